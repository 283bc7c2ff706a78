"""JSON for the console's read path without importing :mod:`json` (which imports ``re``: 5 ms).

The C accelerator :mod:`_json` behind :mod:`json` is used directly: :func:`loads` parses as
``json.loads`` does (its scanner, its number and constant handling) and :func:`dumps_str` quotes a
string as ``json.dumps`` does with its defaults. Anything :func:`loads` is unsure of raises
ValueError; the read path then falls through to the full CLI.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    from typing import Any

_WHITESPACE = " \t\n\r"


def _constant(name: str) -> float:
    return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


class _Context:
    """What :func:`_json.make_scanner` reads from a ``json.JSONDecoder``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_constant)

    def __init__(self) -> None:
        self.memo: dict[str, str] = {}


def loads(text: str) -> Any:
    """Parse one JSON document as ``json.loads(text)`` does; ValueError if it is not one."""
    scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # duck-typed decoder
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = scan(text, start)
    except StopIteration:
        raise ValueError("not a JSON document") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError("extra data after the JSON document")
    return value


def loads_bytes(raw: bytes) -> Any:
    """Parse UTF-8 JSON bytes as ``json.loads(raw)`` does; ValueError for anything else (a
    byte-order mark or another encoding: ``json.loads`` would detect it, the caller falls back)."""
    if raw[:3] == b"\xef\xbb\xbf" or b"\x00" in raw[:4]:
        raise ValueError("not plain UTF-8 JSON")
    return loads(raw.decode("utf-8", "surrogatepass"))


#: ``json.dumps(s)`` of a string (``ensure_ascii``, the default): the same C function.
dumps_str = _json.encode_basestring_ascii
