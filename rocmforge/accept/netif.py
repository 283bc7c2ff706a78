"""The host's network interfaces, as NCCL/RCCL's socket code sees them (no ``ip`` tool needed).

Each interface is read from ``/sys/class/net/NAME`` (``ifindex``, ``operstate``, ``flags``,
``mtu``, ``type``); its IPv4 address with the ``SIOCGIFADDR``/``SIOCGIFNETMASK`` ioctls (the
primary address, the one ``getifaddrs`` lists first and so the one NCCL's bootstrap takes) and
its IPv6 addresses from ``/proc/self/net/if_inet6``. Both ioctls and ``if_inet6`` answer for
the network namespace of this process; ``/sys`` answers for the namespace it was mounted in, so
the names are checked against ``socket.if_nameindex()`` and a mismatch is reported, not hidden.

"Running" is the kernel's ``IFF_RUNNING`` (``dev_get_flags`` in net/core/dev.c): the interface
is up and its operstate is ``up`` or ``unknown`` (loopback and some virtual devices report
``unknown``). ``lo``, ``docker*`` and ``virbr*`` are marked unfit for a bootstrap across nodes:
no other node reaches them. Nothing here prints.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SYS_NET = "/sys/class/net"
IF_INET6 = "/proc/self/net/if_inet6"
#: ioctls of <linux/sockios.h>
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
#: ``type`` (ARPHRD_*, <linux/if_arp.h>) -> a word
KINDS = {1: "ether", 32: "infiniband", 772: "loopback", 776: "sit", 65534: "none", 768: "ipip",
         778: "gre", 823: "ip6gre"}  # fmt: skip
#: name prefixes of interfaces no other node can reach (and their reason)
UNFIT = (("lo", "loopback: other nodes cannot reach it"),
         ("docker", "a Docker bridge: local to this host"),
         ("virbr", "a libvirt bridge: local to this host"))  # fmt: skip
_SCOPES = {0x00: "global", 0x10: "host", 0x20: "link", 0x40: "site"}
_IFA_F_TENTATIVE = 0x40


@dataclass(frozen=True, slots=True)
class Address:
    """One address of an interface: family 4 or 6, the address, its prefix length and scope
    (``global``, ``link``, ``host``, ``site``)."""

    family: int
    address: str
    prefixlen: int
    scope: str = "global"
    tentative: bool = False

    @property
    def loopback(self) -> bool:
        """Whether this is a loopback address (``127.0.0.0/8``, ``::1``)."""
        return ipaddress.ip_address(self.address).is_loopback

    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The network this address is in (for NCCL's same-subnet match with NCCL_COMM_ID)."""
        return ipaddress.ip_interface(f"{self.address}/{self.prefixlen}").network

    def __str__(self) -> str:
        return f"{self.address}/{self.prefixlen}" + (" (link-local)" if self.scope == "link"
                                                      else "")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The address as JSON."""
        return {"family": self.family, "address": self.address, "prefixlen": self.prefixlen,
                "scope": self.scope, "tentative": self.tentative}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Interface:
    """One network interface: name, index, state (``operstate``, ``IFF_UP``, running), whether
    it is the loopback, its MTU and link type, and its addresses."""

    name: str
    index: int
    operstate: str
    up: bool
    running: bool
    loopback: bool
    mtu: int | None
    kind: str
    addresses: tuple[Address, ...] = ()

    @property
    def unfit_reason(self) -> str | None:
        """Why no other node can bootstrap with this interface (``lo``, ``docker*``,
        ``virbr*``), or None."""
        if self.loopback:
            return UNFIT[0][1]
        for prefix, why in UNFIT:
            if self.name.startswith(prefix):
                return why
        return None

    @property
    def bootstrap_fit(self) -> bool:
        """Whether a bootstrap across nodes can use this interface (see :attr:`unfit_reason`)."""
        return self.unfit_reason is None

    def state(self) -> str:
        """One word: ``running``, ``down`` (not IFF_UP), or ``up, no carrier`` (up, not
        running: the peer or cable is down)."""
        if not self.up:
            return "down"
        return "running" if self.running else f"up, {self.operstate}"

    def to_json(self) -> dict[str, Any]:
        """The interface as JSON."""
        return {"name": self.name, "index": self.index, "operstate": self.operstate,
                "up": self.up, "running": self.running, "loopback": self.loopback,
                "mtu": self.mtu, "kind": self.kind, "bootstrap_fit": self.bootstrap_fit,
                "unfit_reason": self.unfit_reason,
                "addresses": [a.to_json() for a in self.addresses]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class NetInterfaces:
    """The interfaces of this process's network namespace, by index, and a warning when
    ``/sys`` shows another namespace's (then the names come from ``if_nameindex``)."""

    interfaces: tuple[Interface, ...]
    warning: str | None = None

    def by_name(self) -> Mapping[str, Interface]:
        """The interfaces keyed by name."""
        return {i.name: i for i in self.interfaces}

    def to_json(self) -> dict[str, Any]:
        """The interfaces as JSON."""
        return {"interfaces": [i.to_json() for i in self.interfaces], "warning": self.warning}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _int(text: str | None, base: int = 10) -> int | None:
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def ipv4_address(name: str) -> Address | None:
    """The primary IPv4 address of ``name`` in this network namespace (``SIOCGIFADDR``), or
    None when it has none (or no such interface is here)."""
    request = struct.pack("256s", name.encode()[:15])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            addr = fcntl.ioctl(s.fileno(), SIOCGIFADDR, request)
        except OSError as exc:
            if exc.errno in (errno.EADDRNOTAVAIL, errno.ENODEV, errno.ENXIO, errno.EINVAL):
                return None
            raise
        try:
            mask = fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, request)
            prefixlen = bin(int.from_bytes(mask[20:24], "big")).count("1")
        except OSError:
            prefixlen = 32
    text = socket.inet_ntoa(addr[20:24])
    scope = "host" if text.startswith("127.") else "global"
    return Address(4, text, prefixlen, scope)


def ipv6_addresses(path: str = IF_INET6) -> dict[str, list[Address]]:
    """The IPv6 addresses of each interface, from ``/proc/self/net/if_inet6`` (empty when IPv6
    is off): global ones first, then link-local, as ``getifaddrs`` lists them."""
    found: dict[str, list[Address]] = {}
    text = _read(path) or ""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 6 or len(fields[0]) != 32:
            continue
        raw, _index, plen, scope, flags, name = fields
        try:
            address = str(ipaddress.IPv6Address(bytes.fromhex(raw)))
            scope_word = _SCOPES.get(int(scope, 16), scope)
            tentative = bool(int(flags, 16) & _IFA_F_TENTATIVE)
            found.setdefault(name, []).append(Address(6, address, int(plen, 16), scope_word,
                                                      tentative))  # fmt: skip
        except ValueError:
            continue
    order = {"global": 0, "site": 1, "link": 2, "host": 3}
    return {n: sorted(a, key=lambda x: order.get(x.scope, 4)) for n, a in found.items()}


def read_interfaces(sys_net: str = SYS_NET, if_inet6: str = IF_INET6) -> NetInterfaces:
    """Every network interface of this process's namespace with its state and addresses,
    ordered by index (the order ``getifaddrs`` lists them in)."""
    try:
        here = {name: index for index, name in socket.if_nameindex()}
    except OSError:
        here = {}
    try:
        in_sys = sorted(os.listdir(sys_net))
    except OSError:
        in_sys = []
    warning = None
    names = [n for n in in_sys if not here or n in here]
    if here and set(in_sys) != set(here):
        warning = (f"{sys_net} is not of this network namespace (it lists "
                   f"{', '.join(in_sys) or 'nothing'}; this process has "
                   f"{', '.join(sorted(here))}): states read there may be wrong; "
                   "remount /sys in the namespace")  # fmt: skip
        names = sorted(here)
    v6 = ipv6_addresses(if_inet6)
    found = []
    for name in names:
        base = os.path.join(sys_net, name)
        index = _int(_read(os.path.join(base, "ifindex")))
        if here and (index is None or here.get(name) != index):
            index = here.get(name, index or 0)
        flags = _int(_read(os.path.join(base, "flags")), 16) or 0
        operstate = _read(os.path.join(base, "operstate")) or "unknown"
        kind_no = _int(_read(os.path.join(base, "type")))
        kind = KINDS.get(kind_no, str(kind_no)) if kind_no is not None else "unknown"
        loopback = bool(flags & IFF_LOOPBACK) or kind == "loopback"
        up = bool(flags & IFF_UP)
        addresses: list[Address] = []
        v4 = ipv4_address(name)
        if v4 is not None:
            addresses.append(v4)
        addresses += v6.get(name, [])
        found.append(Interface(
            name=name, index=index or 0, operstate=operstate, up=up,
            running=up and operstate in ("up", "unknown"), loopback=loopback,
            mtu=_int(_read(os.path.join(base, "mtu"))), kind=kind, addresses=tuple(addresses),
        ))  # fmt: skip
    found.sort(key=lambda i: (i.index, i.name))
    return NetInterfaces(tuple(found), warning)
