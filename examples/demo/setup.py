"""Declares the C extension; all other metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("rfdemo._native", sources=["rfdemo/_native.c"])])
