"""rfusehip: a HIP kernel compiled by hipcc against the rfbase wheel's header and library."""

from rfusehip._native import factor

__all__ = ["factor"]
