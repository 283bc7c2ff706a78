"""A tiny supervisor that takes a command's whole process tree down with it (run as a script).

``python -I -S reaper.py ENV_FD PARENT_PID GRACE -- ARGV...`` reads the command's exact
environment as JSON from ``ENV_FD``, becomes a child subreaper (every orphan below it is
re-parented to it, even one that called ``setsid``) and asks the kernel for ``SIGTERM`` when its
parent dies (``PR_SET_PDEATHSIG``). It then runs ``ARGV``. When the command exits, it SIGKILLs
whatever the command left below it; when it is signalled, or its parent (``realize``) is killed,
even with ``kill -9``, it sends SIGTERM below it and SIGKILL after ``GRACE`` seconds. It reaps
everything before it exits itself; its exit status mirrors the command's.

Standard library only and no ``rocmforge`` import: it runs by path, before any package import.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _prctl(option: int, value: int) -> None:
    """Call ``prctl(option, value)``; raise OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def descendants(root: int) -> list[int]:
    """Return every live process below ``root`` (read from ``/proc``), parents first."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    stack = [root]
    while stack:
        for pid in children.get(stack.pop(), ()):
            found.append(pid)
            stack.append(pid)
    return found


def kill_tree(root: int) -> None:
    """SIGKILL everything below ``root`` and reap it, until nothing is left below it."""
    while True:
        pids = descendants(root)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        reaped = _reap_all()
        if not pids and not reaped:
            return


def stop_tree(root: int, grace: float) -> None:
    """SIGTERM everything below ``root``, wait up to ``grace`` seconds, then :func:`kill_tree`."""
    for pid in descendants(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    stop = time.monotonic() + grace
    while time.monotonic() < stop:
        _reap_all()
        if not descendants(root):
            return
        time.sleep(0.02)
    kill_tree(root)


def _reap_all() -> bool:
    """Reap every exited child without blocking; return True if one was reaped."""
    any_reaped = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return any_reaped
        if pid == 0:
            return any_reaped
        any_reaped = True


def _read_env(fd: int) -> dict[str, str]:
    chunks = []
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(65536):
            chunks.append(chunk)
    env = json.loads(b"".join(chunks))
    if not isinstance(env, dict):
        raise ValueError("environment is not a JSON object")
    return {str(k): str(v) for k, v in env.items()}


def _exit_like(status: int) -> None:
    """Exit the way the command did: with its status, or by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: Sequence[str]) -> None:
    """Run the command below ``--`` in ``argv`` under supervision; never returns."""
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: reaper.py ENV_FD PARENT_PID GRACE -- ARGV...\n")
        os._exit(127)
    env_fd, parent, grace = int(argv[0]), int(argv[1]), float(argv[2])
    command = list(argv[4:])
    me = os.getpid()

    def stop(signum: int, frame: object) -> None:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        stop_tree(me, grace)
        os._exit(128 + signum)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, stop)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    env = _read_env(env_fd)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(128 + signal.SIGTERM)
    try:
        child = os.posix_spawn(command[0], command, env) if "/" in command[0] else (
            os.posix_spawnp(command[0], command, env)
        )
    except OSError as exc:
        sys.stderr.write(f"rocmforge: cannot start {command[0]}: {exc}\n")
        os._exit(127)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(127)
        if pid == child:
            break
    # The command is done; whatever it left running below us goes too.
    kill_tree(me)
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
