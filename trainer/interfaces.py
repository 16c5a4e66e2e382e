"""Network interfaces of the current network namespace, and NCCL_SOCKET_IFNAME matching.

Everything goes through sockets and ioctls (not /sys), so the answers are those of the network
namespace the process runs in even when /sys was not remounted for it. Standard library only:
preflight and launch run before torch is imported.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40


class IfnameSpecError(ValueError):
    """NCCL_SOCKET_IFNAME is not something NCCL can use."""


@dataclass(frozen=True, slots=True)
class IfnameSpec:
    """A parsed NCCL_SOCKET_IFNAME: prefixes (or exact names), possibly excluded.

    NCCL's syntax: a comma-separated list of name prefixes; a leading ``^`` excludes the
    interfaces that match instead of selecting them; a leading ``=`` (after any ``^``) makes
    every entry an exact name rather than a prefix.
    """

    raw: str
    names: tuple[str, ...]
    exclude: bool
    exact: bool

    def matches(self, interface: str) -> bool:
        hit = any(interface == n if self.exact else interface.startswith(n) for n in self.names)
        return not hit if self.exclude else hit

    def describe(self) -> str:
        kind = "named exactly" if self.exact else "whose name starts with"
        listed = ", ".join(self.names)
        return f"{'any interface except those' if self.exclude else 'an interface'} {kind} {listed}"


def parse_ifname(value: str) -> IfnameSpec:
    raw = value
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise IfnameSpecError(
            f"NCCL_SOCKET_IFNAME={raw!r} names no interface; set it to the fabric interface (for example net1 or =net1)"
        )
    for name in names:
        if any(c.isspace() for c in name) or "/" in name or len(name) > 15:
            raise IfnameSpecError(
                f"NCCL_SOCKET_IFNAME={raw!r}: {name!r} cannot be an interface name "
                "(at most 15 characters, no spaces or '/')"
            )
    return IfnameSpec(raw=raw, names=names, exclude=exclude, exact=exact)


@dataclass(slots=True)
class Interface:
    name: str
    flags: int
    ipv4: list[str] = field(default_factory=list)
    ipv6: list[str] = field(default_factory=list)

    @property
    def up(self) -> bool:
        return bool(self.flags & IFF_UP)

    @property
    def running(self) -> bool:
        """Carrier present (operstate up): a veth whose peer is down is up but not running."""
        return bool(self.flags & IFF_RUNNING)

    @property
    def loopback(self) -> bool:
        return bool(self.flags & IFF_LOOPBACK)

    @property
    def addresses(self) -> list[str]:
        """Addresses other hosts can reach: IPv4, and IPv6 except link-local (fe80::/10), which the
        kernel adds to every interface that comes up, configured or not."""
        return self.ipv4 + [a for a in self.ipv6 if not ipaddress.IPv6Address(a).is_link_local]


def _ifreq(name: str) -> bytes:
    return struct.pack("256s", name.encode()[:15])


def _flags(sock: socket.socket, name: str) -> int:
    result = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, _ifreq(name))
    return struct.unpack_from("H", result, 16)[0]


def _ipv4(sock: socket.socket, name: str) -> list[str]:
    try:
        result = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, _ifreq(name))
    except OSError:  # EADDRNOTAVAIL: no IPv4 address
        return []
    return [socket.inet_ntoa(result[20:24])]


def _ipv6_table() -> dict[str, list[str]]:
    """Global and link-local IPv6 addresses per interface, from /proc/net/if_inet6 (per namespace)."""
    table: dict[str, list[str]] = {}
    try:
        text = Path("/proc/net/if_inet6").read_text()
    except OSError:
        return table
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 6:
            continue
        address = str(ipaddress.IPv6Address(bytes.fromhex(parts[0])))
        table.setdefault(parts[5], []).append(address)
    return table


def list_interfaces() -> dict[str, Interface]:
    """Every interface of this network namespace, by name."""
    out: dict[str, Interface] = {}
    v6 = _ipv6_table()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                flags = _flags(sock, name)
            except OSError:  # vanished between listing and asking
                continue
            out[name] = Interface(name=name, flags=flags, ipv4=_ipv4(sock, name), ipv6=v6.get(name, []))
    return out


def matching(spec: IfnameSpec, interfaces: dict[str, Interface]) -> list[Interface]:
    """The interfaces NCCL would consider for ``spec``, sorted by name (exact names first)."""
    found = [i for i in interfaces.values() if spec.matches(i.name)]
    if spec.exclude:
        # NCCL never picks loopback on its own when other interfaces are left.
        non_lo = [i for i in found if not i.loopback]
        found = non_lo or found
    return sorted(found, key=lambda i: (i.name not in spec.names, i.name))


def gloo_ifname(nccl_value: str, interfaces: dict[str, Interface] | None = None) -> str | None:
    """The GLOO_SOCKET_IFNAME that follows NCCL_SOCKET_IFNAME, or None if none can.

    Gloo takes exact names only, so NCCL's prefixes and exclusions are resolved against the
    interfaces present: the first one that is up and has an address.
    """
    try:
        spec = parse_ifname(nccl_value)
    except IfnameSpecError:
        return None
    if spec.exact and not spec.exclude and len(spec.names) == 1:
        return spec.names[0]
    interfaces = list_interfaces() if interfaces is None else interfaces
    for candidate in matching(spec, interfaces):
        if candidate.up and candidate.addresses:
            return candidate.name
    return None


def route_source(host: str, port: int = 9) -> str | None:
    """The local address the kernel would use to reach ``host`` (no packet is sent).

    This is the address other pods can reach this one at, which is what torchrun's rendezvous
    must advertise; None when ``host`` does not resolve (yet).
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect(sockaddr)
                return str(sock.getsockname()[0])
        except OSError:
            continue
    return None
