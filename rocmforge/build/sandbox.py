"""Sandboxed process runner: bubblewrap, or (asked for by name) a clean environment only.

Every runner gives the command exactly the environment it is handed, umask 022, a new session
whose whole process tree is killed on timeout or interrupt, and streams stdout+stderr into a
log. ``bwrap`` also isolates network, pids, hostname and the filesystem (system read-only, only
the mounts visible); ``none`` isolates nothing but the environment and is never chosen unless
asked for by name: ``auto`` means bwrap or an error. The whole build tree dies with ``realize``
at every level, even on ``kill -9``: every runner runs its command through one
:func:`run_supervised`, under :mod:`rocmforge.util.reaper` (a child subreaper with a parent-death
signal that kills everything below it); bwrap's ``--die-with-parent`` then takes its pid
namespace down too.

There is no ``unshare`` level any more: it shared the host filesystem and, run as root, could
read and write the host; a level that claims isolation it does not give is worse than none.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from rocmforge.errors import SandboxError


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """A host directory made visible in the sandbox at ``inside`` (bwrap relocates it there)."""

    host: Path
    inside: str
    writable: bool = False
    #: a device node (a GPU's ``/dev/kfd``, ``/dev/dri/renderD128``, ``/dev/nvidia0``): bound
    #: with its device access (bwrap ``--dev-bind``), at the same path
    device: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How one sandboxed command ended."""

    returncode: int
    timed_out: bool
    seconds: float


class Runner(Protocol):
    """Runs a command isolated from the host; ``level`` is recorded in provenance."""

    level: str
    warning: str | None

    def sandbox_path(self, mount: Mount) -> str:
        """Return where ``mount`` is seen inside the sandbox (``inside`` or the host path)."""
        ...

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        timeout: float | None,
        log: BinaryIO,
        on_line: Callable[[str], None] | None = None,
        deadline: Callable[[], float | None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Run ``argv`` with exactly ``env``, stdout+stderr appended to ``log``.

        ``on_line`` is called with each complete output line as it arrives. On timeout the whole
        process tree is killed and ``timed_out`` is set; on KeyboardInterrupt it is killed too.
        ``deadline``, asked a few times a second, may name an earlier end (a ``time.monotonic``
        instant, or None for none): a caller's per-step budget, moved as the output shows the
        command's progress (the GPU acceptance checks' own timeouts). ``on_start`` is called
        with the pid of the supervisor once the command runs (the root of its process tree, for
        :mod:`rocmforge.observe`).
        """
        ...


LEVELS = ("bwrap", "none")
#: How strong each level is: an entry built at a level satisfies requests at that level or
#: weaker. Unknown or missing levels (old entries, the removed ``unshare``) rank below ``none``.
STRENGTH = {"none": 1, "bwrap": 2}

NONE_WARNING = (
    "sandbox level 'none': NO ISOLATION: the build runs as you, with no network or filesystem "
    "isolation (clean environment only); the entry records sandbox 'none'"
)
UNSHARE_REMOVED = (
    "sandbox level 'unshare' was removed: it shared the host filesystem (a root build could read "
    "/etc/shadow and write /usr); use bwrap, or --sandbox none to build knowingly without "
    "isolation"
)
_REAPER = str(Path(__file__).resolve().parent.parent / "util" / "reaper.py")

# /etc entries compilers, the dynamic loader and Python read; bound read-only when they exist.
_ETC_PATHS = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/os-release",
    "/etc/ssl",
)
# Top-level directories that merged-usr systems make symlinks into /usr.
_USR_ALIASES = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

_CHUNK = 65536
_MAX_PENDING_LINE = 65536
_PROBE_TIMEOUT = 15.0
_DRAIN_SECONDS = 2.0
_REAPER_MARGIN = 2.0
_UMASK = 0o022


class BwrapRunner:
    """Bubblewrap: private mount, pid, net, ipc and uts namespaces; only the mounts are visible."""

    level: str = "bwrap"
    warning: str | None = None

    def __init__(self, executable: str, *, kill_grace: float = 3.0) -> None:
        self.executable = executable
        self.kill_grace = kill_grace

    def sandbox_path(self, mount: Mount) -> str:
        """Return ``mount.inside``: bwrap binds every mount there."""
        return mount.inside

    def command(
        self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], mounts: Sequence[Mount]
    ) -> list[str]:
        """Return the full ``bwrap`` command line that runs ``argv`` in the sandbox."""
        cmd = [
            self.executable,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--clearenv",
        ]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        cmd += ["--ro-bind", "/usr", "/usr"]
        # /usr/local is hidden unless the caller decides what of it to show and hide (masks made
        # by compose_mounts from the system manifest: a package may own files there).
        if os.path.isdir("/usr/local") and not any(
            _within(m.inside, "/usr/local") for m in mounts
        ):
            cmd += ["--tmpfs", "/usr/local"]
        for alias in _USR_ALIASES:
            if os.path.islink(alias):
                cmd += ["--symlink", os.readlink(alias), alias]
            elif os.path.isdir(alias):
                cmd += ["--ro-bind", alias, alias]
        for path in _etc_paths():
            cmd += ["--ro-bind", path, path]
        cmd += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        # Parents before children, so a nested mount is not hidden by its parent's bind.
        for mount in sorted(mounts, key=lambda m: len(PurePosixPath(m.inside).parts)):
            bind = "--dev-bind" if mount.device else "--bind" if mount.writable else "--ro-bind"
            cmd += [bind, str(mount.host), mount.inside]
        # The root is a tmpfs bwrap built; freeze it so /etc, /root ... cannot be written.
        cmd += ["--remount-ro", "/", "--chdir", cwd, "--"]
        if "PWD" not in env:
            # bwrap always exports PWD after --chdir; take it out again so env stays exact.
            cmd += ["/usr/bin/env", "-u", "PWD", "--"]
        cmd += argv
        return cmd

    def unavailable_reason(self) -> str | None:
        """Return why this runner cannot work here (a trial ``true`` fails), or None if usable."""
        return _probe(self.command(["true"], cwd="/", env={}, mounts=()))

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        timeout: float | None,
        log: BinaryIO,
        on_line: Callable[[str], None] | None = None,
        deadline: Callable[[], float | None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Run ``argv`` inside bubblewrap with exactly ``env``; see :class:`Runner`."""
        _check_mounts(mounts, relocated=True)
        cmd = self.command(argv, cwd=cwd, env=env, mounts=mounts)
        return run_supervised(
            cmd, env={}, cwd="/", timeout=timeout, log=log, on_line=on_line,
            grace=self.kill_grace, deadline=deadline, on_start=on_start,
        )  # fmt: skip


class NoneRunner:
    """No isolation: a plain subprocess with a clean environment (prints :data:`warning`)."""

    level: str = "none"
    warning: str | None = NONE_WARNING

    def __init__(self, *, kill_grace: float = 3.0) -> None:
        self.kill_grace = kill_grace

    def sandbox_path(self, mount: Mount) -> str:
        """Return the host path: nothing is relocated."""
        return str(mount.host)

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        timeout: float | None,
        log: BinaryIO,
        on_line: Callable[[str], None] | None = None,
        deadline: Callable[[], float | None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Run ``argv`` under the reaper with exactly ``env``; see :class:`Runner`."""
        _check_mounts(mounts, relocated=False)
        if not argv:
            raise SandboxError("empty command")
        program = argv[0]
        found = program if "/" in program else shutil.which(program, path=env.get("PATH", ""))
        if found is None or not os.access(found, os.X_OK) or os.path.isdir(found):
            raise SandboxError(f"cannot start {shlex.join(argv)!r}: {program}: no such program")
        return run_supervised(
            argv, env=env, cwd=cwd, timeout=timeout, log=log, on_line=on_line,
            grace=self.kill_grace, deadline=deadline, on_start=on_start,
        )  # fmt: skip


def run_supervised(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    timeout: float | None,
    log: BinaryIO,
    on_line: Callable[[str], None] | None,
    grace: float,
    deadline: Callable[[], float | None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> RunResult:
    """Run ``argv`` with exactly ``env`` under :mod:`rocmforge.util.reaper`; every runner's ``run``.

    The reaper (a child subreaper with a parent-death signal) takes the whole tree below it
    down when the command ends, on timeout or interrupt, and when this process dies, even by
    ``kill -9``; it also closes the window in which a parent-death signal set by the command
    itself (bwrap's ``--die-with-parent``) would come too late.
    """
    read_fd, write_fd = os.pipe()
    pending = [write_fd]  # closed by _send_env once the reaper runs, else below

    def send(pid: int) -> None:
        _send_env(pending.pop(), env)
        if on_start is not None:
            on_start(pid)

    try:
        cmd = [sys.executable, "-I", "-S", _REAPER, str(read_fd), str(os.getpid()), str(grace)]
        cmd += ["--", *argv]
        return _run_streaming(
            cmd,
            env={},
            cwd=cwd,
            timeout=timeout,
            log=log,
            on_line=on_line,
            grace=grace + _REAPER_MARGIN,  # the reaper's own grace comes first
            pass_fds=(read_fd,),
            started=send,
            deadline=deadline,
        )
    finally:
        for fd in (read_fd, *pending):
            with contextlib.suppress(OSError):
                os.close(fd)


def _send_env(fd: int, env: Mapping[str, str]) -> None:
    """Write ``env`` as JSON into the reaper's pipe and close it (the reaper reads to EOF)."""
    data = json.dumps(dict(env)).encode()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise SandboxError(f"cannot hand the environment to the build supervisor: {exc}") from exc
    finally:
        os.close(fd)


def detect_runner(level: str | None = None, *, probe_cache: Path | None = None) -> Runner:
    """Return the runner for ``level``; None or ``"auto"`` means bwrap.

    ``auto`` never falls back to a weaker level: if bwrap is unusable it raises
    :class:`SandboxError` with the reason and how to choose ``none`` knowingly. Raises it too for
    an unknown level, for the removed ``unshare``, or for a level this machine cannot provide.
    With ``probe_cache`` (a JSON file), a successful trial run of bwrap is remembered there under
    the stat of the bwrap binary, the user and the kernel's user-namespace settings, and skipped
    while none of them changed; a failure is never remembered.
    """
    if level is None or level == "auto":
        runner, reason = _candidate("bwrap", probe_cache)
        if runner is None:
            raise SandboxError(
                f"no sandbox available: {reason}; install bubblewrap (or allow unprivileged "
                "user namespaces), or pass --sandbox none to build without isolation"
            )
        return runner
    if level == "unshare":
        raise SandboxError(UNSHARE_REMOVED)
    if level not in LEVELS:
        raise SandboxError(
            f"unknown sandbox level {level!r}; expected one of: auto, {', '.join(LEVELS)}"
        )
    runner, reason = _candidate(level, probe_cache)
    if runner is None:
        raise SandboxError(f"sandbox level {level!r} is not available: {reason}")
    return runner


def _candidate(level: str, probe_cache: Path | None = None) -> tuple[Runner | None, str]:
    if level == "none":
        return NoneRunner(), ""
    executable = shutil.which(level)
    if executable is None:
        return None, f"{level!r} not found on PATH"
    runner = BwrapRunner(executable)
    key = _probe_key(executable) if probe_cache is not None else None
    if probe_cache is not None and key is not None:
        try:
            if json.loads(probe_cache.read_bytes()) == key:
                return runner, ""
        except (OSError, ValueError):
            pass
    failure = runner.unavailable_reason()
    if failure is None:
        if probe_cache is not None and key is not None:
            from rocmforge.util.fsutil import write_atomic

            with contextlib.suppress(OSError):
                write_atomic(probe_cache, json.dumps(key).encode())
        return runner, ""
    return None, failure


#: Kernel settings that decide whether an unprivileged user may create namespaces.
_USERNS_SETTINGS = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
)


def _probe_key(executable: str) -> dict[str, object] | None:
    """What a successful bwrap trial run depends on, or None if it cannot be read."""
    try:
        real = os.path.realpath(executable)
        st = os.stat(real)
    except OSError:
        return None
    settings: dict[str, str] = {}
    for path in _USERNS_SETTINGS:
        try:
            with open(path, encoding="ascii") as f:
                settings[path] = f.read().strip()
        except OSError:
            settings[path] = "-"
    return {
        "bwrap": real,
        "stat": [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode],
        "uid": os.getuid(),
        "settings": settings,
    }


def _probe(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={},
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"trial run {shlex.join(cmd)!r} failed: {exc}"
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
        return f"trial run {shlex.join(cmd)!r} failed: {err}"
    return None


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _deepest(path: str, tops: Iterable[str]) -> str | None:
    """The deepest of ``tops`` that is ``path`` or one of its ancestors."""
    best: str | None = None
    for top in tops:
        if _within(path, top) and (best is None or len(top) > len(best)):
            best = top
    return best


def compose_mounts(
    mounts: Sequence[Mount], hidden: Iterable[str], *, scratch: Path
) -> list[Mount]:
    """Return ``mounts`` plus the mounts that hide each path of ``hidden``, in any nesting.

    The deepest decision wins: a path is shown when the nearest of its ancestors (itself
    included) named by ``mounts`` or ``hidden`` is a mount (or there is none), hidden when it
    is in ``hidden``; a mount and a hidden path at one place: the mount. So a hidden directory
    may hold a shown one (a package's ``/usr/local/cuda-13.0`` inside an unowned
    ``/usr/local``) and a shown one a hidden one (a mounted Python prefix's ``site-packages``).

    A hidden directory is replaced by a read-only *skeleton* made under ``scratch``: empty but
    for the mount points of the shown paths directly inside it, so bwrap never has to create
    one in a read-only directory. A hidden file is replaced by an empty file. Hidden paths that
    do not exist where they would be seen, or lie in a hidden directory with no shown path in
    between, need no mount and get none; a symlink is never hidden (a mount over it would
    land on its target).
    """
    shown = {m.inside.rstrip("/") or "/": m for m in mounts}
    wanted = sorted({h.rstrip("/") for h in hidden if h.rstrip("/")} - set(shown))
    tops = [*shown, *wanted]

    def seen(path: str) -> str:
        """The host path seen at ``path`` inside: through the nearest mount above it, if any."""
        above = _deepest(path, shown)
        if above is None:
            return path
        rel = os.path.relpath(path, above)
        return str(shown[above].host) if rel == "." else str(shown[above].host / rel)

    needed: list[str] = []
    for path in wanted:
        parent = _deepest(os.path.dirname(path), tops) if path != "/" else None
        # A symlink is never hidden: a mount over it would land on (and hide) its target.
        if (parent is None or parent in shown) and os.path.lexists(seen(path)) \
                and not os.path.islink(seen(path)):
            needed.append(path)
    out = list(mounts)
    if not needed:
        return out
    scratch.mkdir(parents=True, exist_ok=True)
    empty_file = scratch / "empty-file"
    empty_file.touch()
    # Mount points go into the skeleton of the nearest hidden directory that gets a mount: a
    # hidden path with no mount of its own (inside another hidden one) holds none.
    placed = [*shown, *needed]
    for i, path in enumerate(needed):
        if not os.path.isdir(seen(path)):
            out.append(Mount(host=empty_file, inside=path))
            continue
        skeleton = scratch / f"mask-{i}"
        skeleton.mkdir(exist_ok=True)
        for inside, m in shown.items():
            if inside != path and _within(inside, path) and _deepest(
                os.path.dirname(inside), placed
            ) == path:
                point = skeleton / os.path.relpath(inside, path)
                if m.host.is_dir():
                    point.mkdir(parents=True, exist_ok=True)
                else:
                    point.parent.mkdir(parents=True, exist_ok=True)
                    point.touch()
        out.append(Mount(host=skeleton, inside=path))
    return out


def _etc_paths() -> list[str]:
    found = [p for p in _ETC_PATHS if os.path.exists(p)]
    # Debian's Python reads /etc/python3.X (sitecustomize is a symlink there).
    found += sorted(glob.glob("/etc/python3*"))
    return found


def _check_mounts(mounts: Sequence[Mount], *, relocated: bool) -> None:
    for mount in mounts:
        if not os.path.exists(mount.host):
            raise SandboxError(f"mount source {mount.host} does not exist")
        if relocated and not mount.inside.startswith("/"):
            raise SandboxError(f"mount target {mount.inside!r} for {mount.host} is not absolute")


class _Lines:
    """Splits a byte stream into decoded lines for ``on_line``."""

    def __init__(self, on_line: Callable[[str], None] | None) -> None:
        self.on_line = on_line
        self.pending = b""

    def feed(self, chunk: bytes) -> None:
        if self.on_line is None:
            return
        *complete, self.pending = (self.pending + chunk).split(b"\n")
        for raw in complete:
            self.on_line(raw.rstrip(b"\r").decode("utf-8", "replace"))
        if len(self.pending) > _MAX_PENDING_LINE:
            self.pending = self.pending[-_MAX_PENDING_LINE:]

    def finish(self) -> None:
        if self.on_line is not None and self.pending:
            line, self.pending = self.pending, b""
            self.on_line(line.rstrip(b"\r").decode("utf-8", "replace"))


def _run_streaming(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    timeout: float | None,
    log: BinaryIO,
    on_line: Callable[[str], None] | None,
    grace: float,
    pass_fds: Sequence[int] = (),
    started: Callable[[int], None] | None = None,
    deadline: Callable[[], float | None] | None = None,
) -> RunResult:
    """Spawn ``cmd`` in a new session, stream its output to ``log``, kill its group at the end.

    ``pass_fds`` stay open in the child; ``started`` is called with its pid once it runs (before
    any output is read), and if it raises, the child is killed and the error propagates.
    """
    start = time.monotonic()
    end = None if timeout is None else start + timeout
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            umask=_UMASK,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        raise SandboxError(f"cannot start {shlex.join(cmd)!r} in {cwd}: {exc}") from exc
    assert proc.stdout is not None
    pipe = proc.stdout
    lines = _Lines(on_line)
    timed_out = False
    try:
        if started is not None:
            started(proc.pid)
        timed_out = _pump(proc, pipe.fileno(), end, log, lines, deadline)
        if timed_out:
            _terminate(proc, grace)
        else:
            # The command is done; anything it left running in its group goes too.
            _killpg(proc.pid, signal.SIGKILL)
        _drain(pipe.fileno(), log, lines)
        proc.wait()
        lines.finish()
        log.flush()
    except BaseException:
        if proc.returncode is None:
            _terminate(proc, grace)
            proc.wait()
        raise
    finally:
        pipe.close()
    return RunResult(
        returncode=proc.returncode,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
    )


def _pump(
    proc: subprocess.Popen[bytes],
    fd: int,
    end: float | None,
    log: BinaryIO,
    lines: _Lines,
    moving: Callable[[], float | None] | None = None,
) -> bool:
    """Copy output until the command exits (False) or the end passes (True): ``end``, or the
    instant ``moving()`` names now, whichever comes first.

    One poll waits for output and for the exit (a pidfd), so a finished command is noticed at
    once, not at the next tick.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(proc.pid)
        poller.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):  # an old kernel: poll the exit on a short tick
        pass
    pipe_open = True
    try:
        while True:
            now = time.monotonic()
            deadline = end
            step = moving() if moving is not None else None
            if step is not None and (deadline is None or step < deadline):
                deadline = step
            if deadline is not None and now >= deadline:
                return True
            if _exited(proc.pid):
                return False
            wait = 0.2 if deadline is None else min(0.2, deadline - now)
            if not pipe_open and pidfd is None:
                time.sleep(min(wait, 0.02))
                continue
            for ready, _ in poller.poll(max(0, math.ceil(wait * 1000))):
                if ready != fd:
                    continue
                chunk = os.read(fd, _CHUNK)
                if chunk:
                    log.write(chunk)
                    lines.feed(chunk)
                else:
                    pipe_open = False
                    poller.unregister(fd)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _drain(fd: int, log: BinaryIO, lines: _Lines) -> None:
    """Copy what is left in the pipe; give up after a bound if an escaped process holds it."""
    stop = time.monotonic() + _DRAIN_SECONDS
    while (left := stop - time.monotonic()) > 0:
        if not _readable(fd, left):
            return
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return
        log.write(chunk)
        lines.feed(chunk)


def _readable(fd: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``fd`` to be readable or hung up (poll: no FD_SETSIZE limit)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0, math.ceil(seconds * 1000))))


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (so its group id stays reserved)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _terminate(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the whole process group, then SIGKILL it after ``grace`` seconds at most."""
    _killpg(proc.pid, signal.SIGTERM)
    stop = time.monotonic() + grace
    while not _exited(proc.pid) and time.monotonic() < stop:
        time.sleep(0.02)
    _killpg(proc.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
