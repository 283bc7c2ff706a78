"""AOTriton, the library behind PyTorch's flash / memory-efficient attention on ROCm: which release
a torch version expects and the upstream release assets a recipe declares as ``[inputs]``.

Torch's ``cmake/External/aotriton.cmake`` pins one AOTriton release and, unless
``AOTRITON_INSTALLED_PREFIX`` names a preinstalled one, downloads it at configure time from
``https://github.com/ROCm/aotriton/releases/download/<ver>/`` (checking a sha256 it lists). The
sandbox has no network, so a recipe declares those assets as ``[inputs]`` (``url`` + ``sha256``).
Since AOTriton 0.11b the assets are split: one *runtime* per ROCm major.minor
(``aotriton-<ver>-<manylinux>_x86_64-rocm<M.m>-shared.tar.gz``) and one *image* pack of GPU kernels
per arch family (``aotriton-<ver>-images-amd-<family>.tar.gz``); both unpack under ``aotriton/``.

The table holds only releases read from a torch tree (``source`` says where); a torch version not
in it is linted without version facts (docs/lints.md, RF161-RF164).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

BASE_URL = "https://github.com/ROCm/aotriton/releases/download/"
ARCHIVE_Z = "gz"

#: An AOTriton release asset's file name: version, then either the image family or the runtime's
#: ROCm version (``aotriton-0.13b-images-amd-gfx942.tar.gz``,
#: ``aotriton-0.13b-manylinux_2_28_x86_64-rocm7.15-shared.tar.gz``).
ASSET = re.compile(
    r"^aotriton-(?P<version>[0-9][^-+]*)(?P<variant>\+\w+)?-"
    r"(?:images-(?P<image>amd-gfx\w+)|(?P<manylinux>manylinux_\d+_\d+)_(?P<arch>\w+?)-"
    r"rocm(?P<rocm>\d+\.\d+)-shared)\.tar\.(?:gz|xz|bz2)$"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Asset:
    """One AOTriton release asset named by its file name (see :data:`ASSET`)."""

    version: str
    image: str | None = None  # "amd-gfx942" for an image pack
    rocm: str | None = None  # "7.15" for a runtime

    @property
    def is_runtime(self) -> bool:
        """True for a runtime (``...-rocmM.m-shared``), False for an image pack."""
        return self.rocm is not None


def parse_asset(url_or_name: str) -> Asset | None:
    """Return what an AOTriton asset's URL or file name says, or None for any other file."""
    name = url_or_name.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
    m = ASSET.match(name)
    if m is None:
        return None
    return Asset(version=m["version"], image=m["image"], rocm=m["rocm"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """An AOTriton release as one torch tree pins it (``cmake/External/aotriton.cmake``)."""

    version: str
    commit: str
    manylinux: str
    #: ROCm major.minor -> sha256 of that runtime tarball
    runtimes: Mapping[str, str]
    #: image family (``amd-gfx942``) -> sha256 of that image pack; empty before the 0.11b split
    images: Mapping[str, str] = field(default_factory=dict)
    #: where these values were read
    source: str = ""

    def runtime_name(self, rocm: str) -> str:
        """The runtime tarball's file name for ROCm ``rocm`` (major.minor)."""
        return f"aotriton-{self.version}-{self.manylinux}_x86_64-rocm{rocm}-shared.tar.{ARCHIVE_Z}"

    def image_name(self, image: str) -> str:
        """The image pack's file name for ``image`` (``amd-gfx942``)."""
        return f"aotriton-{self.version}-images-{image}.tar.{ARCHIVE_Z}"

    def url(self, file_name: str) -> str:
        """The upstream download URL of ``file_name``."""
        return f"{BASE_URL}{self.version}/{file_name}"

    def image_for(self, arch: str) -> str | None:
        """The image family that holds kernels for ``arch`` (as aotriton.cmake matches them:
        ``amd-gfx110x`` covers gfx1100-gfx1103), or None when AOTriton has none for it."""
        base = arch.split(":", 1)[0]
        for image in self.images:
            if re.match(image.removeprefix("amd-").replace("x", "."), base):
                return image
        return None


#: AOTriton 0.13b as pinned for torch 2.14 (ROCm/pytorch release/2.13 and release/2.14, TheRock's
#: build_prod_wheels tests; pytorch/pytorch "[ROCm] Bump AOTriton to 0.13b", July 2026, before the
#: 2.14 branch cut on 2026-08-10). Values from that tree's cmake/External/aotriton.cmake.
AOTRITON_0_13B = Release(
    version="0.13b",
    commit="6e00ef3e335b45dfb49065259533b59c68995bfe",
    manylinux="manylinux_2_28",
    runtimes={
        "6.4": "2fafa80953d9a49bd20e794bb8c0e1646e8aa815be2fb161deaa849a47547b17",
        "7.0": "7409f7c974cc79be731a419818bdb2ed6b8a3640fd40665baa76ec3c2a537204",
        "7.1": "f061a997679d8529a7b196b0ffb39912145ede217e515e1ee9ef5673b56d9e41",
        "7.2": "1cdeebb7ef61ab691fba1d81da919b9db5d8bef28269c892a30bd13a0495b7a0",
        "7.14": "7a139797c16b002fd5d9bcd706d36dc9819bb108877150f8186da21d0590eaa6",
        "7.15": "f024225d8b6063f7d95974e5957cb20893a1579a9a73b22b60426441331bc021",
    },
    images={
        "amd-gfx90a": "a3d1a6868ce290ba8118618207093e785252eff4e18a64f495752cb5a03ffed6",
        "amd-gfx942": "ccdbc7e3d96839be4895ee004f21531cc55d590c9018937b9e314bba363b3927",
        "amd-gfx950": "518fd072eb05948fc0a6c25a20832591c6406df865e3b691a2aeff3fd4c5ce1d",
        "amd-gfx110x": "efe773e7a2c8adc995d90ecd0daca2db801285445ee10432df2b29c67d5b11d2",
        "amd-gfx115x": "1bc50e8aa8b6bda3410e92886ccca8fd45df3e60a6cbda9ffc58b2c541efd5c2",
        "amd-gfx120x": "6a465dbc03148bba8a2d78c4c2a3cb83155eca00f4f7f749e676402d7660968c",
        "amd-gfx1250": "4aaf71d6e510549d593757e5f88598df1e4a29cbcd91f70750ee8a76f65c027f",
    },
    source="cmake/External/aotriton.cmake of the torch 2.14 tree (AOTriton 0.13b)",
)

#: torch major.minor -> the AOTriton release its tree pins. Only releases read from a tree.
BY_TORCH: dict[tuple[int, int], Release] = {(2, 14): AOTRITON_0_13B}


def for_torch(release: tuple[int, ...]) -> Release | None:
    """The AOTriton release torch ``release`` (its version's release numbers) expects, if known."""
    if len(release) < 2:
        return None
    return BY_TORCH.get((release[0], release[1]))


def newest_up_to(release: tuple[int, ...]) -> tuple[tuple[int, int], Release] | None:
    """The newest release in :data:`BY_TORCH` pinned by a torch no newer than ``release``, with
    that torch's major.minor; None when every known one is newer. RF162 judges the archs of a
    torch whose own release was not read against it (AOTriton adds archs, e.g. amd-gfx950 in
    0.13b, and has dropped none in the releases read here)."""
    known = [k for k in BY_TORCH if k <= tuple(release[:2])]
    if not known:
        return None
    key = max(known)
    return key, BY_TORCH[key]


def rocm_minor(version: str | None) -> str | None:
    """``"7.15"`` for ``"7.15.0"`` / ``"7.15.0a20260713"``; None for no or an unreadable version."""
    if not version:
        return None
    m = re.match(r"^(\d+)\.(\d+)", version)
    return f"{m[1]}.{m[2]}" if m else None


def inputs_toml(release: Release, rocm: str, archs: list[str]) -> str:
    """The ``[inputs]`` tables that declare ``release`` for ROCm ``rocm`` (major.minor) and the
    image packs of ``archs``: the runtime as ``aotriton-runtime`` and one ``aotriton-<family>`` per
    family, each unpacking under ``aotriton/`` (docs/recipes.md shows the step that merges them)."""
    out = []
    if rocm in release.runtimes:
        name = release.runtime_name(rocm)
        out.append(
            f'[inputs.aotriton-runtime]\nurl = "{release.url(name)}"\n'
            f'sha256 = "{release.runtimes[rocm]}"\nenv = "AOTRITON_RUNTIME"\nsubdir = "aotriton"\n'
        )
    seen: set[str] = set()
    for arch in archs:
        image = release.image_for(arch)
        if image is None or image in seen:
            continue
        seen.add(image)
        family = image.removeprefix("amd-")
        out.append(
            f'[inputs.aotriton-{family}]\nurl = "{release.url(release.image_name(image))}"\n'
            f'sha256 = "{release.images[image]}"\nenv = "AOTRITON_IMAGES_{family.upper()}"\n'
            'subdir = "aotriton"\n'
        )
    return "\n".join(out)
