"""The check stage: the new wheel must carry the promised name and version, install into a
fresh venv (offline) and import ``[check].import`` inside the sandbox; with ``[check].archs``, every
shared library's HIP offload bundles must hold exactly those GPU archs (no bundle at all fails).
A failure publishes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from rocmforge.build.sandbox import Mount, Runner, compose_mounts
from rocmforge.errors import CheckError, RequirementError
from rocmforge.recipe.model import Recipe
from rocmforge.toolchain.probe import Toolchain
from rocmforge.wheel.install import install_wheels
from rocmforge.wheel.metadata import requires_dist
from rocmforge.wheel.names import parse_wheel_name
from rocmforge.wheel.venv import create_venv


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


def check_archs(
    wheels: Sequence[Path], want: Sequence[str], *, workdir: Path, log: BinaryIO
) -> dict[str, Any]:
    """Read the GPU archs of every shared library in ``wheels``; enforce ``want`` if given.

    Returns ``{wheel file: {library: {"bundles": N, "union": [...], "common": [...]}}}`` for
    the libraries holding offload bundles. Without ``want`` an unreadable bundle is only logged.
    """
    from rocmforge.toolchain.offload import LibraryArchs, OffloadError, arch_problems, wheel_archs

    libs: dict[str, LibraryArchs] = {}
    report: dict[str, Any] = {}
    try:
        for w in wheels:
            found = wheel_archs(w, tmp_dir=workdir)
            if found:
                report[w.name] = {name: lib.to_json() for name, lib in found.items()}
            for name, lib in found.items():
                libs[name if len(wheels) == 1 else f"{w.name}:{name}"] = lib
    except OffloadError as exc:
        log.write(f"rocmforge: check: cannot read GPU archs: {exc}\n".encode())
        if want:
            raise CheckError(f"check failed: cannot read the GPU archs: {exc}") from exc
        return {}
    for name, lib in sorted(libs.items()):
        log.write(
            f"rocmforge: check: {name}: {len(lib.bundles)} offload bundle(s), archs "
            f"{' '.join(sorted(lib.union))}; in every bundle: {' '.join(sorted(lib.common))}\n"
            .encode()
        )
    if want:
        problems = arch_problems(libs, want)
        if problems:
            raise CheckError(
                f"check failed: [check] archs = {list(want)}: " + "; ".join(problems)
            )
        log.write(f"rocmforge: check: archs {' '.join(want)} verified\n".encode())
    log.flush()
    return report


def check_wheels(
    wheels: Sequence[Path],
    *,
    recipe: Recipe,
    toolchain: Toolchain,
    runner: Runner,
    workdir: Path,
    log: BinaryIO,
    extra_wheels: Sequence[Path] = (),
    extra_trees: Sequence[Path] = (),
    hidden: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Install ``wheels`` into a fresh venv under ``workdir`` and import the checked modules.

    ``extra_wheels`` (``[check] requirements``) are installed beside them first;
    ``extra_trees`` (top-level directories of an unpacked ROCm SDK: its runtime packages and
    their dist-info, the ``rocm_sdk`` module) are hard-linked into site-packages, as installed;
    the import's sandbox hides the toolchain's masks and ``hidden`` (the host's ROCm for a wheel
    on SDK wheels), and ``extra_env`` joins its environment (``ROCM_SDK_TARGET_FAMILY``).

    Returns what the check found for the entry's meta: ``{"archs": {wheel: {library: {"bundles",
    "union", "common"}}}}`` when some library holds GPU code, else ``{}``.
    """
    check_names(wheels, recipe)
    workdir.mkdir(parents=True, exist_ok=True)
    found = check_archs(wheels, recipe.check.archs, workdir=workdir, log=log)
    meta: dict[str, Any] = {"archs": found} if found else {}
    venv = workdir / "venv"
    create_venv(toolchain.python, venv, version=toolchain.fingerprint["python"]["version"])
    mount = Mount(host=venv, inside="/check/venv")
    inside = runner.sandbox_path(mount)
    if extra_trees:
        from rocmforge.wheel.venv import venv_site_packages
        from rocmforge.wheel.wheelcache import link_tree

        site = venv_site_packages(venv)
        for tree in extra_trees:
            (site / tree.name).mkdir()
            link_tree(tree, site / tree.name)
    if extra_wheels:
        install_wheels(
            extra_wheels, venv, interpreter=f"{inside}/bin/python", error=RequirementError
        )
    install_wheels(wheels, venv, interpreter=f"{inside}/bin/python")
    if not recipe.check.imports:
        return meta
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
        **(extra_env or {}),
    }
    output: list[str] = []
    result = runner.run(
        [f"{inside}/bin/python", "-c", code],
        cwd=inside,
        env=env,
        mounts=compose_mounts(
            [mount, *(Mount(host=p, inside=str(p)) for p in toolchain.mounts)],
            [*toolchain.masks, *hidden],
            scratch=workdir / "masks",
        ),
        timeout=600,
        log=log,
        on_line=output.append,
    )
    if result.returncode != 0 or result.timed_out:
        raise CheckError(
            f"check failed: `{code}` in a fresh venv exited with status {result.returncode}"
            + missing_requirement_hint(wheels, output)
        )
    return meta


_NO_MODULE = re.compile(r"No module named '([A-Za-z_][A-Za-z0-9_.]*)'")


def missing_requirement_hint(wheels: Sequence[Path], output: Sequence[str]) -> str:
    """Return ``": No module named X ..."`` advice when the import failed for want of a module
    that one of ``wheels`` declares in ``Requires-Dist``, else the empty string."""
    missing = next((m.group(1) for line in output for m in [_NO_MODULE.search(line)] if m), None)
    if missing is None:
        return ""
    top = missing.split(".")[0]
    for wheel in wheels:
        for req in requires_dist(wheel):
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if m and _normal(m.group(1)) in {_normal(top), _normal(missing)}:
                return (
                    f": No module named {missing!r}, which the built wheel requires "
                    f"(Requires-Dist: {req.strip()}); add it to [check] requirements as "
                    f'"{m.group(1)}==VERSION" so the check installs it beside the wheel'
                )
    return f": No module named {missing!r}"
