"""Extra inputs: fixed directories or archives a build needs besides its source (``[inputs.NAME]``).

The build has no network, so anything it would download (a prebuilt AOTriton, a model file) must
be an input: a directory (content-hashed like a ``path`` source, with the same stat cache), or an
archive given by ``path`` or by ``url`` + ``sha256`` (blake3 of the archive bytes; the sha256, when
given, is checked). A ``url`` input may leave ``sha256`` out until ``rocmforge lock`` fetches the
URL and writes it into the recipe (:func:`prefetch_input`, like ``nix-prefetch-url``); until then
it is unlocked: ``plan`` is provisional and realize stops before building
(:class:`UnlockedInputError`, :func:`unlocked_message`). Archives are fetched and unpacked once
into the store's source cache. Each input is mounted read-only in the sandbox at ``/inputs/NAME``
and its ``env`` variable names that path. Only the content, the name, ``env`` and ``subdir`` enter
the derivation — never a path or URL.
An input with ``crates = true`` is a directory of crate sources (``cargo vendor`` output, or
Debian's ``/usr/share/cargo/registry``) that the build's private cargo config puts in place of
crates.io (see :func:`rocmforge.build.builder.cargo_config`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from rocmforge.errors import FetchError, SourceError
from rocmforge.recipe.model import InputSpec
from rocmforge.sources.tree import tree_digest
from rocmforge.store import layout
from rocmforge.util.hashing import CHUNK, file_digests, file_sha256
from rocmforge.util.statcache import StatCache

INSIDE = "/inputs"
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar.zst", ".tar", ".zip")


class NotFetchedError(SourceError):
    """An archive input is not in the cache and nothing may fetch it (``plan`` offline)."""


class UnlockedInputError(NotFetchedError):
    """A ``url`` input without ``sha256``: not locked yet (``plan`` notes it; realize stops)."""

    def __init__(self, spec: InputSpec) -> None:
        super().__init__(f"inputs.{spec.name}: {spec.url} is not locked (no sha256 yet)")
        self.spec = spec


def unlocked_message(spec: InputSpec, recipe: Path) -> str:
    """The one-line error realize stops with before building when ``spec`` is not locked."""
    return (
        f"{recipe}: inputs.{spec.name}: {spec.url} is not locked (no sha256): run `rocmforge "
        f"lock {recipe}` where that URL is reachable (it fetches the archive and writes its "
        "sha256), or point url at a reachable mirror of the same file and lock"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedInput:
    """One identified input: its digest and the host directory that gets mounted."""

    name: str
    env: str
    kind: str
    digest: str
    host: Path
    subdir: str | None = None
    sha256: str | None = None  # of the archive bytes (archives only; not in the derivation)
    crates: bool = False  # a crate directory that replaces crates.io for cargo

    @property
    def inside(self) -> str:
        """Where a relocating sandbox mounts the input."""
        return f"{INSIDE}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        """What enters the derivation: kind, content digest, variable and subdir (no path), and
        ``crates`` when the input is cargo's crate source."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "digest": self.digest,
            "env": self.env,
            "subdir": self.subdir,
        }
        if self.crates:  # only when set: the hashes of every other input stay as they were
            out["crates"] = True
        return out


class UrlFetcher(Protocol):
    """Downloads ``url`` into the open file ``out``."""

    def fetch(self, url: str, out: BinaryIO) -> None:
        """Write the bytes at ``url`` into ``out``; raise :class:`SourceError` on failure."""
        ...


class UrllibFetcher:
    """Fetch with :mod:`urllib` (http, https, file)."""

    def fetch(self, url: str, out: BinaryIO) -> None:
        """Stream ``url`` into ``out``."""
        try:
            import urllib.request  # only URL inputs need it; http.client costs ~30 ms to import

            with urllib.request.urlopen(url, timeout=60) as resp:
                shutil.copyfileobj(resp, out, CHUNK)
        except (OSError, ValueError) as exc:  # urllib.error.URLError is an OSError
            raise FetchError(f"cannot download {url}: {exc}") from exc


def archive_suffix(name: str) -> str | None:
    """Return the archive suffix of ``name`` (``.tar.gz``, ``.zip`` ...) or None."""
    low = name.lower()
    return next((s for s in _ARCHIVE_SUFFIXES if low.endswith(s)), None)


def _digest_file(path: Path, cache: Path) -> tuple[str, str]:
    """Return ``(blake3, sha256)`` of ``path``, cached by its stat signature."""
    sc = StatCache(cache / "inputs.json")
    key = f"file|{path}"
    hit = sc.get(key)
    if hit is None:
        try:
            b3, sha = file_digests(path)
        except OSError as exc:
            raise SourceError(f"cannot read input {path}: {exc}") from exc
        hit = [b3, sha]
        sc.put(key, hit, [path])
    return str(hit[0]), str(hit[1])


def _extract(archive: Path, suffix: str, dest: Path) -> None:
    """Unpack ``archive`` into ``dest`` (absent), atomically: a temp dir renamed at the end."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        if suffix == ".zip":
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise SourceError(f"{archive}: unsafe member {member!r}")
                zf.extractall(tmp)
        elif suffix == ".tar.zst":
            import zstandard

            with (
                open(archive, "rb") as f,
                zstandard.ZstdDecompressor().stream_reader(f) as r,
                tarfile.open(fileobj=r, mode="r|") as tf,
            ):
                tf.extractall(tmp, filter="data")
        else:
            with tarfile.open(archive, "r:*") as tf:
                tf.extractall(tmp, filter="data")
        for dirpath, dirnames, filenames in os.walk(tmp):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                if not os.path.islink(p):
                    mode = os.stat(p).st_mode
                    os.chmod(p, (mode | 0o444 | (0o111 if mode & 0o111 else 0)) & 0o755)
        os.replace(tmp, dest)
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise SourceError(f"cannot unpack input archive {archive}: {exc}") from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def download_path(spec: InputSpec, cache: Path) -> Path:
    """Return where the archive of a ``url`` input is kept once fetched (named by its sha256)."""
    assert spec.url is not None and spec.sha256 is not None
    suffix = archive_suffix(spec.url.split("?")[0]) or ".tar.gz"
    return cache / layout.SOURCES_INPUTS / layout.INPUTS_ARCHIVES / f"{spec.sha256}{suffix}"


class DigestMismatchError(SourceError):
    """A download's sha256 is not the one it was expected to have (nothing was kept)."""

    def __init__(self, url: str, got: str, want: str) -> None:
        super().__init__(f"{url} has sha256 {got}, expected {want}")
        self.url, self.got, self.want = url, got, want


def fetch_verified(
    url: str,
    directory: Path,
    fetcher: UrlFetcher,
    *,
    name: Callable[[str], str],
    sha256: str | None = None,
) -> tuple[Path, str]:
    """Download ``url`` into ``directory`` atomically (a temp file there, fsynced, renamed to
    ``name(its sha256)``) and return (the file, its sha256). With ``sha256`` given, other bytes
    raise :class:`DigestMismatchError` and nothing is kept."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".dl-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            fetcher.fetch(url, out)
            out.flush()
            os.fsync(out.fileno())
        got = file_sha256(tmp)
        if sha256 is not None and got != sha256.lower():
            raise DigestMismatchError(url, got, sha256)
        target = directory / name(got)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target, got


def _fetch_archive(spec: InputSpec, cache: Path, fetcher: UrlFetcher) -> tuple[Path, str]:
    """Download ``spec.url`` into the archive cache; return (its path, its sha256). A declared
    sha256 must match (else nothing is kept); an undeclared one is what ``lock`` records."""
    assert spec.url is not None
    try:
        return fetch_verified(
            spec.url,
            cache / layout.SOURCES_INPUTS / layout.INPUTS_ARCHIVES,
            fetcher,
            name=lambda sha: download_path(replace(spec, sha256=sha), cache).name,
            sha256=spec.sha256,
        )
    except DigestMismatchError as exc:
        raise SourceError(
            f"inputs.{spec.name}: {spec.url} has sha256 {exc.got}, the recipe expects {exc.want}"
        ) from None


def prefetch_input(spec: InputSpec, *, cache: Path, fetcher: UrlFetcher) -> str:
    """``lock``'s half of an unlocked ``url`` input (like ``nix-prefetch-url``): download it,
    keep it in the archive cache (realize will not download it again) and return its sha256."""
    return _fetch_archive(spec, cache, fetcher)[1]


def _download(spec: InputSpec, cache: Path, fetcher: UrlFetcher | None) -> Path:
    assert spec.url is not None
    if spec.sha256 is None:
        raise UnlockedInputError(spec)
    target = download_path(spec, cache)
    if target.exists():
        return target
    if fetcher is None:
        raise NotFetchedError(f"inputs.{spec.name}: {spec.url} has not been fetched yet")
    return _fetch_archive(spec, cache, fetcher)[0]


def resolve_input(spec: InputSpec, *, cache: Path, fetcher: UrlFetcher | None) -> ResolvedInput:
    """Identify ``spec`` (hash a directory, or fetch, check and unpack an archive)."""
    where = f"inputs.{spec.name}"
    if spec.path is not None:
        try:
            os.stat(spec.path)
        except FileNotFoundError:
            pass  # reported below, as before
        except OSError as exc:  # a name too long, a loop of links, no permission
            raise SourceError(f"{where}.path: {spec.path}: {exc.strerror or exc}") from exc
    if spec.path is not None and spec.path.is_dir():
        digest = tree_digest(spec.path, cache=cache)
        host, kind = spec.path, "tree"
    else:
        if spec.path is not None:
            if not spec.path.is_file():
                raise SourceError(f"{where}.path: {spec.path} does not exist")
            archive = spec.path
        else:
            archive = _download(spec, cache, fetcher)
        suffix = archive_suffix(archive.name) or archive_suffix(spec.url or "")
        if suffix is None:
            raise SourceError(
                f"{where}: {archive.name} is neither a directory nor an archive ("
                + ", ".join(_ARCHIVE_SUFFIXES)
                + ")"
            )
        b3, sha = _digest_file(archive, cache)
        if spec.sha256 is not None and sha != spec.sha256:
            raise SourceError(
                f"{where}: {archive} has sha256 {sha}, the recipe expects {spec.sha256}"
            )
        host = cache / layout.SOURCES_INPUTS / layout.INPUTS_UNPACKED / b3[:32]
        if not host.is_dir():
            _extract(archive, suffix, host)
        digest, kind = b3, "archive"
    if spec.subdir is not None and not (host / spec.subdir).is_dir():
        raise SourceError(f"{where}.subdir: {spec.subdir!r} is not a directory in the input")
    return ResolvedInput(
        name=spec.name,
        env=spec.env,
        kind=kind,
        digest=f"blake3:{digest}",
        host=host,
        subdir=spec.subdir,
        sha256=None if kind == "tree" else sha,
        crates=spec.crates,
    )


def input_sha256(inp: ResolvedInput, *, cache: Path) -> str:
    """Return the sha256 of an input: of the archive bytes, or of a tree's listing."""
    if inp.sha256 is not None:
        return inp.sha256
    from rocmforge.sources.tree import tree_sha256

    return tree_sha256(inp.host, cache=cache)


def resolve_inputs(
    specs: Mapping[str, InputSpec], *, cache: Path, fetcher: UrlFetcher | None
) -> tuple[ResolvedInput, ...]:
    """Resolve every ``[inputs.NAME]`` of a recipe, sorted by name."""
    return tuple(resolve_input(specs[n], cache=cache, fetcher=fetcher) for n in sorted(specs))
