"""Compile csrc/rfbase.c into rfbase/lib/librfbase.so (with -DRFBASE_SCALE) before packaging."""

import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


class BuildLib(build_py):
    """Build the shared library into the package, then copy the package as usual."""

    def run(self):
        os.makedirs("rfbase/lib", exist_ok=True)
        scale = os.environ.get("RFBASE_SCALE", "1")
        cmd = [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", f"-DRFBASE_SCALE={scale}"]
        cmd += ["-Irfbase/include", "csrc/rfbase.c", "-o", "rfbase/lib/librfbase.so"]
        print("rfbase:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        super().run()


class BinaryDistribution(Distribution):
    """The wheel holds a native library: give it a platform tag."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildLib}, distclass=BinaryDistribution)
