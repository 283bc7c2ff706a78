"""The C++ example's library, loaded with ctypes: ``count()`` TUs, ``total(x)`` calls each."""

import ctypes
import os

_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libcxxmany.so"))
_lib.cxxmany_sum.argtypes = [ctypes.c_long]
_lib.cxxmany_sum.restype = ctypes.c_long
_lib.cxxmany_count.restype = ctypes.c_long


def count() -> int:
    """Return how many translation units the library was built from."""
    return int(_lib.cxxmany_count())


def total(x: int) -> int:
    """Return the sum of every translation unit's function at ``x``."""
    return int(_lib.cxxmany_sum(x))
