"""rfbase: a package that ships C headers and a shared library for other packages to build on."""

import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def include_dir():
    """The directory holding rfbase.h."""
    return os.path.join(_HERE, "include")


def lib_dir():
    """The directory holding librfbase.so."""
    return os.path.join(_HERE, "lib")


def scale():
    """The RFBASE_SCALE this rfbase was built with (read from its library)."""
    return ctypes.CDLL(os.path.join(lib_dir(), "librfbase.so")).rfbase_scale()
