"""A seeded fuzz corpus: mutated recipes and command lines for the rocmforge CLI.

The seeds are the recipes in ``tests/data/fuzz``; :func:`generate` derives ``n`` cases from an
integer seed, deterministically, by structured mutations (a value replaced by one of another
type, a key deleted or added, ``extends`` / ``patches`` / inputs pointed at special files, deep
nesting, huge strings) and textual ones (lines deleted or duplicated, bytes flipped, invalid
UTF-8, truncation), plus random command lines. :func:`materialize` writes one case into a
directory and returns the argv to run. Nothing here touches the network or paths outside the
case directory and the store given (``-o`` links always land in the case directory).

Used by ``tests/cli/test_fuzz.py`` (a bounded run in CI) and ``bench/soak_fuzz.py`` (a long soak).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SEEDS = Path(__file__).resolve().parent / "data" / "fuzz"
SEED_NAMES = ("path.toml", "full.toml", "git.toml", "rocm.toml", "base.toml")


@dataclass(frozen=True)
class Raw:
    """A TOML value written as is (datetimes, odd literals, deliberately broken text)."""

    text: str


@dataclass(frozen=True)
class Case:
    """One fuzz case: the files to write, the command line, and the recipe it runs (if any)."""

    seed: int
    index: int
    argv: tuple[str, ...]
    files: dict[str, bytes] = field(default_factory=dict)
    recipe: str | None = None
    fifo: bool = False

    @property
    def name(self) -> str:
        """A stable name: ``<seed>-<index>``."""
        return f"{self.seed}-{self.index}"


# --- values ------------------------------------------------------------------------------------

SPECIAL_PATHS = (
    "/dev/zero",
    "/dev/null",
    "/etc/passwd",
    "/",
    "{dir}/fifo",
    "{dir}/missing.toml",
    "{dir}",
    "{dir}/base.toml",
    "{dir}/evil.tar.gz",
    "{dir}/plain.txt",
    "",
    ".",
    "..",
    "-rf",
    "--help",
    "a" * 5000,
    "{dir}/" + "d/" * 300 + "x.toml",
    "ünïcødé/名前.toml",
)

KNOWN_KEYS = (
    "schema", "extends", "package", "source", "toolchain", "requirements", "env", "build",
    "check", "lint", "inputs", "name", "version", "path", "git", "rev", "ref", "submodules",
    "patches", "kind", "python", "cc", "cxx", "rocm", "root", "steps", "passthrough", "timeout",
    "import", "archs", "allow", "digests", "url", "sha256", "subdir",
)  # fmt: skip


def _random_string(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.15:
        return rng.choice(SPECIAL_PATHS)
    if pick < 0.25:
        return "x" * rng.choice((101, 300, 4096, 100_000))
    if pick < 0.35:
        return "".join(rng.choice("\u00e9\u540d\U0001f600\u202e\t\n\\\"'$`;|&") for _ in range(8))
    if pick < 0.45:
        return rng.choice(
            ("3.11", "3.99", "0.1", "1.0.0rc1", "==", "numpy==1.0", "setuptools==75.6.0",
             "gfx90a", "gfx000", "RF101", "RF999", "1h", "tiny", "tiny.sub", "-", "9" * 40)
        )  # fmt: skip
    alphabet = "abcdefghijklmnopqrstuvwxyzABC0123456789._-/ "
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))


def _nested(rng: random.Random, depth: int) -> Raw:
    """Arrays and inline tables ``depth`` levels deep, as text (no recursion to write it)."""
    opens, closes = [], []
    for _ in range(depth):
        if rng.random() < 0.5:
            opens.append("[")
            closes.append("]")
        else:
            opens.append("{a = ")
            closes.append("}")
    return Raw("".join(opens) + rng.choice(("1", '"x"', "true")) + "".join(reversed(closes)))


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """Return a random TOML value: any type, odd sizes, special strings, deep nesting."""
    pick = rng.random()
    if pick < 0.35:
        return _random_string(rng)
    if pick < 0.47:
        return rng.choice((0, -1, 1, 2**63 - 1, -(2**63), 7, 3600, 10**9))
    if pick < 0.52:
        return rng.choice((0.5, -0.0, 1e308, math.inf, -math.inf, math.nan))
    if pick < 0.58:
        return rng.random() < 0.5
    if pick < 0.62:
        return Raw(rng.choice(("1979-05-27T07:32:00Z", "1979-05-27", "07:32:00", "0x1F", "1_000")))
    if pick < 0.67:
        return _nested(rng, rng.choice((2, 10, 63, 64, 65, 200, 600)))
    if pick < 0.85 and depth < 3:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 3:
        return {_random_key(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return ""


def _random_key(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.6:
        return rng.choice(KNOWN_KEYS)
    if pick < 0.7:
        return "k" * rng.choice((1, 200, 100_000))
    return _random_string(rng)[:40] or "empty"


# --- a small TOML writer (tomllib reads only) ----------------------------------------------------


def _key(k: str) -> str:
    if k and all(c.isalnum() or c in "_-" for c in k) and k.isascii():
        return k
    return json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def dumps(data: dict[str, Any]) -> str:
    """Write ``data`` as TOML: top-level scalars first, then one ``[table]`` per sub-table."""
    head, tables = [], []
    for k, v in data.items():
        if isinstance(v, dict) and v and all(not isinstance(x, Raw) for x in v.values()):
            body = "\n".join(f"{_key(kk)} = {_value(vv)}" for kk, vv in v.items())
            tables.append(f"[{_key(k)}]\n{body}\n")
        else:
            head.append(f"{_key(k)} = {_value(v)}")
    return "\n".join(head) + "\n\n" + "\n".join(tables)


# --- mutations ---------------------------------------------------------------------------------


def _paths(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append((*prefix, k))
            out.extend(_paths(v, (*prefix, k)))
    return out


def _parent(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node: Any = data
    for k in path[:-1]:
        node = node[k]
    assert isinstance(node, dict)
    return node


def mutate_data(rng: random.Random, data: dict[str, Any]) -> None:
    """Apply one structured mutation to parsed recipe ``data`` in place."""
    paths = _paths(data)
    op = rng.random()
    if op < 0.3 and paths:
        path = rng.choice(paths)
        _parent(data, path)[path[-1]] = random_value(rng)
    elif op < 0.45 and paths:
        path = rng.choice(paths)
        del _parent(data, path)[path[-1]]
    elif op < 0.6:
        tables = [p for p in paths if isinstance(_parent(data, p)[p[-1]], dict)]
        node = data
        if tables and rng.random() < 0.7:
            p = rng.choice(tables)
            node = _parent(data, p)[p[-1]]
        node[_random_key(rng)] = random_value(rng)
    elif op < 0.72:
        data["extends"] = rng.choice((*SPECIAL_PATHS, "{dir}/base.toml", "{dir}/chain0.toml"))
    elif op < 0.82:
        source = data.setdefault("source", {})
        if isinstance(source, dict):
            pick = rng.choice(SPECIAL_PATHS)
            source["patches"] = [pick] if rng.random() < 0.8 else pick
    elif op < 0.92:
        inputs = data.setdefault("inputs", {})
        if isinstance(inputs, dict):
            spec: dict[str, Any] = {"env": rng.choice(("AOT", "PATH", "1X", ""))}
            where = rng.random()
            if where < 0.6:
                spec["path"] = rng.choice(SPECIAL_PATHS)
            elif where < 0.8:
                spec["url"] = rng.choice(
                    ("file:///nonexistent/x.tar.gz", "ftp:/x", "", "file://{dir}/evil.tar.gz")
                )
                spec["sha256"] = rng.choice(("0" * 64, "zz", ""))
            if rng.random() < 0.3:
                spec["subdir"] = rng.choice(("..", "/", "a", ""))
            inputs[rng.choice(("aot", "x y", "", "a" * 300, "..", "data"))] = spec
    else:
        data["package"] = {"name": _random_string(rng), "version": _random_string(rng)}


def mutate_text(rng: random.Random, raw: bytes) -> bytes:
    """Apply one textual mutation to recipe bytes."""
    lines = raw.split(b"\n")
    op = rng.random()
    if op < 0.2 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
    elif op < 0.35:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif op < 0.5:
        i = rng.randrange(len(lines))
        lines.insert(i, rng.choice((b"[[", b"[package", b"= 1", b"a.b.c = {", b'"x', b"[a]]")))
    elif op < 0.65 and raw:
        i = rng.randrange(len(raw))
        return raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1 :]
    elif op < 0.75:
        i = rng.randrange(len(raw) + 1)
        return raw[:i] + rng.choice((b"\xff\xfe", b"\x00", b"\xc3", b"\r", b"\x1b[2J")) + raw[i:]
    elif op < 0.85:
        return raw[: rng.randrange(len(raw) + 1)]
    else:
        i = rng.randrange(len(lines))
        lines[i] = lines[i].replace(b"=", rng.choice((b"==", b"", b"= =", b".=")), 1)
    return b"\n".join(lines)


def _evil_tar() -> bytes:
    """A gzip tar whose one member climbs out of the unpack directory."""
    import gzip
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size, info.mtime = 6, 0
        tf.addfile(info, io.BytesIO(b"owned\n"))
    return gzip.compress(buf.getvalue(), mtime=0)


EVIL_TAR = _evil_tar()


def _recipe_files(rng: random.Random) -> tuple[dict[str, bytes], str]:
    seed = rng.choice(SEED_NAMES)
    text = (SEEDS / seed).read_text()
    files: dict[str, bytes] = {
        "base.toml": (SEEDS / "base.toml").read_bytes(),
        "empty.patch": b"",
        "plain.txt": b"not an archive\n",
        "evil.tar.gz": EVIL_TAR,
    }
    data = tomllib.loads(text)
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        mutate_data(rng, data)
    try:
        raw = dumps(data).encode()
    except (TypeError, RecursionError):
        raw = text.encode()
    if rng.random() < 0.35:
        raw = mutate_text(rng, raw)
    if rng.random() < 0.2:  # the base recipe is broken instead (errors must name the chain)
        base = tomllib.loads(files["base.toml"].decode())
        mutate_data(rng, base)
        with contextlib.suppress(TypeError, RecursionError):
            files["base.toml"] = dumps(base).encode()
        if rng.random() < 0.5:
            files["base.toml"] = mutate_text(rng, files["base.toml"])
    if rng.random() < 0.1:  # a chain of extends, possibly into a special file
        target = rng.choice(("/etc/passwd", "/dev/zero", "{dir}/fifo", "{dir}/chain0.toml"))
        files["chain1.toml"] = f'schema = 1\nextends = "{target}"\n'.encode()
        files["chain0.toml"] = b'schema = 1\nextends = "{dir}/chain1.toml"\n'
    files["recipe.toml"] = raw
    return files, "recipe.toml"


RECIPE_COMMANDS = (("plan",) * 30) + (("realize",) * 6) + ("lock",) * 3 + ("doctor",)
FLAG_VALUES = ("-1", "0", "x", "99999999999999999999999", "", "1e3", "-", "--", "7d", "\x00")


def _cli_line(rng: random.Random) -> tuple[str, ...]:
    """A random command line (recipe-free): bad flags, odd values, missing or extra arguments."""
    command = rng.choice(
        ("du", "gc", "list", "query", "show", "verify", "pins", "pin", "unpin", "log", "audit",
         "explain", "plan", "realize", "lock", "doctor", "frob", "", "--version", "-h")
    )  # fmt: skip
    argv = [command] if command else []
    for _ in range(rng.randint(0, 4)):
        pick = rng.random()
        if pick < 0.3:
            argv += [
                rng.choice(
                    ("--top", "--keep-last", "--older-than", "--max-size", "--since", "--name",
                     "--version", "--sandbox", "--json", "--dry-run", "--frobnicate", "-o",
                     "--check", "--repair", "-v")
                ),
                rng.choice(FLAG_VALUES),
            ]  # fmt: skip
        elif pick < 0.6:
            argv.append(rng.choice(SPECIAL_PATHS))
        elif pick < 0.8:
            argv.append("".join(rng.choice("0123456789abcdef") for _ in range(rng.randint(1, 40))))
        else:
            argv.append(_random_string(rng))
    if "-o" in argv:  # a result link may only ever land in the case directory
        i = argv.index("-o")
        if i + 1 < len(argv):
            argv[i + 1] = rng.choice(("{dir}/link", "{dir}", "{dir}/plain.txt", "{dir}/no/link"))
    return tuple(argv)


def generate(seed: int, n: int) -> list[Case]:
    """Return ``n`` cases derived from ``seed`` (the same every time)."""
    rng = random.Random(seed)
    cases = []
    for index in range(n):
        if rng.random() < 0.75:
            files, recipe = _recipe_files(rng)
            command = rng.choice(RECIPE_COMMANDS)
            argv: tuple[str, ...] = (command, "{dir}/" + recipe)
            if command == "realize" and rng.random() < 0.3:
                argv += ("-o", rng.choice(("{dir}/link", "{dir}/plain.txt", "{dir}/no/link")))
            if command == "lock":
                argv += ("--check",)
            cases.append(Case(seed, index, argv, files, recipe, fifo=rng.random() < 0.5))
        else:
            files = {"plain.txt": b"not an archive\n"}
            cases.append(Case(seed, index, _cli_line(rng), files, None, fifo=True))
    return cases


def materialize(case: Case, workdir: Path, src: Path, store: Path) -> tuple[list[str], Path | None]:
    """Write ``case`` into ``workdir`` (created); return its argv and the recipe it runs.

    ``src`` is a tiny project with ``mkwheel.py``; ``store`` is passed with ``--store`` to every
    command that takes one (placed after ``--`` never, so argparse sees it).
    """
    workdir.mkdir(parents=True, exist_ok=True)

    def fill(text: str) -> str:
        return text.replace("{dir}", str(workdir)).replace("{src}", str(src))

    for name, data in case.files.items():
        (workdir / name).write_bytes(
            fill(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        )
    if case.fifo:
        os.mkfifo(workdir / "fifo")
    (workdir / "inputdir").mkdir(exist_ok=True)
    argv = [fill(a) for a in case.argv]
    if argv and argv[0] not in ("", "--version", "-h", "frob", "doctor"):
        argv += ["--store", str(store)]
    recipe = workdir / case.recipe if case.recipe else None
    return argv, recipe


# --- running and judging ---------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm when one case runs past its time limit (not an ``Exception``)."""


@dataclass(frozen=True)
class Outcome:
    """What one case did: its exit code (None for a hang), output and any escaped exception."""

    case: Case
    argv: tuple[str, ...]
    recipe: Path | None
    code: int | None
    stdout: str
    stderr: str
    escaped: str = ""
    seconds: float = 0.0


def run_in_process(
    case: Case, workdir: Path, src: Path, store: Path, *, timeout: float = 20.0
) -> Outcome:
    """Run ``case`` through ``rocmforge.cli.main.main`` in this process, bounded by ``timeout``."""
    import io
    import signal
    import time
    import traceback

    from rocmforge.cli.main import main

    argv, recipe = materialize(case, workdir, src, store)
    out, err = io.StringIO(), io.StringIO()
    escaped = ""
    code: int | None = None

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang

    old = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    cwd = os.getcwd()
    try:
        os.chdir(workdir)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse: --help, --version, usage errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            except Hang:
                code = None
            except BaseException:
                escaped = traceback.format_exc()
                code = -1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
    return Outcome(
        case, tuple(argv), recipe, code, out.getvalue(), err.getvalue(), escaped,
        time.monotonic() - started,
    )  # fmt: skip


def run_subprocess(
    case: Case, workdir: Path, src: Path, store: Path, *, timeout: float = 60.0
) -> Outcome:
    """Run ``case`` through the real CLI (``python -m rocmforge``), bounded by ``timeout``."""
    import subprocess
    import sys
    import time

    argv, recipe = materialize(case, workdir, src, store)
    argv = [a.replace("\0", "") for a in argv]  # a process argument cannot hold a NUL
    env = {k: v for k, v in os.environ.items() if k not in ("ROCMFORGE_STORE", "ROCMFORGE_DEBUG")}
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "rocmforge", *argv],
            cwd=workdir,
            env=env,
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        return Outcome(case, tuple(argv), recipe, None, "", str(exc.stderr or ""))
    return Outcome(
        case, tuple(argv), recipe, proc.returncode,
        proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
        seconds=time.monotonic() - started,
    )  # fmt: skip


def _own_output(stderr: str) -> str:
    """``stderr`` without the quoted build-log tail (a failing build may print a traceback)."""
    kept, quoting = [], False
    for line in stderr.splitlines():
        if line.startswith("--- last ") and line.endswith(" lines of the build log ---"):
            quoting = True
        elif quoting and line == "---":
            quoting = False
        elif not quoting:
            kept.append(line)
    return "\n".join(kept)


def judge(o: Outcome) -> list[str]:
    """Return what is wrong with an outcome: exit 4, a traceback, a hang, an unnamed recipe."""
    wrong = []
    own = _own_output(o.stderr)
    if o.code is None:
        wrong.append("hang")
    elif o.code == 4 or "internal error" in own:
        wrong.append("exit 4")
    if o.escaped or "Traceback" in own:
        wrong.append("traceback")
    if o.code == 2 and o.recipe is not None and str(o.recipe) not in o.stderr:
        wrong.append("exit 2 without naming the recipe")
    return wrong


def describe(o: Outcome, wrong: list[str]) -> str:
    """One readable report line (trimmed) for a failing case."""
    args = " ".join(a if len(a) < 60 else a[:57] + "..." for a in o.argv)
    text = (o.escaped or o.stderr).strip().replace("\n", " | ")
    return f"case {o.case.name} [{', '.join(wrong)}] exit {o.code}: {args}: {text[:400]}"
