"""Read zstd-compressed logs without running ``zstandard``'s package ``__init__``.

``import zstandard`` costs ~9 ms of start-up because the package's ``__init__`` imports
``platform`` (and with it ``re``) and ``typing``; its compiled backend alone loads in ~0.4 ms.
:func:`decompressor` loads that extension, ``zstandard.backend_c``, straight from the file the
package would load it from, through the import system's own extension loader (already in
``sys.modules`` at start-up); if anything about that fails (no C backend, another layout, a
frozen interpreter) it imports ``zstandard`` the ordinary way. Both give the same decompressor
type, so the bytes are the same. :func:`copy_log` is how every command prints a log.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import IO, Any

_BACKEND = "zstandard.backend_c"


def _backend_file() -> str | None:
    """The file of ``zstandard.backend_c`` in the first ``sys.path`` entry holding the
    ``zstandard`` package (where ``import zstandard`` finds it), or None."""
    import _frozen_importlib_external as external

    for d in sys.path:
        pkg = os.path.join(d or ".", "zstandard")
        if os.path.isfile(os.path.join(pkg, "__init__.py")):
            for suffix in external.EXTENSION_SUFFIXES:
                path = os.path.join(pkg, "backend_c" + suffix)
                if os.path.isfile(path):
                    return path
            return None
    return None


def _load_backend() -> Any:
    """Load ``zstandard.backend_c`` without its package; raise if that cannot be done."""
    mod = sys.modules.get(_BACKEND)
    if mod is not None:
        return mod
    import _frozen_importlib as bootstrap
    import _frozen_importlib_external as external

    path = _backend_file()
    if path is None:
        raise ImportError(f"no {_BACKEND} extension on sys.path")
    loader = external.ExtensionFileLoader(_BACKEND, path)
    spec = bootstrap.ModuleSpec(_BACKEND, loader, origin=path)
    mod = loader.create_module(spec)
    loader.exec_module(mod)
    sys.modules[_BACKEND] = mod  # ``import zstandard`` later reuses it instead of a second copy
    return mod


def decompressor(*, lean: bool = True) -> Any:
    """Return a new ``ZstdDecompressor``: from the backend loaded directly when ``lean`` and
    that works, else from ``import zstandard``."""
    if lean:
        try:
            return _load_backend().ZstdDecompressor()
        except Exception:  # any surprise: the ordinary import below
            pass
    import zstandard

    return zstandard.ZstdDecompressor()


def copy_log(path: str, out: IO[bytes]) -> None:
    """Write the log at ``path`` to ``out``: decompressed if its name ends in ``.zst``, else as
    it is (a Slurm job's live log is plain text)."""
    with open(path, "rb") as f:
        if path.endswith(".zst"):
            decompressor().copy_stream(f, out)
        else:
            while chunk := f.read(1 << 16):
                out.write(chunk)
