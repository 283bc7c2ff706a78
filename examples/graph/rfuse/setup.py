"""Compile against the installed rfbase: its headers, its library, RPATH to where it installs."""

import rfbase
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rfuse._native",
            sources=["rfuse/_native.c"],
            include_dirs=[rfbase.include_dir()],
            library_dirs=[rfbase.lib_dir()],
            libraries=["rfbase"],
            # site-packages/rfuse/_native*.so -> site-packages/rfbase/lib (torchvision -> torch)
            extra_link_args=["-Wl,-rpath,$ORIGIN/../rfbase/lib"],
        )
    ]
)
