"""``rocmforge doctor [RECIPE]``: what this machine has for ROCm builds, and how a recipe fits."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import (
    add_json_option,
    add_store_option,
    emit_json,
    store_choice,
)


def register(sub: Any) -> None:
    """Add the ``doctor`` command."""
    p = sub.add_parser(
        "doctor", help=COMMANDS["doctor"]
    )
    p.add_argument("recipe", nargs="?", metavar="RECIPE", help="also lint this recipe")
    p.add_argument(
        "--sysroot",
        metavar="DIR",
        default="/",
        help="look for /opt/rocm* and /usr under DIR (a container image, a chroot)",
    )
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge doctor [RECIPE]``: print the machine report and the recipe's lint results."""
    from rocmforge.build.doctor import doctor
    from rocmforge.recipe.load import load_recipe

    recipe = load_recipe(args.recipe) if args.recipe else None
    report = doctor(recipe, env=os.environ, sysroot=Path(args.sysroot))
    store = store_info(args)
    if args.json:
        emit_json({**report.to_json(), "store": store})
    else:
        lines = render(report, recipe)
        state = "exists" if store["exists"] else "not created yet: realize creates it"
        lines.insert(1, f"  store:     {store['path']} ({store['how']}; {state})")
        for line in lines:
            print(line)
    # 1 when realize of the recipe would stop (a lint error, a missing or mismatched toolchain)
    return 1 if recipe is not None and report.blocking else 0


def store_info(args: argparse.Namespace) -> dict[str, Any]:
    """The store the other commands would use here: path, how it was found, whether it exists."""
    from rocmforge.store.locate import is_store

    root, how = store_choice(args)
    return {"path": str(root), "how": how, "exists": is_store(str(root))}


def render(report: Any, recipe: Any) -> list[str]:
    """Return the human-readable lines of a :class:`~rocmforge.build.doctor.DoctorReport`."""
    from rocmforge.recipe.lints import to_problem

    m = report.machine
    out = ["machine:"]
    if not m.rocm:
        out.append("  ROCm:      not found ($ROCM_PATH, /opt/rocm, /opt/rocm-*, /usr checked)")
    for r in m.rocm:
        said = f"HIP {r.raw_version}, " if r.raw_version != r.version else ""
        out.append(f"  ROCm:      {r.version} at {r.root} ({said}from {r.version_file})")
        clang = f"{r.hip_clang_version} ({r.hip_clang})" if r.hip_clang else "not found"
        out.append(f"  HIP clang: {clang}")
    if m.gpus:
        out.append(f"  GPUs:      {', '.join(m.gpus)}")
    else:
        out.append("  GPUs:      no GPU visible")
        out += [f"             {p.tool}: {p.detail}" for p in m.gpu_probes]
    ram = f"{m.ram_bytes / 1024**3:.1f} GB" if m.ram_bytes else "unknown"
    out.append(f"  RAM:       {ram}")
    out.append(f"  cores:     {m.cpu_count or 'unknown'}")
    out += _python_lines(m.pythons)
    out.append(f"  bwrap:     {m.bwrap or 'not installed'}")
    out.append(
        f"  sandbox:   {m.sandbox}" + (f" ({m.sandbox_warning})" if m.sandbox_warning else "")
    )
    out += _system_lines(report.system)
    if recipe is None:
        return out
    out.append(f"recipe {report.recipe}:")
    if report.toolchain_error:
        out.append(f"  toolchain: ERROR: {report.toolchain_error}")
    else:
        out.append(f"  toolchain: {report.toolchain}")
    if not report.findings:
        out.append("  lints:     none")
    for f in report.findings:
        p = to_problem(recipe, f)
        where = f"{p.file}:{p.line}" if p.line else str(p.file)
        state = f"acknowledged ({f.allowed})" if f.allowed else f.severity
        out.append(f"  {state}: {where}: {f.key}: {f.text()}")
    cov = report.coverage
    if cov is None or not cov.recipe_archs:
        out.append("  archs:     the recipe names no GPU archs")
    elif cov.covered is None:
        out.append(f"  archs:     {', '.join(cov.recipe_archs)}; no GPU visible to compare with")
    elif cov.covered:
        out.append(f"  archs:     {', '.join(cov.recipe_archs)} cover every GPU found")
    else:
        out.append(
            f"  archs:     {', '.join(cov.recipe_archs)} do NOT cover {', '.join(cov.missing)} "
            "(the build would not run on these GPUs)"
        )
    blocking = sum(1 for f in report.findings if f.blocking) + bool(report.toolchain_error)
    if blocking:
        out.append(f"  {blocking} error(s): realize would stop before fetching anything")
    return out


def _python_lines(pythons: Any) -> list[str]:
    """The interpreters ``[toolchain] python = "3.X"`` can get, with venv and headers."""
    if pythons is None:
        return ["  Pythons:   shown only for this machine (--sysroot /)"]
    if not pythons:
        return ["  Pythons:   no python3.X on PATH, in pyenv, /usr/bin or /usr/local/bin"]
    out = []
    for i, p in enumerate(pythons):
        head = "  Pythons:   " if i == 0 else " " * 13
        if p.version is None:
            out.append(f"{head}{p.short} {p.path} ({p.found}): does not run: {p.error}")
            continue
        has = f"venv {'yes' if p.venv else 'no'}, headers {'yes' if p.headers else 'no'}"
        used = f'for python = "{p.short}"' if p.chosen else f"not used: a {p.short} comes first"
        out.append(f"{head}{p.version} {p.path} ({p.found}; {has}; {used})")
    return out


def _system_lines(system: Any) -> list[str]:
    """The system manifest part of the report: what the input hash covers, what is masked."""
    if system is None:
        return ["  system:    manifest shown only for this machine (--sysroot /)"]
    database = system["database"]
    if database == "error":
        return [f"  system:    ERROR: {system['error']}"]
    if database == "none":
        return [
            f"  system:    no package database (looked for {system['looked_for']}): realize "
            f"refuses (plan's hash stays provisional); {system['fallback']} content-hashes every "
            "file under /usr instead"
        ]
    masked = sorted(system["masked"], key=lambda d: (d != "/usr/local", d))
    shown = ", ".join(masked[:4]) + (f" and {len(masked) - 4} more" if len(masked) > 4 else "")
    masked_line = (
        f"  masked:    {system['masked_files']} files no package owns, in {len(masked)} "
        f"directories hidden from builds: {shown}"
    )
    if database == "content":
        size = f"{system['bytes'] / 1e9:.1f} GB"
        return [
            f"  system:    {system['source']}: every file under /usr is content-hashed "
            f"({system['files']} files, {size} in {system['directories']} directories)",
            f"  cost:      the first resolve reads all {size} (a later one only changed files); "
            "a warm one checks the stat of every file and directory",
            masked_line,
        ]
    source = system.get("source", "")
    if system.get("reader"):
        source += f", read by {system['reader']}"
    if system.get("note"):
        source += f" ({system['note']})"
    return [
        f"  system:    {len(system['packages'])} {database} packages visible to builds, their "
        "versions hashed (doctor --json lists them)",
        f"  database:  {source}",
        masked_line,
        f"  unowned:   {system['unowned_hashed']} loose files under /usr no package owns, "
        "content-hashed",
    ]
