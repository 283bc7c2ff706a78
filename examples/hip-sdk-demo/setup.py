"""Build the HIP kernel with the SDK's clang and link it against the SDK's HIP runtime.

This is what a project does against ROCm's Python wheels (TheRock's python_packaging.md):
ROCM_PATH is ``rocm-sdk path --root`` (the expanded ``_rocm_sdk_devel``); the kernel is compiled
by ``$ROCM_PATH/lib/llvm/bin/clang++ -x hip --rocm-path=$ROCM_PATH`` for the archs in
HIPDEMO_ARCHS (always explicit), with a fixed -cuid so the object does not depend on the build
directory; the extension finds ``libamdhip64`` at run time in the installed ``rocm-sdk-core``
(RPATH ``$ORIGIN/../_rocm_sdk_core/lib``, as torch's wheels do), and the wheel requires that
runtime wheel (HIPDEMO_REQUIRES, like PYTORCH_EXTRA_INSTALL_REQUIREMENTS).
"""

import os
import re
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROCM = os.environ["ROCM_PATH"]


class BuildHip(build_ext):
    """Compile hipsdkdemo/kernel.hip with the SDK's clang and add it to the extension's link."""

    def build_extension(self, ext):
        archs = re.split(r"[;\s]+", os.environ["HIPDEMO_ARCHS"].strip())
        obj = os.path.join(self.build_temp, "kernel.o")
        os.makedirs(self.build_temp, exist_ok=True)
        cmd = [
            os.path.join(ROCM, "lib", "llvm", "bin", "clang++"), "-x", "hip",
            f"--rocm-path={ROCM}", "-cuid=hipsdkdemo_kernel", "-O2", "-fPIC",
            *(f"--offload-arch={a}" for a in archs if a),
            "-c", "hipsdkdemo/kernel.hip", "-o", obj,
        ]
        print("hipsdkdemo:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        ext.extra_objects = [obj]
        super().build_extension(ext)


setup(
    install_requires=[r for r in os.environ.get("HIPDEMO_REQUIRES", "").split(";") if r],
    ext_modules=[
        Extension(
            "hipsdkdemo._hip",
            sources=["hipsdkdemo/_hip.c"],
            libraries=["amdhip64", "stdc++"],
            library_dirs=[os.path.join(ROCM, "lib")],
            # DT_RPATH (not RUNPATH): libamdhip64's own dependencies are found there too
            extra_link_args=["-Wl,-rpath,$ORIGIN/../_rocm_sdk_core/lib", "-Wl,--disable-new-dtags"],
        )
    ],
    cmdclass={"build_ext": BuildHip},
)
