"""rocmforge: reproducible, content-addressed builds of Python wheels."""

__version__ = "0.1.0"
