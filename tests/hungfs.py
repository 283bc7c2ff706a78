"""A hung filesystem for tests: a FUSE mount whose reads never return (issue 34 point 5).

``python tests/hungfs.py MODE REAL MNT -- COMMAND...`` enters a private mount namespace (as
root: ``unshare(CLONE_NEWNS)``, ``/`` made private: nothing is seen outside it, and the mount
goes with the last process in it), mounts at ``MNT`` a read-only FUSE view of the directory
``REAL`` served from this process through ``/dev/fuse`` (the kernel protocol spoken directly:
no libfuse), runs ``COMMAND`` inside and exits with its status once it ends. Its stdout and
stderr are the command's.

``MODE`` says what hangs, as a stuck NFS server or FUSE daemon would leave them:

- ``read``: a READ of any file under ``blobs/`` is never answered (lookups, stat, open and the
  manifests under ``entries/`` answer): a blob read hangs in the kernel, unkillable but by
  SIGKILL, unaffected by ``O_NONBLOCK``;
- ``all``: every request after the mount's first is never answered: even ``open`` of a
  manifest hangs.

Once the command's main thread has exited (it gave up on the reads), the withheld requests are
answered with EIO: a thread still waiting on one would otherwise keep the process from being
reaped (a FUSE request the daemon has taken waits uninterruptibly; a hard NFS mount's waits are
killable, so there a process that gives up exits).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import stat
import struct
import subprocess
import sys

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_RDONLY = 1

IN_HEADER = struct.Struct("<IIQQIIII")
OUT_HEADER = struct.Struct("<IiQ")
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
READ_IN = struct.Struct("<QQII")

LOOKUP, FORGET, GETATTR, OPEN, READ, STATFS, RELEASE = 1, 2, 3, 14, 15, 17, 18
FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR, ACCESS, INTERRUPT = 25, 26, 27, 28, 29, 34, 36
BATCH_FORGET, DESTROY = 42, 38
NO_REPLY = (FORGET, BATCH_FORGET, INTERRUPT)


class Server:
    def __init__(self, fd: int, real: str, mode: str) -> None:
        self.fd = fd
        self.real = real
        self.mode = mode
        self.paths = {1: real}
        self.ids = {real: 1}
        self.handles: dict[int, int] = {}
        self.dirs: dict[int, list[tuple[int, str, int]]] = {}
        self.next_fh = 1
        self.answered = 0
        self.withheld: list[int] = []

    def reply(self, unique: int, data: bytes = b"", error: int = 0) -> None:
        os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(data), -error, unique) + data)

    def node(self, path: str) -> int:
        if path not in self.ids:
            self.ids[path] = len(self.ids) + 1
            self.paths[self.ids[path]] = path
        return self.ids[path]

    def attr(self, path: str) -> bytes:
        st = os.lstat(path)
        return ATTR.pack(
            self.node(path), st.st_size, st.st_blocks, int(st.st_atime), int(st.st_mtime),
            int(st.st_ctime), 0, 0, 0, st.st_mode, st.st_nlink, st.st_uid, st.st_gid, 0,
            4096, 0,
        )  # fmt: skip

    def hangs(self, opcode: int, nodeid: int) -> bool:
        if self.mode == "all":
            return self.answered > 0
        if opcode != READ:
            return False
        rel = os.path.relpath(self.paths.get(nodeid, self.real), self.real)
        return rel.split(os.sep)[0] == "blobs"

    def handle(self, msg: bytes) -> None:
        length, opcode, unique, nodeid, _uid, _gid, _pid, _pad = IN_HEADER.unpack_from(msg)
        body = msg[IN_HEADER.size : length]
        if opcode in NO_REPLY:
            return
        if opcode != INIT and self.mode != "none" and self.hangs(opcode, nodeid):
            self.withheld.append(unique)  # never answered: the caller waits in the kernel
            return
        try:
            self.answer(opcode, unique, nodeid, body)
        except OSError as exc:
            self.reply(unique, error=exc.errno or errno.EIO)
        self.answered += 1

    def answer(self, opcode: int, unique: int, nodeid: int, body: bytes) -> None:
        path = self.paths.get(nodeid)
        if opcode == INIT:
            _major, minor, readahead, _flags = struct.unpack_from("<IIII", body)
            out = struct.pack("<IIIIHHIIHHI7I", 7, min(minor, 31), readahead, 0, 16, 12,
                              128 << 10, 1, 0, 0, 0, *([0] * 7))  # fmt: skip
            self.reply(unique, out)
        elif path is None:
            self.reply(unique, error=errno.ENOENT)
        elif opcode == LOOKUP:
            child = os.path.join(path, body.split(b"\0", 1)[0].decode())
            attr = self.attr(child)  # ENOENT when absent
            self.reply(unique, struct.pack("<QQQQII", self.node(child), 0, 1, 1, 0, 0) + attr)
        elif opcode == GETATTR:
            self.reply(unique, struct.pack("<QII", 1, 0, 0) + self.attr(path))
        elif opcode in (OPEN, OPENDIR):
            fh = self.next_fh
            self.next_fh += 1
            if opcode == OPEN:
                self.handles[fh] = os.open(path, os.O_RDONLY)
            else:
                names = [".", "..", *sorted(os.listdir(path))]
                self.dirs[fh] = [(self.node(os.path.join(path, n)), n, 0) for n in names]
            self.reply(unique, struct.pack("<QII", fh, 0, 0))
        elif opcode == READ:
            fh, offset, size, _ = READ_IN.unpack_from(body)
            self.reply(unique, os.pread(self.handles[fh], size, offset))
        elif opcode == READDIR:
            fh, offset, size, _ = READ_IN.unpack_from(body)
            out = b""
            for i, (ino, name, _t) in enumerate(self.dirs[fh][offset:], start=offset + 1):
                raw = name.encode()
                ent = struct.pack("<QQII", ino, i, len(raw), 0) + raw
                ent += b"\0" * (-len(ent) % 8)
                if len(out) + len(ent) > size:
                    break
                out += ent
            self.reply(unique, out)
        elif opcode in (RELEASE, RELEASEDIR):
            fh = struct.unpack_from("<Q", body)[0]
            if opcode == RELEASE and fh in self.handles:
                os.close(self.handles.pop(fh))
            self.dirs.pop(fh, None)
            self.reply(unique)
        elif opcode in (FLUSH, ACCESS, DESTROY):
            self.reply(unique)
        elif opcode == STATFS:
            self.reply(unique, struct.pack("<QQQQQIIII6I", 1000, 0, 0, 100, 0, 4096, 255,
                                           4096, 0, *([0] * 6)))  # fmt: skip
        else:
            self.reply(unique, error=errno.ENOSYS)


def _leader_exited(pid: int) -> bool:
    """Whether the main thread of ``pid`` has exited (a zombie leader: other threads remain)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def main() -> int:
    mode, real, mnt = sys.argv[1:4]
    assert sys.argv[4] == "--", sys.argv
    command = sys.argv[5:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        print(f"hungfs: unshare: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        print(f"hungfs: private /: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    fd = os.open("/dev/fuse", os.O_RDWR)
    opts = f"fd={fd},rootmode={stat.S_IFDIR:o},user_id=0,group_id=0".encode()
    if libc.mount(b"hungfs", mnt.encode(), b"fuse", MS_RDONLY, opts) != 0:
        print(f"hungfs: mount: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 125
    server = Server(fd, os.path.abspath(real), mode)
    child = subprocess.Popen(command)
    released = False
    while child.poll() is None:
        if not released and _leader_exited(child.pid):
            # The command gave up and exited; a thread of it may still wait on a withheld
            # request, which for FUSE (unlike NFS, whose waits are killable) keeps the process
            # from being reaped: answer them (EIO) so that it can be.
            released = True
            server.mode = "none"
            for unique in server.withheld:
                server.reply(unique, error=errno.EIO)
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                msg = os.read(fd, (1 << 20) + 4096)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.EINTR, errno.EAGAIN):
                    continue  # an interrupted request
                raise
            server.handle(msg)
    print(f"hungfs: {len(server.withheld)} request(s) never answered"
          f"{' before the command exited' if released else ''}", file=sys.stderr)  # fmt: skip
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
