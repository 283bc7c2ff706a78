"""The fork worker pool of a path scan: run a function on parts of a job in forked children.

Threads cannot help a scan (the per-file work is Python code under the GIL); ``fork`` gives each
part a core without pickling the inputs. A worker runs ``fn(part)``, sends the marshal'd outcome
through a pipe and leaves with ``os._exit`` (no atexit handlers, no threads). Workers can also
report as they go with :func:`send_message` (length-prefixed marshal messages no longer than
``PIPE_BUF``, so writes from several workers never interleave), read back by
:func:`take_messages`.
"""

from __future__ import annotations

import marshal
import os
import select
import signal
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from rocmforge.errors import SourceError

MAX_WORKERS = 8
MSG_MAX = select.PIPE_BUF - 4  # a message and its 4-byte length fit one atomic pipe write
_T = TypeVar("_T")
_IN_WORKER = False


def in_worker() -> bool:
    """Return whether this process is a forked scan worker (which must not start threads)."""
    return _IN_WORKER


def workers() -> int:
    """Return how many workers a scan uses: the cores this process may run on, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_WORKERS))


def run_in_worker(fn: Callable[[_T], Any], part: _T, w: int) -> NoReturn:
    """Body of a forked worker: run ``fn(part)``, send the marshal'd outcome, leave at once."""
    global _IN_WORKER
    _IN_WORKER = True
    code = 1
    try:
        try:
            out: tuple[str, Any] = ("ok", fn(part))
        except SourceError as exc:
            out = ("source", str(exc))
        except BaseException as exc:
            out = ("bug", f"{type(exc).__name__}: {exc}")
        view = memoryview(marshal.dumps(out))
        while view:
            view = view[os.write(w, view):]
        code = 0
    finally:
        os._exit(code)


def collect(pid: int, r: int) -> Any:
    """Read worker ``pid``'s result from ``r``, reap it and return the result (or raise it)."""
    chunks = []
    while chunk := os.read(r, 1 << 20):
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not chunks:
        raise SourceError(f"path scan worker {pid} failed (wait status {status})")
    kind, value = marshal.loads(b"".join(chunks))
    if kind == "source":
        raise SourceError(value)
    if kind != "ok":
        raise RuntimeError(f"path scan worker {pid}: {value}")
    return value


def spawn(fn: Callable[[_T], Any], part: _T, close: tuple[int, ...] = ()) -> tuple[int, int]:
    """Fork a worker running ``fn(part)``; return its pid and the read end of its result pipe."""
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:
        os.close(r)
        for fd in close:
            os.close(fd)
        run_in_worker(fn, part, w)
    os.close(w)
    return pid, r


def reap(kids: dict[int, int]) -> None:
    """Stop and reap workers whose results were not collected (only after an error)."""
    for pid, r in kids.items():
        os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def fork_map(fn: Callable[[_T], Any], parts: list[_T]) -> list[Any]:
    """Return ``[fn(p) for p in parts]``: the first part here, each other one in a forked child.

    Threads cannot help (the per-file work is Python code under the GIL); ``fork`` gives each
    part a core without pickling the inputs. Children use no threads, run no atexit handlers and
    return their result marshal'd through a pipe.
    """
    if len(parts) <= 1:
        return [fn(p) for p in parts]
    kids: dict[int, int] = {}
    try:
        for part in parts[1:]:
            pid, r = spawn(fn, part)
            kids[pid] = r
        results = [fn(parts[0])]
        for pid in list(kids):
            r = kids.pop(pid)
            try:
                results.append(collect(pid, r))
            finally:
                os.close(r)
        return results
    except OSError as exc:
        raise SourceError(f"path scan: cannot run a worker: {exc}") from exc
    finally:
        reap(kids)


def send_message(fd: int | None, value: Any) -> bool:
    """Write ``value`` to the pipe ``fd`` as one length-prefixed marshal message.

    Returns False, having written nothing, when there is no pipe or the message would not fit
    one atomic write; the caller then keeps ``value`` itself.
    """
    if fd is None:
        return False
    msg = marshal.dumps(value)
    if len(msg) > MSG_MAX:
        return False
    os.write(fd, len(msg).to_bytes(4, "little") + msg)
    return True


def take_messages(data: bytearray) -> list[Any]:
    """Remove every complete message from the front of ``data`` and return their values."""
    out = []
    while len(data) >= 4 and len(data) >= 4 + (n := int.from_bytes(data[:4], "little")):
        out.append(marshal.loads(bytes(data[4 : 4 + n])))
        del data[: 4 + n]
    return out
