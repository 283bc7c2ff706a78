"""ROCm 10.x SDK wheels (one multi-arch index, device wheels chosen by ``device-<gfx>`` extras):
``lock`` records where each pin came from, ``lock --check`` says when that place is no longer
configured, and the check refuses a built wheel that asks for a device wheel the lock lacks.
Stand-in wheels (tests/standin_sdk.py) in the 10.x shape, served by a real PEP 503 index on
loopback."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import standin_sdk
from conftest import REPO, rf

from rocmforge.recipe.load import parse_recipe_text

VERSION = "10.0.0"
FAMILIES = ["gfx942", "gfx90a"]


def _recipe(tmp_path: Path, requires: str) -> Path:
    text = (REPO / "tests" / "data" / "hip-sdk.toml").read_text()
    text = text.replace('"../../examples/hip-sdk-demo"', f'"{REPO / "examples" / "hip-sdk-demo"}"')
    text = text.replace('version = "7.14.0"', f'version = "{VERSION}"')
    text = text.replace(
        'families = ["gfx94X-dcgpu", "gfx90a"]', f"families = {json.dumps(FAMILIES)}"
    )
    text = text.replace(
        'HIPDEMO_REQUIRES = "rocm-sdk-core==7.14.0"', f'HIPDEMO_REQUIRES = "{requires}"'
    )
    path = tmp_path / "hip-sdk-10.toml"
    path.write_text(text)
    return path


def _pep503(files: Path, root: Path) -> None:
    """A simple index of ``files`` under ``root/simple/<project>/`` with ``#sha256=`` links."""
    by_project: dict[str, list[Path]] = {}
    for f in sorted(files.iterdir()):
        name = f.name.split("-")[0] if f.suffix == ".whl" else f.name.rsplit("-", 1)[0]
        by_project.setdefault(name.replace("_", "-").lower(), []).append(f)
    for project, paths in by_project.items():
        page = root / "simple" / project
        page.mkdir(parents=True)
        links = "".join(
            f'<a href="../../files/{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">'
            f"{p.name}</a>\n"
            for p in paths
        )
        (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    why = standin_sdk.available()
    if why is not None:
        pytest.skip(f"not installed: {why} (scripts/test.sh)")
    root = tmp_path_factory.mktemp("amd-index")
    standin_sdk.build_sdk(root / "files", VERSION, FAMILIES)
    _pep503(root / "files", root)
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.hip
@pytest.mark.slow
def test_10x_lock_records_origins_and_the_check_holds_device_extras(
    tmp_path: Path, index: str
) -> None:
    env = {"ROCMFORGE_SDK_ARGS": f"--index-url {index}"}
    store = tmp_path / "store"
    good = _recipe(tmp_path, f"rocm[libraries,device-gfx942,device-gfx90a]=={VERSION}")
    lock = rf("lock", good, "--store", store, env=env)
    assert lock.returncode == 0, lock.stdout + lock.stderr
    tc = parse_recipe_text(good.read_text(), file=good, locked=False).toolchain
    # the 10.x names: core, devel, the arch-neutral libraries and one device wheel per ISA
    assert sorted(p.partition("==")[0] for p in tc.sdk_wheels) == sorted(
        ["rocm-sdk-core", "rocm-sdk-devel", "rocm-sdk-libraries",
         "rocm-sdk-device-gfx942", "rocm-sdk-device-gfx90a"]
    )  # fmt: skip
    assert tc.sdk_origins == {p: index for p in [*tc.sdk_wheels, *tc.sdk_module]}
    assert "[toolchain.origins]" in good.read_text()
    assert rf("lock", "--check", good, "--store", store, env=env).returncode == 0

    # the index moved (a mirror now): still locked, and said where the pins came from
    moved = rf("lock", "--check", good, "--store", store,
               env={"ROCMFORGE_SDK_ARGS": f"--index-url {index}mirror/"})  # fmt: skip
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert f"rocm-sdk-core=={VERSION}: locked from {index}, which is not configured now" in (
        moved.stdout
    )

    built = rf("realize", good, "--store", store, "--json", env=env)
    assert built.returncode == 0, built.stderr[-3000:]

    # a wheel asking for a device wheel the lock has none of fails its check, naming it
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace("device-gfx90a]", "device-gfx950]"))
    failed = rf("realize", bad, "--store", store, env=env)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "requires rocm[device-gfx950], but the locked SDK has no rocm-sdk-device-gfx950" in (
        failed.stderr
    )
    assert "gfx90a, gfx942" in failed.stderr and "Traceback" not in failed.stderr
