"""A private root for tests that install packages or edit system files (issue 26).

:class:`PrivateRoot` starts a holder process in a new, private mount namespace (``unshare -m
--propagation private``, as root) in which each of a list of system directories (``/usr``,
``/opt``, ``/var/lib/dpkg``, ...) is an overlay mount over the real one, with its upper layer on a
tmpfs mounted inside that namespace. ``dpkg -i``, header edits and files under ``/usr/local``
made from inside land in the tmpfs only: the host never sees them, and they vanish with the
namespace, also when the test is killed with SIGKILL (the holder exits when its stdin, a pipe
from the test process, closes; nothing outside the namespace refers to the tmpfs).

Commands run inside with :meth:`PrivateRoot.run` (``subprocess.run`` whose child enters the
namespace before it executes), Python callables with :meth:`PrivateRoot.call` (a forked child
that enters it; its return value, or its failure, comes back). Everything those start (the
rocmforge CLI, dpkg, bwrap) inherits the namespace, so it sees the changed system. Everything
outside the overlaid directories (the test's ``tmp_path`` under ``/tmp``, the repository) is
the host's, shared both ways.

:func:`isolated` turns a whole test function into one that runs inside a fresh private root.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pickle
import shlex
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import pytest

#: What a test that installs a Debian or rpm package or edits system headers changes: the
#: system trees, the package databases and dpkg's log. Paths that do not exist are left out.
DEFAULT_PATHS = ("/usr", "/opt", "/var/lib/dpkg", "/var/lib/rpm", "/var/log")

_CLONE_NEWNS = 0x00020000
_READY = "rocmforge-privroot-ready"

T = TypeVar("T")


class PrivateRootError(AssertionError):
    """A callable failed inside the private root (its traceback is the message), or the root
    could not be made."""


def unavailable() -> str | None:
    """Why a private root cannot be made on this machine, or None if it can."""
    if os.geteuid() != 0:
        return "needs root (mount namespaces and overlay mounts)"
    for tool in ("unshare", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    try:
        with open("/proc/filesystems") as f:
            if not any(line.split()[-1:] == ["overlay"] for line in f):
                return "needs overlayfs in the kernel"
    except OSError:
        return "cannot read /proc/filesystems"
    return None


def _setns(fd: int) -> None:
    """Enter the mount namespace open at ``fd`` (in a single-threaded child)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class PrivateRoot:
    """A private mount namespace whose ``paths`` are overlays over the host's (a context
    manager; see the module docstring)."""

    def __init__(self, paths: Sequence[str] = DEFAULT_PATHS) -> None:
        """Prepare a private root overlaying those of ``paths`` that exist (started by
        ``with``)."""
        self.paths = tuple(p for p in paths if os.path.isdir(p))
        self._holder: subprocess.Popen[str] | None = None
        self._ns_fd = -1
        self._base = ""

    def __enter__(self) -> PrivateRoot:
        """Start the holder and mount the overlays; raises :class:`PrivateRootError` if not."""
        why = unavailable()
        if why is not None:
            raise PrivateRootError(f"no private root: {why}")
        self._base = tempfile.mkdtemp(prefix="rocmforge-privroot-")
        base = shlex.quote(self._base)
        lines = ["set -e", f"mount -t tmpfs -o mode=0700 rocmforge-privroot {base}"]
        for i, path in enumerate(self.paths):
            upper, work = f"{self._base}/{i}/upper", f"{self._base}/{i}/work"
            opts = f"lowerdir={path},upperdir={upper},workdir={work}"
            lines += [
                f"mkdir -p {shlex.quote(upper)} {shlex.quote(work)}",
                f"mount -t overlay rocmforge-privroot -o {shlex.quote(opts)} {shlex.quote(path)}",
            ]
        lines += [f"echo {_READY}", "read -r _ || true"]  # lives until the test's end closes stdin
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self._holder.stdout is not None
        if self._holder.stdout.readline().strip() != _READY:
            _, err = self._holder.communicate(timeout=30)
            self.__exit__(None, None, None)
            raise PrivateRootError(f"no private root: {err.strip() or 'the holder exited'}")
        self._ns_fd = os.open(f"/proc/{self._holder.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """End the holder: the namespace, its overlays and their tmpfs go with its last
        process."""
        if self._ns_fd >= 0:
            os.close(self._ns_fd)
            self._ns_fd = -1
        if self._holder is not None:
            if self._holder.poll() is None:
                self._holder.communicate(timeout=30)  # closes stdin: `read` returns
            self._holder = None
        if self._base:
            os.rmdir(self._base)  # empty on the host: the tmpfs was mounted only inside
            self._base = ""

    def _enter(self) -> None:
        """In a forked child: enter the namespace, keeping the working directory."""
        cwd = os.getcwd()
        _setns(self._ns_fd)
        os.chdir(cwd)

    def run(self, argv: Sequence[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """``subprocess.run(argv, **kwargs)`` inside the private root."""
        if self._ns_fd < 0:
            raise PrivateRootError("the private root is not started (use it with `with`)")
        fd = self._ns_fd
        cwd = os.fspath(kwargs.pop("cwd", None) or os.getcwd())

        def enter() -> None:
            _setns(fd)
            os.chdir(cwd)

        return subprocess.run([os.fspath(a) for a in argv], preexec_fn=enter, **kwargs)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a forked child inside the private root; its return value
        (pickled) comes back. A failure in the child is raised here as
        :class:`PrivateRootError` with the child's traceback; ``pytest.skip`` there skips here."""
        if self._ns_fd < 0:
            raise PrivateRootError("the private root is not started (use it with `with`)")
        sys.stdout.flush()
        sys.stderr.flush()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's stack
            os.close(read)
            if self._holder is not None and self._holder.stdin is not None:
                os.close(self._holder.stdin.fileno())  # only the test process keeps it alive
            status = 0
            try:
                self._enter()
                answer: tuple[str, Any] = ("ok", fn(*args, **kwargs))
            except pytest.skip.Exception as skip:
                answer = ("skip", str(skip.msg))
            except BaseException:  # everything goes back to the parent
                answer, status = ("fail", traceback.format_exc()), 1
            try:
                data = pickle.dumps(answer)
            except Exception:  # an unpicklable result is a failure too
                data, status = pickle.dumps(("fail", traceback.format_exc())), 1
            with os.fdopen(write, "wb") as out:
                out.write(data)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        if not data:
            raise PrivateRootError(f"the child in the private root died ({_how(status)})")
        kind, value = pickle.loads(data)
        if kind == "skip":
            pytest.skip(value)
        if kind == "fail":
            raise PrivateRootError(f"inside the private root:\n{value}")
        return value  # type: ignore[no-any-return]


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.WEXITSTATUS(status)}"


@contextmanager
def private_root(paths: Sequence[str] = DEFAULT_PATHS) -> Iterator[PrivateRoot]:
    """A started :class:`PrivateRoot`; the test is skipped where none can be made."""
    why = unavailable()
    if why is not None:
        pytest.skip(f"no private root: {why}")
    with PrivateRoot(paths) as root:
        yield root


def isolated(
    paths: Sequence[str] = DEFAULT_PATHS,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorate a test so its whole body runs inside a fresh private root (fixtures are made
    outside, in the host's view: those under ``tmp_path`` are shared with it)."""

    def wrap(test: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(test)
        def inside(*args: Any, **kwargs: Any) -> None:
            with private_root(paths) as root:
                root.call(test, *args, **kwargs)

        return inside

    return wrap
