"""``rocmforge test --python PATH``: GPU acceptance checks of a Python environment's torch."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rocmforge.cli.commands import COMMANDS
from rocmforge.cli.commands._common import add_json_option, emit_json

EPILOG = """\
tiers:
  smoke  is_available, device count, each device's arch among the wheel's, fp32 and bf16
         matmul and a conv against float64 CPU references, SDPA (flash), torch.compile,
         the runtime facts
  comm   one process per GPU: init_process_group, new_group, all_reduce correctness, an
         in-place bandwidth sweep (algbw, busbw = algbw x 2(n-1)/n) judged at its largest size
exit status: 0 passed (or warned), 1 a check failed or timed out, 2 bad input, 3 no GPU
"""


def register(sub: Any) -> None:
    """Add the ``test`` command."""
    from rocmforge.cli.parser import RawDescriptionHelpFormatter

    p = sub.add_parser("test", help=COMMANDS["test"], epilog=EPILOG,
                       formatter_class=RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--python", metavar="PATH", required=True,
                   help="the interpreter whose environment is tested (its torch, its GPUs)")
    p.add_argument("--tier", choices=("smoke", "comm"), default="smoke")
    p.add_argument("--gpus", type=int, metavar="N",
                   help="GPUs expected (default: the visible devices)")
    p.add_argument("--timeout", action="append", default=[], metavar="CHECK=SECONDS",
                   help="a check's timeout (default 120 s; import 120, compile 300, sweep 600)")
    p.add_argument("--max-bytes", type=int, default=8 << 30, metavar="B",
                   help="the comm sweep's largest size (default 8 GiB)")
    p.add_argument("--thresholds", metavar="FILE",
                   help='a TOML table of busbw lines, "MODEL xN" = GB/s, and tolerance')
    p.add_argument("--sandbox", choices=("bwrap", "none"), default="bwrap")
    p.add_argument("--attestation", metavar="FILE",
                   help="write the run's in-toto statement (test-result predicate) here")
    add_json_option(p)
    p.set_defaults(func=run)


def _timeouts(items: list[str]) -> dict[str, float]:
    from rocmforge.errors import UsageError

    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or not name or seconds <= 0:
            raise UsageError(f"--timeout {item}: expected CHECK=SECONDS (e.g. compile=600)")
        out[name] = seconds
    return out


def run(args: argparse.Namespace) -> int:
    """Run the tier; print each check, the verdict, and where the log and statement are."""
    import os
    import tempfile
    from pathlib import Path

    from rocmforge.accept.devices import find_devices
    from rocmforge.accept.run import accept_python
    from rocmforge.build.sandbox import detect_runner
    from rocmforge.store import layout
    from rocmforge.store.locate import host_cache
    from rocmforge.util.fsutil import json_bytes, write_atomic

    thresholds = None
    if args.thresholds:
        import tomllib

        from rocmforge.accept.thresholds import parse_thresholds
        from rocmforge.errors import UsageError

        path = Path(args.thresholds)
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"{path}: cannot read the thresholds: {exc}") from exc
        thresholds = parse_thresholds(data, file=path, key="thresholds")
    timeouts = _timeouts(args.timeout)
    runner = detect_runner(args.sandbox, probe_cache=Path(host_cache()) / layout.CACHE_BWRAP)
    workdir = Path(tempfile.mkdtemp(prefix="rocmforge-test-"))
    done = accept_python(args.python, tier=args.tier, runner=runner, workdir=workdir,
                         environ=os.environ, devices=find_devices(), gpus=args.gpus,
                         timeouts=timeouts, thresholds=thresholds,
                         max_bytes=args.max_bytes)  # fmt: skip
    if args.attestation:
        write_atomic(Path(args.attestation), json_bytes(done.statement))
    report = done.report
    if args.json:
        emit_json({**report.to_json(), "log": str(done.log), "statement": done.statement})
        return report.exit_code
    if runner.warning:
        print(f"warning: {runner.warning}", file=sys.stderr)
    for c in report.checks:
        print(f"{c.status:>8}  {c.name:<13} {c.seconds:7.2f} s  {c.detail}")
    node = report.node
    where = f" on {node['gpu_count']}x {node['gpu_model']}" if node.get("gpu_model") else ""
    print(f"{report.result}: {report.tier} tier{where}, {report.seconds:.1f} s "
          f"(log {done.log})")  # fmt: skip
    if args.attestation:
        print(f"attestation: {args.attestation}")
    return report.exit_code
