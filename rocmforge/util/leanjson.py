"""JSON parsing without ``import json`` (which imports ``re``: ~5.5 ms of start-up).

The read commands' import-light readers (:mod:`rocmforge.store.readers`) read small JSON files
(an entry's ``meta.json``) without the store classes.
:func:`loads` drives the C scanner of the standard
library's own ``_json`` with the settings ``json.loads`` uses by default, so it returns what
``json.loads`` returns for every document; a malformed one is handed to ``json.loads`` itself,
which raises its own error (a :class:`ValueError`).
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}
_WHITESPACE = " \t\n\r"


class _Context:
    """The attributes ``_json.make_scanner`` reads from a ``json.JSONDecoder``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict[str, str] = {}


_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # duck-typed context


def loads(text: str | bytes) -> Any:
    """Parse one JSON document (``bytes`` are UTF-8) as ``json.loads`` does; its error if it
    is not one."""
    if isinstance(text, bytes):
        if b"\x00" in text[:4]:  # UTF-16 or UTF-32, which json.loads detects: let it
            import json

            return json.loads(text)
        # as json.loads decodes UTF-8 (a byte order mark is dropped); errors are ValueErrors
        text = text.decode("utf-8-sig" if text.startswith(b"\xef\xbb\xbf") else "utf-8",
                           "surrogatepass")  # fmt: skip
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except (StopIteration, ValueError, SystemError):  # SystemError: the C scanner's error
        end = -1  # needs json.decoder loaded to raise its own; let json.loads say what is wrong
    if end < 0 or text[end:].strip(_WHITESPACE):
        import json

        return json.loads(text)  # raises json's own error (JSONDecodeError, a ValueError)
    return value


#: ``json.dumps(s)`` of a string (``ensure_ascii``, the default): the same C function.
dumps_str = _json.encode_basestring_ascii
