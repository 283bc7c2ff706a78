"""``rocmforge doctor --comm``: will NCCL/RCCL find its peers here, and where does it stop?

Static checks first, each a :class:`Finding` (``error``: NCCL stops or cannot reach its peers;
``warning``: it runs, slower or not as meant; ``note``):

- the network interfaces (:mod:`rocmforge.accept.netif`) and which of them
  ``NCCL_SOCKET_IFNAME`` selects, computed as NCCL computes it (:func:`parse_iflist`,
  :func:`choose`), and NCCL's own choice when it is unset;
- ``NCCL_NET_PLUGIN`` (and ``RCCL_NET_PLUGIN``) against the library files, ``NCCL_IB_HCA``
  against ``/sys/class/infiniband``, ``NCCL_P2P_DISABLE``/``NCCL_SHM_DISABLE`` values;
- ``/dev/shm`` free space, and the GPUs visible (:mod:`rocmforge.accept.devices`).

Then, given an interpreter with torch, a timed run (:func:`timed_run`): the comm tier's own
script (``comm_script.py``: ``init_process_group``, an ``all_reduce`` checked for the right
sum, a one-size sweep of 8 B) at world size = the visible GPUs, through the acceptance runner
(:func:`rocmforge.accept.run.run_script`: the sandbox, the GPUs bound) with ``NCCL_DEBUG=INFO``,
killed at one deadline for the whole run. Its output is read for the stage it reached
(:data:`STAGES`, :func:`read_stage`, from NCCL's and RCCL's own INFO lines) and the report ends
with one line on what to change (:func:`advise`). Nothing here prints.

NCCL's rules, as read in its source (NVIDIA/nccl, src/misc/socket.cc ``ncclFindInterfaces`` and
``findInterfaces`` — ``src/os/linux.cc`` ``ncclOsFindInterfaces`` from 2.29 —, src/misc/utils.cc
``parseStringList``/``matchIfList``; RCCL's copies in ROCm/rccl are the pre-2.28 ones):

- ``NCCL_SOCKET_IFNAME`` counts only when it is 2 characters or longer (``strlen(env) > 1``);
  a leading ``^`` excludes, then a leading ``=`` matches whole names; the rest is split at
  commas, empty items dropped, an item's ``:PORT`` tail cut off (read as a port), at most 16
  items (``MAX_IFS``); an item matches a name it is a prefix of (``strncmp`` over the item's
  length), or, with ``=``, the name itself.
- Only interfaces with an IPv4 or IPv6 address count (``getifaddrs``), IPv6 loopback skipped,
  in ``getifaddrs`` order (IPv4 addresses first, then IPv6), each interface once; the bootstrap
  takes the first (``maxIfs`` 1), ``NET/Socket`` up to 16. ``NCCL_SOCKET_FAMILY=AF_INET`` or
  ``AF_INET6`` keeps one family.
- Unset, NCCL tries in turn: ``ib`` (prefix), an interface in the subnet of ``NCCL_COMM_ID``,
  ``^docker,lo`` (anything but docker* and lo), ``docker``, then ``lo``. NCCL 2.28 and later
  also skip interfaces that are not running (``IFF_RUNNING``) and treat ``virbr`` like
  ``docker`` (``^docker,lo,virbr``, then ``docker``, ``lo``, ``virbr``): :data:`CURRENT`;
  RCCL and older NCCL: :data:`LEGACY`.
- ``NCCL_NET_PLUGIN`` (src/plugin/net.cc, plugin_open.cc): a comma list; ``none`` turns
  plugins off; each name is ``dlopen``-ed as given, then, unless it is a path or a
  ``lib*.so`` name, as ``libnccl-net-NAME.so`` (RCCL: ``librccl-net-NAME.so``); a plugin that
  does not load is skipped for the internal IB and socket transports (an INFO line, no error).
  RCCL reads ``NCCL_NET_PLUGIN`` too; ``RCCL_NET_PLUGIN`` is not read by its loader.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rocmforge.accept.devices import GpuDevices, find_devices, visible_count
from rocmforge.accept.netif import Address, Interface, NetInterfaces, read_interfaces
from rocmforge.build.sandbox import Mount, Runner, RunResult
from rocmforge.errors import UsageError

ERROR, WARNING, NOTE = "error", "warning", "note"
#: where a timed run can stop, in order (``done``: the all_reduce returned)
STAGES = ("import", "rendezvous", "bootstrap", "transport setup", "first collective", "done")
#: the free space under which /dev/shm is flagged (Docker's default is 64 MiB)
SHM_MIN = 1 << 30
#: NCCL's MAX_IFS: the items of an interface list it reads
MAX_IFS = 16
#: the NCCL debug subsystems the timed run shows (src/debug.cc; BOOTSTRAP since NCCL 2.21,
#: ignored by older ones)
DEBUG_SUBSYS = "INIT,NET,BOOTSTRAP,ENV"
DEFAULT_TIMEOUT = 60.0
#: the lines of the NCCL log a report keeps
TAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the doctor found: severity (error, warning, note), what it is about (a
    variable, ``/dev/shm``, an interface), what is wrong and what to change."""

    severity: str
    topic: str
    text: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        """The finding as JSON."""
        return {"severity": self.severity, "topic": self.topic, "text": self.text,
                "fix": self.fix}  # fmt: skip


# --- interface lists (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) ---------------------------------------


@dataclass(frozen=True, slots=True)
class IfList:
    """An interface list as NCCL reads it: exclusion (leading ``^``), exact names (then a
    leading ``=``), the items (prefix, port or None), and what is wrong with how it is
    written (``problems``: NCCL reads it, but not as the writer meant; ``warnings``)."""

    raw: str
    exclude: bool
    exact: bool
    items: tuple[tuple[str, int | None], ...]
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def matches(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL keeps ``name`` (``matchIfList(...) ^ searchNot``); an empty list
        matches everything (so ``^`` alone keeps nothing)."""
        hit = not self.items or any(
            (name == p if self.exact else name.startswith(p))
            and (port is None or q is None or port == q)
            for p, q in self.items
        )
        return hit != self.exclude

    def describe(self) -> str:
        """The list in words: ``prefixes eth, ib`` / ``all but exactly lo``."""
        names = ", ".join(p + (f":{q}" if q is not None else "") for p, q in self.items)
        how = ("exactly " if self.exact else "prefixes ") + (names or "(none)")
        return ("all but " + how) if self.exclude else how

    def to_json(self) -> dict[str, Any]:
        """The list as JSON."""
        return {"raw": self.raw, "exclude": self.exclude, "exact": self.exact,
                "items": [[p, q] for p, q in self.items], "problems": list(self.problems),
                "warnings": list(self.warnings)}  # fmt: skip


def parse_iflist(raw: str, *, ports: bool = False) -> IfList:
    """Parse ``raw`` as NCCL's ``findInterfaces`` and ``parseStringList`` do, and say what in
    it NCCL would read otherwise than meant: an empty item, a ``^`` or ``=`` that is not
    leading (NCCL matches it as a character of a name), blanks, more than 16 items, a ``:PORT``
    (for ``NCCL_SOCKET_IFNAME``, where the port is ignored: ``ports=False``)."""
    text = raw
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    problems: list[str] = []
    warnings: list[str] = []
    items: list[tuple[str, int | None]] = []
    pieces = text.split(",")
    for n, piece in enumerate(pieces):
        name, colon, rest = piece.partition(":")
        if not name:
            if colon:
                problems.append(f"item {n + 1} ({piece!r}) has no name before its ':'")
            elif len(pieces) == 1:
                problems.append("the list is empty after its leading ^/=" if raw else
                                "the list is empty")  # fmt: skip
            else:
                problems.append(f"item {n + 1} is empty (two commas, or a comma at an end)")
            continue
        port: int | None = None
        if colon:
            digits = re.match(r"\s*[+-]?\d+", rest)
            port = int(digits.group()) if digits else 0  # atoi
            if not ports:
                warnings.append(f"item {piece!r}: NCCL reads ':{rest}' as a port and ignores "
                                f"it for interfaces; the item matches like {name!r}")  # fmt: skip
        for ch in "^=":
            if ch in name:
                problems.append(f"item {name!r} holds {ch!r}: NCCL reads one leading ^ "
                                "(exclude), then one leading = (exact), for the whole list; "
                                f"a {ch} anywhere else is matched as a character of a name")
        if name != name.strip() or any(c.isspace() for c in name):
            problems.append(f"item {name!r} holds a blank: NCCL matches it literally, so it "
                            "matches no interface")  # fmt: skip
        items.append((name, port))
    if len(items) > MAX_IFS:
        warnings.append(f"{len(items)} items: NCCL reads the first {MAX_IFS} and ignores the "
                        f"rest ({', '.join(p for p, _ in items[MAX_IFS:])})")  # fmt: skip
        items = items[:MAX_IFS]
    return IfList(raw, exclude, exact, tuple(items), tuple(problems), tuple(warnings))


# --- NCCL's interface choice -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rules:
    """How a version line of NCCL/RCCL picks interfaces: only running ones or any with an
    address, and the lists it tries in turn when ``NCCL_SOCKET_IFNAME`` is unset."""

    name: str
    running_only: bool
    defaults: tuple[str, ...]


#: NCCL 2.28 and later (src/misc/socket.cc, src/os/linux.cc): running interfaces only
CURRENT = Rules("NCCL >= 2.28", True, ("^docker,lo,virbr", "docker", "lo", "virbr"))
#: RCCL (ROCm/rccl src/misc/socket.cc) and NCCL before 2.28: any interface with an address
LEGACY = Rules("RCCL, NCCL < 2.28", False, ("^docker,lo", "docker", "lo"))


@dataclass(frozen=True, slots=True)
class Choice:
    """The interfaces NCCL takes under ``rules``: how (``NCCL_SOCKET_IFNAME=...`` or the
    default step that found some), the names in NCCL's order, and the bootstrap one (the
    first) with its address."""

    rules: str
    how: str
    chosen: tuple[str, ...]
    bootstrap: str | None = None
    bootstrap_address: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The choice as JSON."""
        return {"rules": self.rules, "how": self.how, "chosen": list(self.chosen),
                "bootstrap": self.bootstrap,
                "bootstrap_address": self.bootstrap_address}  # fmt: skip


def getifaddrs_order(
    interfaces: Sequence[Interface], family: int | None = None
) -> list[tuple[Interface, Address]]:
    """The (interface, address) pairs NCCL walks, in ``getifaddrs`` order: every IPv4 address
    by interface index, then the IPv6 ones; IPv6 loopback left out (as NCCL does), one family
    when ``family`` (4 or 6) is forced."""
    out = []
    for fam in (4, 6):
        if family is not None and fam != family:
            continue
        for iface in sorted(interfaces, key=lambda i: i.index):
            for addr in iface.addresses:
                if addr.family == fam and not (fam == 6 and addr.loopback):
                    out.append((iface, addr))
    return out


def _find(
    spec: IfList, entries: Sequence[tuple[Interface, Address]], rules: Rules
) -> list[tuple[Interface, Address]]:
    found: list[tuple[Interface, Address]] = []
    for iface, addr in entries:
        if rules.running_only and not iface.running:
            continue
        if spec.matches(iface.name) and all(i.name != iface.name for i, _ in found):
            found.append((iface, addr))
    return found[:MAX_IFS]


def _comm_id_address(comm_id: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    host = comm_id.rsplit(":", 1)[0].strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def choose(
    interfaces: Sequence[Interface],
    ifname: str | None,
    rules: Rules,
    *,
    family: int | None = None,
    comm_id: str | None = None,
) -> Choice:
    """The interfaces NCCL takes under ``rules`` with ``NCCL_SOCKET_IFNAME=ifname`` (None:
    unset), as :func:`ncclFindInterfaces` does (see the module's docstring)."""
    entries = getifaddrs_order(interfaces, family)

    def done(how: str, found: Sequence[tuple[Interface, Address]]) -> Choice:
        first = found[0] if found else None
        return Choice(rules.name, how, tuple(i.name for i, _ in found),
                      first[0].name if first else None,
                      first[1].address if first else None)  # fmt: skip

    if ifname is not None and len(ifname) > 1:
        return done(f"NCCL_SOCKET_IFNAME={ifname}", _find(parse_iflist(ifname), entries, rules))
    found = _find(parse_iflist("ib"), entries, rules)
    if found:
        return done("default: ib* first", found)
    target = _comm_id_address(comm_id) if comm_id and len(comm_id) > 1 else None
    if target is not None:
        same = [(i, a) for i, a in entries
                if a.family == target.version and target in a.network()]  # fmt: skip
        if same:
            return done(f"default: the subnet of NCCL_COMM_ID={comm_id}", same[:1])
    for step in rules.defaults:
        found = _find(parse_iflist(step), entries, rules)
        if found:
            return done(f"default: {step}", found)
    return done("default: nothing found", [])


@dataclass(frozen=True, slots=True)
class IfaceView:
    """An interface as the report shows it: the interface, whether the list names it (its
    name matches), under which rules it is selected, whether it is the bootstrap interface,
    and a few words on why (not)."""

    interface: Interface
    named: bool
    selected_by: tuple[str, ...]
    bootstrap: bool
    note: str

    def to_json(self) -> dict[str, Any]:
        """The view as JSON."""
        return {**self.interface.to_json(), "named": self.named,
                "selected_by": list(self.selected_by), "bootstrap": self.bootstrap,
                "note": self.note}  # fmt: skip


# --- the report ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShmInfo:
    """``/dev/shm``: whether it exists, its free and total bytes."""

    path: str
    exists: bool
    free_bytes: int = 0
    total_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {"path": self.path, "exists": self.exists, "free_bytes": self.free_bytes,
                "total_bytes": self.total_bytes}  # fmt: skip


@dataclass(frozen=True, slots=True)
class DeviceView:
    """The GPUs: the stack found (rocm, cuda or None), the device nodes' GPU count, how many
    a process sees and why, and what was looked for."""

    kind: str | None
    found: int
    visible: int
    why: str
    looked_for: str

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {"kind": self.kind, "found": self.found, "visible": self.visible,
                "why": self.why, "looked_for": self.looked_for}  # fmt: skip


@dataclass(frozen=True, slots=True)
class StageReading:
    """What a run's output shows: the furthest stage (None: nothing of the run's own), the
    line that put it there, NCCL's version, its bootstrap interface and network, and the line
    that says why it failed (NCCL's own words, else the traceback's last line)."""

    stage: str | None
    evidence: str = ""
    nccl_version: str | None = None
    bootstrap: str | None = None
    network: str | None = None
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class CommRun:
    """The timed run: its status (``passed``, ``failed``, ``timed out``, ``skipped``,
    ``no gpu``), the stage it reached, why (``detail``), its world size and seconds, what
    NCCL said (version, bootstrap interface, network, failure line), the last lines of its
    log and where the log is, the sandbox, and the ``NCCL_SOCKET_IFNAME`` it ran with when
    that differs from the caller's."""

    status: str
    detail: str
    stage: str | None = None
    world_size: int = 0
    seconds: float = 0.0
    timeout: float = 0.0
    nccl_version: str | None = None
    bootstrap: str | None = None
    network: str | None = None
    failure: str | None = None
    tail: tuple[str, ...] = ()
    log: str | None = None
    sandbox: str | None = None
    ifname_used: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the run passed (or was not asked for)."""
        return self.status in ("passed", "skipped")

    def to_json(self) -> dict[str, Any]:
        """As JSON."""
        return {"status": self.status, "detail": self.detail, "stage": self.stage,
                "world_size": self.world_size, "seconds": round(self.seconds, 3),
                "timeout": self.timeout, "nccl_version": self.nccl_version,
                "bootstrap": self.bootstrap, "network": self.network,
                "failure": self.failure, "tail": list(self.tail), "log": self.log,
                "sandbox": self.sandbox, "ifname_used": self.ifname_used}  # fmt: skip


@dataclass(frozen=True, slots=True)
class CommReport:
    """Everything ``doctor --comm`` found, and the one line of advice."""

    interfaces: tuple[IfaceView, ...]
    ifname: IfList | None
    choices: tuple[Choice, ...]
    findings: tuple[Finding, ...]
    shm: ShmInfo
    devices: DeviceView
    nodes: int
    run: CommRun
    advice: str
    sysfs_warning: str | None = None
    variables: Mapping[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """3 when a run was asked for and no GPU is visible; 1 when something stops NCCL
        (an error) or the run failed or hung; else 0."""
        if self.run.status == "no gpu":
            return 3
        if any(f.severity == ERROR for f in self.findings) or not self.run.ok:
            return 1
        return 0

    def to_json(self) -> dict[str, Any]:
        """The report as JSON (``doctor --comm --json``)."""
        return {"interfaces": [v.to_json() for v in self.interfaces],
                "socket_ifname": self.ifname.to_json() if self.ifname else None,
                "choices": [c.to_json() for c in self.choices],
                "findings": [f.to_json() for f in self.findings], "shm": self.shm.to_json(),
                "devices": self.devices.to_json(), "nodes": self.nodes,
                "run": self.run.to_json(), "advice": self.advice,
                "sysfs_warning": self.sysfs_warning, "variables": dict(self.variables),
                "exit_code": self.exit_code}  # fmt: skip


# --- the checks ------------------------------------------------------------------------------


def _family(environ: Mapping[str, str], findings: list[Finding]) -> int | None:
    value = environ.get("NCCL_SOCKET_FAMILY")
    if value is None:
        return None
    if value in ("AF_INET", "AF_INET6"):
        return 4 if value == "AF_INET" else 6
    findings.append(Finding(WARNING, "NCCL_SOCKET_FAMILY",
                            f"NCCL_SOCKET_FAMILY={value}: NCCL knows only AF_INET and AF_INET6 "
                            "and ignores anything else (both families are used)",
                            "set AF_INET or AF_INET6, or unset it"))  # fmt: skip
    return None


def usable_interfaces(nets: NetInterfaces) -> list[str]:
    """The interfaces to suggest: running, with an address, fit for a bootstrap across nodes
    when there are such (else any running one with an address)."""
    up = [i for i in nets.interfaces if i.addresses and i.running]
    return [i.name for i in up if i.bootstrap_fit] or [i.name for i in up]


def check_interfaces(
    nets: NetInterfaces, environ: Mapping[str, str], nodes: int
) -> tuple[IfList | None, tuple[Choice, ...], tuple[IfaceView, ...], list[Finding]]:
    """``NCCL_SOCKET_IFNAME`` (and ``NCCL_SOCKET_FAMILY``, ``NCCL_COMM_ID``) against the
    interfaces: the parsed list, NCCL's choice under each :class:`Rules`, a view of each
    interface, and the findings (see the module's docstring for the rules)."""
    findings: list[Finding] = []
    raw = environ.get("NCCL_SOCKET_IFNAME")
    family = _family(environ, findings)
    comm_id = environ.get("NCCL_COMM_ID")
    ifaces = nets.interfaces
    spec = parse_iflist(raw) if raw is not None and len(raw) > 1 else None
    if raw is not None and spec is None:
        findings.append(Finding(WARNING, "NCCL_SOCKET_IFNAME",
                                f"NCCL_SOCKET_IFNAME={raw!r} is ignored: NCCL reads it only "
                                "when it has 2 characters or more, and picks its default",
                                "unset it, or name an interface"))  # fmt: skip
    if spec is not None:
        for problem in spec.problems:
            findings.append(Finding(ERROR, "NCCL_SOCKET_IFNAME",
                                    f"NCCL_SOCKET_IFNAME={raw}: {problem}",
                                    "write it as NCCL reads it: [^][=]name[,name...], e.g. "
                                    "NCCL_SOCKET_IFNAME=^docker,lo or =eth0"))  # fmt: skip
        for warning in spec.warnings:
            findings.append(Finding(WARNING, "NCCL_SOCKET_IFNAME",
                                    f"NCCL_SOCKET_IFNAME={raw}: {warning}"))  # fmt: skip
    setting = raw if spec is not None else None
    choices = tuple(choose(ifaces, setting, r, family=family, comm_id=comm_id)
                    for r in (CURRENT, LEGACY))  # fmt: skip
    by = nets.by_name()
    usable = usable_interfaces(nets)
    # nothing selected
    empty = [c for c in choices if not c.chosen]
    if empty:
        which = " and ".join(c.rules for c in empty)
        if setting is not None:
            named = [i for i in ifaces if spec is not None and spec.matches(i.name)]
            why = _why_not(named, spec)
            findings.append(Finding(ERROR, "NCCL_SOCKET_IFNAME",
                                    f"NCCL_SOCKET_IFNAME={setting} selects no interface NCCL "
                                    f"can use ({which}){why}: NCCL stops with \"Bootstrap : "
                                    "no socket interface found\"",
                                    "set NCCL_SOCKET_IFNAME to an interface that is up and has "
                                    f"an address: {', '.join(usable) or 'none here'}"))
        else:
            findings.append(Finding(ERROR, "interfaces",
                                    f"no interface has an address NCCL can use ({which}), not "
                                    "even lo: NCCL stops with \"Bootstrap : no socket "
                                    "interface found\"",
                                    "bring lo up and give the interface of the nodes' network "
                                    "an address"))  # fmt: skip
    # selected but not running: RCCL and older NCCL take it
    legacy = next(c for c in choices if c.rules == LEGACY.name)
    for name in legacy.chosen:
        iface = by[name]
        if iface.running:
            continue
        across = nodes > 1
        findings.append(Finding(
            ERROR if across else WARNING, name,
            f"{name} is {iface.state()} but has an address and is selected: RCCL and NCCL "
            "< 2.28 still take it (NCCL >= 2.28 skips it)"
            + ("; the other nodes cannot reach it" if across else
               "; on this node its address still works (the kernel routes it locally), "
               "across nodes it would not"),
            f"bring {name} up, or leave it out (NCCL_SOCKET_IFNAME=^{name},...)",
        ))  # fmt: skip
    # named but without an address
    if spec is not None and not spec.exclude:
        for iface in ifaces:
            if spec.matches(iface.name) and not iface.addresses:
                findings.append(Finding(WARNING, iface.name,
                                        f"{iface.name} matches NCCL_SOCKET_IFNAME={setting} "
                                        "but has no address: NCCL skips it"))  # fmt: skip
    # the bootstrap interface across nodes (one finding an interface, naming the rules)
    fit = ", ".join(n for n in usable if by[n].bootstrap_fit) or "none here"
    for boot in dict.fromkeys(c.bootstrap for c in choices if c.bootstrap is not None):
        who = _who([c for c in choices if c.bootstrap == boot])
        iface = by[boot]
        unfit = iface.unfit_reason
        if unfit and nodes > 1:
            findings.append(Finding(ERROR, "bootstrap",
                                    f"{who}: bootstrap on {boot} ({unfit}) in a run across "
                                    f"{nodes} nodes: the other nodes cannot connect",
                                    "set NCCL_SOCKET_IFNAME to the interface of the nodes' "
                                    f"shared network: {fit}"))  # fmt: skip
        elif unfit:
            findings.append(Finding(NOTE, "bootstrap",
                                    f"{who}: bootstrap on {boot} ({unfit}): fine on one node, "
                                    "not across nodes"))  # fmt: skip
        address = next(c.bootstrap_address for c in choices if c.bootstrap == boot)
        addr = next((x for x in iface.addresses if x.address == address), None)
        if addr is not None and addr.scope == "link" and nodes > 1:
            findings.append(Finding(WARNING, "bootstrap",
                                    f"{who}: bootstrap on {boot}'s IPv6 link-local address "
                                    f"{addr.address}: other nodes reach it only on the same "
                                    "link, with its scope id",
                                    f"give {boot} a global address, or "
                                    "NCCL_SOCKET_FAMILY=AF_INET"))  # fmt: skip
    if comm_id:
        findings.append(Finding(NOTE, "NCCL_COMM_ID",
                                f"NCCL_COMM_ID={comm_id}: newer NCCL bootstraps on the "
                                "interface in the same subnet as this address, whatever "
                                "NCCL_SOCKET_IFNAME says"))  # fmt: skip
    views = tuple(_view(i, spec, choices) for i in ifaces)
    return spec, choices, views, findings


def _why_not(named: Sequence[Interface], spec: IfList | None) -> str:
    if spec is None:
        return ""
    if not named:
        return "; it names none of this host's interfaces"
    no_addr = [i.name for i in named if not i.addresses]
    down = [i.name for i in named if i.addresses and not i.running]
    parts = []
    if no_addr:
        parts.append(f"{', '.join(no_addr)} {'has' if len(no_addr) == 1 else 'have'} no "
                     "address")  # fmt: skip
    if down:
        parts.append(f"{', '.join(down)} {'is' if len(down) == 1 else 'are'} not running")
    return "; " + "; ".join(parts) if parts else ""


def _who(choices: Sequence[Choice]) -> str:
    """The rules of ``choices`` in words: ``NCCL`` when all of them agree."""
    return "NCCL and RCCL" if len(choices) == 2 else " and ".join(c.rules for c in choices)


def _view(iface: Interface, spec: IfList | None, choices: Sequence[Choice]) -> IfaceView:
    named = spec.matches(iface.name) if spec is not None else False
    by = tuple(c.rules for c in choices if iface.name in c.chosen)
    boot = any(c.bootstrap == iface.name for c in choices)
    if by:
        note = "selected" + (" (bootstrap)" if boot else "")
        if len(by) < len(choices):
            note += f" by {' and '.join(by)} only"
    elif named and not iface.addresses:
        note = "matches, no address: skipped"
    elif named:
        note = "matches, not running: skipped by NCCL >= 2.28"
    elif spec is not None:
        note = "not selected: " + ("excluded" if spec.exclude else "not named")
    else:
        note = "not selected" + (f" ({iface.unfit_reason})" if iface.unfit_reason else "")
    return IfaceView(iface, named, by, boot, note)


#: where a dynamic linker looks besides LD_LIBRARY_PATH and the RUNPATHs (which are not read)
LIB_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib")


def library_dirs(environ: Mapping[str, str], ld_conf: str = "/etc/ld.so.conf") -> list[str]:
    """The directories ``dlopen`` of a bare name searches that can be read without running
    anything: ``LD_LIBRARY_PATH``, those of ``/etc/ld.so.conf`` (with its ``include``s) and
    the default ones."""
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]

    def conf(path: str, depth: int = 0) -> None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include ") and depth < 3:
                pattern = line.split(None, 1)[1]
                if not pattern.startswith("/"):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for inc in sorted(glob.glob(pattern)):
                    conf(inc, depth + 1)
            elif line.startswith("/"):
                dirs.append(line)

    conf(ld_conf)
    dirs += LIB_DIRS
    out: list[str] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def find_plugin(name: str, dirs: Sequence[str], prefixes: Sequence[str]) -> tuple[str | None,
                                                                                   list[str]]:
    """Where ``dlopen`` would find the NET plugin ``name`` (as given, then
    ``PREFIX-NAME.so`` for each of ``prefixes`` unless ``name`` is a path or a ``lib*.so``
    name), and the names tried."""
    if "/" in name:
        return (name if os.path.isfile(name) else None), [name]
    tried = [name]
    if not (name.startswith("lib") and name.endswith(".so")):
        tried += [f"{p}-{name}.so" for p in prefixes]
    for candidate in tried:
        for d in dirs:
            path = os.path.join(d, candidate)
            if os.path.isfile(path):
                return path, tried
    return None, tried


def check_variables(
    environ: Mapping[str, str],
    *,
    gpus: int,
    ib_root: str = "/sys/class/infiniband",
    ld_conf: str = "/etc/ld.so.conf",
) -> list[Finding]:
    """``NCCL_NET_PLUGIN``/``RCCL_NET_PLUGIN``, ``NCCL_IB_HCA``, ``NCCL_P2P_DISABLE`` and
    ``NCCL_SHM_DISABLE`` against this host."""
    findings: list[Finding] = []
    dirs = library_dirs(environ, ld_conf)
    if "RCCL_NET_PLUGIN" in environ and "NCCL_NET_PLUGIN" not in environ:
        findings.append(Finding(WARNING, "RCCL_NET_PLUGIN",
                                f"RCCL_NET_PLUGIN={environ['RCCL_NET_PLUGIN']} is set but "
                                "RCCL's plugin loader reads NCCL_NET_PLUGIN (src/plugin/net.cc)",
                                f"set NCCL_NET_PLUGIN={environ['RCCL_NET_PLUGIN']}"))  # fmt: skip
    for var in ("NCCL_NET_PLUGIN", "RCCL_NET_PLUGIN"):
        value = environ.get(var)
        if value is None:
            continue
        if value.strip().lower() == "none":
            findings.append(Finding(NOTE, var, f"{var}=none: external network plugins off "
                                               "(internal IB and socket transports)"))
            continue
        for name in (n for n in value.split(",") if n):
            if name.upper() == "STATIC_PLUGIN":
                continue
            path, tried = find_plugin(name, dirs, ("libnccl-net", "librccl-net"))
            if path is not None:
                findings.append(Finding(NOTE, var, f"{var}: {name} is {path}"))
                continue
            where = "" if "/" in name else (
                " in LD_LIBRARY_PATH, /etc/ld.so.conf's directories or "
                f"{', '.join(LIB_DIRS)}; the RUNPATH of libnccl/librccl is not read")
            findings.append(Finding(WARNING, var,
                                    f"{var}={value}: {' or '.join(tried)} not found{where}: "
                                    "NCCL/RCCL skip it and fall back to their internal IB and "
                                    "socket transports (slow, or no route, where the fabric "
                                    "needs the plugin)",
                                    f"install the plugin and put its directory on "
                                    f"LD_LIBRARY_PATH, or name its file in {var}"))  # fmt: skip
    hca = environ.get("NCCL_IB_HCA")
    if hca is not None:
        findings += _check_hca(hca, ib_root)
    for var in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"):
        value = environ.get(var)
        if value is None or value in ("0", "1"):
            continue
        number = _nccl_int(value)
        if number is None:
            findings.append(Finding(WARNING, var, f"{var}={value!r} is not a number: NCCL "
                                                  "ignores it and keeps the default (0)",
                                    f"set {var}=0 or 1"))  # fmt: skip
        else:
            findings.append(Finding(WARNING, var, f"{var}={value!r}: NCCL reads it as "
                                                  f"{number} ({'off' if number else 'on'})",
                                    f"set {var}={1 if number else 0}"))  # fmt: skip
    p2p, shm = (_nccl_int(environ.get(v, "0")) for v in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"))
    if p2p and shm and gpus > 1:
        findings.append(Finding(WARNING, "NCCL_P2P_DISABLE",
                                "NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are both set: the GPUs "
                                "of this node talk through the network transport (slow)",
                                "unset one of them once the problem it worked around is "
                                "fixed"))  # fmt: skip
    return findings


def _nccl_int(value: str) -> int | None:
    """``strtoll(value, &end, 0)`` as NCCL's parameters read it: None when no digit leads."""
    m = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", value)
    if m is None:
        return None
    digits = m.group(2)
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") and len(digits) > 1 \
        else 10
    number = int(digits, base)
    return -number if m.group(1) == "-" else number


def _check_hca(hca: str, ib_root: str) -> list[Finding]:
    if not os.path.isdir(ib_root):
        return [Finding(WARNING, "NCCL_IB_HCA",
                        f"NCCL_IB_HCA={hca} is set but this host has no RDMA devices ({ib_root} "
                        "does not exist): NCCL uses its socket transport",
                        "unset it here, or load the RDMA drivers")]  # fmt: skip
    spec = parse_iflist(hca, ports=True)
    devices = sorted(os.listdir(ib_root))
    out = [Finding(WARNING, "NCCL_IB_HCA", f"NCCL_IB_HCA={hca}: {p}") for p in spec.problems]
    out += [Finding(WARNING, "NCCL_IB_HCA", f"NCCL_IB_HCA={hca}: {w}") for w in spec.warnings]
    picked = []
    for dev in devices:
        ports = sorted(os.listdir(os.path.join(ib_root, dev, "ports"))) \
            if os.path.isdir(os.path.join(ib_root, dev, "ports")) else ["1"]
        for port in ports:
            if port.isdigit() and spec.matches(dev, int(port)):
                picked.append(f"{dev}:{port}")
    if not picked:
        out.append(Finding(WARNING, "NCCL_IB_HCA",
                           f"NCCL_IB_HCA={hca} selects none of this host's RDMA devices "
                           f"({', '.join(devices) or 'none'}): NCCL prints \"NET/IB : No device "
                           "found\" and uses its socket transport",
                           f"name one of: {', '.join(devices) or 'none here'}"))  # fmt: skip
    else:
        out.append(Finding(NOTE, "NCCL_IB_HCA", f"NCCL_IB_HCA={hca} selects "
                                                f"{', '.join(picked)}"))  # fmt: skip
    return out


def check_shm(path: str, *, gpus: int, shm_disabled: bool) -> tuple[ShmInfo, list[Finding]]:
    """``path`` (``/dev/shm``): free space, flagged under :data:`SHM_MIN` (an error when two
    or more GPUs will use NCCL's SHM transport)."""
    try:
        st = os.statvfs(path)
    except OSError:
        info = ShmInfo(path, False)
        severity = ERROR if gpus > 1 and not shm_disabled else WARNING
        return info, [Finding(severity, "/dev/shm", f"{path} does not exist: NCCL's SHM "
                                                    "transport and its proxy cannot allocate",
                              "mount a tmpfs there (Docker: --shm-size=8g or --ipc=host)")]
    info = ShmInfo(path, True, st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)
    if info.free_bytes >= SHM_MIN:
        return info, []
    severity = ERROR if gpus > 1 and not shm_disabled else WARNING
    return info, [Finding(severity, "/dev/shm",
                          f"{path} has {_size(info.free_bytes)} free (of "
                          f"{_size(info.total_bytes)}), under 1 GiB: NCCL's SHM transport "
                          "fails to grow its segments (\"unhandled system error\", "
                          "\"failed to extend /dev/shm/nccl-...\"); Docker's default is 64 MiB",
                          "give it more (Docker: --shm-size=8g or --ipc=host), or "
                          "NCCL_SHM_DISABLE=1 (slower)")]  # fmt: skip


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def device_view(devices: GpuDevices) -> DeviceView:
    """The GPUs found and how many a process sees (:func:`visible_count`)."""
    visible, why = visible_count(devices)
    return DeviceView(devices.kind, devices.gpus, visible, why, devices.looked_for)


def nodes_from(environ: Mapping[str, str]) -> int:
    """How many nodes the run spans, from Slurm's variables (1 when not under Slurm)."""
    for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        value = environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


# --- the NCCL log ----------------------------------------------------------------------------

_START = "ROCMFORGE-START "
_RESULT = "ROCMFORGE-CHECK "
#: (pattern, stage) in NCCL's and RCCL's INFO lines (NVIDIA/nccl src/bootstrap.cc, init.cc,
#: transport/*.cc, graph/rings.cc; ROCm/rccl the same, "Bootstrap : Using" before 2.26)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), s) for p, s in (
        (r"Init COMPLETE", "first collective"),
        (r"Bootstrap timings", "transport setup"),
        (r"comm 0x[0-9a-f]+ rank \d+ nRanks \d+ nNodes", "transport setup"),
        (r"Channel \d+(/\d+)? :", "transport setup"),
        (r"Trees \[", "transport setup"),
        (r"Connected all (rings|trees)", "transport setup"),
        (r"P2P Chunksize", "transport setup"),
        (r"Setting affinity for GPU", "transport setup"),
        (r"Bootstrap ?: Using", "bootstrap"),
        (r"NET/(Socket|IB|Plugin)", "bootstrap"),
        (r"Using network", "bootstrap"),
        (r"Init START", "bootstrap"),
        (r"NCCL (INFO|WARN)", "bootstrap"),
        (r"(NCCL|RCCL) version", "bootstrap"),
    )
)  # fmt: skip
_VERSION = re.compile(r"(?:NCCL version|RCCL version :) ?(\S+)")
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using\s*\[?\d*\]?(\S+)")
_NETWORK = re.compile(r"Using network (\S+)")
#: the comm script's checks -> the stage their start and end show
_MARK_START = {"import": "import", "init": "rendezvous", "correctness": "rendezvous"}
_MARK_DONE = {"import": "rendezvous", "correctness": "done"}


def read_stage(lines: Iterable[str]) -> StageReading:
    """The furthest stage a run's output shows (:data:`STAGES`), from the comm script's own
    lines (a check started or ended) and NCCL/RCCL's INFO lines: any NCCL line means NCCL is
    in its bootstrap (finding its interface, the bootstrap ring), ``Bootstrap timings`` or
    the ``comm ... nRanks ... nNodes`` line or a ``Channel`` line that it is setting up its
    transports, ``Init COMPLETE`` that the first collective runs; the ``correctness`` check's
    result that the all_reduce returned."""
    from rocmforge.accept.run import telling_line

    best = -1
    evidence = ""
    version = bootstrap = network = None
    kept: list[str] = []

    def reach(stage: str, line: str) -> None:
        nonlocal best, evidence
        rank = STAGES.index(stage)
        if rank > best:
            best, evidence = rank, line.strip()

    for line in lines:
        kept.append(line)
        if line.startswith((_START, _RESULT)):
            try:
                info = json.loads(line.split(" ", 1)[1])
            except ValueError:
                continue
            name = str(info.get("check", "")) if isinstance(info, dict) else ""
            table = _MARK_START if line.startswith(_START) else _MARK_DONE
            if name in table:
                reach(table[name], line)
            continue
        if m := _VERSION.search(line):
            version = version or m.group(1)
        if m := _BOOTSTRAP.search(line):
            bootstrap = bootstrap or m.group(1)
        if m := _NETWORK.search(line):
            network = network or m.group(1)
        for pattern, stage in _PATTERNS:
            if pattern.search(line):
                reach(stage, line)
                break
    failure = telling_line(kept[-60:]) if kept else None
    return StageReading(STAGES[best] if best >= 0 else None, evidence, version, bootstrap,
                        network, failure)  # fmt: skip


# --- the timed run ---------------------------------------------------------------------------


class _Deadline:
    """A :class:`~rocmforge.build.sandbox.Runner` that ends whatever it runs at ``end`` (a
    ``time.monotonic`` instant) at the latest: the acceptance clock's per-check deadline
    still applies, but between checks (where that clock has none, e.g. a hung
    ``destroy_process_group``) and overall the run ends at ``end``. ``timed_out`` says whether
    the last run was killed for time."""

    def __init__(self, runner: Runner, end: float) -> None:
        self.runner = runner
        self.end = end
        self.level = runner.level
        self.warning = runner.warning
        self.timed_out = False

    def sandbox_path(self, mount: Mount) -> str:
        """Where ``mount`` is seen inside (the wrapped runner's answer)."""
        return self.runner.sandbox_path(mount)

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        timeout: float | None,
        log: BinaryIO,
        on_line: Callable[[str], None] | None = None,
        deadline: Callable[[], float | None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Run as the wrapped runner does, with ``end`` as the deadline when it is earlier."""

        def until() -> float:
            step = deadline() if deadline is not None else None
            return self.end if step is None else min(step, self.end)

        left = max(0.1, self.end - time.monotonic())
        result = self.runner.run(argv, cwd=cwd, env=env, mounts=mounts,
                                 timeout=left if timeout is None else min(timeout, left),
                                 log=log, on_line=on_line, deadline=until,
                                 on_start=on_start)  # fmt: skip
        self.timed_out = result.timed_out
        return result


def run_environment(
    environ: Mapping[str, str], sandbox: str
) -> tuple[dict[str, str], str | None]:
    """The caller's variables for the timed run, with ``NCCL_DEBUG=INFO`` and
    :data:`DEBUG_SUBSYS` (and no ``NCCL_DEBUG_FILE``: the log must reach the output). In a
    bwrap sandbox (loopback only) an ``NCCL_SOCKET_IFNAME`` that does not select ``lo`` is
    replaced by ``lo``; the second value says so (None: unchanged)."""
    env = {k: v for k, v in environ.items() if k != "NCCL_DEBUG_FILE"}
    env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS=DEBUG_SUBSYS)
    ifname = env.get("NCCL_SOCKET_IFNAME")
    shown = ifname is not None and len(ifname) > 1
    if sandbox == "bwrap" and shown and not parse_iflist(str(ifname)).matches("lo"):
        env["NCCL_SOCKET_IFNAME"] = "lo"
        return env, "lo"
    return env, None


def timed_run(
    executable: str,
    *,
    runner: Runner | None,
    devices: GpuDevices,
    workdir: Path,
    environ: Mapping[str, str],
    timeout: float = DEFAULT_TIMEOUT,
) -> CommRun:
    """Run the comm script's init + all_reduce in ``executable`` under ``runner``, killed
    ``timeout`` seconds after it starts, and read where it got to (status ``no gpu``, and
    ``runner`` not needed, when no GPU is visible). Raises
    :class:`~rocmforge.errors.UsageError` when ``executable`` does not run."""
    from rocmforge.accept.run import SCRIPTS, probe_python, run_script

    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: must be more than 0 seconds")
    python = probe_python(executable)
    if devices.kind is None:
        return CommRun("no gpu", f"no GPU found: looked for {devices.looked_for}", timeout=timeout)
    visible, why = visible_count(devices)
    if visible == 0:
        return CommRun("no gpu", f"no GPU visible: {why} ({devices.gpus} found)",
                       timeout=timeout)  # fmt: skip
    if runner is None:
        raise UsageError("a timed run needs a sandbox runner")
    world = max(1, visible)
    env, ifname_used = run_environment(environ, runner.level)
    config: dict[str, Any] = {
        "world_size": world, "min_bytes": 8, "max_bytes": 8,
        "timeouts": {n: timeout for n in ("import", "init", "correctness", "sweep")},
    }  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "comm.log"
    t = time.monotonic()
    bounded = _Deadline(runner, t + timeout)
    with log_path.open("wb") as log:
        report = run_script("comm", python, SCRIPTS / "comm_script.py",
                            ["launch", json.dumps(config)], runner=bounded, devices=devices,
                            workdir=workdir, log=log, environ=env, timeouts=config["timeouts"],
                            scripts=Mount(host=SCRIPTS, inside="/accept"),
                            default_check="launch", default_timeout=timeout)  # fmt: skip
    seconds = time.monotonic() - t
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    reading = read_stage(lines)
    failed = [c for c in report.checks if c.status == "failed"]
    timed_out = bounded.timed_out
    correct = next((c for c in report.checks if c.name == "correctness"), None)
    tail = tuple(ln for ln in lines if ln.strip() and not ln.startswith((_START, _RESULT)))
    tail = tail[-TAIL_LINES:]
    common: dict[str, Any] = dict(
        stage=reading.stage, world_size=world, seconds=seconds, timeout=timeout,
        nccl_version=reading.nccl_version, bootstrap=reading.bootstrap,
        network=reading.network, tail=tail, log=str(log_path), sandbox=runner.level,
        ifname_used=ifname_used,
    )  # fmt: skip
    if timed_out and reading.stage == "done":
        return CommRun("timed out", f"killed at the {timeout:g} s timeout after the first "
                                    "all_reduce had returned (in the comm script's 8 B sweep "
                                    "or destroy_process_group)", **common)  # fmt: skip
    if timed_out:
        return CommRun("timed out", f"killed at the {timeout:g} s timeout in stage "
                                    f"{reading.stage or 'start'}", **common)  # fmt: skip
    # the script's own verdict on the sum (a failed check without its figures is the
    # runner's: the process exited while the check ran)
    if correct is not None and correct.status == "failed" and "exact_sum" in correct.figures:
        return CommRun("failed", f"the all_reduce returned a wrong result: {correct.detail}",
                       failure=correct.detail, **common)  # fmt: skip
    if failed:
        return CommRun("failed", f"stopped in stage {reading.stage or 'start'}: "
                                 f"{reading.failure or failed[0].detail}",
                       failure=reading.failure, **common)  # fmt: skip
    detail = f"init_process_group + all_reduce at world size {world}"
    if correct is not None:
        detail += f": {correct.detail}"
    return CommRun("passed", detail, **common)


# --- advice and the whole ----------------------------------------------------------------------


def advise(findings: Sequence[Finding], run: CommRun, usable: Sequence[str]) -> str:
    """One line on what to change: the timed run's failure first (by what NCCL said, else by
    the stage it stopped in), else the first error's fix, else the first warning's."""
    if run.status in ("failed", "timed out"):
        return _run_advice(run, usable)
    if run.status == "no gpu":
        return f"{run.detail}: run it where the GPUs are, with their devices visible"
    errors = [f for f in findings if f.severity == ERROR]
    if errors:
        return errors[0].fix or errors[0].text
    warnings = [f for f in findings if f.severity == WARNING and f.fix]
    tail = f"; also: {warnings[0].fix}" if warnings else ""
    if run.status == "passed":
        where = f" over {run.bootstrap}" if run.bootstrap else ""
        return (f"nothing to change: NCCL initialised{where} and the first all_reduce returned "
                f"in {run.seconds:.1f} s{tail}")  # fmt: skip
    if warnings:
        return warnings[0].fix
    return "nothing stops NCCL here; --python PATH runs a timed init and all_reduce to be sure"


def _run_advice(run: CommRun, usable: Sequence[str]) -> str:
    said = (run.failure or "").lower()
    names = ", ".join(usable) or "none here"
    if "no socket interface found" in said:
        return ("NCCL_SOCKET_IFNAME selects no interface with an address in the run: name one "
                f"that has one ({names})")  # fmt: skip
    if "duplicate gpu" in said:
        return ("two ranks on one GPU: NCCL needs one GPU per rank; make "
                "CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES list distinct GPUs")  # fmt: skip
    if run.status == "timed out" and run.stage == "done":
        return ("the all_reduce worked; the run then ran out of time (the script's 8 B sweep or "
                f"destroy_process_group): give --timeout more than {run.timeout:g} s")
    if run.status == "timed out" and run.stage in (None, "import"):
        return (f"`import torch` did not finish within {run.timeout:g} s (seconds on a cold "
                "start): give --timeout more, or fix the environment --python names")
    if "no module named" in said or run.stage in (None, "import"):
        return ("the interpreter did not get through `import torch`: fix the environment "
                f"--python names ({run.failure or 'see the log'})")  # fmt: skip
    if "unhandled system error" in said or "/dev/shm" in said:
        return ("NCCL hit a system error: check /dev/shm's free space (Docker: --shm-size=8g) "
                "and the log's NCCL WARN lines")  # fmt: skip
    if run.status == "failed" and run.stage == "done":
        return "the all_reduce gave a wrong sum: report it with the log; try NCCL_P2P_DISABLE=1"
    stage = run.stage
    if stage == "rendezvous":
        return ("init_process_group did not reach NCCL: torch's TCP store rendezvous "
                "(MASTER_ADDR/MASTER_PORT, loopback here) hung or failed; check the port is "
                "free and nothing filters loopback")  # fmt: skip
    if stage == "bootstrap":
        via = f" over {run.bootstrap}" if run.bootstrap else ""
        return (f"NCCL did not get through its bootstrap{via}: make NCCL_SOCKET_IFNAME name an "
                "interface every rank can reach, and let TCP through the firewall between the "
                "nodes (NCCL uses ephemeral ports)")  # fmt: skip
    if stage == "transport setup":
        return ("NCCL stalled connecting its transports: try NCCL_P2P_DISABLE=1 (GPU "
                "peer-to-peer blocked by the IOMMU/ACS), then NCCL_SHM_DISABLE=1, and "
                "NCCL_IB_DISABLE=1 where an RDMA NIC is half configured")  # fmt: skip
    if stage == "first collective":
        return ("NCCL initialised but the first all_reduce did not finish: usually GPU "
                "peer-to-peer (try NCCL_P2P_DISABLE=1; IOMMU in passthrough, ACS off) or a rank "
                "that never called it")  # fmt: skip
    return f"the run failed: {run.failure or run.detail}"


def comm_doctor(
    *,
    environ: Mapping[str, str],
    nets: NetInterfaces | None = None,
    devices: GpuDevices | None = None,
    nodes: int | None = None,
    shm_path: str = "/dev/shm",
    ib_root: str = "/sys/class/infiniband",
    python: str | None = None,
    runner: Runner | None = None,
    workdir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> CommReport:
    """Everything ``doctor --comm`` checks, then the timed run when ``python`` (with
    ``runner``) is given. Raises :class:`~rocmforge.errors.UsageError` for a bad
    ``timeout`` or a ``python`` that does not run."""
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: must be more than 0 seconds")
    nets = nets if nets is not None else read_interfaces()
    devices = devices if devices is not None else find_devices(environ=environ)
    nodes = nodes if nodes is not None else nodes_from(environ)
    view = device_view(devices)
    spec, choices, views, findings = check_interfaces(nets, environ, nodes)
    findings += check_variables(environ, gpus=view.visible, ib_root=ib_root)
    shm_off = bool(_nccl_int(environ.get("NCCL_SHM_DISABLE", "0")))
    shm, more = check_shm(shm_path, gpus=view.visible, shm_disabled=shm_off)
    findings += more
    if python is None:
        run = CommRun("skipped", "no --python given: the timed init_process_group + all_reduce "
                                 "needs an interpreter with torch")  # fmt: skip
    else:
        where = workdir or Path(tempfile.mkdtemp(prefix="rocmforge-doctor-"))
        run = timed_run(python, runner=runner, devices=devices, workdir=where,
                        environ=environ, timeout=timeout)  # fmt: skip
    usable = usable_interfaces(nets)
    variables = {k: v for k, v in sorted(environ.items())
                 if k.startswith(("NCCL_", "RCCL_")) or k in ("MASTER_ADDR", "MASTER_PORT")}
    return CommReport(interfaces=views, ifname=spec, choices=choices,
                      findings=tuple(findings), shm=shm, devices=view, nodes=nodes, run=run,
                      advice=advise(findings, run, usable), sysfs_warning=nets.warning,
                      variables=variables)  # fmt: skip
