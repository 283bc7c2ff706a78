"""Calls and reads with a deadline, for filesystems that may stop answering.

A read of a regular file on a hung mount (an NFS server gone with a ``hard`` mount, a FUSE
daemon that stopped, a stuck network block device) blocks in the kernel, and no signal but
SIGKILL ends it: neither ``O_NONBLOCK`` (ignored for regular files) nor ``SIGALRM`` (such waits
are not interruptible) helps. What does is to make the blocking call in another thread and stop
waiting for it: :func:`call` runs one call so, and :class:`DeadlineReader` does each read of a
stream so (one worker thread per stream, the caller's buffer read into directly: no copy). The
abandoned thread is a daemon: it ends when its call returns, or with the process (a process
exits even while one of its threads waits on NFS or FUSE: those waits are killable).

The cost is a thread hand-off per call, some 10-30 us: nothing beside a 1 MiB read.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, TypeVar

# threading and queue (~4 ms) are imported on first use: a command that only opens a cache
# backend (a lookup that misses nothing) must not pay for them.

T = TypeVar("T")


class Stalled(TimeoutError):
    """A call did not return within its deadline (it was abandoned, still running)."""


def call(fn: Callable[[], T], timeout: float, *, what: str = "the call") -> T:
    """Return ``fn()`` run in a daemon thread, or raise what it raised; :class:`Stalled` when
    it has not returned after ``timeout`` seconds (the thread is left to finish on its own)."""
    import threading

    box: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed to the caller, who raises it
            box.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="rocmforge-deadline", daemon=True).start()
    if not done.wait(timeout):
        raise Stalled(f"{what}: no answer within {timeout:g} s")
    ok, value = box[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


_STOP = object()


class DeadlineReader(io.RawIOBase):
    """A binary stream over ``raw`` (a file object with ``readinto``) whose every read must
    return within ``timeout`` seconds, else :class:`Stalled` (and so does every later read:
    the worker is still in the abandoned one). Closing it closes ``raw`` (at once, or when an
    abandoned read returns)."""

    def __init__(self, raw: Any, timeout: float, *, what: str = "a read") -> None:
        import queue

        super().__init__()
        self._raw = raw
        self._timeout = timeout
        self._what = what
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._worker: Any = None  # the threading.Thread, started by the first read
        self._stalled = False

    def readable(self) -> bool:
        """A reader is readable."""
        return True

    def _work(self) -> None:
        try:
            while (buf := self._requests.get()) is not _STOP:
                try:
                    self._answers.put((True, self._raw.readinto(buf)))
                except BaseException as exc:
                    self._answers.put((False, exc))
        finally:
            self._raw.close()

    def readinto(self, buf: Any) -> int:
        """Read into ``buf`` in the worker thread; :class:`Stalled` past the deadline."""
        if self._stalled:
            raise Stalled(f"{self._what}: an earlier read never returned")
        if self._worker is None:
            import threading

            self._worker = threading.Thread(
                target=self._work, name="rocmforge-reader", daemon=True
            )
            self._worker.start()
        import queue

        self._requests.put(buf)
        try:
            ok, value = self._answers.get(timeout=self._timeout)
        except queue.Empty:
            self._stalled = True
            raise Stalled(f"{self._what}: no data within {self._timeout:g} s") from None
        if ok:
            return int(value or 0)
        raise value

    def close(self) -> None:
        """End the worker (once its read returns) and close the stream."""
        if not self.closed:
            if self._worker is None:
                self._raw.close()
            else:
                self._requests.put(_STOP)
        super().close()
