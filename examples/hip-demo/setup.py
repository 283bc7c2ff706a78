"""Build the HIP kernel with hipcc, then link it into a C extension with -lamdhip64.

The GPU targets come from HIPDEMO_ARCHS (";"- or space-separated, default gfx90a;gfx940) and are
always passed explicitly: hipcc without --offload-arch silently compiles for gfx803.
With HIP_CLANG set (a plain clang++, e.g. Debian's clang++-19, which can target gfx942) the kernel
is compiled by it instead, with HIP_DEVICE_LIB_PATH as its device-library directory and a fixed
-cuid so the object does not depend on the build directory.
"""

import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROCM = os.environ.get("ROCM_PATH", "/opt/rocm")


class BuildHip(build_ext):
    """Compile hipdemo/kernel.hip to an object with hipcc and add it to the extension's link."""

    def build_extension(self, ext):
        hipcc = shutil.which("hipcc") or os.path.join(ROCM, "bin", "hipcc")
        archs = re.split(r"[;\s]+", os.environ.get("HIPDEMO_ARCHS", "gfx90a;gfx940").strip())
        obj = os.path.join(self.build_temp, "kernel.o")
        os.makedirs(self.build_temp, exist_ok=True)
        cmd = [hipcc, "-O2", "-fPIC", *(f"--offload-arch={a}" for a in archs if a)]
        if os.environ.get("HIP_CLANG"):
            cmd = [
                os.environ["HIP_CLANG"], "-x", "hip", f"--rocm-path={ROCM}",
                f"--rocm-device-lib-path={os.environ['HIP_DEVICE_LIB_PATH']}",
                "-cuid=hipdemo_kernel", *cmd[1:],
            ]
        cmd += ["-c", "hipdemo/kernel.hip", "-o", obj]
        print("hipdemo:", " ".join(cmd), flush=True)
        # HIP_PLATFORM=amd: with a CUDA toolkit on the machine hipcc would otherwise pick nvcc.
        subprocess.run(cmd, check=True, env=dict(os.environ, HIP_PLATFORM="amd"))
        ext.extra_objects = [obj]
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension(
            "hipdemo._hip",
            sources=["hipdemo/_hip.c"],
            libraries=["amdhip64", "stdc++"],
            library_dirs=[os.path.join(ROCM, "lib")],
        )
    ],
    cmdclass={"build_ext": BuildHip},
)
