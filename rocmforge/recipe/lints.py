"""Pre-flight lints: cheap domain rules that catch multi-hour ROCm / PyTorch failures up front.

Every lint is a pure function of a loaded :class:`~rocmforge.recipe.model.Recipe` and a few
:class:`LintFacts` about the machine (probed ROCm version, RAM, cores, host env). Each finding has
a stable id (``RF101``), a name, a severity, the recipe key it is about, the reason and a one-line
fix. Errors stop ``realize`` and ``plan`` before anything is fetched; warnings are reported. A
recipe acknowledges a lint with ``[lint] allow = { RF105 = "reason" }``. Every id is documented in
``docs/lints.md``; the facts behind the rules are in ROCM.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rocmforge.errors import Problem, RecipeError
from rocmforge.recipe import aotriton
from rocmforge.recipe.aotriton import Asset
from rocmforge.recipe.model import Recipe

Severity = Literal["error", "warning"]

GIB = 1024**3
#: Rule of thumb from ROCM.md: one parallel C++/HIP compile job of PyTorch needs about 4 GB.
BYTES_PER_JOB = 4 * GIB


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A lint's stable identity: id, short name, default severity and a one-line summary."""

    id: str
    name: str
    severity: Severity
    summary: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One lint result about one recipe key; ``allowed`` is the recipe's reason if acknowledged."""

    id: str
    name: str
    severity: Severity
    key: str
    message: str
    fix: str
    allowed: str | None = None

    @property
    def blocking(self) -> bool:
        """True for an error the recipe has not acknowledged: it stops the build."""
        return self.severity == "error" and self.allowed is None

    def text(self) -> str:
        """Return ``RF101 arch-token: <reason>. Fix: <fix>`` (without file and key)."""
        return f"{self.id} {self.name}: {self.message}. Fix: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        """Return the finding as JSON-ready data."""
        return {
            "id": self.id,
            "name": self.name,
            "severity": self.severity,
            "key": self.key,
            "message": self.message,
            "fix": self.fix,
            "allowed": self.allowed,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class LintFacts:
    """What the lints may know about the machine; ``None`` means unknown (the lint is skipped).

    ``rocm_version`` is the version probed at the recipe's ROCm root, ``targets`` the archs the
    toolchain can compile for (when the toolchain can tell), ``host_env`` the environment that
    passthrough variables would come from.
    """

    rocm_version: str | None = None
    targets: frozenset[str] | None = None
    ram_bytes: int | None = None
    cpu_count: int | None = None
    host_env: Mapping[str, str] = field(default_factory=dict)
    #: the recipes this one is built against (``[requirements] recipes``, transitively)
    dependencies: tuple[Recipe, ...] = ()


class LintError(RecipeError):
    """A recipe has error lints it does not acknowledge; raised before anything is fetched."""

    def __init__(
        self,
        recipe_file: Path,
        findings: tuple[Finding, ...],
        problems: list[Problem],
        warnings: tuple[Problem, ...] = (),
    ) -> None:
        super().__init__(
            problems,
            note="a lint that does not apply can be acknowledged in the recipe: "
            f'[lint] allow = {{ {findings[0].id} = "why it does not apply" }} (docs/lints.md)',
        )
        self.recipe_file = recipe_file
        self.findings = findings
        #: The recipe's unacknowledged warnings, shown after the errors (all findings at once).
        self.warnings = warnings


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(id="RF001", name="unknown-lint", severity="error",
             summary="[lint] allow names a lint id that does not exist"),
        Rule(id="RF101", name="arch-token", severity="error",
             summary="a GPU arch token is malformed or uses the wrong separator"),
        Rule(id="RF102", name="arch-rocm-version", severity="error",
             summary="an arch needs a newer ROCm than the recipe declares"),
        Rule(id="RF103", name="arch-toolchain", severity="error",
             summary="the ROCm found at the toolchain root cannot target an arch"),
        Rule(id="RF104", name="arch-unknown", severity="warning",
             summary="a well-formed arch that is not a known AMD GPU target"),
        Rule(id="RF105", name="arch-missing", severity="error",
             summary="a PyTorch ROCm build without PYTORCH_ROCM_ARCH"),
        Rule(id="RF106", name="arch-check-mismatch", severity="error",
             summary="[check] archs differ from the archs the build is asked to compile"),
        Rule(id="RF111", name="use-cuda", severity="error",
             summary="USE_CUDA must be 0 for a ROCm build"),
        Rule(id="RF112", name="use-cudnn", severity="warning",
             summary="USE_CUDNN is ignored on ROCm (MIOpen is always used)"),
        Rule(id="RF121", name="rccl-home", severity="warning",
             summary="RCCL_HOME is never read"),
        Rule(id="RF122", name="include-path", severity="warning",
             summary="CPATH / C_INCLUDE_PATH / CPLUS_INCLUDE_PATH in a ROCm build"),
        Rule(id="RF123", name="hip-path", severity="warning",
             summary="HIP_PATH ending in /hip"),
        Rule(id="RF124", name="hcc-target", severity="warning",
             summary="HCC_AMDGPU_TARGET is a leftover of the retired HCC compiler"),
        Rule(id="RF125", name="toolchain-env-override", severity="error",
             summary="[env] overrides ROCM_PATH, ROCM_HOME or HIP_PATH (the toolchain sets them)"),
        Rule(id="RF131", name="runtime-env", severity="error",
             summary="a runtime-only variable in the hashed [env]"),
        Rule(id="RF135", name="input-unlocked", severity="warning",
             summary="a url input without sha256: realize stops until `rocmforge lock` pins it"),
        Rule(id="RF141", name="rccl-needs-nccl", severity="error",
             summary="USE_RCCL needs USE_NCCL and USE_DISTRIBUTED"),
        Rule(id="RF151", name="hipify-step", severity="error",
             summary="PyTorch < 2.9 on ROCm must run tools/amd_build/build_amd.py once, first"),
        Rule(id="RF152", name="cmake-4", severity="error",
             summary="PyTorch <= 2.6 does not configure with CMake >= 4"),
        Rule(id="RF153", name="setuptools-80", severity="error",
             summary="torch's setup.py develop/install need setuptools < 80"),
        Rule(id="RF154", name="setup-py-removed", severity="error",
             summary="torch >= 2.14 has no setup.py (scikit-build-core): use the PEP 517 build"),
        Rule(id="RF161", name="aotriton-input", severity="error",
             summary="torch >= 2.3: flash / memory-efficient attention need AOTriton as an input"),
        Rule(id="RF162", name="aotriton-arch", severity="warning",
             summary="AOTriton supports only some archs (2.5: gfx90a, gfx942)"),
        Rule(id="RF163", name="aotriton-images", severity="error",
             summary="an arch built with attention has no AOTriton image pack input"),
        Rule(id="RF164", name="aotriton-version", severity="error",
             summary="an AOTriton input of another release or ROCm than this torch expects"),
        Rule(id="RF171", name="build-version", severity="error",
             summary="PYTORCH_BUILD_VERSION is not a valid PEP 440 version"),
        Rule(id="RF172", name="build-version-mismatch", severity="error",
             summary="the wheel version PyTorch will write differs from package.version"),
        Rule(id="RF181", name="max-jobs-ram", severity="warning",
             summary="MAX_JOBS x 4 GB exceeds the machine's RAM"),
        Rule(id="RF182", name="max-jobs-hashed", severity="warning",
             summary="MAX_JOBS in [env] puts parallelism into the hash"),
        Rule(id="RF194", name="compiler-cache-off", severity="warning",
             summary="a ROCm build with the compiler cache turned off"),
        Rule(id="RF191", name="force-cuda", severity="error",
             summary="torchvision/torchaudio on ROCm without a GPU build CPU-only ops silently"),
        Rule(id="RF192", name="extension-check-archs", severity="error",
             summary="a ROCm torch extension without [check] archs passes a CPU-only wheel"),
        Rule(id="RF193", name="arch-not-in-torch", severity="error",
             summary="the extension's PYTORCH_ROCM_ARCH is not a subset of its torch's"),
        Rule(id="RF195", name="triton-offline", severity="error",
             summary="a triton build without TRITON_OFFLINE_BUILD=1 downloads what it lacks"),
        Rule(id="RF196", name="triton-deps", severity="error",
             summary="a triton build without LLVM_SYSPATH / JSON_SYSPATH given by an input"),
        Rule(id="RF197", name="sdk-legacy-index", severity="warning",
             summary="the SDK index is under repo.amd.com/rocm/, the legacy folder to be archived"),
        Rule(id="RF198", name="sdk-device-extra", severity="warning",
             summary="the wheel requires rocm[...] without a device-<gfx> extra per declared ISA"),
    )
}  # fmt: skip

# --- domain tables (ROCM.md) --------------------------------------------------------------------

ARCH_TOKEN = re.compile(r"^gfx[0-9a-f]{3,4}(:(sramecc|xnack)[+-])*$")

#: Variables that carry GPU archs to a build: name -> the separators the consumer accepts.
ARCH_ENV: dict[str, tuple[str, ...]] = {
    "PYTORCH_ROCM_ARCH": (";", " "),
    "AMDGPU_TARGETS": (";",),
    "GPU_TARGETS": (";",),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchSupport:
    """The first ROCm release that can target an arch, and whether ROCM.md marks it unverified."""

    since: str
    verified: bool
    note: str = ""


ARCH_MIN_ROCM: dict[str, ArchSupport] = {
    "gfx90a": ArchSupport(since="4.5", verified=True, note="MI210/MI250"),
    "gfx941": ArchSupport(
        since="6.0", verified=False, note="MI300; ROCm 5.2 rejects it as an invalid target ID"
    ),
    "gfx942": ArchSupport(since="6.0", verified=True, note="MI300X/MI300A"),
    "gfx1100": ArchSupport(since="5.5", verified=True, note="RDNA3; wheels since ROCm 5.5"),
    "gfx1101": ArchSupport(since="5.5", verified=False, note="RDNA3"),
    "gfx1102": ArchSupport(since="5.5", verified=False, note="RDNA3"),
    "gfx950": ArchSupport(since="7.0", verified=False, note="MI350"),
    "gfx1200": ArchSupport(since="6.4.1", verified=False, note="RDNA4"),
    "gfx1201": ArchSupport(since="6.4.1", verified=False, note="RDNA4"),
}

#: Processor names LLVM's AMDGPU backend knows (AMDGPUUsage), to catch typos such as gfx9420.
KNOWN_ARCHS = frozenset(
    str.split(
        "gfx600 gfx601 gfx602 gfx700 gfx701 gfx702 gfx703 gfx704 gfx705 gfx801 gfx802 gfx803 "
        "gfx805 gfx810 gfx900 gfx902 gfx904 gfx906 gfx908 gfx909 gfx90a gfx90c gfx940 gfx941 "
        "gfx942 gfx950 gfx1010 gfx1011 gfx1012 gfx1013 gfx1030 gfx1031 gfx1032 gfx1033 gfx1034 "
        "gfx1035 gfx1036 gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 gfx1153 "
        "gfx1200 gfx1201"
    )
)

#: Archs AOTriton (PyTorch 2.5's flash / memory-efficient attention on ROCm) supports.
AOTRITON_ARCHS = frozenset({"gfx90a", "gfx942"})

#: Runtime-only variables (never build inputs); ``NCCL_*`` too, except the build-time locators.
RUNTIME_ENV = frozenset(
    {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
     "HSA_OVERRIDE_GFX_VERSION", "AMD_LOG_LEVEL", "RCCL_NET_PLUGIN"}
)  # fmt: skip
#: What the rocm toolchain sets from its root (toolchain/rocm.py); [env] must not override it.
TOOLCHAIN_ENV = ("ROCM_PATH", "ROCM_HOME", "HIP_PATH")
NCCL_BUILD_ENV = frozenset({"NCCL_ROOT", "NCCL_ROOT_DIR", "NCCL_INCLUDE_DIR", "NCCL_LIB_DIR"})

_FALSE = frozenset({"0", "OFF", "NO", "FALSE", "N"})
_TRUE = frozenset({"1", "ON", "YES", "TRUE", "Y"})
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*$")
_HIPIFY = re.compile(r"tools/amd_build/build_amd\.py")
_BUILD_CMD = re.compile(r"setup\.py|pip\s+wheel|pip\s+install|-m\s+build\b")
#: The setup.py commands setuptools 80 broke for torch (pytorch#152276); bdist_wheel still works.
_SETUP_DEVELOP = re.compile(r"setup\.py\b[^;&|]*\b(develop|install)\b")

# --- version gates (docs/lints.md lists each range; tests cover both sides) ---------------------

#: RF151: torch releases before this need the hipify step in the recipe; from it on, torch's
#: own build (setup.py / its PEP 517 backend) runs hipify itself.
HIPIFY_BY_TORCH_SINCE = "2.9"
#: RF154: the first torch release without setup.py. The switch to scikit-build-core and the removal
#: of setup.py landed on main on 2026-07-20 (pytorch#189758, #180247, #180248). release/2.13 was
#: branched in the week of 2026-06-08 (release tracker pytorch#186934; 2.13.0 shipped 2026-07-08)
#: and still builds with setuptools; release/2.14 was branched on 2026-08-10 (pytorch#193034), after
#: the switch, so 2.14 is the first release without setup.py (spack's py-torch: scikit-build-core
#: ``when="@2.14:"``, setuptools/cmake/ninja "historical" ``when="@:2.13"``).
SETUP_PY_REMOVED_SINCE = "2.14"
#: Any step that runs torch's setup.py.
_SETUP_PY = re.compile(r"\bsetup\.py\b")
#: RF161: ROCm flash / memory-efficient attention (built on AOTriton) arrived in torch 2.3
#: (pytorch#115981); older torch builds them off on ROCm and downloads nothing.
AOTRITON_SINCE = "2.3"

# --- helpers ------------------------------------------------------------------------------------


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    """True / False for an explicit torch-style boolean, None when unset or unrecognised."""
    value = env.get(name)
    if value is None:
        return None
    v = value.strip().upper()
    return True if v in _TRUE else False if v in _FALSE else None


def _version(text: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def _pins(recipe: Recipe) -> dict[str, tuple[str, str]]:
    """Canonical name -> (key path, version) of each ``[requirements] build`` pin."""
    out = {}
    for i, item in enumerate(recipe.requirements.build):
        m = _PIN.match(item)
        if m:
            name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            out[name] = (f"requirements.build[{i}]", m.group(2))
    return out


def _inputs_env(recipe: Recipe) -> set[str]:
    """The env var names through which declared extra inputs are made available."""
    return {spec.env for spec in recipe.inputs.values()}


def is_rocm(recipe: Recipe) -> bool:
    """A ROCm build: a ``rocm`` or ``rocm-sdk`` toolchain, or ``USE_ROCM`` on in ``[env]``."""
    kind = recipe.toolchain.kind
    return bool(kind in ("rocm", "rocm-sdk") or _flag(recipe.env, "USE_ROCM"))


def is_torch(recipe: Recipe) -> bool:
    """A PyTorch build (``[package] name = "torch"``)."""
    return bool(recipe.package.name.lower() == "torch")


def torch_in_range(recipe: Recipe, *, since: str | None = None, before: str | None = None) -> bool:
    """True for a torch recipe whose ``[package] version`` is in ``[since, before)``.

    Only the release numbers count (``2.5.1+rocm6.2`` is 2.5.1; a pre-release of 2.9 is 2.9). A
    version that does not parse is in every range: a gated rule then errs on the side of firing.
    """
    if not is_torch(recipe):
        return False
    have = _version(recipe.package.version)
    if have is None:
        return True
    low, high = _version(since) if since else None, _version(before) if before else None
    if low is not None and have.release < low.release:
        return False
    return not (high is not None and have.release >= high.release)


def split_archs(value: str) -> list[str]:
    """Split an arch list on ``;``, spaces and commas (commas are reported by RF101)."""
    return [t for t in re.split(r"[;,\s]+", value) if t]


def recipe_archs(recipe: Recipe) -> list[tuple[str, str]]:
    """Every (key path, arch token) the recipe asks to compile for, in order."""
    out = []
    for name in ARCH_ENV:
        if name in recipe.env:
            out += [(f"env.{name}", t) for t in split_archs(recipe.env[name])]
    return out


def check_archs(recipe: Recipe) -> list[tuple[str, str]]:
    """Every (key path, arch) of ``[check] archs``."""
    return [(f"check.archs[{i}]", a) for i, a in enumerate(recipe.check.archs)]


def _base(token: str) -> str:
    return token.split(":", 1)[0]


def declared_rocm(recipe: Recipe) -> str | None:
    """The ROCm version the recipe declares (``[toolchain] rocm``, or the SDK's ``version``)."""
    return recipe.toolchain.rocm or recipe.toolchain.sdk_version


def can_target(arch: str, rocm_version: str) -> ArchSupport | None:
    """Return the table row when ``rocm_version`` is too old for ``arch``; None if fine/unknown."""
    row = ARCH_MIN_ROCM.get(_base(arch))
    if row is None:
        return None
    have, need = _version(rocm_version), _version(row.since)
    if have is None or need is None:
        return None
    return row if have.release[:3] < need.release[:3] else None


# --- the rules ----------------------------------------------------------------------------------


def _emit(
    rule_id: str, key: str, message: str, fix: str, severity: Severity | None = None
) -> Finding:
    rule = RULES[rule_id]
    return Finding(
        id=rule.id,
        name=rule.name,
        severity=severity or rule.severity,
        key=key,
        message=message,
        fix=fix,
    )


def _lint_allow(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    for lint_id in recipe.lint.allow:
        if lint_id not in RULES:
            yield _emit(
                "RF001",
                f"lint.allow.{lint_id}",
                f"{lint_id} is not a rocmforge lint, so acknowledging it has no effect",
                "use an id listed in docs/lints.md (or `rocmforge doctor RECIPE`) or remove it",
            )


def _lint_arch_tokens(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    for name, seps in ARCH_ENV.items():
        value = recipe.env.get(name)
        if value is None:
            continue
        key = f"env.{name}"
        shown = " or ".join(repr(s) for s in seps)
        if "," in value:
            fixed = seps[0].join(split_archs(value))
            yield _emit(
                "RF101",
                key,
                f"{value!r} separates archs with ',' but {name} splits on {shown}",
                f'write {name} = "{fixed}"',
            )
        elif " " in value.strip() and " " not in seps:
            yield _emit(
                "RF101",
                key,
                f"{value!r} separates archs with spaces but {name} splits on {shown}",
                f'write {name} = "{";".join(split_archs(value))}"',
            )
        if not value.strip():
            yield _emit("RF101", key, "is empty", f'list the archs, e.g. {name} = "gfx942"')
    for key, token in [*recipe_archs(recipe), *check_archs(recipe)]:
        if not ARCH_TOKEN.match(token):
            hint = token.lower() if ARCH_TOKEN.match(token.lower()) else "gfx942 or gfx90a:xnack-"
            yield _emit(
                "RF101",
                key,
                f"{token!r} is not a GPU arch token (gfx + 3-4 hex digits, then optional "
                "':sramecc+/-' or ':xnack+/-' features)",
                f"write it like {hint}",
            )
        elif _base(token) not in KNOWN_ARCHS:
            yield _emit(
                "RF104",
                key,
                f"{token!r} is not a known AMD GPU target (a typo?)",
                "check the name against `rocminfo` or LLVM's AMDGPU processor list",
            )


def _too_old(rule_id: str, key: str, arch: str, version: str, origin: str) -> Finding | None:
    row = can_target(arch, version)
    if row is None:
        return None
    unverified = "" if row.verified else " (unverified)"
    note = f" ({row.note})" if row.note else ""
    return _emit(
        rule_id,
        key,
        f"{arch}{note} needs ROCm >= {row.since}{unverified}, but {origin} ROCm {version}",
        f"use a ROCm >= {row.since} toolchain or drop {arch}",
        severity=None if row.verified else "warning",
    )


def _lint_arch_versions(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    archs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for key, token in recipe_archs(recipe) + check_archs(recipe):  # each arch once, build first
        if ARCH_TOKEN.match(token) and _base(token) not in seen:
            seen.add(_base(token))
            archs.append((key, token))
    declared = declared_rocm(recipe)
    if declared and recipe.toolchain.hip_clang is None:  # a plain clang: its device libs decide
        for key, arch in archs:
            if f := _too_old("RF102", key, arch, declared, "[toolchain] rocm declares"):
                yield f
    probed = facts.rocm_version
    if facts.targets is not None:
        for key, arch in archs:
            if _base(arch) not in facts.targets:
                yield _emit(
                    "RF103",
                    key,
                    f"the toolchain cannot target {arch} (it targets "
                    f"{', '.join(sorted(facts.targets)) or 'nothing'})",
                    f"use a toolchain that supports {arch} or drop it",
                )
    elif probed and recipe.toolchain.hip_clang is None and not _same_release(probed, declared):
        root = recipe.toolchain.root
        origin = f"the toolchain found at {root} is" if root else "the toolchain found is"
        for key, arch in archs:
            if f := _too_old("RF103", key, arch, probed, origin):
                yield f


def _same_release(probed: str, declared: str | None) -> bool:
    """True when both name the same ROCm major.minor (HIP's patch is a build number)."""
    a, b = _version(probed), _version(declared) if declared else None
    return a is not None and b is not None and a.release[:2] == b.release[:2]


def _lint_arch_presence(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if is_torch(recipe) and is_rocm(recipe) and "PYTORCH_ROCM_ARCH" not in recipe.env:
        yield _emit(
            "RF105",
            "env.PYTORCH_ROCM_ARCH",
            "unset: with no GPU visible in the sandbox the build stops with 'No GPU arch specified "
            "for ROCm build', and with one it builds only for that GPU",
            'set PYTORCH_ROCM_ARCH = "gfx942" (the archs you deploy on)',
        )
    wanted = {_base(t) for _, t in recipe_archs(recipe) if ARCH_TOKEN.match(t)}
    checked = {_base(t) for _, t in check_archs(recipe) if ARCH_TOKEN.match(t)}
    if wanted and checked and wanted != checked:
        yield _emit(
            "RF106",
            "check.archs",
            f"the check expects {', '.join(sorted(checked))} but the build compiles for "
            f"{', '.join(sorted(wanted))}, so the check would fail after the build",
            "make [check] archs list the same archs as the build",
        )


def _lint_cuda(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if not is_rocm(recipe):
        return
    use_cuda = _flag(recipe.env, "USE_CUDA")
    if "USE_CUDA" in recipe.env and use_cuda is not False:
        yield _emit(
            "RF111",
            "env.USE_CUDA",
            f"is {recipe.env['USE_CUDA']!r} in a ROCm build; with a CUDA toolkit also installed "
            "the build stops with 'Both CUDA and ROCm are enabled and found'",
            'set USE_CUDA = "0"',
        )
    elif use_cuda is None and is_torch(recipe):
        yield _emit(
            "RF111",
            "env.USE_CUDA",
            "is not set; PyTorch enables CUDA when it finds a toolkit, and with ROCm also found "
            "the build stops with 'Both CUDA and ROCm are enabled and found'",
            'set USE_CUDA = "0" explicitly',
        )
    if "USE_CUDNN" in recipe.env:
        yield _emit(
            "RF112",
            "env.USE_CUDNN",
            "has no effect on ROCm: USE_CUDNN depends on USE_CUDA, and MIOpen is used whenever "
            "HIP is found (there is no switch); it only changes the hash",
            "remove USE_CUDNN from [env]",
        )


def _lint_folklore(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    env = recipe.env
    if "RCCL_HOME" in env:
        yield _emit(
            "RF121",
            "env.RCCL_HOME",
            "is never read; PyTorch finds RCCL with find_package(rccl) under $ROCM_PATH/lib/cmake",
            "remove RCCL_HOME (install the ROCm rccl dev package instead)",
        )
    if is_rocm(recipe):
        passthrough = recipe.build.passthrough
        for name in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"):
            where = "env" if name in env else "build.passthrough" if name in passthrough else None
            if where:
                yield _emit(
                    "RF122",
                    f"{where}.{name}" if where == "env" else where,
                    f"{name} adds include dirs to every compile; ROCm's compilers find their own "
                    "headers, and a ROCm include dir here can mix headers of two ROCm versions "
                    "(undefined symbol hip...R0600 at import)",
                    f"remove {name}",
                )
    hip_path = env.get("HIP_PATH", "")
    if hip_path.rstrip("/").endswith("/hip"):
        yield _emit(
            "RF123",
            "env.HIP_PATH",
            f"{hip_path!r} points at the old <rocm>/hip subdirectory; HIP_PATH is read only by "
            "build_amd.py and the rocm toolchain already sets it to the ROCm root",
            "remove HIP_PATH (or set it to the ROCm root)",
        )
    if "HCC_AMDGPU_TARGET" in env:
        yield _emit(
            "RF124",
            "env.HCC_AMDGPU_TARGET",
            "belongs to the retired HCC compiler; PyTorch takes its archs from PYTORCH_ROCM_ARCH",
            "remove it and set PYTORCH_ROCM_ARCH",
        )
    if recipe.toolchain.kind in ("rocm", "rocm-sdk"):
        for name in TOOLCHAIN_ENV:
            if name not in env or (name == "HIP_PATH" and hip_path.rstrip("/").endswith("/hip")):
                continue  # a HIP_PATH ending in /hip is RF123's
            yield _emit(
                "RF125",
                f"env.{name}",
                f"{name} = {env[name]!r} silently replaces the value the rocm toolchain sets from "
                "its root, so the build can see two ROCm installations (e.g. ROCM_PATH and "
                "ROCM_HOME disagree)",
                f"remove {name} from [env] and set [toolchain] root to the ROCm you mean",
            )


def _lint_runtime_env(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    for name in recipe.env:
        nccl = name.startswith("NCCL_") and name not in NCCL_BUILD_ENV
        if name not in RUNTIME_ENV and not nccl:
            continue
        extra = (
            " (and the documented name is NCCL_NET_PLUGIN, not RCCL_NET_PLUGIN)"
            if name == "RCCL_NET_PLUGIN"
            else ""
        )
        yield _emit(
            "RF131",
            f"env.{name}",
            f"{name} is read when the wheel runs, never by the build{extra}; in [env] it only "
            "changes the hash",
            f"remove {name} from [env] and set it where the program runs",
        )


def _lint_rccl(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if not _flag(recipe.env, "USE_RCCL"):
        return
    for name in ("USE_NCCL", "USE_DISTRIBUTED"):
        if _flag(recipe.env, name) is False:
            yield _emit(
                "RF141",
                f"env.{name}",
                f"USE_RCCL=1 needs {name}=1, but it is {recipe.env[name]!r}: RCCL is "
                "PyTorch's NCCL backend on ROCm",
                f'set {name} = "1" (or USE_RCCL = "0")',
            )


def _lint_steps(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    steps = recipe.build.steps
    if is_rocm(recipe) and torch_in_range(recipe, before=HIPIFY_BY_TORCH_SINCE):
        hipify = [i for i, s in enumerate(steps) if _HIPIFY.search(s)]
        builds = [i for i, s in enumerate(steps) if _BUILD_CMD.search(s)]
        fix = 'make the first step "python tools/amd_build/build_amd.py"'
        if not hipify:
            yield _emit(
                "RF151",
                "build.steps",
                "no step runs tools/amd_build/build_amd.py (hipify); without it CMake stops with "
                "'HIPConfig.h.in does not exist'",
                fix,
            )
        elif len(hipify) > 1:
            yield _emit(
                "RF151",
                f"build.steps[{hipify[1]}]",
                "hipify runs more than once; it must run exactly once on a clean tree",
                "keep a single build_amd.py step",
            )
        elif builds and builds[0] < hipify[0]:
            yield _emit(
                "RF151",
                f"build.steps[{hipify[0]}]",
                "hipify runs after the build step; it must come before it",
                fix,
            )
    if torch_in_range(recipe, since=SETUP_PY_REMOVED_SINCE):
        for i, step in enumerate(steps):
            if _SETUP_PY.search(step):
                yield _emit(
                    "RF154",
                    f"build.steps[{i}]",
                    f"torch {recipe.package.version} has no setup.py: it builds with "
                    "scikit-build-core since 2026-07-20 (pytorch#189758), so this step fails",
                    'use the PEP 517 build: "python -m build --wheel --no-isolation --outdir $OUT" '
                    "with the release's requirements-build.txt in [requirements] build",
                )
                break
    # RF153 is about torch's own setup.py: from SETUP_PY_REMOVED_SINCE on there is none (RF154).
    if torch_in_range(recipe, before=SETUP_PY_REMOVED_SINCE) and any(
        _SETUP_DEVELOP.search(s) for s in steps
    ):
        pins = _pins(recipe)
        if "setuptools" not in pins:
            yield _emit(
                "RF153",
                "requirements.build",
                "a step runs torch's setup.py develop/install but setuptools is not pinned (the "
                "build venv holds only pinned requirements)",
                'pin it below 80, e.g. "setuptools==75.6.0"',
                severity="warning",
            )
        else:
            key, pinned = pins["setuptools"]
            v = _version(pinned)
            if v is not None and v.release[0] >= 80:
                yield _emit(
                    "RF153",
                    key,
                    f"setuptools {pinned} with torch's setup.py develop/install: setuptools 80 "
                    "broke these commands (pytorch#152276); bdist_wheel is not affected",
                    'build the wheel with "setup.py bdist_wheel" or pin "setuptools==75.6.0"',
                )


def _lint_cmake(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if not is_torch(recipe) or "CMAKE_POLICY_VERSION_MINIMUM" in recipe.env:
        return
    torch_version = _version(recipe.package.version)
    if torch_version is None or torch_version.release[:2] > (2, 6):
        return
    pins = _pins(recipe)
    fix = 'pin "cmake==3.31.1" (or set CMAKE_POLICY_VERSION_MINIMUM = "3.5")'
    if "cmake" not in pins:
        yield _emit(
            "RF152",
            "requirements.build",
            f"cmake is not pinned, so the build uses whatever cmake is on PATH; torch "
            f"{recipe.package.version} fails with CMake >= 4 ('Compatibility with CMake < 3.5 "
            "has been removed')",
            fix,
            severity="warning",
        )
        return
    key, pinned = pins["cmake"]
    v = _version(pinned)
    if v is not None and v.release[0] >= 4:
        yield _emit(
            "RF152",
            key,
            f"cmake {pinned} with torch {recipe.package.version}: torch <= 2.6 stops with "
            "'Compatibility with CMake < 3.5 has been removed from CMake'",
            fix,
        )


def _aotriton_assets(recipe: Recipe) -> list[tuple[str, Asset]]:
    """(input name, asset) of every ``[inputs]`` archive named like an AOTriton release asset."""
    out = []
    for name in sorted(recipe.inputs):
        spec = recipe.inputs[name]
        where = spec.url or (spec.path.name if spec.path is not None else "")
        asset = aotriton.parse_asset(where)
        if asset is not None:
            out.append((name, asset))
    return out


def _lint_attention(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if not (is_rocm(recipe) and torch_in_range(recipe, since=AOTRITON_SINCE)):
        return
    enabled = [n for n in ("USE_FLASH_ATTENTION", "USE_MEM_EFF_ATTENTION")
               if _flag(recipe.env, n) is not False]  # fmt: skip
    if not enabled:
        return
    which = " and ".join(enabled) + (" (on by default)" if not any(
        n in recipe.env for n in enabled) else "")  # fmt: skip
    have = _version(recipe.package.version)
    release = aotriton.for_torch(have.release) if have is not None else None
    rocm = aotriton.rocm_minor(declared_rocm(recipe))
    archs = [t for _, t in recipe_archs(recipe) if ARCH_TOKEN.match(t)]
    assets = _aotriton_assets(recipe)
    runtimes = [(n, a) for n, a in assets if a.is_runtime]
    if release is not None and rocm is not None and rocm in release.runtimes:
        fix = (
            f"declare AOTriton {release.version}'s release assets as [inputs] (url + sha256; "
            f"`{release.runtime_name(rocm)}` and the image pack of each arch, docs/recipes.md "
            '"AOTriton"), or set USE_FLASH_ATTENTION = "0" and USE_MEM_EFF_ATTENTION = "0"'
        )
    else:
        fix = (
            'declare AOTriton as an input with env = "AOTRITON_INSTALLED_PREFIX", '
            'or set USE_FLASH_ATTENTION = "0" and USE_MEM_EFF_ATTENTION = "0"'
        )
    expects = f" (this torch expects AOTriton {release.version})" if release else ""
    prefix_step = any("AOTRITON_INSTALLED_PREFIX=" in step for step in recipe.build.steps)
    if "AOTRITON_INSTALLED_PREFIX" not in _inputs_env(recipe):
        if "AOTRITON_INSTALLED_PREFIX" in recipe.env:
            yield _emit(
                "RF161",
                "env.AOTRITON_INSTALLED_PREFIX",
                f"{which} use the AOTriton at {recipe.env['AOTRITON_INSTALLED_PREFIX']!r}, a host "
                "path whose content is not hashed and may not be visible in the sandbox",
                fix,
                severity="warning",
            )
        elif runtimes and not prefix_step:
            yield _emit(
                "RF161",
                f"inputs.{runtimes[0][0]}",
                "AOTriton is declared as an input, but no step sets AOTRITON_INSTALLED_PREFIX to "
                "it, so torch's CMake still downloads AOTriton, which fails without network",
                "merge the inputs into one prefix and run the build with AOTRITON_INSTALLED_PREFIX"
                '=<it> (docs/recipes.md "AOTriton")',
            )
        elif not runtimes:
            yield _emit(
                "RF161",
                "env.USE_FLASH_ATTENTION",
                f"{which} pull in AOTriton{expects}; without a preinstalled one the build "
                "downloads it, which fails without network",
                fix,
            )
    if release is not None:
        yield from _aotriton_release(recipe, release, rocm, archs, assets)
    built = {_base(t) for t in archs}
    # a torch whose AOTriton was not read: the archs of the newest release read for an older one
    judge, label = release, f" {release.version}" if release else ""
    if release is None and have is not None:
        older = aotriton.newest_up_to(have.release)
        if older is not None:
            (major, minor), judge = older
            label = f" {judge.version} (torch {major}.{minor}'s, the newest read here)"
    if judge is not None and judge.images:
        bad = sorted(a for a in built & KNOWN_ARCHS if judge.image_for(a) is None)
        supported = ", ".join(i.removeprefix("amd-") for i in judge.images)
    else:
        bad = sorted((built & KNOWN_ARCHS) - AOTRITON_ARCHS)  # unknown ones are RF104's
        supported = "gfx90a and gfx942"
    if bad:
        yield _emit(
            "RF162",
            "env.PYTORCH_ROCM_ARCH",
            f"AOTriton{label} (flash / memory-efficient "
            f"attention) supports {supported}, not {', '.join(bad)}",
            'set USE_FLASH_ATTENTION = "0" and USE_MEM_EFF_ATTENTION = "0" for these archs',
        )


def _aotriton_release(
    recipe: Recipe,
    release: aotriton.Release,
    rocm: str | None,
    archs: list[str],
    assets: list[tuple[str, Asset]],
) -> Iterator[Finding]:
    """RF163/RF164: the declared AOTriton assets against the release this torch pins."""
    torch = recipe.package.version
    for name, asset in assets:
        if asset.version != release.version:
            yield _emit(
                "RF164",
                f"inputs.{name}",
                f"AOTriton {asset.version}, but torch {torch} is built against AOTriton "
                f"{release.version} (its cmake/External/aotriton.cmake); another release's API "
                "and kernels do not match",
                f'use the {release.version} assets (docs/recipes.md "AOTriton")',
            )
        elif asset.rocm is not None and rocm is not None and asset.rocm != rocm:
            ok = rocm in release.runtimes
            yield _emit(
                "RF164",
                f"inputs.{name}",
                f"the AOTriton runtime for ROCm {asset.rocm}, but the toolchain is ROCm {rocm}: "
                "aotriton.cmake only uses a runtime built for exactly the build's ROCm (ABI)",
                f"use {release.runtime_name(rocm)} (sha256 {release.runtimes[rocm]})"
                if ok
                else f"AOTriton {release.version} has no runtime for ROCm {rocm}: use a ROCm of "
                f"{', '.join(release.runtimes)} or turn attention off",
            )
    if not release.images or not assets:
        return  # before the split, or a preinstalled prefix (a directory) that may hold them
    declared = {a.image for _, a in assets if a.image is not None}
    missing: dict[str, str] = {}
    for arch in archs:
        image = release.image_for(arch)
        if image is not None and image not in declared:
            missing.setdefault(image, _base(arch))
    for image, arch in missing.items():
        yield _emit(
            "RF163",
            "env.PYTORCH_ROCM_ARCH",
            f"AOTriton {release.version} ships the kernels for {arch} as a separate image pack "
            f"({image}) and no input declares it: flash attention would find no kernel for {arch}",
            f"declare {release.url(release.image_name(image))} (sha256 {release.images[image]}) "
            "as an input and merge it into the AOTriton prefix",
        )


def _lint_build_version(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    value = recipe.env.get("PYTORCH_BUILD_VERSION")
    if value is None:
        return
    if _version(value) is None:
        yield _emit(
            "RF171",
            "env.PYTORCH_BUILD_VERSION",
            f"{value!r} is not a valid PEP 440 version; the wheel cannot be named or installed",
            'write it like "2.5.1+rocm6.2"',
        )
        return
    if not is_torch(recipe):
        return
    number = recipe.env.get("PYTORCH_BUILD_NUMBER", "0").strip()
    expected = value + (f".post{number}" if number.isdigit() and int(number) > 1 else "")
    if _version(expected) != _version(recipe.package.version):
        yield _emit(
            "RF172",
            "package.version",
            f"{recipe.package.version!r}, but PyTorch will name the wheel {expected!r} "
            "(PYTORCH_BUILD_VERSION, plus .postN when PYTORCH_BUILD_NUMBER > 1); the check "
            "compares the two",
            f'set version = "{expected}"',
        )


def _lint_max_jobs(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if "MAX_JOBS" in recipe.env:
        yield _emit(
            "RF182",
            "env.MAX_JOBS",
            "parallelism does not change the wheel, but in [env] it is hashed: another MAX_JOBS "
            "means a rebuild",
            'remove it from [env] and add "MAX_JOBS" to [build] passthrough',
        )
    if not is_rocm(recipe) or not facts.ram_bytes:
        return
    raw = recipe.env.get("MAX_JOBS")
    origin = "[env]"
    if raw is None and "MAX_JOBS" in recipe.build.passthrough:
        raw, origin = facts.host_env.get("MAX_JOBS"), "the host's MAX_JOBS (passthrough)"
    if raw is None or not raw.strip().isdigit():
        raw, origin = (str(facts.cpu_count) if facts.cpu_count else None), "the CPU count (default)"
    if raw is None:
        return
    jobs = int(raw)
    if jobs * BYTES_PER_JOB > facts.ram_bytes:
        fit = max(1, facts.ram_bytes // BYTES_PER_JOB)
        yield _emit(
            "RF181",
            "env.MAX_JOBS" if origin == "[env]" else "build.passthrough",
            f"MAX_JOBS={jobs} from {origin} needs about {jobs * 4} GB at ~4 GB per compile job "
            f"but this machine has {facts.ram_bytes / GIB:.0f} GB; the OOM killer stops compilers "
            "(exit 137)",
            f"pass MAX_JOBS={fit} (add MAX_JOBS to [build] passthrough and export it)",
        )


def _lint_compiler_cache(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if is_rocm(recipe) and recipe.build.compiler_cache == "off":
        yield _emit(
            "RF194",
            "build.compiler-cache",
            "the compiler cache is off: every rebuild of this ROCm build (a new commit, a changed "
            "flag) compiles all of its thousands of translation units again; the cache never "
            "changes the hash or the wheel's bytes",
            'remove compiler-cache = false (PyTorch: compiler-cache = "cmake-launcher"), or '
            "pass --no-compiler-cache for one build",
        )


#: torch extensions and the [env] switch that makes their setup.py build the GPU ops without a
#: visible GPU (torchvision: ``torch.cuda.is_available() or FORCE_CUDA``; torchaudio: USE_ROCM,
#: which otherwise follows ``torch.version.hip``, or FORCE_CUDA).
GPU_SWITCH: dict[str, tuple[str, ...]] = {
    "torchvision": ("FORCE_CUDA",),
    "torchaudio": ("USE_ROCM", "FORCE_CUDA"),
}


def _lint_torch_extension(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    name = recipe.package.name.lower()
    if name not in GPU_SWITCH or not is_rocm(recipe):
        return
    switches = GPU_SWITCH[name]
    if not any(_flag(recipe.env, s) for s in switches):
        yield _emit(
            "RF191",
            f"env.{switches[0]}",
            f"{name}'s setup.py builds its GPU ops only when it sees a GPU or {switches[0]}=1; the "
            "sandbox shows no GPU, so the wheel would silently hold CPU-only ops",
            f'set {switches[0]} = "1" in [env]',
        )
    if not recipe.check.archs:
        yield _emit(
            "RF192",
            "check.archs",
            "without [check] archs a CPU-only build (no HIP code in the wheel) passes the check",
            'set [check] archs = ["gfx942"] (the archs in PYTORCH_ROCM_ARCH)',
        )
    torch = next((d for d in facts.dependencies if is_torch(d)), None)
    if torch is None or "PYTORCH_ROCM_ARCH" not in recipe.env:
        return
    have = {_base(t) for t in split_archs(torch.env.get("PYTORCH_ROCM_ARCH", ""))}
    want = {_base(t) for t in split_archs(recipe.env["PYTORCH_ROCM_ARCH"])}
    extra = sorted(want - have)
    if have and extra:
        yield _emit(
            "RF193",
            "env.PYTORCH_ROCM_ARCH",
            f"{', '.join(extra)} not in the archs of the torch it is built against "
            f"({torch.file.name}: {', '.join(sorted(have))}); those kernels would have no torch "
            "to run with",
            f"use a subset of {', '.join(sorted(have))}, or add the arch to the torch recipe",
        )


def _lint_inputs(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    for name in sorted(recipe.inputs):
        spec = recipe.inputs[name]
        if spec.url is not None and spec.sha256 is None:
            yield _emit(
                "RF135",
                f"inputs.{name}",
                f"{spec.url} has no sha256 yet: the input is not locked, plan is provisional and "
                "realize stops before building",
                f"run `rocmforge lock {recipe.file}` where that URL is reachable (it fetches the "
                "archive and writes its sha256)",
            )


#: Package names of Triton builds (upstream's, and PyTorch's names for its ROCm / CUDA wheels).
TRITON_NAMES = frozenset({"triton", "pytorch-triton", "pytorch-triton-rocm"})

#: What Triton's build (python/build_helpers.py) downloads unless a variable names it: the
#: prebuilt LLVM (cmake/llvm-hash.txt / llvm-info.json) and nlohmann json (cmake/json-version.txt).
TRITON_DEPS: dict[str, str] = {
    "LLVM_SYSPATH": "the prebuilt LLVM of cmake/llvm-hash.txt (llvm-<hash8>-ubuntu-x64.tar.gz)",
    "JSON_SYSPATH": "nlohmann json (include.zip of cmake/json-version.txt)",
}


def _lint_triton(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    if recipe.package.name.lower() not in TRITON_NAMES:
        return
    if not _flag(recipe.env, "TRITON_OFFLINE_BUILD"):
        yield _emit(
            "RF195",
            "env.TRITON_OFFLINE_BUILD",
            "without it Triton's build downloads LLVM, nlohmann json and the NVIDIA tools it "
            "finds no path for; the sandbox has no network, so it fails late and unclearly",
            'set TRITON_OFFLINE_BUILD = "1" in [env] (a missing input then stops the build '
            "at once, naming the variable)",
        )
    given = _inputs_env(recipe) | set(recipe.env)
    for var, what in TRITON_DEPS.items():
        if var not in given:
            yield _emit(
                "RF196",
                "inputs",
                f"nothing sets {var}: Triton's build would download {what}",
                f'declare it as [inputs.NAME] with env = "{var}" (url + sha256; docs/recipes.md '
                '"Triton")',
            )


#: AMD's legacy index folder (TheRock RFC0012: to be archived) and the stable stream's multi-arch
#: index that replaced it (RFC0011 names the stream hosts; ultralytics/ultralytics#24137, an AMD
#: engineer installing torch[device-gfx950] from it, 2026-09-12).
LEGACY_INDEX = re.compile(r"^https?://repo\.amd\.com/rocm/")
CURRENT_INDEX = "https://stable.repo.amd.com/rocm/whl-next/"
#: ``rocm[libraries]`` and its extras in a requirement string (``|``- or space-separated).
_ROCM_REQ = re.compile(r"(?:^|[|\s,])rocm\[([^\]]*)\]")


def _lint_sdk_index(recipe: Recipe, facts: LintFacts) -> Iterator[Finding]:
    """RF197/RF198: where the SDK wheels come from, and which device wheels the built wheel
    asks for on the multi-arch index."""
    tc = recipe.toolchain
    if tc.kind != "rocm-sdk":
        return
    if tc.index and LEGACY_INDEX.match(tc.index):
        yield _emit(
            "RF197",
            "toolchain.index",
            f"{tc.index} is in repo.amd.com/rocm/, which TheRock's RFC0012 calls a legacy "
            "folder to be archived; the locked digests stay valid, but a fresh fetch will fail "
            "once it is gone",
            f'index = "{CURRENT_INDEX}" (the stable stream\'s multi-arch index), then '
            "`rocmforge lock` (it records where each wheel came from)",
        )
    isas = [f for f in tc.families if re.fullmatch(r"gfx[0-9a-f]{3,4}", f)]
    for key, value in sorted(recipe.env.items()):
        for m in _ROCM_REQ.finditer(value):
            extras = {e.strip() for e in m.group(1).split(",")}
            missing = [
                i for i in isas if f"device-{i}" not in extras and "device-all" not in extras
            ]
            if missing:
                want = ",".join([*sorted(extras), *(f"device-{i}" for i in missing)])
                yield _emit(
                    "RF198",
                    f"env.{key}",
                    f"rocm[{m.group(1)}] names no device wheel for {', '.join(missing)}: on the "
                    "multi-arch index the rocm sdist then picks device wheels by probing the "
                    "installing machine's GPU (none on a login node: the kernels are missing)",
                    f"require rocm[{want}]",
                )


LINTS: tuple[Callable[[Recipe, LintFacts], Iterator[Finding]], ...] = (
    _lint_allow,
    _lint_arch_tokens,
    _lint_arch_versions,
    _lint_arch_presence,
    _lint_cuda,
    _lint_folklore,
    _lint_runtime_env,
    _lint_rccl,
    _lint_steps,
    _lint_cmake,
    _lint_attention,
    _lint_build_version,
    _lint_max_jobs,
    _lint_compiler_cache,
    _lint_torch_extension,
    _lint_inputs,
    _lint_triton,
    _lint_sdk_index,
)


def lint_recipe(recipe: Recipe, facts: LintFacts | None = None) -> tuple[Finding, ...]:
    """Run every lint over ``recipe``; acknowledged findings carry the recipe's reason."""
    facts = facts or LintFacts()
    allow = recipe.lint.allow
    found = []
    for lint in LINTS:
        for f in lint(recipe, facts):
            found.append(replace(f, allowed=allow[f.id]) if f.id in allow else f)
    return tuple(found)


def locate(recipe: Recipe, key: str) -> tuple[Path, int | None]:
    """Return the file of the ``extends`` chain that declares ``key`` and its line there.

    Only used to show findings; reads the recipe files again (tomllib gives no lines).
    """
    from rocmforge.recipe.load import scan_lines
    from rocmforge.recipe.model import parent_keys

    chain = list(recipe.extends_chain) or [recipe.file]
    scanned = []
    for file in reversed(chain):
        try:
            scanned.append((file, scan_lines(Path(file).read_text(encoding="utf-8"))))
        except OSError:
            scanned.append((file, {}))
    for k in parent_keys(key):
        for file, lines in scanned:
            if k in lines:
                return Path(file), lines[k]
    return Path(recipe.file), None


def to_problem(recipe: Recipe, finding: Finding) -> Problem:
    """Return ``finding`` as a located :class:`~rocmforge.errors.Problem` (file, key, line)."""
    file, line = locate(recipe, finding.key)
    return Problem(file=file, key=finding.key, message=finding.text(), line=line)


def enforce(recipe: Recipe, findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """Raise :class:`LintError` for unacknowledged errors (carrying the warnings too, so every
    finding is shown at once, errors first); return the warnings to report."""
    errors = tuple(f for f in findings if f.blocking)
    warnings = tuple(f for f in findings if f.severity == "warning" and f.allowed is None)
    if errors:
        raise LintError(
            Path(recipe.file),
            errors,
            [to_problem(recipe, f) for f in errors],
            tuple(to_problem(recipe, f) for f in warnings),
        )
    return warnings


def describe(recipe: Recipe, finding: Finding) -> str:
    """Return ``file:line: key: RF101 name: reason. Fix: ...`` for showing a finding."""
    return str(to_problem(recipe, finding))


def preflight(recipe: Recipe, facts: LintFacts) -> tuple[Finding, ...]:
    """Lint ``recipe`` before anything is fetched: raise :class:`LintError` on errors it does not
    acknowledge, else return every finding (warnings and acknowledged ones).

    ``facts`` come from the caller (``rocmforge.toolchain.machine.lint_facts`` for this machine):
    the recipe layer never probes the machine itself.
    """
    findings = lint_recipe(recipe, facts)
    enforce(recipe, findings)
    return findings
