"""The progress lines of the commands that build or fetch (realize, lock, push): one
:class:`ConsoleReporter` on stderr, a spinner on a terminal, a heartbeat line off one."""

from __future__ import annotations

import os
import threading
import time
from typing import IO

from rocmforge.pipeline.options import HEARTBEAT_SECONDS


class ConsoleReporter:
    """Progress on stderr: one live status line on a TTY, plain phase lines otherwise.

    Off a terminal (CI logs, nohup, Slurm) a heartbeat line every ``heartbeat`` seconds says the
    work is alive: phase, elapsed time, the size of the build output so far and its last line.
    """

    def __init__(
        self,
        stream: IO[str],
        *,
        label: str,
        verbose: bool = False,
        heartbeat: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.stream = stream
        self.label = label
        self.verbose = verbose
        self.heartbeat = heartbeat
        self.log_bytes = 0
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.current = "resolve"
        self.last = ""
        #: ninja's progress and ETA (``[12,345/18,020] 68% ETA 0:41 (from the ...)``), if any
        self.status = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._drawn = 0.0
        self._ticker: threading.Thread | None = None
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        elif heartbeat > 0:
            self._ticker = threading.Thread(target=self._beat, daemon=True)
            self._ticker.start()

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.started)
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"

    def _draw(self) -> None:
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except OSError:
            width = 0
        width = width if width >= 20 else 100
        status = f"{self.status} " if self.status else ""
        text = f"[{self.label} {self.current} {self._elapsed()}] {status}{self.last}"
        with self._lock:
            self.stream.write("\r\x1b[K" + text[: max(10, width - 1)])
            self.stream.flush()
            self._drawn = time.monotonic()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            self.beat()

    def beat(self) -> None:
        """Print one heartbeat line (off a terminal): phase, elapsed, output size, last line."""
        size = self.log_bytes
        shown = (f"{size / 1024**2:.1f} MB" if size >= 1024**2
                 else f"{size / 1024:.1f} kB" if size >= 1024 else f"{size} B")  # fmt: skip
        last = f"; last: {self.last[:200]}" if self.last else ""
        status = f" {self.status};" if self.status else ""
        with self._lock:
            self._say(
                f"rocmforge: {self.label}: {self.current} still running (+{self._elapsed()});"
                f"{status} output {shown}{last}"
            )
            self.stream.flush()

    def progress(self, text: str) -> None:
        """Remember ninja's progress and ETA for the status line and the heartbeat."""
        self.status = text

    def phase(self, name: str) -> None:
        """Show that a new phase started."""
        self.current = name
        self.status = ""
        if self.tty:
            self._draw()
        else:
            self._say(f"rocmforge: {self.label}: {name} (+{self._elapsed()})")

    def log_line(self, line: str) -> None:
        """Remember (TTY) or echo (``--verbose``) one line of build output."""
        self.last = line.strip()
        self.log_bytes += len(line.encode("utf-8", "replace")) + (not line.endswith("\n"))
        if self.tty:
            if time.monotonic() - self._drawn > 0.1:
                self._draw()
        elif self.verbose:
            self._say(f"  | {line.rstrip()}")

    def warning(self, message: str) -> None:
        """Print a warning on its own line."""
        self.clear()
        self._say(f"warning: {message}")

    def _say(self, line: str) -> None:
        # One write per line: with PYTHONUNBUFFERED print() writes the text and its newline in
        # two calls, and the children of `realize -j` share one stderr, so another child's
        # line could start in the middle of this one.
        self.stream.write(line + "\n")

    def clear(self) -> None:
        """Erase the live status line."""
        if self.tty:
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    def close(self) -> None:
        """Stop the ticker (or heartbeat) and erase the status line."""
        self._stop.set()
        self.clear()
