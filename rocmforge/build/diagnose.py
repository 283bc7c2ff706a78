"""Failure diagnosis: match a failed build's log against known ROCm / PyTorch failure strings.

Each :class:`Pattern` pairs a regular expression over one log line with the cause and the fix
(facts from ROCM.md). :func:`diagnose_log` streams the log once through a single combined regular
expression and returns a :class:`Diagnosis` per pattern that matched, in the order their first
evidence appears (the first error in a build log is usually the root cause). The build stage
builds the :class:`~rocmforge.errors.BuildError` it raises with the result and stores it beside
the failed log as ``store/failed/<hash>-<name>-<version>.json``. (:class:`Diagnosis` itself is
defined in :mod:`rocmforge.errors`, which carries it.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmforge.errors import Diagnosis
from rocmforge.util.fsutil import json_bytes, write_atomic
from rocmforge.wheel.metadata import requires_dist

#: At most this many diagnoses are reported for one failure.
MAX_DIAGNOSES = 3

#: Lines rocmforge itself writes into a build log (``rocmforge: [time] step 1/2: <cmd>``): never
#: evidence, or a step whose command quotes an error string would be blamed on its header line.
OWN_LINE = "rocmforge: "


@dataclass(frozen=True, slots=True, kw_only=True)
class Pattern:
    """A known failure: an id, a regular expression over one log line, the cause and the fix.

    ``cause`` and ``fix`` may use ``{0}`` for the first group the expression captured.
    """

    id: str
    regex: str
    cause: str
    fix: str


PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        id="torch-abi-mismatch",
        regex=r"undefined symbol: (_ZN3c10\w*|_ZN2at\w*|_ZNK3c10\w*|_ZN5torch\w*)",
        cause="a torch extension was built against another torch than the one it runs with "
        "(missing symbol {0})",
        fix="build it against the torch recipe it is used with: [requirements] recipes = "
        '["mi300x.toml"], so its build and check venvs get exactly that wheel',
    ),
    Pattern(
        id="torch-extension-op-missing",
        regex=r"operator (torchvision|torchaudio)::(\w+) does not exist",
        cause="{0}'s compiled ops did not load: {0} was built without its GPU ops or against "
        "another torch",
        fix="build {0} against the torch recipe it runs with ([requirements] recipes) and set "
        'FORCE_CUDA = "1" in [env] on ROCm (lint RF191)',
    ),
    Pattern(
        id="torch-not-in-build-venv",
        regex=r"ModuleNotFoundError: No module named 'torch'",
        cause="the build imports torch but no torch is installed in the build venv",
        fix='add the torch recipe to [requirements] recipes (e.g. recipes = ["mi300x.toml"])',
    ),
    Pattern(
        id="hipify-missing",
        regex=r"HIPConfig\.h\.in does not exist|'cuda_runtime\.h' file not found"
        r"|cuda_runtime\.h: No such file or directory",
        cause="the source was not hipified: tools/amd_build/build_amd.py did not run before the "
        "build, so CMake and the compiler still see the CUDA sources",
        fix='make the first step "python tools/amd_build/build_amd.py" (once, on a clean tree; '
        "lint RF151)",
    ),
    Pattern(
        id="cpu-only-build",
        regex=r"ROCM_PATH environment variable is not set and /opt/rocm does not exist"
        r"|Building without ROCm support|Torch not compiled with CUDA enabled",
        cause="PyTorch found no ROCm and silently built for the CPU only",
        fix='use [toolchain] kind = "rocm" with the right root (it sets ROCM_PATH) and '
        'USE_ROCM = "1"; `rocmforge doctor` shows which ROCm this machine has',
    ),
    Pattern(
        id="rocm-version-h",
        regex=r"rocm_version\.h could not be found|rocm_version\.h['\"]? (?:file )?not found"
        r"|rocm-core/rocm_version\.h: No such file",
        cause="rocm_version.h was not found: ROCM_PATH points at the wrong directory or the "
        "rocm-core package is missing",
        fix="point [toolchain] root at a complete ROCm (with include/rocm-core) or install "
        "rocm-core; check with `rocmforge doctor`",
    ),
    Pattern(
        id="rocm-dev-package",
        regex=r'Could not find a package configuration file provided by "([\w.+-]+)"',
        cause='CMake cannot find the package "{0}": its development files (the ROCm dev package '
        "for hipblaslt, rccl, miopen, hipsolver ...) are not installed under the ROCm root",
        fix="install the {0} dev package of the same ROCm version as the toolchain (it provides "
        "{0}Config.cmake under $ROCM_PATH/lib/cmake)",
    ),
    Pattern(
        id="rccl-missing",
        regex=r"cannot find -lrccl|librccl\.so[.\d]*: cannot open shared object file",
        cause="RCCL is missing: the linker or loader cannot find librccl",
        fix="install RCCL (rccl and rccl-dev) for the toolchain's ROCm version, or build with "
        'USE_RCCL = "0" if you do not need distributed GPU communication',
    ),
    Pattern(
        id="hip-runtime-h",
        regex=r"hip_runtime\.h: No such file or directory|'hip/hip_runtime\.h' file not found",
        cause="the HIP headers were not found: ROCm's headers are not installed or ROCM_PATH "
        "points at the wrong directory",
        fix="install the HIP dev package (hip-dev / libamdhip64-dev) or fix [toolchain] root; "
        "check with `rocmforge doctor`",
    ),
    Pattern(
        id="oom-killed",
        regex=r"Killed signal terminated program (?:cc1plus|cc1|\S+)"
        r"|clang frontend command failed due to signal"
        r"|unable to execute command: Killed|\bError 137\b|exited with status 137\b"
        r"|exited with status -9\b",
        cause="a compiler was killed, almost always by the out-of-memory killer: too many "
        "parallel compile jobs for this machine's RAM (~4 GB per job)",
        fix="lower MAX_JOBS (add it to [build] passthrough and export e.g. MAX_JOBS=4; "
        "lint RF181 estimates RAM / 4 GB)",
    ),
    Pattern(
        id="cmake-4",
        regex=r"Compatibility with CMake < 3\.5 has been removed from CMake",
        cause="CMake >= 4 refuses the old cmake_minimum_required of this source (PyTorch <= 2.6 "
        "and its third-party submodules)",
        fix='pin "cmake==3.31.1" in [requirements] build, or set '
        'CMAKE_POLICY_VERSION_MINIMUM = "3.5" in [env] (lint RF152)',
    ),
    Pattern(
        id="submodules-missing",
        regex=r"Did you run 'git submodule update --init --recursive'\?",
        cause="the git submodules are not checked out",
        fix="set submodules = true in [source] (rocmforge then checks them out recursively)",
    ),
    Pattern(
        id="libstdcxx-headers",
        regex=r"fatal error: '(cmath|cstdlib|cstddef|limits|type_traits|cstdint|new|utility)' "
        r"file not found",
        cause="ROCm's clang picked the newest GCC installation, whose libstdc++ headers ('{0}') "
        "are not installed",
        fix="install the libstdc++ dev package of the newest GCC on the machine (e.g. "
        "libstdc++-12-dev), or remove the GCC without headers",
    ),
    Pattern(
        id="mixed-rocm",
        regex=r"undefined symbol: (hip\w*R0600\w*|hipMalloc\w*|rsmi_init\w*|hip\w+|rocblas\w+)",
        cause="headers and runtime of two different ROCm versions were mixed (or stale objects "
        "from another ROCm were linked): '{0}' is missing from the libraries loaded",
        fix="build and run against one ROCm: no CPATH/CPLUS_INCLUDE_PATH (lint RF122), no "
        "LD_LIBRARY_PATH to another ROCm, and the toolchain root matching the runtime",
    ),
    Pattern(
        id="sandbox-no-tmp",
        regex=r"unable to make temporary file",
        cause="the compiler could not write a temporary file: the sandbox has no writable /tmp",
        fix="give the build a writable /tmp (rocmforge's bwrap runner mounts one; "
        "a custom runner needs --tmpfs /tmp)",
    ),
    Pattern(
        id="sandbox-no-dev",
        regex=r"'/dev/null': No such file or directory",
        cause="the sandbox has no /dev (clang-offload-bundler opens /dev/null)",
        fix="mount /dev in the sandbox (bwrap --dev /dev, as rocmforge's runner does)",
    ),
    Pattern(
        id="nvcc-picked",
        regex=r"nvcc fatal\s*:\s*Unknown option '-?-offload-arch",
        cause="hipcc chose nvcc (the CUDA platform) instead of HIP clang because a CUDA toolkit "
        "is installed and HIP_PLATFORM was not set",
        fix='use [toolchain] kind = "rocm" (it sets HIP_PLATFORM=amd) or set HIP_PLATFORM = "amd"',
    ),
    Pattern(
        id="no-gpu-arch",
        regex=r"No GPU arch specified for ROCm build",
        cause="PYTORCH_ROCM_ARCH is unset and no GPU is visible in the sandbox to guess from",
        fix='set PYTORCH_ROCM_ARCH = "gfx942" (the archs you deploy on; lint RF105)',
    ),
    Pattern(
        id="cuda-and-rocm",
        regex=r"Both CUDA and ROCm are enabled and found",
        cause="a CUDA toolkit and ROCm were both found and USE_CUDA was not 0",
        fix='set USE_CUDA = "0" in [env] (lint RF111)',
    ),
    Pattern(
        id="header-not-visible",
        # Headers with a more specific pattern above (hip, cuda, rocm_version, cmath) excluded.
        regex=r"fatal error: '?(?!(?:[\w./+-]*/)?(?:hip_runtime|cuda_runtime|rocm_version|cmath)\b)"
        r"([\w./+-]+?)'?(?:: No such file or directory| file not found)",
        cause="{0} is not visible in the sandbox: builds see only files a system package owns "
        "(plus the toolchain and declared inputs); /usr/local and other unowned places are "
        "hidden because the input hash cannot cover them",
        fix="install the package that provides {0} (`apt-file search {0}`; its version then "
        "enters the hash), or vendor the header in the source or a declared [inputs] entry; "
        "`rocmforge doctor` lists what is masked",
    ),
    Pattern(
        id="no-network",
        regex=r"socket\.gaierror|Temporary failure in name resolution|Name or service not known"
        r"|Could not resolve host|Failed to establish a new connection|Network is unreachable"
        r"|No matching distribution found for|Could not find a version that satisfies the "
        r"requirement|FetchContent\S*\.cmake|Failed to clone repository|fatal: unable to access "
        r"'[a-z]+://",
        cause="the build tried to use the network (a download, pip install, cmake FetchContent, "
        "git clone), but the sandbox has no network",
        fix="declare it as an input: a Python package in [requirements] build, a git dependency "
        "as a submodule ([source] submodules = true), anything else as [inputs.NAME] (the build "
        "finds it through that input's env variable)",
    ),
    Pattern(
        id="setup-py-removed",
        regex=r"can't open file '[^']*setup\.py'|'python setup\.py \w+' is no longer supported",
        cause="this source has no setup.py: torch moved to scikit-build-core and removed it on "
        "2026-07-20 (pytorch#189758)",
        fix='build with PEP 517: "python -m build --wheel --no-isolation --outdir $OUT" and the '
        "release's requirements-build.txt in [requirements] build (lint RF154)",
    ),
    Pattern(
        id="build-backend-missing",
        regex=r"Backend '([\w.:]+)' is not available|BackendUnavailable: Cannot import '([\w.]+)'",
        cause="the PEP 517 build backend {0} is not installed in the build venv (a build without "
        "isolation installs nothing itself; torch >= 2.14 builds with scikit_build_core.build)",
        fix="add the backend's distribution to [requirements] build (for torch, the release's "
        "requirements-build.txt: scikit-build-core>=1.0 since 2.14) or set build-system = true, "
        "then `rocmforge lock RECIPE`",
    ),
    Pattern(
        id="build-requirements-unmet",
        regex=r"Unmet dependencies \(checked against ",
        cause="`python -m build --no-isolation` checked the source's [build-system] requires "
        "against the build venv: some are missing or of the wrong version (listed under this "
        "line with wanted/found)",
        fix="put the listed requirements into [requirements] build (for torch, its "
        "requirements-build.txt) or set build-system = true, then `rocmforge lock RECIPE`",
    ),
    Pattern(
        id="skbuild-no-cmake",
        regex=r"Could not find CMake with version (\S+)",
        cause="scikit-build-core found no CMake {0} in the build venv or on PATH",
        fix="pin cmake in [requirements] build (torch's requirements-build.txt asks "
        '"cmake>=3.27")',
    ),
    Pattern(
        id="skbuild-cmake-failed",
        regex=r"^\s*\*\*\* CMake (configuration|build) failed",
        cause="the CMake {0} step run by scikit-build-core failed; this line only reports it: the "
        "cause is the first 'CMake Error' or compiler error above it",
        fix="read the first error above this line in the log (`rocmforge log RECIPE`): a "
        "configuration error usually names a missing package or file, a build error a compiler "
        "failure; rocmforge lists a known cause before this line when it recognises one",
    ),
    Pattern(
        id="rocm-sdk-missing",
        regex=r"Missing required rocm libraries|rocm_sdk_devel module for the ROCm SDK "
        r"development package is not installed|No module named '_?rocm_sdk\w*'"
        r"|Could not find rocm library '\w+'",
        cause="a ROCm SDK wheel is not installed where this ran: torch built against the SDK "
        "wheels loads ROCm from them (rocm-sdk-core, rocm-sdk-libraries-<family>; a build also "
        "needs rocm-sdk-devel)",
        fix='build with the rocm-sdk toolchain ([toolchain] kind = "rocm-sdk", locked by digest) '
        "and install the same rocm[libraries]==<version> wheels from the family's index where "
        "the program runs",
    ),
    Pattern(
        id="hip-invalid-image",
        regex=r"hipErrorInvalidImage|device kernel image is invalid|hipErrorNoBinaryForGpu",
        cause="no code object for this GPU: the wheel was not built for its arch, or the ROCm SDK "
        "device wheel for it (rocm-sdk-device-<gfx>) is not installed",
        fix="add the GPU's arch to PYTORCH_ROCM_ARCH and [check] archs, and install the matching "
        "device wheel where the program runs",
    ),
    Pattern(
        id="arch-not-supported",
        regex=r"invalid target ID '(gfx\w+)|cannot find ROCm device library for (?:target )?"
        r"'?(gfx\w+)",
        cause="this ROCm's clang cannot compile for {0} (too old a ROCm for that GPU)",
        fix="use a ROCm that supports {0} or drop it from the archs (lints RF102/RF103)",
    ),
    Pattern(
        id="cargo-lock-mismatch",
        regex=r"failed to select a version for the requirement `([\w-]+) = [^`]*` \(locked to"
        r"|checksum for `([\w-]+) v[^`]*` changed between lock files",
        cause="the crates given to cargo are not the ones the source's Cargo.lock pins ({0}: "
        "another version, or another checksum - Debian's registry records none for many crates)",
        fix="give the crates Cargo.lock was made with (`cargo vendor` with that lock), or drop "
        "Cargo.lock with a [source] patches patch so cargo resolves against the crate input "
        "(Debian's practice)",
    ),
    Pattern(
        id="cargo-offline",
        regex=r"attempting to make an HTTP request, but --offline was specified"
        r"|no matching package named `([\w-]+)` found|failed to download `?([\w-]+)"
        r"|failed to select a version for the requirement `([\w-]+)",
        cause="the sandbox has no network: cargo could not fetch a crate ({0}) that the source "
        "does not vendor",
        fix="vendor the crates or declare them as an input: `cargo vendor` into the source with "
        "a .cargo/config.toml pointing [source.crates-io] at it (as sdists of Rust projects "
        "ship), or an [inputs] tree of crates with crates = true (`cargo vendor` output, or "
        "Debian's /usr/share/cargo/registry from its librust-*-dev packages)",
    ),
    Pattern(
        id="no-cargo",
        regex=r"Cargo metadata failed\. Do you have cargo in your PATH"
        r"|cargo: (?:command )?not found|can't find Rust compiler"
        r"|No module named 'puccinialin'",  # maturin, finding no cargo, tries to download Rust
        cause="the build needs Rust, but the recipe declares no Rust toolchain",
        fix='add rust = "host" to [toolchain] (rustup or Debian rustc/cargo on PATH) or '
        "rust = \"/path/to/toolchain\"",
    ),
)

_COMBINED = re.compile(
    "|".join(f"(?P<p{i}>{p.regex})" for i, p in enumerate(PATTERNS)), re.IGNORECASE
)
_GROUP_INDEX = {f"p{i}": i for i in range(len(PATTERNS))}
_GROUP_COUNT = [re.compile(p.regex).groups for p in PATTERNS]


def _first_capture(match: re.Match[str], group: str) -> str:
    start = match.re.groupindex[group]
    for g in range(start + 1, start + 1 + _GROUP_COUNT[_GROUP_INDEX[group]]):
        value = match.group(g)
        if value:
            return value
    return ""


def _lines(source: Iterable[str]) -> Iterable[tuple[int, str]]:
    for number, line in enumerate(source, 1):
        yield number, line.rstrip("\r\n")


def diagnose_lines(lines: Iterable[str], *, message: str = "") -> tuple[Diagnosis, ...]:
    """Diagnose a build from its log ``lines`` and the failure ``message`` (exit status, ...).

    One diagnosis per matching pattern, ordered by where its first evidence is (the message
    counts as coming after the log), at most :data:`MAX_DIAGNOSES`.
    """
    found: dict[int, Diagnosis] = {}
    sources = [*(("log", n, s) for n, s in _lines(lines)), ("message", None, message)]
    for origin, number, text in sources:
        if not text or (origin == "log" and text.startswith(OWN_LINE)):
            continue
        for m in _COMBINED.finditer(text):
            group = m.lastgroup
            if group is None:
                continue
            index = _GROUP_INDEX[group]
            if index in found:
                continue
            p = PATTERNS[index]
            arg = _first_capture(m, group)
            found[index] = Diagnosis(
                id=p.id,
                cause=p.cause.format(arg),
                fix=p.fix.format(arg),
                evidence=text.strip()[:300],
                line=number,
            )
        if len(found) >= len(PATTERNS):
            break
    return tuple(found.values())[:MAX_DIAGNOSES]


def diagnose_log(path: Path, *, message: str = "") -> tuple[Diagnosis, ...]:
    """Diagnose a failed build from its plain-text log at ``path`` (streamed, never loaded whole).

    A missing or unreadable log leaves only ``message`` to match.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return diagnose_lines(f, message=message)
    except OSError:
        return diagnose_lines((), message=message)


#: Evidence that a build ran cargo: for builds whose recipe declares no Rust toolchain, where an
#: undeclared cargo (Debian's /usr/bin/cargo) can be on the sandbox PATH and fail in any way.
UNDECLARED_CARGO = Pattern(
    id="undeclared-rust",
    regex=r"Cargo metadata failed|`cargo (?:metadata|build|rustc)` (?:exited|failed)"
    r"|error: could not compile `|^\s*Compiling [\w-]+ v\d",
    cause="the build ran cargo, but the recipe declares no Rust toolchain: an undeclared cargo "
    "on the sandbox PATH ran, with no private CARGO_HOME, crate source or offline mode",
    fix='add rust = "host" to [toolchain] (rustup or Debian rustc/cargo on PATH), rust = '
    '"debian" or rust = "/path/to/toolchain"',
)
_UNDECLARED = re.compile(UNDECLARED_CARGO.regex)


def diagnose_undeclared_rust(path: Path) -> tuple[Diagnosis, ...]:
    """For a failed build whose recipe declares no Rust toolchain: the first log line showing
    that cargo ran anyway, as a diagnosis (none when cargo did not run)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in _lines(f):
                if not line.startswith(OWN_LINE) and _UNDECLARED.search(line):
                    p = UNDECLARED_CARGO
                    return (
                        Diagnosis(
                            id=p.id, cause=p.cause, fix=p.fix, evidence=line.strip()[:300],
                            line=number,
                        ),
                    )  # fmt: skip
    except OSError:
        pass
    return ()


def failed_record_path(failed_log: Path) -> Path:
    """``store/failed/<hash>-<name>-<version>.json`` beside ``...log.zst``."""
    name = failed_log.name.removesuffix(".zst").removesuffix(".log")
    return failed_log.with_name(name + ".json")


def write_failed_record(path: Path, record: Mapping[str, Any]) -> None:
    """Write the failed build's record (error, diagnosis) to ``path`` atomically."""
    write_atomic(path, json_bytes(record))


def read_failed_record(path: Path) -> dict[str, Any] | None:
    """Return the record written by :func:`write_failed_record`, or None if absent/unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'")


def diagnose_missing_module(
    log: Path, *, wheels: Sequence[Path], recipe: Path
) -> tuple[Diagnosis, ...]:
    """Name the build requirement that needed a module the build venv lacks.

    A build (typically its backend, while the build requirements load) failing with
    ``ModuleNotFoundError: No module named 'X'`` is matched against the ``Requires-Dist`` of
    every installed requirement wheel: the one that declares X is named, and the fix is to
    re-lock (a lock carries the whole closure; exact pins are installed without dependencies).
    """
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            found = next(
                ((n, m) for n, line in _lines(f) if (m := _MISSING_MODULE.search(line))), None
            )
    except OSError:
        return ()
    if found is None:
        return ()
    number, match = found
    module = match.group(1).split(".")[0]
    if module == "rocm_sdk":  # a _rocm_init.py (TheRock's torch) in the check, not the build
        return (
            Diagnosis(
                id="missing-rocm-sdk-module",
                cause="the built wheel's _rocm_init imports rocm_sdk (ROCm's SDK module, from "
                "the rocm sdist), which the check venv gets only when the wheel requires the "
                "SDK and [toolchain.module] is locked",
                fix="declare the SDK in the wheel's requirements (torch: "
                'PYTORCH_EXTRA_INSTALL_REQUIREMENTS = "rocm[libraries]==VERSION") and lock '
                f"the rocm_sdk module with `rocmforge lock {recipe}`",
                evidence=match.group(0),
                line=number,
            ),
        )
    wanted = {re.sub(r"[-_.]+", "-", module).lower()}
    owners = []
    for wheel in wheels:
        for req in requires_dist(wheel):
            name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if name and re.sub(r"[-_.]+", "-", name.group(1)).lower() in wanted:
                owner = wheel.name.split("-")[:2]
                owners.append(f"{owner[0]}=={owner[1]} (Requires-Dist: {req})")
                break
    if owners:
        cause = (
            f"the build requirement {', '.join(owners)} needs {module!r}, which is not in the "
            "build venv: its dependencies were not installed"
        )
    else:
        cause = f"the build imports {module!r}, which no build requirement provides"
    fix = (
        f"write [requirements] build as specifiers (or build-system = true) and re-lock with "
        f"`rocmforge lock {recipe}`: the lock carries the whole closure"
        + ("" if owners else f"; if {module!r} is needed, add its distribution to it")
    )
    return (
        Diagnosis(
            id="missing-build-module",
            cause=cause,
            fix=fix,
            evidence=match.group(0),
            line=number,
        ),
    )
