"""The check stage: the new wheel must carry the promised name and version, install into a
fresh venv (offline) and import ``[check].import`` inside the sandbox. A failure publishes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from rocmforge.errors import CheckError
from rocmforge.recipe import Recipe
from rocmforge.sandbox import Mount, Runner
from rocmforge.toolchain import Toolchain
from rocmforge.wheels import create_venv, install_wheels, parse_wheel_name


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_names(wheels: Sequence[Path], recipe: Recipe) -> None:
    """Raise :class:`CheckError` unless some wheel is ``[package]``'s name at its version."""
    from packaging.version import Version

    want_name, want_version = _normal(recipe.package.name), Version(recipe.package.version)
    seen = []
    for w in wheels:
        wn = parse_wheel_name(w.name)
        seen.append(f"{wn.distribution} {wn.version}")
        if _normal(wn.distribution) == want_name and Version(wn.version) == want_version:
            return
    raise CheckError(
        f"the build produced {', '.join(seen)}, but the recipe promises "
        f"{recipe.package.name} {recipe.package.version} (package.name / package.version)"
    )


def check_wheels(
    wheels: Sequence[Path],
    *,
    recipe: Recipe,
    toolchain: Toolchain,
    runner: Runner,
    workdir: Path,
    log: BinaryIO,
) -> None:
    """Install ``wheels`` into a fresh venv under ``workdir`` and import the checked modules."""
    check_names(wheels, recipe)
    venv = workdir / "venv"
    workdir.mkdir(parents=True, exist_ok=True)
    create_venv(toolchain.python, venv, version=toolchain.fingerprint["python"]["version"])
    mount = Mount(host=venv, inside="/check/venv")
    inside = runner.sandbox_path(mount)
    install_wheels(wheels, venv, interpreter=f"{inside}/bin/python")
    if not recipe.check.imports:
        return
    code = "; ".join(f"import {m}" for m in recipe.check.imports)
    log.write(f"rocmforge: check: {code}\n".encode())
    log.flush()
    env = {
        "PATH": f"{inside}/bin:/usr/bin:/bin",
        "HOME": "/tmp" if inside.startswith("/check") else str(workdir),
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    result = runner.run(
        [f"{inside}/bin/python", "-c", code],
        cwd=inside,
        env=env,
        mounts=[mount, *(Mount(host=p, inside=str(p)) for p in toolchain.mounts)],
        timeout=600,
        log=log,
    )
    if result.returncode != 0 or result.timed_out:
        raise CheckError(
            f"check failed: `{code}` in a fresh venv exited with status {result.returncode}"
        )
