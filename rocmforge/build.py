"""The build stage: a fresh source copy, a private venv, the steps in the sandbox, a staged entry.

Inside a relocating sandbox (bubblewrap) every build sees the same paths — ``/build/src``,
``/build/venv``, ``/build/out``, ``/build/home`` — so compilers embed no per-build temp path and two
builds of one derivation give byte-identical wheels.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from rocmforge.check import check_wheels
from rocmforge.errors import (
    BuildError,
    BuildTimeout,
    Diagnosis,
    RequirementError,
    RocmforgeError,
)
from rocmforge.provenance import make_statement, write_statement
from rocmforge.resolve import Resolved
from rocmforge.sandbox import Mount, Runner
from rocmforge.sources.identity import materialize_source
from rocmforge.sources.refs import used_sources
from rocmforge.stamp import stamp_wheel
from rocmforge.store import layout
from rocmforge.store.entry import Entry, WheelRecord, build_fields
from rocmforge.store.store import Store
from rocmforge.util.fsutil import (
    disk_full_error,
    file_kind,
    is_disk_full,
    json_bytes,
    write_atomic,
)
from rocmforge.util.hashing import file_blake3
from rocmforge.util.progress import Reporter
from rocmforge.wheels import create_venv, install_wheels, normalize_wheel, wheel_digests

TAIL_LINES = 30

# A minimal PEP 517 frontend run by the build venv's Python; no isolation (the venv is the
# isolation) and no network (requirements are pinned and pre-installed).
PEP517_FRONTEND = r"""
import importlib, os, sys, tomllib
out = sys.argv[1]
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
print("rocmforge: built", hooks.build_wheel(out), flush=True)
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


def compress_file(src: Path, dest: Path) -> None:
    """Compress ``src`` into ``dest`` with zstandard, streaming, and fsync it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            zstandard.ZstdCompressor(level=3).copy_stream(fin, fout)
            fout.flush()
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
    env.update(recipe.env)
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
    return env


def _run_steps(
    resolved: Resolved, runner: Runner, *, root: Path, log: BinaryIO, reporter: Reporter
) -> None:
    mounts = [
        Mount(host=root / "src", inside="/build/src", writable=True),
        Mount(host=root / "venv", inside="/build/venv", writable=False),
        Mount(host=root / "out", inside="/build/out", writable=True),
        Mount(host=root / "home", inside="/build/home", writable=True),
        *(Mount(host=p, inside=str(p)) for p in resolved.toolchain.mounts),
        *(Mount(host=i.host, inside=i.inside) for i in resolved.inputs),
    ]
    names = ("src", "venv", "out", "home")
    paths = {name: runner.sandbox_path(m) for name, m in zip(names, mounts[:4], strict=True)}
    paths["tmp"] = "/tmp" if paths["src"] == "/build/src" else str(root / "tmp")
    env = build_env(resolved, paths=paths, host_env=os.environ)
    for inp in resolved.inputs:  # read-only at /inputs/NAME, named by its variable
        at = runner.sandbox_path(Mount(host=inp.host, inside=inp.inside))
        env[inp.env] = f"{at}/{inp.subdir}" if inp.subdir else at
    steps = resolved.recipe.build.steps
    commands = [["/bin/sh", "-euc", s] for s in steps] or [
        [f"{paths['venv']}/bin/python", "-c", PEP517_FRONTEND, paths["out"]]
    ]
    deadline = time.monotonic() + resolved.recipe.build.timeout
    for i, argv in enumerate(commands, 1):
        label = f"step {i}/{len(commands)}" if steps else "PEP 517 build"
        log.write(f"rocmforge: {label}: {argv[-1] if steps else 'build_wheel'}\n".encode())
        log.flush()
        result = runner.run(
            argv,
            cwd=paths["src"],
            env=env,
            mounts=mounts,
            timeout=max(1.0, deadline - time.monotonic()),
            log=log,
            on_line=reporter.log_line,
        )
        if result.timed_out:
            raise BuildTimeout(f"{label} timed out after {resolved.recipe.build.timeout:.0f} s")
        if result.returncode != 0:
            raise BuildError(f"{label} exited with status {result.returncode}")


def _stage(
    resolved: Resolved,
    root: Path,
    runner: Runner,
    reporter: Reporter,
    log: BinaryIO,
    check_requirements: Sequence[Path] = (),
) -> tuple[tuple[WheelRecord, ...], Mapping[str, Any] | None]:
    """Stamp, normalize and check the built wheels and move them with the derivation into
    ``root/entry``; return the wheels' records and the GPU archs the check read (if any)."""
    wheels = out_wheels(root / "out")
    if not wheels:
        raise BuildError("the build finished but wrote no wheel into $OUT")
    for w in wheels:
        # The stamp goes in before normalizing, so the final bytes (and RECORD) include it.
        stamp_wheel(w, input_hash=resolved.derivation.hash, derivation=resolved.derivation.data)
        normalize_wheel(w, epoch=resolved.source.epoch)
    reporter.phase("check")
    found = check_wheels(
        wheels,
        recipe=resolved.recipe,
        toolchain=resolved.toolchain,
        runner=runner,
        workdir=root / "check",
        log=log,
        extra_wheels=check_requirements,
    )
    staged = root / "entry"
    staged.mkdir()
    records = []
    for w in wheels:
        os.replace(w, staged / w.name)
        d = wheel_digests(staged / w.name)
        size = (staged / w.name).stat().st_size
        records.append(WheelRecord(file=w.name, sha256=d["sha256"], blake3=d["blake3"], size=size))
    write_atomic(staged / layout.DERIVATION, json_bytes(resolved.derivation.data))
    return tuple(records), found.get("archs")


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
    from rocmforge.diagnose import diagnose_log, failed_record_path, write_failed_record

    drv = resolved.derivation
    diagnosis = diagnose_log(log_path, message=str(exc))
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
) -> BuildOutcome:
    """Build ``resolved`` in a fresh directory under ``store/tmp`` and publish it.

    ``check_requirements`` are the wheels of ``[check] requirements``, installed beside the built
    wheel for the import check only. With ``replace`` the new entry supersedes an existing one
    of the same hash (built under a weaker sandbox) atomically, see :meth:`Store.replace`.
    """
    drv = resolved.derivation
    started = time.time()
    with store.new_build_dir(drv.hash) as bd:
        root = bd.path
        log_path = root / "build.log"
        for d in ("out", "home", "tmp"):
            (root / d).mkdir()
        try:
            with open(log_path, "ab") as log:
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
                install_wheels(
                    _build_wheels(resolved),
                    root / "venv",
                    interpreter=f"{inside_venv}/bin/python",
                    error=RequirementError,
                )
                reporter.phase("build")
                _run_steps(resolved, runner, root=root, log=log, reporter=reporter)
                records, archs = _stage(
                    resolved, root, runner, reporter, log, check_requirements
                )
                log.write(f"rocmforge: build finished in {time.time() - started:.1f} s\n".encode())
            reporter.phase("publish")
            compress_file(log_path, root / "entry" / layout.BUILD_LOG)
            finished = time.time()
            seconds = finished - started
            statement = make_statement(
                resolved,
                wheels=records,
                sandbox=runner.level,
                started=started,
                finished=finished,
            )
            write_statement(root / "entry" / layout.PROVENANCE, statement)
            meta = build_fields(
                wheels=records,
                sandbox=runner.level,
                build_seconds=round(seconds, 3),
                # Which source caches this entry needs: gc keeps exactly these while it stays.
                sources=used_sources(
                    resolved, store.sources_dir, check_wheels=check_requirements
                ),
                files=_file_digests(root / "entry"),
                archs=archs,
                built_against=sorted({d.hash for d in resolved.dependencies}),
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
