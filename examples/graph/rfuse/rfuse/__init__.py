"""rfuse: a C extension built against the rfbase wheel's header and library."""

from rfuse._native import scaled

__all__ = ["scaled"]
