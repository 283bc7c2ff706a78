"""The ``kind = "rocm-sdk"`` toolchain: ROCm made of AMD's SDK wheels, pinned by digest.

AMD ships ROCm as Python wheels (ROCm/TheRock, ``docs/packaging/python_packaging.md``):
``rocm-sdk-core`` (compiler, HIP runtime, tools: ``_rocm_sdk_core/``),
``rocm-sdk-libraries-<family>`` (math libraries of one GPU family, legacy per-family indexes)
or the arch-neutral ``rocm-sdk-libraries`` plus one ``rocm-sdk-device-<gfx>``
per ISA (multi-arch releases),
and ``rocm-sdk-devel`` (headers, CMake files: a ``_devel.tar[.xz]`` that ``rocm-sdk init`` expands
into ``_rocm_sdk_devel/`` beside the others, file symlinks turned into hard links, then each device
wheel's ``.devel_links/<gfx>.json`` files hard-linked into it). The selector sdist ``rocm`` (which
detects the GPU at install time) is never used as a selector: the recipe names the families,
``lock`` names the concrete wheels and pins them by sha256 (``[toolchain] wheels``). It is still
the only source of the ``rocm_sdk`` Python module, which a wheel built on the SDK imports at run
time (TheRock's ``torch/_rocm_init.py`` calls ``rocm_sdk.initialize_process``), so ``lock`` pins
that sdist by sha256 too (``[toolchain] module``) and the unpacked tree gets its
``src/rocm_sdk/`` copied out (with a ``rocm-<version>.dist-info``): its ``setup.py`` never runs,
nothing is resolved, no GPU is probed.

The fingerprint is exactly those wheels (name, version, sha256): nothing on the host is probed for
it. On realize the wheels are unpacked once into ``sources/rocm-sdk/<key>/`` (key: the digests),
``init`` runs there, the tree is sealed read-only and shared by every build that uses the same
wheels; the build sees it read-only at :data:`SDK_MOUNT` with ``ROCM_PATH``, ``ROCM_HOME``,
``HIP_PATH`` (``rocm-sdk path --root``), ``CMAKE_PREFIX_PATH`` (``--cmake``) and ``PATH``
(``--bin``, and the SDK's LLVM) set from it, and the host's own ROCm packages hidden.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from rocmforge.errors import ToolchainError
from rocmforge.recipe.model import ToolchainSpec
from rocmforge.store import layout
from rocmforge.util.fsutil import json_bytes, make_tree_once, write_atomic

#: Where the unpacked SDK is mounted (read-only) in the build sandbox.
SDK_MOUNT = "/opt/rocm-sdk"
#: Extra pip index options for the SDK wheels only (a mirror of AMD's index, or
#: ``--no-index --find-links DIR``); ``ROCMFORGE_PIP_ARGS`` is for PyPI-style requirements.
ENV_ARGS = "ROCMFORGE_SDK_ARGS"
#: Bumped when the unpacked tree's layout changes: old trees are then not reused.
FORMAT = "1"
#: The selector sdist: locked only as the source of :data:`MODULE` (``[toolchain] module``).
SELECTOR = "rocm"
#: The pure-Python package the selector sdist ships (``src/rocm_sdk/``).
MODULE = "rocm_sdk"
#: The file rocmforge writes at the top of an unpacked tree: the wheels and the devel root.
TREE_INFO = ".rocmforge-sdk.json"
#: Example index (AMD's legacy per-family nightly index for MI300) for messages and docs.
EXAMPLE_INDEX = "https://rocm.nightlies.amd.com/v2/gfx94X-dcgpu/"

_ISA = re.compile(r"^gfx[0-9a-f]{3,4}$")
#: bin/ entries ``rocm-sdk init`` keeps as symlinks (TheRock ``_devel.py``: PRESERVE_SYMLINKS).
_PRESERVE = frozenset(
    {"amdclang", "amdclang++", "amdclang-cl", "amdclang-cpp", "amdflang", "amdlld", "amdllvm"}
)
#: Debian/Ubuntu packages of a host ROCm, hidden from a build on SDK wheels.
HOST_ROCM = re.compile(
    r"^(hipcc|hipify.*|rocminfo|rocm-.*|librocm.*|libroc(blas|fft|rand|solver|sparse|thrust|prim)"
    r".*|libamdhip64.*|libhip.*|libamd-comgr.*|libhsa.*|libhsakmt.*)(:.*)?$"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SdkWheel:
    """One locked SDK wheel in the store: PEP 503 name, version, file and sha256 (hex)."""

    name: str
    version: str
    wheel: Path
    sha256: str

    def to_json(self) -> dict[str, str]:
        """What enters the fingerprint (and audit, provenance): name, version, wheel, sha256."""
        return {
            "name": self.name,
            "version": self.version,
            "wheel": self.wheel.name,
            "sha256": self.sha256,
        }


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_names(families: Sequence[str]) -> tuple[str, ...]:
    """The concrete wheels for ``families`` (PEP 503 names): core, devel, and per family either
    ``rocm-sdk-libraries-<family>`` or, for an ISA like ``gfx942``, ``rocm-sdk-libraries`` and
    ``rocm-sdk-device-<gfx>``."""
    names = ["rocm-sdk-core", "rocm-sdk-devel"]
    isas = [f for f in families if _ISA.match(f)]
    if isas:
        names.append("rocm-sdk-libraries")
        names += [f"rocm-sdk-device-{f}" for f in isas]
    names += [_normal(f"rocm-sdk-libraries-{f}") for f in families if not _ISA.match(f)]
    return tuple(names)


def same_release(version: str, declared: str) -> bool:
    """True if ``version`` is ``declared`` or a post release of it (AMD re-spins a wheel as
    ``.postN``; ``rocm-sdk init`` compares versions without the post segment too)."""
    return re.sub(r"\.post\d+$", "", version) == declared


def requirement(name: str, declared: str) -> str:
    """The specifier ``lock`` resolves ``name`` with: ``declared`` or a post release of it."""
    plain = re.fullmatch(r"\d+(\.\d+)*", declared) is not None
    return f"{name}=={declared}.*" if plain else f"{name}=={declared}"


def locked_pins(spec: ToolchainSpec) -> tuple[dict[str, str], tuple[str, ...]]:
    """``({name: "name==version"}, missing names)``: the wheels ``[toolchain] wheels`` locks for
    the declared version and families, and the ones it does not."""
    found: dict[str, str] = {}
    for pin in spec.sdk_wheels:
        name, _, version = pin.partition("==")
        if spec.sdk_version is not None and same_release(version, spec.sdk_version):
            found[name] = pin
    names = wheel_names(spec.families)
    return {n: found[n] for n in names if n in found}, tuple(n for n in names if n not in found)


def locked_module(spec: ToolchainSpec) -> str | None:
    """The ``rocm==version`` pin of ``[toolchain] module`` for the declared version (None: the
    ``rocm_sdk`` module is not locked, or locked for another version)."""
    for pin in spec.sdk_module:
        _, _, version = pin.partition("==")
        if spec.sdk_version is not None and same_release(version, spec.sdk_version):
            return pin
    return None


def check_env(spec: ToolchainSpec) -> dict[str, str]:
    """The check's environment for the ``rocm_sdk`` module: ``ROCM_SDK_TARGET_FAMILY`` set to
    the recipe's first family, so the module's ``determine_target_family()`` (which would
    otherwise run ``offload-arch`` on the host) answers from the recipe."""
    return {"ROCM_SDK_TARGET_FAMILY": spec.families[0]} if spec.families else {}


def sdist_name(version: str) -> str:
    """The file name of the selector sdist of ``version`` (``rocm-7.14.0.tar.gz``)."""
    return f"{SELECTOR}-{version}{layout.SDIST_SUFFIX}"


def is_runtime(name: str) -> bool:
    """True for the wheels an installed program loads (all but ``rocm-sdk-devel``)."""
    return name != "rocm-sdk-devel"


def index_args(spec: ToolchainSpec, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """pip index options for the SDK wheels: ``--index-url`` of ``[toolchain] index``, then
    ``ROCMFORGE_SDK_ARGS`` (a later ``--index-url`` wins: a mirror). Empty: none configured."""
    env = os.environ if environ is None else environ
    extra = tuple(shlex.split(env.get(ENV_ARGS, "")))
    own = ("--index-url", spec.index) if spec.index else ()
    return (*own, *extra)


def no_index_message(spec: ToolchainSpec, what: str) -> str:
    """The one-line error when the SDK wheels are needed but no index is configured."""
    return (
        f"toolchain.index: {what}: no index for the ROCm SDK wheels is configured; set "
        f'[toolchain] index = "URL" (AMD\'s per-family index, e.g. {EXAMPLE_INDEX}) or '
        f"{ENV_ARGS}='--index-url MIRROR' (or '--no-index --find-links DIR'), then run "
        "`rocmforge lock RECIPE`"
    )


def fingerprint(wheels: Sequence[SdkWheel]) -> list[dict[str, str]]:
    """The ROCm part of the toolchain fingerprint: the wheels, sorted by name."""
    return [w.to_json() for w in sorted(wheels, key=lambda w: w.name)]


# -- unpacking ------------------------------------------------------------------------------------


def tree_key(wheels: Sequence[SdkWheel]) -> str:
    """The directory name of the unpacked tree: a digest of the wheels' names and sha256s."""
    text = "\0".join([FORMAT, *(f"{w.name}\0{w.sha256}" for w in sorted(wheels, key=_by_name))])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _by_name(w: SdkWheel) -> str:
    return w.name


def tree_path(sources_dir: Path, wheels: Sequence[SdkWheel]) -> Path:
    """Where the wheels' unpacked tree lives (or will live)."""
    return sources_dir / layout.SOURCES_ROCM_SDK / tree_key(wheels)


def _inside(rel: str) -> bool:
    p = PurePosixPath(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts


def _verify(w: SdkWheel) -> None:
    """The wheel must still have the sha256 it was locked and fetched with (the tree is keyed by
    it and reused by every later build, so it is checked once, here)."""
    h = hashlib.sha256()
    try:
        with open(w.wheel, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    except OSError as exc:
        raise ToolchainError(f"{w.wheel}: cannot read the SDK wheel: {exc}") from exc
    if h.hexdigest() != w.sha256:
        raise ToolchainError(
            f"{w.wheel}: the SDK wheel changed since it was fetched (sha256 "
            f"{h.hexdigest()[:16]}.., locked {w.sha256[:16]}..); remove it from the store and "
            "realize again"
        )


def _extract_wheel(wheel: Path, dest: Path) -> None:
    """Unzip ``wheel`` into ``dest`` (a site-packages-like directory), keeping exec bits."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if not _inside(name):
                    raise ToolchainError(f"{wheel.name}: unsafe member {name!r}")
                target = dest / name
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if os.path.lexists(target):  # the shared pure package (rocm_sdk_libraries/...)
                    os.unlink(target)
                with zf.open(info) as src, open(target, "xb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                mode = (info.external_attr >> 16) & 0o777
                os.chmod(target, 0o755 if mode & 0o111 else 0o644)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ToolchainError(f"{wheel}: cannot unpack the SDK wheel: {exc}") from exc


def module_dist_info(version: str) -> str:
    """The dist-info directory written beside :data:`MODULE` (``rocm-7.14.0.dist-info``)."""
    return f"{SELECTOR}-{version}.dist-info"


def _extract_module(w: SdkWheel, tree: Path) -> None:
    """Copy ``<top>/src/rocm_sdk/`` of the selector sdist to ``tree/rocm_sdk/`` and write a
    ``rocm-<version>.dist-info`` (no ``Requires-Dist``: the concrete wheels are locked beside
    it). The sdist's ``setup.py`` (which probes the GPU to choose its dependencies) never runs."""
    from base64 import urlsafe_b64encode

    record: list[str] = []
    try:
        with tarfile.open(w.wheel, "r:*") as tf:
            for ti in tf:
                parts = PurePosixPath(ti.name).parts
                if len(parts) < 3 or parts[1:3] != ("src", MODULE) or not ti.isfile():
                    continue
                rel = PurePosixPath(*parts[2:]).as_posix()
                if not _inside(ti.name) or not _inside(rel):
                    raise ToolchainError(f"{w.wheel.name}: unsafe member {ti.name!r}")
                src = tf.extractfile(ti)
                assert src is not None
                with src:
                    data = src.read()
                dest = tree / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                os.chmod(dest, 0o644)
                digest = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                record.append(f"{rel},sha256={digest},{len(data)}")
    except (tarfile.TarError, OSError) as exc:
        raise ToolchainError(f"{w.wheel}: cannot read the rocm sdist: {exc}") from exc
    if not (tree / MODULE / "__init__.py").is_file():
        raise ToolchainError(f"{w.wheel.name}: holds no src/{MODULE}/__init__.py")
    info = tree / module_dist_info(w.version)
    info.mkdir()
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {SELECTOR}\nVersion: {w.version}\n",
        "INSTALLER": "rocmforge\n",
    }
    for name, text in files.items():
        (info / name).write_text(text, encoding="utf-8")
        data = text.encode()
        digest = urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{info.name}/{name},sha256={digest},{len(data)}")
    record.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")


def _find_devel_tar(tree: Path) -> Path | None:
    pure = tree / "rocm_sdk_devel"
    for name in ("_devel.tar.xz", "_devel.tar"):
        if (pure / name).is_file():
            return pure / name
    return None


def _expand_devel(tree: Path) -> None:
    """What ``rocm-sdk init`` does first: expand ``rocm_sdk_devel/_devel.tar[.xz]`` beside the
    other packages, file symlinks as hard links (``bin/amdclang*`` and directory symlinks stay
    symlinks), then delete the tarball."""
    found = _find_devel_tar(tree)
    if found is None:
        raise ToolchainError("rocm-sdk-devel holds no rocm_sdk_devel/_devel.tar[.xz] to expand")
    path = found
    try:
        with tarfile.open(path, "r:*") as tf:
            for ti in tf:
                if not _inside(ti.name):
                    raise ToolchainError(f"{path.name}: unsafe member {ti.name!r}")
                dest = tree / ti.name
                if ti.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                if ti.isfile():
                    src = tf.extractfile(ti)
                    assert src is not None
                    with src, open(dest, "xb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    os.chmod(dest, 0o755 if ti.mode & 0o111 else 0o644)
                elif ti.issym():
                    _link(tree, dest, ti.linkname, path.name)
                elif ti.islnk() and _inside(ti.linkname):
                    os.link(tree / ti.linkname, dest)
    except (tarfile.TarError, OSError) as exc:
        raise ToolchainError(f"{path}: cannot expand the devel tree: {exc}") from exc
    os.unlink(path)


def _link(tree: Path, dest: Path, target: str, what: str) -> None:
    """A symlink of the devel tarball: a hard link to a file, else kept as a symlink."""
    resolved = os.path.normpath(os.path.join(dest.parent, target))
    if os.path.isabs(target) or not (resolved + "/").startswith(str(tree) + "/"):
        raise ToolchainError(f"{what}: {dest.relative_to(tree)} points outside the SDK: {target}")
    keep = dest.name in _PRESERVE and dest.parent.name == "bin"
    if not keep and os.path.isfile(resolved) and not os.path.islink(resolved):
        os.link(resolved, dest)
    else:
        os.symlink(target, dest)


def devel_root(tree: Path) -> str:
    """The expanded devel package's directory name (``_rocm_sdk_devel`` plus the version nonce)."""
    found = sorted(
        p.name for p in tree.iterdir() if p.name.startswith("_rocm_sdk_devel") and p.is_dir()
    )
    if len(found) != 1:
        raise ToolchainError(
            f"the SDK's devel tree expanded into {len(found)} _rocm_sdk_devel* directories, not one"
        )
    return found[0]


def _device_links(tree: Path, root: str) -> int:
    """What ``rocm-sdk init`` does second: hard-link each device wheel's files (listed in
    ``<libraries>/.devel_links/<gfx>.json``) into the devel tree. Returns the count."""
    count = 0
    for manifest in sorted(tree.glob("_rocm_sdk_libraries*/.devel_links/*.json")):
        try:
            links = json.loads(manifest.read_text(encoding="utf-8")).get("links", [])
        except (OSError, ValueError, AttributeError) as exc:
            raise ToolchainError(f"{manifest.relative_to(tree)}: unreadable: {exc}") from exc
        for link in links:
            rel, target = str(link.get("relpath", "")), str(link.get("target", ""))
            if not _inside(rel):
                raise ToolchainError(f"{manifest.name}: unsafe relpath {rel!r}")
            dest = tree / root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = os.path.normpath(os.path.join(dest.parent, target))
            if not (src + "/").startswith(str(tree) + "/"):
                raise ToolchainError(f"{manifest.name}: {rel} points outside the SDK: {target}")
            if not os.path.isfile(src):
                continue
            if os.path.lexists(dest):
                os.unlink(dest)
            os.link(src, dest)
            count += 1
    return count


def _seal(tree: Path) -> int:
    """Make every file and directory below ``tree`` read-only; return the number of files."""
    files = 0
    for dirpath, dirs, names in os.walk(tree, topdown=False):
        for n in names:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o222)
                files += 1
        for d in dirs:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, 0o555)
    os.chmod(tree, 0o555)
    return files


def ensure_tree(sources_dir: Path, wheels: Sequence[SdkWheel]) -> tuple[Path, bool]:
    """Return the unpacked, initialised and sealed tree of ``wheels``, unpacking it if missing.

    The second value is True when this call unpacked it. The tree is built under
    ``sources/tmp`` and renamed into place, so a concurrent build never sees half of it.
    Raises :class:`ToolchainError`.
    """
    final = tree_path(sources_dir, wheels)

    def fill(tree: Path) -> None:
        for w in sorted(wheels, key=_by_name):
            _verify(w)
            if w.name == SELECTOR:
                _extract_module(w, tree)
            else:
                _extract_wheel(w.wheel, tree)
        _expand_devel(tree)
        root = devel_root(tree)
        linked = _device_links(tree, root)
        info = {"format": FORMAT, "devel_root": root, "device_links": linked,
                "wheels": fingerprint(wheels)}  # fmt: skip
        write_atomic(tree / TREE_INFO, json_bytes(info))
        _seal(tree)

    tmp_root = sources_dir / layout.SOURCES_TMP
    try:
        made = make_tree_once(
            final, tmp_root, "rocm-sdk.", fill, lambda: (final / TREE_INFO).is_file()
        )
    except OSError as exc:
        raise ToolchainError(f"cannot unpack the ROCm SDK into {final}: {exc}") from exc
    return final, made


def tree_info(tree: Path) -> dict[str, Any]:
    """Read the :data:`TREE_INFO` of an unpacked tree."""
    try:
        data = json.loads((tree / TREE_INFO).read_bytes())
    except (OSError, ValueError) as exc:
        raise ToolchainError(f"{tree}: not an unpacked ROCm SDK: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("devel_root"), str):
        raise ToolchainError(f"{tree / TREE_INFO}: no devel_root")
    return data


def sdk_env(tree: Path, inside: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """The build's ROCm variables and PATH entries for ``tree`` seen at ``inside``.

    ``rocm-sdk path --root`` is the devel root, ``--bin`` its ``bin``, ``--cmake`` its
    ``lib/cmake``; the SDK's LLVM is ``lib/llvm/bin``.
    """
    root = f"{inside}/{tree_info(tree)['devel_root']}"
    env = {
        "ROCM_PATH": root,
        "ROCM_HOME": root,
        "HIP_PATH": root,
        "HIP_PLATFORM": "amd",
        "CMAKE_PREFIX_PATH": f"{root}/lib/cmake",
    }
    return env, (f"{root}/bin", f"{root}/lib/llvm/bin")


# -- the host's own ROCm ---------------------------------------------------------------------------


def host_rocm_files(
    cache_dir: Path | None = None, db: Path = Path("/var/lib/dpkg")
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The host's ROCm packages under ``/usr``: (directories only they fill, their other files).

    A build on SDK wheels must see none of them: the directories are masked with an empty one,
    the files bound over by an empty file. Cached in ``cache_dir`` by the stat of dpkg's
    database (a warm realize reads one small JSON file).
    """
    from rocmforge.util.statcache import StatCache

    status = db / "status"
    cache = StatCache(cache_dir / layout.CACHE_ROCMSDK) if cache_dir is not None else None
    key = f"hide|{FORMAT}|{db}"
    hit = cache.get(key) if cache is not None else None
    if isinstance(hit, list) and len(hit) == 2:
        return tuple(hit[0]), tuple(hit[1])
    dirs, files = _host_rocm_files(db)
    if cache is not None:
        cache.put(key, [list(dirs), list(files)], [status])
    return dirs, files


def _host_rocm_files(db: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from rocmforge.toolchain.manifest import _read_list, _usr_path, parse_dpkg_status

    try:
        status = (db / "status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return (), ()
    owned: set[str] = set()
    for key in parse_dpkg_status(status):
        name = key.partition(":")[0]
        if not HOST_ROCM.match(name):
            continue
        for lst in (db / "info" / f"{key}.list", db / "info" / f"{name}.list"):
            if lst.is_file():
                owned.update(_usr_path(p) for p in _read_list(lst))
                break
    owned = {p for p in owned if p.startswith("/usr/")}
    qualified: dict[str, bool] = {}

    def only_owned(directory: str) -> bool:
        """Every entry below ``directory`` belongs to a ROCm package (stops at the first not)."""
        if directory not in qualified:
            ok = True
            try:
                with os.scandir(directory) as it:
                    for entry in it:
                        if entry.path not in owned or (
                            entry.is_dir(follow_symlinks=False) and not only_owned(entry.path)
                        ):
                            ok = False
                            break
            except OSError:
                ok = False
            qualified[directory] = ok
        return qualified[directory]

    dirs: list[str] = []
    for p in sorted(owned):
        if any(p.startswith(d + "/") for d in dirs) or os.path.islink(p) or not os.path.isdir(p):
            continue
        if only_owned(p):
            dirs.append(p)
    files = [
        p for p in sorted(owned)
        if not any(p.startswith(d + "/") for d in dirs)
        and os.path.isfile(p) and not os.path.islink(p)
    ]  # fmt: skip
    return tuple(dirs), tuple(files)
