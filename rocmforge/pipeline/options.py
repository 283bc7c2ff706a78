"""The options of one ``rocmforge realize``: one frozen value, one spelling as child arguments.

:class:`RealizeOptions` is made once from the command line and the configuration
(:func:`rocmforge.cli.commands.realize.options_of`) and passed as it is to
:func:`rocmforge.pipeline.realize.realize`, to :func:`rocmforge.pipeline.graph.realize_graph`
and, as :meth:`RealizeOptions.to_argv` of :meth:`RealizeOptions.for_child`, to every child
``rocmforge realize``: the local ones of ``-j N`` and the Slurm jobs alike. Parsing
``to_argv()`` again gives the same options back.

Imports only :mod:`dataclasses` and :mod:`typing` (the realize hit path loads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rocmforge.trust.signing import PublicKey

#: Seconds between two heartbeat lines off a terminal (``realize --heartbeat``).
HEARTBEAT_SECONDS = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RealizeOptions:
    """Every option of ``realize`` that says how its nodes are realized.

    The substitution fields hold the settings as resolved once (flags over the environment over
    the configuration files), so a child told them reads no other project file.
    """

    #: ``--sandbox`` as given (None: ``auto``); :attr:`level` is the weakest level accepted.
    sandbox: str | None = None
    #: ``--keep-failed``: keep the build directory of a failed build.
    keep_failed: bool = False
    #: ``--verify``: re-hash a cached entry's wheels before returning them.
    verify: bool = False
    #: False with ``--no-compiler-cache`` (never changes the hash).
    compiler_cache: bool = True
    #: ``-v``: echo build output off a terminal.
    verbose: bool = False
    #: ``--heartbeat``: seconds between progress lines off a terminal (0: never).
    heartbeat: float = HEARTBEAT_SECONDS
    #: The project configuration file read (``--config``; '' when none was).
    config: str = ""
    #: Whether binary caches are asked (``--substitute``/``--no-substitute``, or configured).
    substitute: bool = True
    #: The caches asked on a miss, in order (none when :attr:`substitute` is off).
    caches: tuple[str, ...] = ()
    #: Fail instead of building when no cache provides a missing entry.
    require_substitute: bool = False
    #: The keys a substituted entry must be signed with (None: none asked, or the default
    #: file). Derived from the configuration and the environment, which a child reads again:
    #: never an argument, and not compared.
    trusted: Mapping[str, PublicKey] | None = field(default=None, compare=False, repr=False)
    #: ``--push CACHE``: push every entry realized there afterwards.
    push: str | None = None
    #: ``--check``: rebuild the cached targets and compare, publishing nothing.
    check: bool = False
    #: ``-o LINK``: the result link of the first target (LINK-2, LINK-3 ... for the others).
    out_link: str | None = None
    #: ``-j N``: independent nodes built at once, each by a child realize.
    jobs: int = 1
    #: ``--keep-going``: after a failure, still build what does not depend on it.
    keep_going: bool = False
    #: ``--stall-after D``: warn after D seconds without a finished edge (None: 5x the previous
    #: build's longest edge, at least 10 minutes).
    stall_after: float | None = None
    #: ``--stall-timeout D``: fail a build step after D seconds without a finished edge.
    stall_timeout: float | None = None

    @property
    def level(self) -> str:
        """The weakest sandbox level a realize accepts: ``none`` only when asked for."""
        return "none" if self.sandbox == "none" else "bwrap"

    def for_child(self) -> RealizeOptions:
        """The options of a child realize of one node: how to realize it, without the graph's
        own options (jobs, keep-going, links, push, check), which the parent carries out."""
        return replace(
            self, jobs=1, keep_going=False, out_link=None, push=None, check=False
        )

    def to_argv(self) -> list[str]:
        """These options as ``realize`` arguments (the one place a child's command line is
        spelled); a default is left out, except the substitution settings, always given so a
        child resolves none of its own."""
        argv: list[str] = []
        if self.sandbox is not None:
            argv += ["--sandbox", self.sandbox]
        if self.keep_failed:
            argv.append("--keep-failed")
        if self.verify:
            argv.append("--verify")
        if not self.compiler_cache:
            argv.append("--no-compiler-cache")
        if self.verbose:
            argv.append("-v")
        if self.heartbeat != HEARTBEAT_SECONDS:
            argv += ["--heartbeat", repr(self.heartbeat)]
        # the settings resolved here, so a child reads no other project file
        argv += ["--config", self.config]
        argv.append("--substitute" if self.substitute else "--no-substitute")
        for url in self.caches:
            argv += ["--cache", url]
        if self.require_substitute:
            argv.append("--require-substitute")
        if self.push is not None:
            argv += ["--push", self.push]
        if self.check:
            argv.append("--check")
        if self.out_link is not None:
            argv += ["-o", self.out_link]
        if self.jobs != 1:
            argv += ["-j", str(self.jobs)]
        if self.keep_going:
            argv.append("--keep-going")
        if self.stall_after is not None:
            argv += ["--stall-after", f"{self.stall_after!r}s"]
        if self.stall_timeout is not None:
            argv += ["--stall-timeout", f"{self.stall_timeout!r}s"]
        return argv
