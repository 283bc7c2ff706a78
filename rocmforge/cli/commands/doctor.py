"""``rocmforge doctor [RECIPE]``: what this machine has for ROCm builds, and how a recipe fits.

``rocmforge doctor --comm [--python PATH] [--timeout S] [--nodes N]``: whether NCCL/RCCL can
talk here (:mod:`rocmforge.accept.commdoctor`): the interfaces and what ``NCCL_SOCKET_IFNAME``
selects, the RCCL/NCCL variables, ``/dev/shm``, the GPUs, and a timed init + all_reduce.
"""

from __future__ import annotations

import argparse
import os
import sys
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
    comm = p.add_argument_group("communication (--comm)")
    comm.add_argument("--comm", action="store_true",
                      help="check what NCCL/RCCL needs: interfaces and NCCL_SOCKET_IFNAME, "
                           "the RCCL variables, /dev/shm, GPUs; exit 0 ok, 1 a problem that "
                           "stops NCCL (or the timed run failed or hung), 2 bad input, 3 no GPU "
                           "for --python")  # fmt: skip
    comm.add_argument("--python", metavar="PATH",
                      help="also run a timed init_process_group + all_reduce in this "
                           "interpreter (it needs torch), NCCL_DEBUG=INFO read")  # fmt: skip
    comm.add_argument("--timeout", type=float, default=None, metavar="S",
                      help="kill the timed run after S seconds (default 60)")
    comm.add_argument("--nodes", type=int, default=None, metavar="N",
                      help="the run spans N nodes (default: $SLURM_JOB_NUM_NODES, else 1): "
                           "lo/docker0 bootstraps are errors across nodes")  # fmt: skip
    comm.add_argument("--sandbox", choices=("bwrap", "none"), default="bwrap",
                      help="where the timed run runs (bwrap: loopback only)")
    add_store_option(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``rocmforge doctor [RECIPE]``: print the machine report and the recipe's lint results."""
    if args.comm:
        return run_comm(args)
    for flag, value in (("--python", args.python), ("--timeout", args.timeout),
                        ("--nodes", args.nodes)):  # fmt: skip
        if value is not None:
            from rocmforge.errors import UsageError

            raise UsageError(f"{flag} goes with --comm (rocmforge doctor --comm {flag} ...)")
    from rocmforge.build.doctor import doctor
    from rocmforge.cli.commands._nextsteps import stack_recipes
    from rocmforge.recipe.load import load_recipe

    stack = stack_recipes(args.recipe) if args.recipe else None
    if stack is not None:
        return _run_stack(args, *stack)
    recipe = load_recipe(args.recipe) if args.recipe else None
    report = doctor(recipe, env=os.environ, sysroot=Path(args.sysroot))
    store = store_info(args)
    advice = _jobs_advice(store, recipe)
    if args.json:
        extra = {"max_jobs": advice.to_json() if advice else None} if recipe is not None else {}
        emit_json({**report.to_json(), "store": store, **extra})
    else:
        lines = render(report, recipe)
        state = "exists" if store["exists"] else "not created yet: realize creates it"
        lines.insert(1, f"  store:     {store['path']} ({store['how']}; {state})")
        if recipe is not None:
            lines += _next_lines(args, store, report, [recipe], advice, stack=False)
        for line in lines:
            print(line)
    # 1 when realize of the recipe would stop (a lint error, a missing or mismatched toolchain)
    return 1 if recipe is not None and report.blocking else 0


def _jobs_advice(store: dict[str, Any], recipe: Any) -> Any:
    """The MAX_JOBS advice for ``recipe`` from the newest entry of its name with telemetry in
    the store (:mod:`rocmforge.observe.advice`), None when there is none."""
    if recipe is None or not store["exists"]:
        return None
    from rocmforge.observe.advice import previous_advice
    from rocmforge.store import layout

    return previous_advice(Path(store["path"]) / layout.ENTRIES, recipe.package.name)


def _stack_advice(store: dict[str, Any], recipes: list[Any]) -> Any:
    """The tightest MAX_JOBS advice among a stack's recipes (fewest jobs), None without any."""
    found = [a for a in (_jobs_advice(store, r) for r in recipes) if a is not None]
    return min(found, key=lambda a: a.jobs) if found else None


def _next_lines(
    args: argparse.Namespace,
    store: dict[str, Any],
    report: Any,
    recipes: list[Any],
    advice: Any,
    *,
    stack: bool,
) -> list[str]:
    """Free disk at the store, the one MAX_JOBS line, the expected build time, and the
    numbered next steps."""
    from rocmforge.cli.commands._nextsteps import next_steps, resource_lines, time_line
    from rocmforge.store import layout

    m = report.machine
    names = [r.package.name for r in recipes]
    entries = Path(store["path"]) / layout.ENTRIES if store["exists"] else None
    res = resource_lines(Path(store["path"]), m.ram_bytes, m.cpu_count, advice, names=names)
    return ["resources:", *res, time_line(recipes, m.cpu_count, entries),
            *next_steps(args.recipe, stack=stack, names=names, recipes=recipes)]  # fmt: skip


def _run_stack(args: argparse.Namespace, name: str, files: list[Path]) -> int:
    """``doctor STACK``: the machine once, each recipe's lints and toolchain, then the
    resources and next steps for the stack; 1 when realize of any recipe would stop."""
    from rocmforge.build.doctor import doctor
    from rocmforge.recipe.load import load_recipe

    recipes = [load_recipe(f) for f in files]
    reports = [doctor(r, env=os.environ, sysroot=Path(args.sysroot)) for r in recipes]
    store = store_info(args)
    if args.json:
        emit_json({"stack": name, "store": store,
                   "recipes": [{"recipe": str(r.file), **rep.to_json()}
                               for r, rep in zip(recipes, reports, strict=True)]})  # fmt: skip
    else:
        lines = render(reports[0], None)  # the machine, once
        state = "exists" if store["exists"] else "not created yet: realize creates it"
        lines.insert(1, f"  store:     {store['path']} ({store['how']}; {state})")
        for r, rep in zip(recipes, reports, strict=True):
            lines += render(rep, r)[len(render(rep, None)) :]
        advice = _stack_advice(store, recipes)
        lines += _next_lines(args, store, reports[0], recipes, advice, stack=True)
        for line in lines:
            print(line)
    return 1 if any(rep.blocking for rep in reports) else 0


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


def run_comm(args: argparse.Namespace) -> int:
    """``rocmforge doctor --comm``: print (or ``--json``) the communication report; its exit
    code (0 ok, 1 a problem that stops NCCL or a failed/hung run, 3 no GPU for --python)."""
    from rocmforge.accept.commdoctor import DEFAULT_TIMEOUT, comm_doctor
    from rocmforge.errors import UsageError

    if args.recipe:
        raise UsageError(f"doctor --comm takes no recipe ({args.recipe}): run doctor "
                         f"{args.recipe} for it")  # fmt: skip
    if args.nodes is not None and args.nodes < 1:
        raise UsageError(f"--nodes {args.nodes}: must be 1 or more")
    timeout = DEFAULT_TIMEOUT if args.timeout is None else args.timeout
    if not timeout > 0:
        raise UsageError(f"--timeout {args.timeout:g}: must be more than 0 seconds")
    from rocmforge.accept.devices import find_devices

    devices = find_devices()
    runner = None
    if args.python and devices.kind is not None:  # no GPU: exit 3, no sandbox needed
        from rocmforge.build.sandbox import detect_runner
        from rocmforge.store import layout
        from rocmforge.store.locate import host_cache

        runner = detect_runner(args.sandbox, probe_cache=Path(host_cache()) / layout.CACHE_BWRAP)
    report = comm_doctor(environ=os.environ, devices=devices, nodes=args.nodes,
                         python=args.python, runner=runner, timeout=timeout)  # fmt: skip
    if args.json:
        emit_json(report.to_json())
    else:
        if runner is not None and runner.warning:
            print(f"warning: {runner.warning}", file=sys.stderr)
        for line in render_comm(report):
            print(line)
    return report.exit_code


def render_comm(report: Any) -> list[str]:
    """The lines of a :class:`~rocmforge.accept.commdoctor.CommReport`: a line per
    interface, what NCCL_SOCKET_IFNAME selects, the problems, /dev/shm, the GPUs, the timed
    run and the advice."""
    spec = report.ifname
    raw = report.variables.get("NCCL_SOCKET_IFNAME")
    head = f"NCCL_SOCKET_IFNAME={raw}" if raw is not None else "NCCL_SOCKET_IFNAME unset"
    out = [f"interfaces ({head}):"]
    width = max((len(v.interface.name) for v in report.interfaces), default=2)
    for v in report.interfaces:
        i = v.interface
        addrs = ", ".join(str(a) for a in i.addresses) or "no address"
        mtu = f"mtu {i.mtu}" if i.mtu else ""
        out.append(f"  {i.name:<{width}}  {i.state():<22} {mtu:<10} {addrs:<34} {v.note}")
    if report.sysfs_warning:
        out.append(f"  warning: {report.sysfs_warning}")
    if spec is not None:
        out.append(f"  NCCL_SOCKET_IFNAME reads as: {spec.describe()}")
    same = len({(c.chosen, c.bootstrap) for c in report.choices}) == 1
    hows = {c.how for c in report.choices}
    for c in report.choices[:1] if same else report.choices:
        who = "NCCL and RCCL" if same else c.rules
        chosen = ", ".join(c.chosen) or "nothing"
        how = c.how if not same or len(hows) == 1 else "; ".join(
            f"{x.rules}: {x.how}" for x in report.choices)
        boot = f"; bootstrap on {c.bootstrap} {c.bootstrap_address}" if c.bootstrap else ""
        out.append(f"  {who}: {chosen} ({how}){boot}")
    nodes = f"{report.nodes} node(s)"
    problems = [f for f in report.findings if f.severity != "note"]
    notes = [f for f in report.findings if f.severity == "note"]
    out.append(f"problems ({nodes}):" if problems else f"problems ({nodes}): none")
    for f in problems:
        out.append(f"  {f.severity}: {f.text}")
        if f.fix:
            out.append(f"    fix: {f.fix}")
    for f in notes:
        out.append(f"  note: {f.text}")
    shm = report.shm
    if shm.exists:
        out.append(f"/dev/shm: {shm.free_bytes / 2**30:.1f} GiB free of "
                   f"{shm.total_bytes / 2**30:.1f} GiB ({shm.path})")  # fmt: skip
    else:
        out.append(f"/dev/shm: {shm.path} does not exist")
    d = report.devices
    if d.kind is None:
        out.append(f"devices: no GPU found (looked for {d.looked_for})")
    else:
        out.append(f"devices: {d.kind}, {d.found} GPU(s), {d.visible} visible ({d.why})")
    r = report.run
    if r.status in ("skipped", "no gpu"):
        out.append(f"timed run: {'skipped' if r.status == 'skipped' else 'not run'}: "
                   f"{r.detail}")
    else:
        version = f", NCCL {r.nccl_version}" if r.nccl_version else ""
        out.append(f"timed run: {r.status.upper()} at stage {r.stage or 'start'}, world size "
                   f"{r.world_size}, {r.seconds:.1f} s of {r.timeout:g} s{version} "
                   f"(sandbox {r.sandbox})")  # fmt: skip
        out.append(f"  {r.detail}")
        if r.ifname_used:
            out.append(f"  the sandbox has loopback only: the run used NCCL_SOCKET_IFNAME="
                       f"{r.ifname_used} (--sandbox none runs it on this host's interfaces)")
        elif r.sandbox == "bwrap":
            out.append("  the sandbox has loopback only (--sandbox none runs it on this host's "
                       "interfaces)")
        if r.status != "passed" and r.tail:
            out.append("  last lines of the log:")
            out += [f"    {line}" for line in r.tail]
        if r.log:
            out.append(f"  log: {r.log}")
    out.append(f"advice: {report.advice}")
    return out
