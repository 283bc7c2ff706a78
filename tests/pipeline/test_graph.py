"""The derivation graph: recipes built against other recipes' wheels (``[requirements] recipes``).

The real example (``examples/graph``): rfbase ships a header and a shared library in its wheel,
rfuse compiles C against them with an RPATH; both are built for real in the sandbox.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import REPO, TINY_RECIPE, pip_args, rf, rf_in


def graph_copy(tmp_path: Path) -> Path:
    """Copy the example packages and their recipes (same relative layout); return the recipes."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "examples" / "graph", root / "examples" / "graph")
    shutil.copytree(REPO / "recipes" / "graph", root / "recipes" / "graph")
    return root / "recipes" / "graph"


def hashes(recipe: Path, store: Path) -> dict[str, str]:
    proc = rf("plan", "--graph", recipe, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    return {n["name"]: n["hash"] for n in json.loads(proc.stdout)["nodes"]}


def realize(*args: str | Path) -> subprocess.CompletedProcess[str]:
    proc = rf("realize", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def built(stderr: str) -> list[str]:
    """The names of the packages a realize built (not answered from the store).

    Searched anywhere, not per line: the children of ``-j`` share one stderr, and an
    unbuffered child (PYTHONUNBUFFERED) writes a line and its newline in two calls, so another
    child's line can start mid-line."""
    return re.findall(r"rocmforge: (\S+) \S+ [0-9a-f]{32} built in ", stderr)


def scaled_in_fresh_venv(tmp_path: Path, wheels: list[str], name: str) -> int:
    env_dir = tmp_path / name
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-index", *wheels], check=True, capture_output=True
    )
    out = subprocess.run(
        [py, "-c", "import rfuse; print(rfuse.scaled(5))"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.slow
def test_dependent_builds_dependency_first_and_imports_against_it(
    tmp_path: Path, wheelhouse: Path
) -> None:
    recipes = graph_copy(tmp_path)
    store = tmp_path / "store"
    proc = realize(recipes / "rfuse.toml", "--store", store, "--all")
    assert built(proc.stderr) == ["rfbase", "rfuse"]
    wheels = proc.stdout.split()
    assert [Path(w).name.split("-")[0] for w in wheels] == ["rfbase", "rfuse"]
    assert scaled_in_fresh_venv(tmp_path, wheels, "v2") == 10  # RFBASE_SCALE = 2
    # without --all only the named recipe's wheel is printed; the graph is cached now
    again = realize(recipes / "rfuse.toml", "--store", store)
    assert again.stdout.split() == wheels[1:] and built(again.stderr) == []
    # --check rebuilds the dependent against the stored dependency: byte-identical
    check = rf("realize", "--check", recipes / "rfuse.toml", "--store", store)
    assert check.returncode == 0, check.stderr[-3000:]
    assert "rfuse 1.0.0" in check.stderr and "byte-identical" in check.stderr
    # the dependent's derivation names the dependency by input hash
    drv = json.loads((Path(wheels[1]).parent / "derivation.json").read_text())
    assert drv["recipes"] == [
        {"name": "rfbase", "version": "1.0.0", "hash": Path(wheels[0]).parent.name[:32]}
    ]

    # a comment in the dependency changes neither hash
    before = hashes(recipes / "rfuse.toml", store)
    base = recipes / "rfbase.toml"
    base.write_text("# a comment\n" + base.read_text())
    assert hashes(recipes / "rfuse.toml", store) == before
    # a flag of the dependency changes both, and realize rebuilds both
    base.write_text(base.read_text().replace('RFBASE_SCALE = "2"', 'RFBASE_SCALE = "5"'))
    after = hashes(recipes / "rfuse.toml", store)
    assert after["rfbase"] != before["rfbase"] and after["rfuse"] != before["rfuse"]
    # --check never builds: the changed dependency is not in the store yet
    check = rf("realize", "--check", recipes / "rfuse.toml", "--store", store)
    assert check.returncode == 2 and "its dependency rfbase 1.0.0" in check.stderr
    assert "run `rocmforge realize` first" in check.stderr and "Traceback" not in check.stderr
    proc = realize(recipes / "rfuse.toml", "--store", store, "--all")
    assert built(proc.stderr) == ["rfbase", "rfuse"]
    assert scaled_in_fresh_venv(tmp_path, proc.stdout.split(), "v5") == 25


@pytest.mark.slow
def test_two_dependency_variants_give_two_dependents(tmp_path: Path, wheelhouse: Path) -> None:
    recipes = graph_copy(tmp_path)
    store = tmp_path / "store"
    two = realize(recipes / "rfuse.toml", "--store", store, "--all").stdout.split()
    three = realize(recipes / "rfuse-scale3.toml", "--store", store, "--all").stdout.split()
    assert two[1] != three[1] and two[0] != three[0]
    assert scaled_in_fresh_venv(tmp_path, two, "a") == 10
    assert scaled_in_fresh_venv(tmp_path, three, "b") == 15


@pytest.mark.slow
def test_stack_and_parallel_jobs(tmp_path: Path, wheelhouse: Path) -> None:
    recipes = graph_copy(tmp_path)
    store = tmp_path / "store"
    stack = recipes / "graph-stack.toml"
    stack.write_text(
        stack.read_text().replace('"rfuse.toml"]', '"rfuse.toml", "rfuse-scale3.toml"]')
    )
    proc = realize(stack, "--store", store, "-j", "2")
    names = [Path(w).name.split("-")[0] for w in proc.stdout.split()]
    assert names == ["rfbase", "rfuse", "rfuse"]  # the stack's recipes, in its order
    assert sorted(built(proc.stderr)) == ["rfbase", "rfbase", "rfuse", "rfuse"]
    graph = rf("plan", stack, "--store", store, "--json")
    nodes = json.loads(graph.stdout)["nodes"]
    assert len(nodes) == 4 and all(n["cached"] for n in nodes)


@pytest.mark.slow
def test_kill_during_graph_realize_leaves_no_partial_entry(
    tmp_path: Path, wheelhouse: Path
) -> None:
    recipes = graph_copy(tmp_path)
    store = tmp_path / "store"
    env = dict(os.environ, ROCMFORGE_PIP_ARGS=pip_args())
    env.pop("ROCMFORGE_STORE", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rocmforge",
            "realize",
            str(recipes / "rfuse.toml"),
            "--store",
            str(store),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "rfuse: build" in line:
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    entries = sorted(p.name.split("-")[1] for p in (store / "entries").iterdir())
    assert entries == ["rfbase"]  # rfuse was never published
    for entry in (store / "entries").iterdir():
        assert (entry / "meta.json").is_file()
    again = realize(recipes / "rfuse.toml", "--store", store)
    assert built(again.stderr) == ["rfuse"]


def tiny(tmp_path: Path, name: str, deps: list[str]) -> Path:
    recipe = tmp_path / f"{name}.toml"
    text = TINY_RECIPE.replace('name = "tiny"', f'name = "{name}"').format(src=tmp_path)
    if deps:
        text += f"\n[requirements]\nrecipes = {json.dumps(deps)}\n"
    recipe.write_text(text)
    return recipe


def test_cycle_and_missing_file_name_the_chain(tmp_path: Path, store: Path) -> None:
    a = tiny(tmp_path, "a", ["b.toml"])
    tiny(tmp_path, "b", ["c.toml"])
    tiny(tmp_path, "c", ["a.toml"])
    for cmd in ("plan", "realize"):
        proc = rf_in(cmd, a, "--store", store)
        assert proc.returncode == 2, proc.stderr
        assert "dependency cycle: a.toml -> b.toml -> c.toml -> a.toml" in proc.stderr
        assert "requirements.recipes" in proc.stderr
    tiny(tmp_path, "c", ["gone.toml"])
    proc = rf_in("plan", a, "--store", store)
    assert proc.returncode == 2
    assert (
        "no such recipe" in proc.stderr and "a.toml -> b.toml -> c.toml -> gone.toml" in proc.stderr
    )


@pytest.mark.slow
def test_plan_graph_is_provisional_through_a_provisional_dependency(
    tmp_path: Path, store: Path
) -> None:
    # a git source never cloned: plan does not fetch it, so the dependency is provisional
    dep = tmp_path / "dep.toml"
    dep.write_text(
        'schema = 1\n[package]\nname = "dep"\nversion = "1.0"\n'
        '[source]\ngit = "https://example.invalid/dep.git"\n'
        'rev = "0123456789abcdef0123456789abcdef01234567"\n'
        '[build]\nsteps = ["true"]\n'
    )
    top = tiny(tmp_path, "top", ["dep.toml"])
    proc = rf("plan", "--graph", top, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    nodes = {n["name"]: n for n in json.loads(proc.stdout)["nodes"]}
    assert nodes["dep"]["provisional"] and not nodes["dep"]["cached"]
    assert nodes["top"]["provisional"] == ["recipes: dep 1.0 is provisional"]
    assert nodes["top"]["deps"] == [nodes["dep"]["hash"]]
    text = rf("plan", "--graph", top, "--store", store)
    assert f"<- dep {nodes['dep']['hash']}" in text.stdout and "missing, provisional" in text.stdout


@pytest.mark.slow
def test_export_installs_with_pip_and_uv(tmp_path: Path, wheelhouse: Path) -> None:
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        pytest.fail("uv is missing: install the test extra (pip install -e '.[test]')")
    recipes = graph_copy(tmp_path)
    store = tmp_path / "store"
    stack = recipes / "graph-stack.toml"
    realize(stack, "--store", store)
    out = tmp_path / "export"
    proc = rf("export", stack, "--to", out, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    files = sorted(w["file"] for w in json.loads(proc.stdout)["wheels"])
    assert [f.split("-")[0] for f in files] == ["rfbase", "rfuse"]
    constraints = (out / "constraints.txt").read_text().splitlines()
    assert [c.split(" --hash=sha256:")[0] for c in constraints] == ["rfbase==1.0.0", "rfuse==1.0.0"]
    assert "rfuse/" in (out / "simple" / "index.html").read_text()
    assert "#sha256=" in (out / "simple" / "rfuse" / "index.html").read_text()
    pip_args = [
        ["--find-links", str(out), "rfuse"],
        ["--find-links", str(out), "-r", str(out / "constraints.txt")],  # hash-checked
    ]
    for i, extra in enumerate(pip_args):
        env_dir = tmp_path / f"pip{i}"
        venv.create(env_dir, with_pip=True)
        py = env_dir / "bin" / "python"
        done = subprocess.run(
            [py, "-m", "pip", "install", "-q", "--no-index", *extra], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        check = subprocess.run(
            [py, "-c", "import rfuse; print(rfuse.scaled(4))"], capture_output=True, text=True
        )
        assert check.stdout.strip() == "8", check.stderr
    uv_args = [
        ["--no-index", "--find-links", str(out), "rfuse"],
        ["--index-url", (out / "simple").as_uri(), "rfuse"],  # the PEP 503 index
    ]
    for i, extra in enumerate(uv_args):
        env_dir = tmp_path / f"uv{i}"
        venv.create(env_dir, with_pip=False)
        py = env_dir / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
        env["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
        done = subprocess.run(
            [uv, "pip", "install", "--offline", "--python", py, *extra],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        listed = subprocess.run(
            [py, "-c", "import rfuse, rfbase; print(rfuse.scaled(4), rfbase.scale())"],
            capture_output=True,
            text=True,
        )
        assert listed.stdout.split() == ["8", "2"], listed.stderr


def tiny_pkg(tmp_path: Path, name: str, deps: list[str], env: str = "") -> Path:
    """A fast compiler-free recipe for package ``name`` built against ``deps``."""
    src = tmp_path / f"{name}-src"
    (src / name).mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "tests" / "data" / "mkwheel.py", src / "mkwheel.py")
    (src / name / "__init__.py").write_text("VALUE = 1\n")
    text = TINY_RECIPE.replace("tiny", name).format(src=src)
    if deps:
        text += f"\n[requirements]\nrecipes = {json.dumps(deps)}\n"
    if env:
        text += f"\n[env]\n{env}\n"
    recipe = tmp_path / f"{name}.toml"
    recipe.write_text(text)
    return recipe


@pytest.mark.slow
def test_traceability_and_gc_through_the_graph(tmp_path: Path, store: Path) -> None:
    base = tiny_pkg(tmp_path, "base", [], 'ARCH = "gfx90a"')
    top = tiny_pkg(tmp_path, "top", ["base.toml"])
    first = realize(top, "--store", store, "--all").stdout.split()
    base_hash, top_hash = (Path(w).parent.name[:32] for w in first)
    # provenance lists the dependency entry with its wheel digest
    statement = json.loads((Path(first[1]).parent / "provenance.json").read_text())
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    [rec] = [d for d in deps if d["name"] == "recipes/base"]
    assert rec["annotations"]["inputHash"] == base_hash and len(rec["digest"]["sha256"]) == 64
    # audit shows what it was built against and that dependency's flags
    audit = rf("audit", first[1], "--store", store, "--json")
    [report] = json.loads(audit.stdout)
    [dep] = report["built_against"]
    assert dep["hash"] == base_hash and dep["env"] == {"ARCH": "gfx90a"}
    assert dep["wheel_sha256"] == rec["digest"]["sha256"]
    text = rf("audit", first[1], "--store", store).stdout
    assert f"built on     base 0.1 {base_hash}" in text, text
    assert "ARCH='gfx90a'" in text
    # query --built-against finds the dependent
    q = rf("query", "--built-against", base_hash[:8], "--store", store, "--json")
    assert [e["hash"] for e in json.loads(q.stdout)] == [top_hash]
    # a second variant; explain descends into the dependency
    base.write_text(base.read_text().replace("gfx90a", "gfx942"))
    second = realize(top, "--store", store, "--all").stdout.split()
    ex = rf("explain", first[1], second[1], "--store", store)
    assert "recipes.base -> env.ARCH: gfx90a -> gfx942" in ex.stdout, ex.stdout
    # gc keeps what a kept entry was built against, and says why
    pin = rf("pin", "old", top_hash, "--store", store)
    assert pin.returncode == 0, pin.stderr
    dry = rf("gc", "--dry-run", "--json", "--store", store)
    plan = json.loads(dry.stdout)
    kept = (
        {e["hash"]: e["reasons"] for e in plan["plan"]["keep"]}
        if "plan" in plan
        else {e["hash"]: e["reasons"] for e in plan["kept"]}
    )
    assert kept[base_hash] == ["kept: dependency of top 0.1"]
    gone = rf("gc", "--keep-last", "0", "--store", store)
    assert gone.returncode == 0, gone.stderr
    left = {p.name[:32] for p in (store / "entries").iterdir()}
    assert left == {base_hash, top_hash}
    # a stack is pinned and kept as one name
    stack = tmp_path / "stack.toml"
    stack.write_text('schema = 1\n[stack]\nname = "s"\nrecipes = ["top.toml"]\n')
    realize(stack, "--store", store)
    pinned = rf("pin", "team", stack, "--store", store)
    assert pinned.returncode == 0, pinned.stderr
    assert "pinned team.top" in pinned.stdout and "pinned team.base" in pinned.stdout
    rf("unpin", "old", "--store", store)
    assert rf("gc", "--store", store).returncode == 0
    assert len(list((store / "entries").iterdir())) == 2  # the stack's closure
    assert rf("unpin", "team", "--store", store).returncode == 0
    keep = rf("gc", "--dry-run", "--keep", str(stack), "--store", store)
    assert "would delete" not in keep.stdout, keep.stdout


@pytest.mark.parametrize(
    ("where", "torch_version"),
    [("legacy", "2.5.1+rocm6.2"), ("torch-2.14", "2.14.1+rocm7.14"), ("", "2.15.0+rocm10.0")],
)
def test_rocm_stack_plans_anywhere_without_cloning(
    tmp_path: Path, where: str, torch_version: str
) -> None:
    store = tmp_path / "store"
    directory = REPO / "recipes" / where
    proc = rf_in("plan", directory / "mi300x-stack.toml", "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["stacks"][0]["name"] == "mi300x"
    nodes = {n["name"]: n for n in data["nodes"]}
    torch = nodes["torch"]["hash"]
    with_triton = where == "torch-2.14"  # 2.15's wheel requires PyPI's triton 3.9.0 (recipes/)
    if not with_triton:
        assert set(nodes) == {"torch", "torchvision", "torchaudio"}
    else:  # the 2.14 stack builds the Triton its torch requires, first
        assert set(nodes) == {"triton", "torch", "torchvision", "torchaudio"}
        assert nodes["torch"]["deps"] == [nodes["triton"]["hash"]]
    assert nodes["torchvision"]["deps"] == [torch] and nodes["torchaudio"]["deps"] == [torch]
    assert all(n["provisional"] and not n["cached"] for n in nodes.values())
    git = store / "sources" / "git"
    assert not git.exists() or not any(git.iterdir())  # nothing cloned
    # the single-recipe plan hashes the dependency in the same way
    one = rf_in("plan", directory / "torchvision-mi300x.toml", "--store", store, "--json")
    drv = json.loads(one.stdout)["derivation"]
    closure = [{"name": "torch", "version": torch_version, "hash": torch}]
    if with_triton:  # the whole closure: torch's triton too
        closure.append({"name": "triton", "version": "3.8.0+rocm7.14",
                           "hash": nodes["triton"]["hash"]})  # fmt: skip
    assert drv["recipes"] == closure
    assert json.loads(one.stdout)["hash"] == nodes["torchvision"]["hash"]
    for name in ("torchvision-mi300x.toml", "torchaudio-mi300x.toml"):
        rev = re.search(r'^rev = "([0-9a-f]+)"', (directory / name).read_text(), re.M)
        assert rev and len(rev.group(1)) == 40, name


def test_extension_arch_outside_torch_stops_before_fetch(tmp_path: Path) -> None:
    for name in ("mi300x.toml", "rocm-6.2.toml", "rocm-6.2.lock", "torchvision-mi300x.toml"):
        shutil.copy(REPO / "recipes" / "legacy" / name, tmp_path / name)
    tv = tmp_path / "torchvision-mi300x.toml"
    tv.write_text(
        tv.read_text().replace('PYTORCH_ROCM_ARCH = "gfx942"', 'PYTORCH_ROCM_ARCH = "gfx90a"')
    )
    proc = rf_in("plan", tv, "--store", tmp_path / "store")
    assert proc.returncode == 2 and "RF193" in proc.stderr and "gfx90a" in proc.stderr


@pytest.mark.hip
@pytest.mark.slow
def test_hip_dependent_built_against_dependency(tmp_path: Path, wheelhouse: Path) -> None:
    if shutil.which("hipcc") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hipcc is missing in CI: scripts/setup.sh should install it (apt hipcc)")
        pytest.skip("hipcc not installed (apt-get install hipcc: Debian 12's ROCm 5.2)")
    recipes = graph_copy(tmp_path)
    store = tmp_path / "store"
    proc = realize(recipes / "rfuse-hip.toml", "--store", store, "--all", "--json")
    reports = json.loads(proc.stdout)
    assert [r["name"] for r in reports] == ["rfbase", "rfusehip"]
    wheels = [w for r in reports for w in r["wheels"]]
    meta = json.loads((Path(reports[1]["path"]) / "meta.json").read_text())
    assert meta["built_against"] == [reports[0]["hash"]]
    [libs] = meta["archs"].values()
    assert [v["union"] for v in libs.values()] == [["gfx90a"]]  # hipcc ran: device code inside
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", *wheels], check=True)
    out = subprocess.run(
        [py, "-c", "import rfusehip; print(rfusehip.factor())"], capture_output=True, text=True
    )
    assert out.stdout.strip() == "2", out.stderr  # the rfbase it was built against


@pytest.mark.slow
def test_keep_going_builds_independent_branches_and_names_the_rest(
    tmp_path: Path, store: Path
) -> None:
    bad = tiny_pkg(tmp_path, "bad", [])
    bad.write_text(bad.read_text().replace('steps = ["python', 'steps = ["exit 3; python'))
    tiny_pkg(tmp_path, "needsbad", ["bad.toml"])
    tiny_pkg(tmp_path, "good", [])
    stack = tmp_path / "stack.toml"
    stack.write_text(
        'schema = 1\n[stack]\nname = "k"\nrecipes = ["bad.toml", "needsbad.toml", "good.toml"]\n'
    )
    stop = rf("realize", stack, "--store", store)
    assert stop.returncode == 1
    assert "needsbad (needsbad.toml): not built: its dependency bad (bad.toml)" in stop.stderr
    assert "good (good.toml): not built: an earlier build failed (use --keep-going)" in stop.stderr
    go = rf("realize", stack, "--store", store, "--keep-going")
    assert go.returncode == 1 and built(go.stderr) == ["good"], go.stderr
    assert "needsbad (needsbad.toml): not built: its dependency bad" in go.stderr
    assert go.stdout == ""  # nothing printed as a result when the set is incomplete


@pytest.mark.slow
def test_parallel_jobs_share_the_cores_and_overlapping_graphs_build_once(
    tmp_path: Path, store: Path
) -> None:
    base = tiny_pkg(tmp_path, "base", [])
    base.write_text(base.read_text().replace('steps = ["python', 'steps = ["sleep 2; python'))
    for name in ("left", "right"):
        r = tiny_pkg(tmp_path, name, ["base.toml"])
        step = f'echo JOBS = \\"$MAX_JOBS\\" >> {name}/__init__.py; python'
        r.write_text(r.read_text().replace('steps = ["python', f'steps = ["{step}'))
    env = dict(os.environ, ROCMFORGE_PIP_ARGS=pip_args())
    env.pop("ROCMFORGE_STORE", None)
    cli = [sys.executable, "-m", "rocmforge", "realize", "--store", str(store), "-j", "2"]
    procs = [
        subprocess.Popen(
            [*cli, str(tmp_path / f"{n}.toml")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in ("left", "right")
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n---\n".join(e for _, e in outs)
    assert sum(built(e).count("base") for _, e in outs) == 1  # one build of the shared node
    import zipfile

    [wheel] = outs[0][0].split()
    with zipfile.ZipFile(wheel) as z:
        text = z.read("left/__init__.py").decode()
    share = max(1, (os.cpu_count() or 1) // 2)
    assert f"JOBS = {share}\n" in text, text


def test_gc_policies_never_break_a_kept_closure() -> None:
    from rocmforge.store.gc import EntryInfo, Policies, plan_gc

    def info(h: str, name: str, created: float, against: tuple[str, ...] = ()) -> EntryInfo:
        return EntryInfo(
            hash=h * 32, name=name, version="1", dirname=f"{h * 32}-{name}-1", size=100,
            created=created, last_used=created, built_against=against,
        )  # fmt: skip

    torch_old, torch_new = info("a", "torch", 1), info("b", "torch", 2)
    vision = info("c", "torchvision", 3, (torch_old.hash,))  # built against the older torch
    entries = [torch_old, torch_new, vision]
    plan = plan_gc(entries, {}, Policies(keep_last=1), now=10)
    assert {d.entry.name for d in plan.delete} == set()  # the old torch stays with its dependent
    kept = {d.entry.hash: d.reasons for d in plan.keep}
    assert kept[torch_old.hash] == ("kept: dependency of torchvision 1",)
    plan = plan_gc(entries, {vision.hash: ["pin v"]}, Policies(max_size=200), now=10)
    assert [d.entry.hash for d in plan.delete] == [torch_new.hash]  # not the pinned one's torch
    plan = plan_gc(entries, {}, Policies(), now=10)
    assert len(plan.delete) == 3  # nothing kept: nothing kept for it either
