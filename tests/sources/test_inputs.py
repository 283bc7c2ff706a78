"""Extra inputs (``[inputs.NAME]``): hashed into the derivation, read-only at ``/inputs/NAME`` in
the sandbox with their variable; archives by path or URL (loopback HTTP) with sha256; and ``plan``
staying offline with a provisional hash."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TINY_RECIPE, rf, rf_in

# The build step proves what the build sees: the variable, the content, and that it is read-only.
STEP = (
    'test "$AOT" = "{want}" && cp "$AOT/lib/data.txt" tiny/seen.txt && '
    'if touch "$AOT/new" 2>/dev/null; then echo WRITABLE; exit 1; fi && '
    "python mkwheel.py $OUT tiny 0.1"
)


def recipe(tmp_path: Path, src: Path, inp: str, want: str = "/inputs/aot") -> Path:
    text = TINY_RECIPE.format(src=src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]',
        f"steps = [{json.dumps(STEP.format(want=want))}]",
    )
    path = tmp_path / "r.toml"
    path.write_text(text + f"\n[inputs.aot]\n{inp}\n")
    return path


def plan_hash(path: Path, store: Path) -> str:
    proc = rf("plan", path, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["provisional"] == []
    return str(data["hash"])


def realize_wheel(path: Path, store: Path) -> zipfile.ZipFile:
    proc = rf("realize", path, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    [report] = json.loads(proc.stdout)
    return zipfile.ZipFile(report["wheels"][0])


@pytest.fixture
def aot(tmp_path: Path) -> Path:
    d = tmp_path / "aotriton"
    (d / "lib").mkdir(parents=True)
    (d / "lib" / "data.txt").write_text("kernels v1\n")
    return d


@pytest.mark.slow
def test_directory_input(tmp_path: Path, tiny_src: Path, aot: Path) -> None:
    store = tmp_path / "store"
    r = recipe(tmp_path, tiny_src, f'path = "{aot}"\nenv = "AOT"')
    h1 = plan_hash(r, store)
    drv = json.loads(rf("plan", r, "--store", store, "--json").stdout)["derivation"]
    assert drv["inputs"]["aot"]["env"] == "AOT"
    assert drv["inputs"]["aot"]["kind"] == "tree"
    assert str(aot) not in json.dumps(drv)  # the content is hashed, not the path
    with realize_wheel(r, store) as whl:
        assert whl.read("tiny/seen.txt") == b"kernels v1\n"
    (aot / "lib" / "data.txt").write_text("kernels v2\n")
    h2 = plan_hash(r, store)
    assert h2 != h1
    with realize_wheel(r, store) as whl:  # the memo must not answer with the old build
        assert whl.read("tiny/seen.txt") == b"kernels v2\n"
    moved = tmp_path / "elsewhere"
    aot.rename(moved)
    assert plan_hash(recipe(tmp_path, tiny_src, f'path = "{moved}"\nenv = "AOT"'), store) == h2


def make_tar(tmp_path: Path, text: str) -> Path:
    top = tmp_path / "pkg" / "aotriton" / "lib"
    top.mkdir(parents=True, exist_ok=True)
    (top / "data.txt").write_text(text)
    archive = tmp_path / "aotriton.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(tmp_path / "pkg" / "aotriton", "aotriton")
    return archive


@pytest.mark.slow
def test_archive_input_with_subdir_and_sha256(tmp_path: Path, tiny_src: Path) -> None:
    store = tmp_path / "store"
    archive = make_tar(tmp_path, "packed\n")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    inp = f'path = "{archive}"\nsha256 = "{sha}"\nenv = "AOT"\nsubdir = "aotriton"'
    r = recipe(tmp_path, tiny_src, inp, want="/inputs/aot/aotriton")
    with realize_wheel(r, store) as whl:
        assert whl.read("tiny/seen.txt") == b"packed\n"
    bad = recipe(tmp_path, tiny_src, inp.replace(sha, "0" * 64), want="/inputs/aot/aotriton")
    proc = rf("realize", bad, "--store", store)
    assert proc.returncode == 2 and sha in proc.stderr and "0" * 64 in proc.stderr


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server over tmp_path/www; yields its base URL and the paths requested."""
    root = tmp_path / "www"
    root.mkdir()
    seen: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: object, **kw: object) -> None:
            super().__init__(*a, directory=str(root), **kw)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            seen.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()


@pytest.mark.slow
def test_url_input_fetched_once(
    tmp_path: Path, tiny_src: Path, http_dir: tuple[str, list[str]]
) -> None:
    base, seen = http_dir
    archive = make_tar(tmp_path, "from the net\n")
    (tmp_path / "www" / "aot.tar.gz").write_bytes(archive.read_bytes())
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    inp = f'url = "{base}/aot.tar.gz"\nsha256 = "{sha}"\nenv = "AOT"\nsubdir = "aotriton"'
    r = recipe(tmp_path, tiny_src, inp, want="/inputs/aot/aotriton")
    store = tmp_path / "store"
    with realize_wheel(r, store) as whl:
        assert whl.read("tiny/seen.txt") == b"from the net\n"
        entry = Path(str(whl.filename)).parent
    # The entry names the download and the unpacked tree among the source caches it uses.
    used = [u for u in json.loads((entry / "meta.json").read_bytes())["sources"] if "inputs/" in u]
    assert sorted(u.split("/")[1] for u in used) == ["archives", "unpacked"]
    assert all((store / "sources" / u).exists() for u in used)
    assert plan_hash(r, store)  # resolved from the cache
    assert len([p for p in seen if "aot.tar.gz" in p]) == 1
    wrong = recipe(tmp_path, tiny_src, inp.replace(sha, "1" * 64), want="/inputs/aot/aotriton")
    proc = rf("realize", wrong, "--store", tmp_path / "store2")
    assert proc.returncode == 2 and sha in proc.stderr


@pytest.mark.slow
def test_url_input_without_sha256_is_locked_by_lock(
    tmp_path: Path, tiny_src: Path, http_dir: tuple[str, list[str]]
) -> None:
    """Like nix-prefetch-url: a url input may leave sha256 out; plan, lint and lock --check say
    it is unlocked, realize stops before fetching or building anything, and lock fetches the
    real archive from the (loopback) server and writes its sha256 into the recipe."""
    base, seen = http_dir
    archive = make_tar(tmp_path, "locked later\n")
    (tmp_path / "www" / "aot.tar.gz").write_bytes(archive.read_bytes())
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    url = f"{base}/aot.tar.gz"
    r = recipe(tmp_path, tiny_src, f'url = "{url}"\nenv = "AOT"\nsubdir = "aotriton"',
               want="/inputs/aot/aotriton")  # fmt: skip
    store = tmp_path / "store"
    plan = rf("plan", r, "--store", store, "--json")
    assert plan.returncode == 0, plan.stderr
    notes = json.loads(plan.stdout)["provisional"]
    assert any("inputs.aot" in n and "not locked" in n for n in notes), notes
    doctor = rf("doctor", r)  # the lints, doctor's way
    assert "RF135" in doctor.stdout and "rocmforge lock" in doctor.stdout, doctor.stdout
    check = rf("lock", r, "--check", "--store", store)
    assert check.returncode == 0, check.stderr
    assert "provisional: inputs.aot" in check.stdout and "not locked" in check.stdout
    before = r.read_text()
    proc = rf("realize", r, "--store", store)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()  # one line, before any fetch or build
    assert "inputs.aot" in line and url in line and f"rocmforge lock {r}" in line, line
    assert seen == [] and r.read_text() == before  # nothing fetched, nothing written
    locked = rf("lock", r, "--store", store)
    assert locked.returncode == 0, locked.stderr
    assert f"inputs.aot.sha256: (none) -> {sha}" in locked.stdout
    assert f'url = "{url}"\nsha256 = "{sha}"\n' in r.read_text()  # right after url
    assert rf("lock", r, "--check", "--store", store).stdout.strip().endswith("already locked")
    with realize_wheel(r, store) as whl:
        assert whl.read("tiny/seen.txt") == b"locked later\n"
    assert len(seen) == 1  # lock's download is the one realize uses
    # the recorded sha256 is then enforced: other bytes behind the same URL are refused
    (tmp_path / "www" / "aot.tar.gz").write_bytes(make_tar(tmp_path, "changed\n").read_bytes())
    proc = rf("realize", r, "--store", tmp_path / "store2")
    assert proc.returncode == 2 and sha in proc.stderr
    # and lock where the URL is unreachable fails in one line, writing nothing
    r2 = recipe(tmp_path / "www", tiny_src, 'url = "http://127.0.0.1:9/none.tar.gz"\nenv = "AOT"')
    proc = rf("lock", r2, "--store", store)
    assert proc.returncode != 0 and "none.tar.gz" in proc.stderr
    assert "Traceback" not in proc.stderr and "sha256 =" not in r2.read_text()


def test_plan_never_clones_a_remote_source(tmp_path: Path) -> None:
    r = tmp_path / "remote.toml"
    r.write_text(
        'schema = 1\n[package]\nname = "x"\nversion = "1"\n'
        '[source]\ngit = "https://invalid.example/big.git"\n'
        'rev = "a8d6afb511a69687bbb2b7e88a3cf67917e1697e"\nsubmodules = true\n'
        '[toolchain]\nkind = "rocm"\nrocm = "6.2.4"\nroot = "/nonexistent/rocm"\n'
    )
    proc = rf_in("plan", r, "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr
    assert "provisional" in proc.stdout
    assert "commit a8d6afb511a69687bbb2b7e88a3cf67917e1697e (submodules not resolved" in proc.stdout
    assert "/nonexistent/rocm does not exist" in proc.stdout
    data = json.loads(rf_in("plan", r, "--store", tmp_path / "store", "--json").stdout)
    assert len(data["provisional"]) == 2
    assert data["derivation"]["provisional"] == data["provisional"]
    assert not list((tmp_path / "store").rglob("*.git"))


def _tar_tree(path: Path, files: dict[str, str]) -> str:
    """Write a .tar.gz whose members are ``files`` (under their paths); return its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_aotriton_release_assets_as_inputs_merge_into_one_prefix(
    tmp_path: Path, tiny_src: Path, http_dir: tuple[str, list[str]]
) -> None:
    """The AOTriton pattern of docs/recipes.md, for real: the [inputs] tables inputs_toml writes
    for AOTriton 0.13b (runtime for ROCm 7.15 + the gfx942 image pack; here stand-in archives of
    the same names and layout, served over loopback HTTP) are fetched, mounted read-only, and the
    first build step merges them into the prefix AOTRITON_INSTALLED_PREFIX then names."""
    from rocmforge.recipe.aotriton import AOTRITON_0_13B, BASE_URL, inputs_toml

    base, _ = http_dir
    rel = AOTRITON_0_13B
    www = tmp_path / "www" / rel.version
    sha_rt = _tar_tree(
        www / rel.runtime_name("7.15"),
        {"aotriton/lib/libaotriton_v2.so": "runtime\n", "aotriton/include/aotriton/dtypes.h": ""},
    )
    sha_img = _tar_tree(
        www / rel.image_name("amd-gfx942"),
        {"aotriton/lib/aotriton.images/amd-gfx942/__signature__": "gfx942 kernels\n"},
    )
    inputs = (
        inputs_toml(rel, "7.15", ["gfx942"])
        .replace(BASE_URL, base + "/")
        .replace(rel.runtimes["7.15"], sha_rt)
        .replace(rel.images["amd-gfx942"], sha_img)
    )
    merge = (
        "mkdir -p $HOME/aotriton && "
        "cp -r $AOTRITON_RUNTIME/. $AOTRITON_IMAGES_GFX942/. $HOME/aotriton/"
    )
    use = (
        "AOTRITON_INSTALLED_PREFIX=$HOME/aotriton sh -c 'cat $AOTRITON_INSTALLED_PREFIX/lib/"
        "libaotriton_v2.so $AOTRITON_INSTALLED_PREFIX/lib/aotriton.images/amd-gfx942/__signature__"
        " > tiny/seen.txt' && python mkwheel.py $OUT tiny 0.1"
    )
    steps = f"steps = [{json.dumps(merge)}, {json.dumps(use)}]"
    text = TINY_RECIPE.format(src=tiny_src).replace(
        'steps = ["python mkwheel.py $OUT tiny 0.1"]', steps
    )
    path = tmp_path / "r.toml"
    path.write_text(text + "\n" + inputs)
    with realize_wheel(path, tmp_path / "store") as whl:
        assert whl.read("tiny/seen.txt") == b"runtime\ngfx942 kernels\n"
