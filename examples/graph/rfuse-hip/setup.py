"""hipcc compiles the kernel against rfbase's header; the extension links rfbase and amdhip64.

GPU targets come from RFUSEHIP_ARCHS (default gfx90a), always passed explicitly: hipcc without
--offload-arch silently compiles for gfx803.
"""

import os
import re
import shutil
import subprocess

import rfbase
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROCM = os.environ.get("ROCM_PATH", "/opt/rocm")


class BuildHip(build_ext):
    """Compile rfusehip/kernel.hip with hipcc and add the object to the extension's link."""

    def build_extension(self, ext):
        hipcc = shutil.which("hipcc") or os.path.join(ROCM, "bin", "hipcc")
        archs = re.split(r"[;\s]+", os.environ.get("RFUSEHIP_ARCHS", "gfx90a").strip())
        obj = os.path.join(self.build_temp, "kernel.o")
        os.makedirs(self.build_temp, exist_ok=True)
        cmd = [hipcc, "-O2", "-fPIC", f"-I{rfbase.include_dir()}"]
        cmd += [f"--offload-arch={a}" for a in archs if a]
        cmd += ["-c", "rfusehip/kernel.hip", "-o", obj]
        print("rfusehip:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env=dict(os.environ, HIP_PLATFORM="amd"))
        ext.extra_objects = [obj]
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension(
            "rfusehip._native",
            sources=["rfusehip/_native.c"],
            library_dirs=[rfbase.lib_dir(), os.path.join(ROCM, "lib")],
            libraries=["rfbase", "amdhip64", "stdc++"],
            extra_link_args=["-Wl,-rpath,$ORIGIN/../rfbase/lib"],
        )
    ],
    cmdclass={"build_ext": BuildHip},
)
