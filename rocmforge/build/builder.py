"""The build stage: a fresh source copy, a private venv, the steps in the sandbox, a staged entry.

Inside a relocating sandbox (bubblewrap) every build sees the same paths — ``/build/src``,
``/build/venv``, ``/build/out``, ``/build/home`` — so compilers embed no per-build temp path and two
builds of one derivation give byte-identical wheels.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import stat
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from rocmforge.build.check import check_wheels
from rocmforge.build.portable import Finding, scan_build
from rocmforge.build.sandbox import Mount, Runner, compose_mounts
from rocmforge.build.scm import source_env
from rocmforge.errors import (
    BuildError,
    BuildStalled,
    BuildTimeout,
    CheckError,
    Diagnosis,
    RequirementError,
    RocmforgeError,
)
from rocmforge.lock.sdkwheels import sdk_sources
from rocmforge.plan.repro import frontend_config, repro_env
from rocmforge.plan.resolve import Resolved
from rocmforge.sources.identity import materialize_source
from rocmforge.sources.refs import used_sources
from rocmforge.store import layout
from rocmforge.store.entry import Entry, StepTiming, WheelRecord, build_fields
from rocmforge.store.store import Store
from rocmforge.trust.provenance import make_statement, write_statement
from rocmforge.trust.signing import sign_entry
from rocmforge.util.fsutil import (
    disk_full_error,
    file_kind,
    is_disk_full,
    json_bytes,
    write_atomic,
)
from rocmforge.util.hashing import file_blake3
from rocmforge.util.progress import Reporter
from rocmforge.wheel.install import install_wheels
from rocmforge.wheel.stamp import STAMP_NAME, stamp_bytes
from rocmforge.wheel.venv import create_venv
from rocmforge.wheel.writer import normalize_wheel

TAIL_LINES = 30

# A minimal PEP 517 frontend run by the build venv's Python; no isolation (the venv is the
# isolation) and no network (requirements are pinned and pre-installed).
PEP517_FRONTEND = r"""
import importlib, json, os, sys, tomllib
out, config = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
backend, paths = "setuptools.build_meta:__legacy__", []
if os.path.exists("pyproject.toml"):
    with open("pyproject.toml", "rb") as f:
        system = tomllib.load(f).get("build-system", {})
    backend = system.get("build-backend", backend)
    paths = system.get("backend-path", [])
sys.path[:0] = [os.path.abspath(p) for p in paths]
module, _, attr = backend.partition(":")
hooks = importlib.import_module(module)
for part in filter(None, attr.split(".")):
    hooks = getattr(hooks, part)
settings = dict(config.get("settings", {}))
fixed = config.get("build-dir", {}).get(module)
if fixed and fixed[0] not in settings:  # a fixed build directory instead of a random one
    settings[fixed[0]] = fixed[1]
if settings:
    print("rocmforge: config settings", json.dumps(settings, sort_keys=True), flush=True)
print("rocmforge: built", hooks.build_wheel(out, settings or None), flush=True)
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildOutcome:
    """A published build: the store entry, the sandbox level used and the build's duration."""

    entry: Entry
    sandbox: str
    seconds: float


def _log_tail(path: Path, n: int = TAIL_LINES) -> tuple[str, ...]:
    try:
        with open(path, "rb") as f:
            lines: deque[bytes] = deque(f, maxlen=n)
    except OSError:
        return ()
    return tuple(ln.decode("utf-8", "replace").rstrip("\n") for ln in lines)


def compress_file(src: Path, dest: Path, *, durable: bool = True) -> None:
    """Compress ``src`` into ``dest`` with zstandard, streaming, and fsync it (if ``durable``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            zstandard.ZstdCompressor(level=3).copy_stream(fin, fout)
            fout.flush()
            if durable:
                os.fsync(fout.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _file_digests(staged: Path) -> dict[str, str]:
    """Return ``{file name: blake3}`` of the staged entry's non-wheel files (for ``verify``)."""
    return {
        p.name: file_blake3(p)
        for p in sorted(staged.iterdir())
        if p.is_file() and not p.name.endswith(layout.WHEEL_SUFFIX)
    }


def build_env(
    resolved: Resolved, *, paths: Mapping[str, str], host_env: Mapping[str, str]
) -> dict[str, str]:
    """Return the complete environment of a build: recipe env, toolchain env, fixed vars."""
    recipe, tc = resolved.recipe, resolved.toolchain
    search = [f"{paths['venv']}/bin", *tc.path_dirs, "/usr/local/bin", "/usr/bin", "/bin"]
    env: dict[str, str] = {}
    for name in recipe.build.passthrough:
        if name in host_env:
            env[name] = host_env[name]
    env.update(tc.env)
    env.update(source_env(resolved))  # no .git in the build copy: version and commit (scm.py)
    env.update(recipe.env)
    env.update(repro_env(recipe.build, env, paths))
    share = host_env.get("ROCMFORGE_MAX_JOBS")  # a graph realize's share of the cores
    if share and "MAX_JOBS" not in env:
        env["MAX_JOBS"] = share
    env.update(
        {
            "PATH": ":".join(dict.fromkeys(search)),
            "HOME": paths["home"],
            "TMPDIR": paths["tmp"],
            "OUT": paths["out"],
            "VIRTUAL_ENV": paths["venv"],
            "SOURCE_DATE_EPOCH": str(resolved.source.epoch),
            "TZ": "UTC",
            "LC_ALL": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PIP_NO_INDEX": "1",
        }
    )
    if "CARGO" in tc.env:  # a Rust toolchain: cargo's home is private to this build
        env["CARGO_HOME"] = f"{paths['home']}/.cargo"
    return env


def cargo_config(crates: str) -> str:
    """The ``$CARGO_HOME/config.toml`` of a build whose ``[inputs]`` hold its crates: crates.io
    is replaced by the directory ``crates`` (as ``cargo vendor`` and Debian's
    ``/usr/share/cargo/registry`` lay it out: one ``NAME-VERSION`` directory with its
    ``.cargo-checksum.json`` per crate), and cargo never asks the network."""
    quoted = json.dumps(crates)  # a TOML basic string
    return (
        "# written by rocmforge: crates.io is the [inputs] crate directory (the sandbox has no\n"
        "# network)\n"
        '[source.crates-io]\nreplace-with = "rocmforge-inputs"\n\n'
        f"[source.rocmforge-inputs]\ndirectory = {quoted}\n\n"
        "[net]\noffline = true\n"
    )


def _utc(ts: float) -> str:
    """``2026-01-31T12:00:05Z``: the timestamp written into the build log before each step."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


#: The repair step ``[build] repair = "auditwheel"`` adds after the build steps (in the sandbox,
#: with the pinned auditwheel of the build venv); the host then swaps the repaired wheels in.
REPAIR_DIR = ".repaired"
REPAIR_SCRIPT = (
    'rm -rf "$OUT/{dir}" && mkdir "$OUT/{dir}"\n'
    'for w in "$OUT"/*.whl; do auditwheel repair --plat {policy} -w "$OUT/{dir}" "$w"; done'
)


def _swap_repaired(resolved: Resolved, out: Path) -> dict[str, Any]:
    """Replace the wheels in ``out`` by the repaired ones in ``out/.repaired``; return the
    record of the repair for the provenance (tool, policy, wheel names before and after)."""
    build = resolved.recipe.build
    before, after = out_wheels(out), out_wheels(out / REPAIR_DIR)
    if not after:
        raise BuildError(f"{build.repair} repair wrote no wheel (see the build log)")
    for w in before:
        w.unlink()
    for w in after:
        os.replace(w, out / w.name)
    os.rmdir(out / REPAIR_DIR)
    return {
        "tool": build.repair,
        "policy": build.repair_policy,
        "wheels": [w.name for w in before],
        "repaired": [w.name for w in after],
    }


def drop_interpreter_runpaths(resolved: Resolved, wheels: Sequence[Path], log: BinaryIO) -> None:
    """Remove the toolchain Python's own ``<prefix>/lib`` from the RUNPATH/RPATH of every library
    in ``wheels``, in place, before they are stamped and normalized, as auditwheel would.

    That entry comes from the interpreter's ``sysconfig`` ``LDSHARED``/``LDFLAGS``
    (``-Wl,-rpath,<prefix>/lib`` of a pyenv, conda or ``--prefix`` Python), not from the project,
    and points at the build machine; each removal is said in the build log."""
    from rocmforge.toolchain.runpath import interpreter_lib_dirs, strip_wheel_runpaths
    from rocmforge.wheel.members import replace_members

    dirs = interpreter_lib_dirs(resolved.toolchain.python_prefix)
    for w in wheels:
        members, dropped = strip_wheel_runpaths(w, dirs=dirs)
        if not members:
            continue
        replace_members(w, members)
        for lib, cut in dropped.items():
            log.write(
                f"rocmforge: {w.name}: {lib}: removed RUNPATH {':'.join(cut)} (the toolchain "
                "Python's own prefix, from its sysconfig LDSHARED)\n".encode()
            )


def warn_foreign_runpaths(
    resolved: Resolved, wheels: Sequence[Path], reporter: Reporter, log: BinaryIO
) -> None:
    """Warn about libraries whose RUNPATH still points outside the wheel and the toolchain root
    after :func:`drop_interpreter_runpaths` (an ``-rpath`` the project or the recipe adds), with
    the fix in the recipe."""
    from rocmforge.toolchain.runpath import foreign_runpaths

    tc_env = resolved.toolchain.env
    roots = [tc_env[k] for k in ("ROCM_PATH", "ROCM_HOME", "HIP_PATH") if tc_env.get(k)]
    for w in wheels:
        for lib, bad in foreign_runpaths(w, allowed_roots=roots).items():
            flags = " ".join(f"-Wl,-rpath,{b}" for b in bad)
            text = (
                f"{w.name}: {lib} has RUNPATH {':'.join(bad)}, outside the wheel and the toolchain "
                f"root, so it looks for libraries on the build machine; drop `{flags}` from the "
                "recipe's [env] LDFLAGS or, if the project adds it, with a [source] patches "
                "entry (or make it $ORIGIN-relative)"
            )
            log.write(f"rocmforge: warning: {text}\n".encode())
            reporter.warning(text)


def _apply_advice(resolved: Resolved, env: dict[str, str], watch: Any, log: BinaryIO) -> None:
    """Set MAX_JOBS from ``watch.advice`` when the recipe leaves it to rocmforge: not in its
    ``[env]``, not passed through from the caller (a graph's share of the cores still bounds
    it). Never hashed: parallelism does not change the wheel."""
    advice = getattr(watch, "advice", None)
    build = resolved.recipe.build
    if advice is None or "MAX_JOBS" in resolved.recipe.env:
        return
    if "MAX_JOBS" in build.passthrough and "MAX_JOBS" in os.environ:
        return
    share = env.get("MAX_JOBS")
    jobs = advice.jobs if not (share and share.isdigit()) else min(advice.jobs, int(share))
    env["MAX_JOBS"] = str(jobs)
    log.write(f"rocmforge: MAX_JOBS={jobs}: {advice.text()} (from {advice.source})\n".encode())


def _run_steps(
    resolved: Resolved,
    runner: Runner,
    *,
    root: Path,
    log: BinaryIO,
    reporter: Reporter,
    repaired: dict[str, Any] | None = None,
    extra: Sequence[Mount] = (),
    hidden: Sequence[str] = (),
    cache: Any = None,
    watch: Any = None,
) -> tuple[list[StepTiming], Any]:
    """Run the build steps (and the ``[build] repair`` step) in the sandbox; return each step's
    start and duration, and the compiler cache's setup when one was used (``cache`` is the
    :class:`rocmforge.build.ccache.CacheSettings`, None for a build without the cache). The repair's
    record goes into ``repaired`` (when given). The sandbox hides the manifest's unowned
    directories and ``hidden`` (the host's ROCm for an SDK build), the mounts shown through them
    (:func:`rocmforge.build.sandbox.compose_mounts`).

    The log gets a ``rocmforge: [<UTC time>] step i/n: <command>`` line before each step and a
    ``rocmforge: [<UTC time>] step i/n finished in N s`` line after it.

    ``watch`` (a :class:`rocmforge.observe.watch.BuildWatch`, None: no telemetry) samples each
    step's process tree and follows its ninja; with its ``--stall-timeout`` a step that stalls
    is killed (:class:`~rocmforge.errors.BuildStalled`). ``watch.advice``, when set, is the
    MAX_JOBS the previous build's memory advises, applied when the recipe leaves MAX_JOBS to
    rocmforge (neither its ``[env]`` nor the caller's passed-through environment sets it).
    """
    mounts = [
        Mount(host=root / "src", inside="/build/src", writable=True),
        Mount(host=root / "venv", inside="/build/venv", writable=False),
        Mount(host=root / "out", inside="/build/out", writable=True),
        Mount(host=root / "home", inside="/build/home", writable=True),
        *(Mount(host=p, inside=str(p)) for p in resolved.toolchain.mounts),
        *(Mount(host=i.host, inside=i.inside) for i in resolved.inputs),
        *extra,
    ]
    names = ("src", "venv", "out", "home")
    paths = {name: runner.sandbox_path(m) for name, m in zip(names, mounts[:4], strict=True)}
    paths["tmp"] = "/tmp" if paths["src"] == "/build/src" else str(root / "tmp")
    env = build_env(resolved, paths=paths, host_env=os.environ)
    if watch is not None:
        watch.inside_src = paths["src"]
        _apply_advice(resolved, env, watch, log)
    setup = None
    if cache is not None:  # mounts and env only: nothing of the cache enters the derivation
        from rocmforge.build import ccache

        setup = ccache.prepare(
            fingerprint=resolved.toolchain.fingerprint,
            build_env=env,
            recipe_name=resolved.recipe.package.name,
            mode=resolved.recipe.build.compiler_cache,
            root=root,
            cache=cache,
            runner=runner,
        )
        if setup is not None:
            mounts += setup.mounts
            env.update(setup.env)
    else:  # off means off: a build that finds ccache itself (PyTorch, Meson) passes through
        env["CCACHE_DISABLE"] = "1"
    mounts = compose_mounts(mounts, [*resolved.toolchain.masks, *hidden], scratch=root / "masks")
    for inp in resolved.inputs:  # read-only at /inputs/NAME, named by its variable
        at = runner.sandbox_path(Mount(host=inp.host, inside=inp.inside))
        env[inp.env] = f"{at}/{inp.subdir}" if inp.subdir else at
        if inp.crates:  # cargo's private home says where crates.io's crates are
            config = root / "home" / ".cargo" / "config.toml"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(cargo_config(env[inp.env]))
    steps = resolved.recipe.build.steps
    commands = [["/bin/sh", "-euc", s] for s in steps] or [
        [
            f"{paths['venv']}/bin/python",
            "-c",
            PEP517_FRONTEND,
            paths["out"],
            json.dumps(frontend_config(resolved.recipe.build), sort_keys=True),
        ]
    ]
    labels = [f"step {i}/{len(commands)}" if steps else "PEP 517 build"
              for i in range(1, len(commands) + 1)]  # fmt: skip
    shown = [argv[-1] if steps else "build_wheel" for argv in commands]
    build = resolved.recipe.build
    if build.repair:
        script = REPAIR_SCRIPT.format(dir=REPAIR_DIR, policy=build.repair_policy)
        commands.append(["/bin/sh", "-euc", script])
        labels.append(f"repair ({build.repair})")
        shown.append(script.replace("\n", "; "))
    deadline = time.monotonic() + resolved.recipe.build.timeout
    timings: list[StepTiming] = []
    for argv, label, command in zip(commands, labels, shown, strict=True):
        started, clock = time.time(), time.monotonic()
        log.write(f"rocmforge: [{_utc(started)}] {label}: {command}\n".encode())
        log.flush()
        if watch is not None:
            watch.start_step(label)
        result = runner.run(
            argv,
            cwd=paths["src"],
            env=env,
            mounts=mounts,
            timeout=max(1.0, deadline - time.monotonic()),
            log=log,
            on_line=reporter.log_line,
            deadline=watch.deadline if watch is not None and watch.stall_timeout else None,
            on_start=watch.attach if watch is not None else None,
        )
        seconds = round(time.monotonic() - clock, 3)
        usage = ""
        if watch is not None:
            from rocmforge.observe.record import human_bytes

            used = watch.end_step(seconds)
            cpu = f"CPU {used.cpu_seconds:.1f} s, " if used.cpu_seconds is not None else ""
            usage = f" ({cpu}peak RSS {human_bytes(used.peak_rss)})"
        done = f"rocmforge: [{_utc(time.time())}] {label} finished in {seconds:.1f} s{usage}\n"
        log.write(done.encode())
        log.flush()
        timings.append(StepTiming(label=label, command=command, started=started, seconds=seconds))
        stall = watch.deadline() if watch is not None and watch.stall_timeout else None
        if (
            result.timed_out
            and stall is not None
            and stall < deadline - 0.5
            and stall <= time.monotonic()
        ):
            assert watch is not None
            reason = watch.note_killed()
            log.write(f"rocmforge: {reason}\n".encode())
            log.flush()
            raise BuildStalled(reason)
        if result.timed_out:
            raise BuildTimeout(f"{label} timed out after {resolved.recipe.build.timeout:.0f} s")
        if result.returncode != 0:
            raise BuildError(f"{label} exited with status {result.returncode}")
    if build.repair:
        record = _swap_repaired(resolved, root / "out")
        log.write(f"rocmforge: repaired {record['wheels']} -> {record['repaired']}\n".encode())
        if repaired is not None:
            repaired.update(record)
    return timings, setup


@dataclass(frozen=True, slots=True, kw_only=True)
class Staged:
    """What staging found out about the built wheels, for meta.json and provenance."""

    records: tuple[WheelRecord, ...]
    #: The GPU archs the check read from the offload bundles, if any.
    archs: Mapping[str, Any] | None
    #: Per wheel, the libraries its ELF files link and who provides them (see record_links).
    links: Mapping[str, list[dict[str, str]]] | None
    #: Each build step's start and duration.
    steps: tuple[StepTiming, ...] = ()
    #: What ``[build] repair`` did (tool, policy, wheels before and after), if it ran.
    repair: Mapping[str, Any] | None = None
    #: The compiler cache's counters for this build (None: built without it).
    compiler_cache: Mapping[str, Any] | None = None


def _stage(
    resolved: Resolved,
    store: Store,
    root: Path,
    runner: Runner,
    reporter: Reporter,
    log: BinaryIO,
    check_requirements: Sequence[Path] = (),
) -> Staged:
    """Stamp, normalize and check the built wheels and move them with the derivation into
    ``root/entry``; return their records, the GPU archs the check read and their links."""
    wheels = out_wheels(root / "out")
    if not wheels:
        raise BuildError("the build finished but wrote no wheel into $OUT")
    drop_interpreter_runpaths(resolved, wheels, log)
    warn_foreign_runpaths(resolved, wheels, reporter, log)
    digests: dict[str, dict[str, str]] = {}
    staged = root / "entry"
    staged.mkdir()
    built, wheels = wheels, [staged / w.name for w in wheels]
    for w, final in zip(built, wheels, strict=True):
        # The stamp goes in while normalizing (one streamed pass), so RECORD includes it; the
        # wheel's digests are computed while it is written (no second read of a 4 GB wheel);
        # a big member's RECORD digest is verified once, by the check's install below. The
        # normalized wheel is written straight into the staged entry (the check only reads
        # it); the build's own goes with the scratch directory.
        stamp = stamp_bytes(resolved.derivation.hash, resolved.derivation.data)
        digests[w.name] = normalize_wheel(
            w,
            epoch=resolved.source.epoch,
            add={STAMP_NAME: stamp},
            durable=False,
            rehash_big=False,
            dest=final,
        )
    reporter.phase("check")
    sdk_runtime: list[Path] = []
    sdk_check_env: dict[str, str] = {}
    hidden: list[str] = []
    if resolved.toolchain.sdk:
        # a wheel that requires the SDK imports with its runtime packages, not the host's ROCm
        hidden = _hide_host_rocm(store) if runner.level == "bwrap" else []
        from rocmforge.lock.sdkwheels import runtime_dirs

        sdk_runtime = runtime_dirs(wheels, resolved.toolchain.sdk, store.sources_dir)
        if sdk_runtime:
            shown = ", ".join(d.name for d in sdk_runtime)
            log.write(f"rocmforge: check venv gets the SDK's runtime packages {shown}\n".encode())
            from rocmforge.toolchain.rocmsdk import check_env

            sdk_check_env = check_env(resolved.recipe.toolchain)
    found = check_wheels(
        wheels,
        recipe=resolved.recipe,
        toolchain=resolved.toolchain,
        runner=runner,
        workdir=root / "check",
        log=log,
        extra_wheels=check_requirements,
        extra_trees=sdk_runtime,
        hidden=hidden,
        extra_env=sdk_check_env,
    )
    records = []
    for w in wheels:
        d = digests[w.name]
        size = (staged / w.name).stat().st_size
        records.append(WheelRecord(file=w.name, sha256=d["sha256"], blake3=d["blake3"], size=size))
    write_atomic(  # sealed with the entry at publish
        staged / layout.DERIVATION, json_bytes(resolved.derivation.data), durable=False
    )
    sdk_libs: list[str] = []
    if resolved.toolchain.sdk:  # the SDK's runtime libraries, where the installed wheel finds them
        from rocmforge.toolchain.rocmsdk import tree_path

        tree = tree_path(store.sources_dir, resolved.toolchain.sdk)
        libs = sorted(tree.glob("_rocm_sdk_*/lib"))
        sdk_libs = [str(p) for p in libs if "devel" not in p.parent.name]
    links = record_links(resolved, [staged / w.name for w in wheels], log, sdk_libs=sdk_libs)
    return Staged(records=tuple(records), archs=found.get("archs"), links=links or None)


def record_links(
    resolved: Resolved, wheels: Sequence[Path], log: BinaryIO, *, sdk_libs: Sequence[str] = ()
) -> dict[str, list[dict[str, str]]]:
    """Return, per wheel, which library each ELF member links and who provides it.

    ``sdk_libs`` are the library directories of the unpacked ROCm SDK's runtime packages: they
    are searched first, as the installed wheel finds them beside it in site-packages.

    A library resolved from a place the input hash does not cover (no package owns it, not in
    the wheel, not under a hashed toolchain root) is a :class:`BuildError`.
    """
    from rocmforge.toolchain.elf import (
        ElfError,
        candidate_paths,
        links_json,
        loader_dirs,
        resolve_links,
        wheel_dynamic,
    )
    from rocmforge.toolchain.manifest import covered_roots, detect_database, find_owners

    tc = resolved.toolchain
    db = detect_database()
    roots: dict[str, list[str]] = covered_roots(db)  # no package database: /usr by content
    rocm = tc.env.get("ROCM_PATH")
    if rocm and (not (rocm == "/usr" or rocm.startswith("/usr/")) or rocm.startswith("/usr/local")):
        roots["rocm"] = list(dict.fromkeys([rocm, os.path.realpath(rocm)]))
    if tc.python_prefix in tc.mounts:
        roots["python"] = [str(tc.python_prefix)]
    out: dict[str, list[dict[str, str]]] = {}
    try:
        dynamic = {w: wheel_dynamic(w) for w in wheels}
        candidates: set[str] = set()
        search = [*sdk_libs, *loader_dirs()]
        if sdk_libs:
            roots["rocm-sdk"] = list(sdk_libs)
        for members, _ in dynamic.values():
            candidates |= candidate_paths(members, search)
        owner_of = find_owners(candidates, db)
        for w in wheels:
            found = resolve_links(dynamic[w], owner_of=owner_of, roots=roots, search=search)
            for link in found:
                log.write(f"rocmforge: {link.member} {link.describe()}\n".encode())
            bad = [link for link in found if link.provider == "unhashed"]
            if bad:
                raise BuildError(
                    f"{w.name}: "
                    + "; ".join(f"{b.member} {b.describe()}" for b in bad)
                    + " - install the library from a system package (its version is then "
                    "hashed) or bundle it in the wheel"
                )
            if found:
                out[w.name] = links_json(found)
    except ElfError as exc:
        raise BuildError(f"cannot read the libraries the wheel links: {exc}") from exc
    return out


def _suggest_package(d: Diagnosis) -> Diagnosis:
    """For a header hidden by a declared view, name the package that ships it and the line."""
    import dataclasses
    import re

    from rocmforge.toolchain.manifest import packages_shipping

    m = re.search(r"^(\S+) is not visible", d.cause)
    if d.id != "header-not-visible" or m is None:
        return d
    owners = packages_shipping("/include/" + m.group(1))
    if not owners:
        return d
    return dataclasses.replace(
        d,
        cause=f"{m.group(1)} is shipped by {' or '.join(owners)}, which [toolchain] packages "
        "does not declare: the declared view of /usr leaves it out",
        fix=f'add it to the recipe: [toolchain] packages = [..., "{owners[0]}"]',
    )


def check_portable(
    resolved: Resolved, root: Path, log_path: Path, reporter: Reporter
) -> tuple[Finding, ...]:
    """Scan the finished build for host-specific code generation (see
    :mod:`rocmforge.build.portable`):
    warn for each finding, or fail the build when the recipe asks for ``[check] portable``."""
    found = scan_build(log_path, sorted((root / "entry").glob("*" + layout.WHEEL_SUFFIX)))
    if found and resolved.recipe.check.portable:
        raise CheckError(
            "check failed: [check] portable = true, but the build generated host-specific code: "
            + "; ".join(f.message() for f in found)
        )
    for f in found:
        reporter.warning(f.message())
    return found


def out_wheels(out: Path) -> list[Path]:
    """Return the ``*.whl`` files the build left in ``out`` ($OUT), checked without following.

    The build wrote ``out``; nothing on the host may follow a link or open a special file it
    made there (a link to a host file would put bytes the sandbox never saw into the published
    wheel; a FIFO would hang the host). ``out`` itself and every wheel must be a plain
    directory and regular files (``lstat``); anything else fails the build, naming it.
    """
    try:
        mode = os.lstat(out).st_mode
        if not stat.S_ISDIR(mode):
            raise BuildError(
                f"$OUT ({out}) is a {file_kind(mode)}, not a directory: the build replaced it"
            )
        found = []
        with os.scandir(out) as it:
            for item in it:
                if not item.name.endswith(".whl"):
                    continue
                mode = item.stat(follow_symlinks=False).st_mode
                if not stat.S_ISREG(mode):
                    raise BuildError(
                        f"$OUT/{item.name} is a {file_kind(mode)}, not a regular file: a build "
                        "must write its wheels into $OUT as regular files (rocmforge never "
                        "follows links or opens special files the build made)"
                    )
                found.append(Path(item.path))
    except OSError as exc:
        raise BuildError(f"cannot list the wheels in $OUT ({out}): {exc}") from exc
    return sorted(found)


def _record_failure(
    exc: BuildError, resolved: Resolved, log_path: Path, failed: Path
) -> tuple[Diagnosis, ...]:
    """Diagnose the failed log, store the diagnosis beside it (``failed/<...>.json``), return it."""
    from rocmforge.build.diagnose import (
        diagnose_log,
        diagnose_missing_module,
        diagnose_undeclared_rust,
        failed_record_path,
        write_failed_record,
    )

    drv = resolved.derivation
    diagnosis = diagnose_log(log_path, message=str(exc))
    if resolved.recipe.toolchain.rust is None and not any(d.id == "no-cargo" for d in diagnosis):
        diagnosis = diagnose_undeclared_rust(log_path) + diagnosis
    diagnosis += diagnose_missing_module(
        log_path, wheels=[r.wheel for r in resolved.requirements], recipe=resolved.recipe.file
    )
    if resolved.toolchain.view is not None:
        diagnosis = tuple(_suggest_package(d) for d in diagnosis)
    record = {
        "hash": drv.hash,
        "name": drv.name,
        "version": drv.version,
        "error": str(exc),
        "log": failed.name,
        "diagnosis": [d.to_json() for d in diagnosis],
    }
    # The record is a convenience; the build error itself must surface even if it is not written.
    with contextlib.suppress(OSError):
        write_failed_record(failed_record_path(failed), record)
    return diagnosis


def _build_in(
    root: Path,
    resolved: Resolved,
    store: Store,
    runner: Runner,
    reporter: Reporter,
    log: BinaryIO,
    check_requirements: Sequence[Path],
    cache: Any = None,
    watch: Any = None,
) -> Staged:
    """Prepare, build and stage ``resolved`` in the fresh build directory ``root`` (with the
    compiler cache ``cache``, if any; ``watch``: the build's telemetry, see :func:`_run_steps`)."""
    reporter.phase("prepare")
    materialize_source(
        resolved.recipe.source, resolved.source, root / "src", cache=store.sources_dir
    )
    create_venv(
        resolved.toolchain.python,
        root / "venv",
        version=resolved.toolchain.fingerprint["python"]["version"],
    )
    inside_venv = runner.sandbox_path(Mount(host=root / "venv", inside="/build/venv"))
    wheels = _build_wheels(resolved)
    rest = wheels
    if runner.level == "bwrap":  # the venv is mounted read-only: share installed trees
        from rocmforge.wheel.wheelcache import install_linked

        python_xy = ".".join(resolved.toolchain.fingerprint["python"]["version"].split(".")[:2])
        install_linked(
            [(r.wheel, r.sha256) for r in resolved.requirements],
            root / "venv",
            sources_dir=store.sources_dir,
            python_xy=python_xy,
            interpreter=f"{inside_venv}/bin/python",
        )
        own = {r.wheel for r in resolved.requirements}
        rest = [w for w in wheels if w not in own]  # the dependencies' wheels (a graph)
    if rest:
        install_wheels(
            rest,
            root / "venv",
            interpreter=f"{inside_venv}/bin/python",
            error=RequirementError,
        )
    reporter.phase("build")
    extra: list[Mount] = []
    hidden: list[str] = []
    if resolved.toolchain.sdk:
        resolved, sdk_mount, hidden = _sdk_mounts(resolved, store, runner, root, log)
        extra.append(sdk_mount)
    view = resolved.toolchain.view
    if view is not None:  # [toolchain] packages: /usr holds only the declared packages' closure
        from rocmforge.toolchain.view import prepare_view

        usr = prepare_view(
            view["packages"],
            view["links"],
            cache_dir=store.cache_dir,
            copies=resolved.toolchain.guards,
        )
        extra.append(Mount(host=usr, inside="/usr"))
        log.write(f"rocmforge: /usr is the view of {len(view['packages'])} packages\n".encode())
        if cache is not None:  # ccache and its libraries are not in a declared view of /usr
            cache = None
            log.write(b"rocmforge: compiler cache off: a declared view of /usr holds no ccache\n")
    repaired: dict[str, Any] = {}
    timings, setup = _run_steps(
        resolved,
        runner,
        root=root,
        log=log,
        reporter=reporter,
        repaired=repaired,
        extra=extra,
        hidden=hidden,
        cache=cache,
        watch=watch,
    )
    staged = _stage(resolved, store, root, runner, reporter, log, check_requirements)
    return dataclasses.replace(
        staged,
        steps=tuple(timings),
        repair=repaired or None,
        compiler_cache=_cache_stats(setup),
    )


def _sdk_mounts(
    resolved: Resolved, store: Store, runner: Runner, root: Path, log: BinaryIO
) -> tuple[Resolved, Mount, list[str]]:
    """Unpack the SDK wheels once (or reuse their tree), mount it read-only at the fixed path,
    set ROCM_PATH & co. from it and hide the host's own ROCm packages."""
    from rocmforge.toolchain.rocmsdk import SDK_MOUNT, ensure_tree, sdk_env

    tc = resolved.toolchain
    clock = time.monotonic()
    tree, fresh = ensure_tree(store.sources_dir, tc.sdk)
    what = "unpacked" if fresh else "reused"
    log.write(
        f"rocmforge: ROCm SDK {what} ({time.monotonic() - clock:.2f} s): {tree} at {SDK_MOUNT}, "
        f"from {', '.join(w.wheel.name for w in tc.sdk)}\n".encode()
    )
    mount = Mount(host=tree, inside=SDK_MOUNT)
    if runner.sandbox_path(mount) != SDK_MOUNT:
        raise BuildError(
            f"a rocm-sdk toolchain needs a sandbox that mounts the SDK at {SDK_MOUNT} (bwrap), "
            f"not sandbox level {runner.level!r}"
        )
    env, dirs = sdk_env(tree, SDK_MOUNT)
    tc = dataclasses.replace(tc, env={**tc.env, **env}, path_dirs=(*dirs, *tc.path_dirs))
    hidden = _hide_host_rocm(store)
    if hidden:
        log.write(f"rocmforge: the host's ROCm is hidden: {len(hidden)} paths\n".encode())
    return dataclasses.replace(resolved, toolchain=tc), mount, hidden


def _hide_host_rocm(store: Store) -> list[str]:
    """The host's ROCm packages' paths a build on SDK wheels must not see: each directory only
    they fill and each of their other files (build and check sandboxes)."""
    from rocmforge.toolchain.rocmsdk import host_rocm_files

    hidden_dirs, hidden_files = host_rocm_files(store.cache_dir)
    return [*hidden_dirs, *hidden_files]


#: ``ROCMFORGE_TELEMETRY=off`` (or 0, no, false) builds without the watch (the benchmark's "off").
TELEMETRY_ENV = "ROCMFORGE_TELEMETRY"


def telemetry_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether builds are watched (:mod:`rocmforge.observe`): unless ``ROCMFORGE_TELEMETRY``
    is ``off``, ``0``, ``no`` or ``false``."""
    return env.get(TELEMETRY_ENV, "").strip().lower() not in ("off", "0", "no", "false")


def _make_watch(
    resolved: Resolved,
    store: Store,
    reporter: Reporter,
    stall_after: float | None,
    stall_timeout: float | None,
) -> Any:
    """The build's :class:`~rocmforge.observe.watch.BuildWatch` (None with telemetry off),
    with the history and the MAX_JOBS advice of the newest entry of the same name."""
    if not telemetry_enabled():
        return None
    from rocmforge.observe.advice import advise_jobs
    from rocmforge.observe.record import previous_record
    from rocmforge.observe.watch import BuildWatch, History
    from rocmforge.toolchain.machine import cpu_count, ram_bytes

    drv = resolved.derivation
    history = advice = None
    found = previous_record(store.entries_dir, drv.name)
    if found is not None:
        path, record = found
        history = History.from_record(record, str(path))
        advice = advise_jobs(
            record.job_peak_rss, ram_bytes=ram_bytes(), cores=cpu_count(), source=path.name
        )
    watch = BuildWatch(
        reporter=reporter, history=history, stall_after=stall_after, stall_timeout=stall_timeout
    )
    watch.advice = advice
    return watch


class _WatchedReporter:
    """The reporter a watched build talks to: lines go through the watch (ninja's status),
    phases are recorded; everything reaches the caller's reporter."""

    def __init__(self, inner: Reporter, watch: Any) -> None:
        self.inner = inner
        self.watch = watch

    def phase(self, name: str) -> None:
        """Record the phase and pass it on."""
        self.watch.phase(name)
        self.inner.phase(name)

    def log_line(self, line: str) -> None:
        """Let the watch read the line (it passes it on)."""
        self.watch.on_line(line)

    def warning(self, message: str) -> None:
        """Pass the warning on."""
        self.inner.warning(message)

    def progress(self, text: str) -> None:
        """Pass ninja's progress and ETA on, to a reporter that shows it."""
        shown = getattr(self.inner, "progress", None)
        if shown is not None:
            shown(text)


def rebuild(
    resolved: Resolved,
    *,
    store: Store,
    runner: Runner,
    reporter: Reporter,
    dest: Path,
    check_requirements: Sequence[Path] = (),
) -> tuple[Path, ...]:
    """Build ``resolved`` again in a fresh directory and sandbox; move its wheels into ``dest``.

    Nothing is published: this is ``realize --check``'s second build. A failure raises the
    :class:`BuildError` with the log tail, as a normal build does.
    """
    with store.new_build_dir(resolved.derivation.hash) as bd:
        root = bd.path
        log_path = root / "build.log"
        for d in ("out", "home", "tmp"):
            (root / d).mkdir()
        try:
            with open(log_path, "ab") as log:
                staged = _build_in(root, resolved, store, runner, reporter, log, check_requirements)
        except BuildError as exc:
            exc.log_tail = _log_tail(log_path)
            raise
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for record in staged.records:
            os.replace(root / "entry" / record.file, dest / record.file)
            out.append(dest / record.file)
        return tuple(out)


def _cache_stats(setup: Any) -> dict[str, Any] | None:
    if setup is None:
        return None
    from rocmforge.build import ccache

    return ccache.read_stats(setup).to_json()


def _build_wheels(resolved: Resolved) -> list[Path]:
    """The wheels of the build venv: pinned requirements, then each dependency's closure."""
    return closure_wheels([r.wheel for r in resolved.requirements], resolved)


def closure_wheels(first: Sequence[Path], resolved: Resolved) -> list[Path]:
    """``first``, then each dependency's wheels and ``[check]`` wheels; one per distribution."""
    wheels: list[Path] = []
    seen: set[str] = set()
    for dep_wheels in (first, *((*d.wheels, *d.check_wheels) for d in resolved.dependencies)):
        for w in dep_wheels:
            name = w.name.split("-", 1)[0].lower()
            if name not in seen:
                seen.add(name)
                wheels.append(w)
    return wheels


def build(
    resolved: Resolved,
    *,
    store: Store,
    runner: Runner,
    reporter: Reporter,
    keep_failed: bool = False,
    check_requirements: Sequence[Path] = (),
    replace: bool = False,
    compiler_cache: bool = True,
    stall_after: float | None = None,
    stall_timeout: float | None = None,
) -> BuildOutcome:
    """Build ``resolved`` in a fresh directory under ``store/tmp`` and publish it.

    Unless ``ROCMFORGE_TELEMETRY=off``, the build is watched (:mod:`rocmforge.observe`): ninja
    progress and an ETA from the previous entry of the same name, stall warnings after
    ``stall_after`` seconds without a finished edge (None: the default) and a failure after
    ``stall_timeout``, the process tree sampled; the record goes into the entry.

    ``check_requirements`` are the wheels of ``[check] requirements``, installed beside the built
    wheel for the import check only. With ``replace`` the new entry supersedes an existing one
    of the same hash (built under a weaker sandbox) atomically, see :meth:`Store.replace`.
    ``compiler_cache`` False builds without ccache (so does ``[build] compiler-cache = false``).
    """
    drv = resolved.derivation
    started = time.time()
    watch = _make_watch(resolved, store, reporter, stall_after, stall_timeout)
    if watch is not None:
        reporter = _WatchedReporter(reporter, watch)
    with store.new_build_dir(drv.hash) as bd:
        root = bd.path
        log_path = root / layout.BUILD_DIR_LOG
        for d in ("out", "home", "tmp"):
            (root / d).mkdir()
        if watch is not None:
            watch.host_src = root / "src"
        try:
            with open(log_path, "ab") as log:
                if watch is not None:
                    watch.log = log
                cache = None
                if compiler_cache and resolved.recipe.build.compiler_cache != "off":
                    from rocmforge.build import ccache

                    cache = ccache.settings(store.root)
                staged = _build_in(
                    root, resolved, store, runner, reporter, log, check_requirements, cache,
                    watch,
                )  # fmt: skip
                portability = check_portable(resolved, root, log_path, reporter)
                log.write(f"rocmforge: build finished in {time.time() - started:.1f} s\n".encode())
            reporter.phase("publish")
            compress_file(log_path, root / "entry" / layout.BUILD_LOG, durable=False)
            byproducts = [root / "entry" / layout.BUILD_LOG]
            telemetry = None
            if watch is not None:
                from rocmforge.observe.record import write_record

                record = watch.finish(root / "src", warn=reporter.warning)
                write_record(record, root / "entry" / layout.TELEMETRY)
                byproducts.append(root / "entry" / layout.TELEMETRY)
                telemetry = record.summary()
            finished = time.time()
            seconds = finished - started
            statement = make_statement(
                resolved,
                wheels=staged.records,
                sandbox=runner.level,
                started=started,
                finished=finished,
                links=staged.links,
                cache=store.sources_dir,
                byproducts=byproducts,
                entry_dir=root / "entry",
            )
            if staged.repair:  # what [build] repair did: the wheels before and after, the policy
                internal = statement["predicate"]["buildDefinition"]["internalParameters"]
                internal["repair"] = dict(staged.repair)
            write_statement(root / "entry" / layout.PROVENANCE, statement, durable=False)
            sign_entry(root / "entry", store_root=store.root)  # when a signing key exists
            meta = build_fields(
                wheels=staged.records,
                sandbox=runner.level,
                build_seconds=round(seconds, 3),
                # Which source caches this entry needs: gc keeps exactly these while it stays.
                sources=sorted(
                    {
                        *used_sources(resolved, store.sources_dir, check_wheels=check_requirements),
                        *sdk_sources(resolved.toolchain.sdk, store.sources_dir),
                    }
                ),
                files=_file_digests(root / "entry"),
                archs=staged.archs,
                links=staged.links,
                steps=staged.steps,
                compiler_cache=staged.compiler_cache,
                portability=[f.to_json() for f in portability],
                built_against=sorted({d.hash for d in resolved.dependencies}),
                telemetry=telemetry,
            )
            publish = store.replace if replace else store.publish
            entry = publish(
                root / "entry", hash=drv.hash, name=drv.name, version=drv.version, meta=meta
            )
            return BuildOutcome(entry=entry, sandbox=runner.level, seconds=seconds)
        except RocmforgeError as exc:
            failed = store.failed_log_path(drv.hash, drv.name, drv.version)
            saved: Path | None = None
            if log_path.exists():
                # Saving the log must never hide the error it documents (a full disk, say).
                try:
                    compress_file(log_path, failed)
                    saved = failed
                except OSError as err:
                    if is_disk_full(err):
                        raise disk_full_error(
                            err, store=store.root, what=str(exc), path=failed
                        ) from exc
            bd.keep = keep_failed
            if not isinstance(exc, BuildError):
                raise
            raise exc.with_log(
                log_tail=_log_tail(log_path),
                log_path=saved,
                kept_dir=root if keep_failed else None,
                diagnosis=_record_failure(exc, resolved, log_path, failed),
            ) from exc
