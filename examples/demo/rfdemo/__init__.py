"""rfdemo: a tiny package whose arithmetic lives in a C extension."""

from rfdemo._native import add, fib

__version__ = "1.0.0"
__all__ = ["__version__", "add", "fib"]
