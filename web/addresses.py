"""Which addresses the web tools may connect to: public ones, and the private ones the owner lists.

Refused, unless an allowance lists the host name, the address or a network holding it: every
range of IANA's special-purpose registries that is not globally reachable, multicast and
reserved space (web/special_addresses.py, an explicit table rather than the interpreter's
flags): loopback, private (RFC 1918, ULA), link-local (169.254.0.0/16 holds the cloud metadata
address 169.254.169.254), CGNAT (100.64.0.0/10), documentation, benchmarking (198.18.0.0/15,
where fake-IP proxies answer), 192.0.0.0/24, the unspecified address. IPv6 forms that carry an
IPv4 address — IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96)
and 6to4 (2002::/16) — are judged by the IPv4 address inside them, so ::ffff:127.0.0.1 is
loopback however it is spelled; Teredo and local-use NAT64 (64:ff9b:1::/48) are refused whole.

The check is made on the address actually connected to (web/fetch.py), never on a name resolved
once for a check and again for the connection (nanobot #4611). The allowance exists because a
guard with no way to allow a LAN SearXNG gets switched off whole (openclaw #67165).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from web.errors import BlockedAddressError
from web.special_addresses import special_purpose

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class Allowance:
    """WEB_ALLOW_PRIVATE parsed: host names (lower case) and networks the owner allows."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    def allows(self, host: str, address: IPAddress) -> bool:
        if host.lower().rstrip(".") in self.hosts:
            return True
        return any(_in(address, network) for network in self.networks)


def parse_allowance(entries: list[str] | str) -> Allowance:
    """Entries are host names, addresses or CIDRs ("searxng, 192.168.1.0/24, 10.0.0.5")."""
    if isinstance(entries, str):
        entries = [part for part in entries.split(",")]
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for raw in entries:
        entry = raw.strip().strip("[]")
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.lower().rstrip("."))
    return Allowance(frozenset(hosts), tuple(networks))


def _in(address: IPAddress, network: IPNetwork) -> bool:
    forms = [address, *_forms(address)]
    return any(form in network for form in forms if form.version == network.version)


def _forms(address: IPAddress) -> list[IPAddress]:
    """The addresses to judge for `address`: an IPv6 form that only wraps an IPv4 address
    (mapped, compatible, NAT64's 64:ff9b::/96) is that IPv4 address; 6to4 is both itself and
    the IPv4 address it carries."""
    if isinstance(address, ipaddress.IPv4Address):
        return [address]
    packed = int(address)
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address in _NAT64:
        return [ipaddress.IPv4Address(packed & 0xFFFFFFFF)]
    if packed >> 32 == 0 and packed > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
        return [ipaddress.IPv4Address(packed)]
    if address.sixtofour is not None:
        return [address, address.sixtofour]
    return [address]


def refusal(address: IPAddress) -> str | None:
    """Why connecting to `address` is refused ("loopback", "private", …), or None if public:
    the registries' answer (web/special_addresses.py), the same on every Python."""
    for form in _forms(address):
        reason = special_purpose(form)
        if reason:
            return reason
    return None


def check_address(host: str, address: IPAddress, allowance: Allowance) -> None:
    """Raise BlockedAddressError unless `address` (which `host` resolved to) may be connected to."""
    reason = refusal(address)
    if reason is None or allowance.allows(host, address):
        return
    shown = host if host == str(address) else f"{host} ({address})"
    if address == ipaddress.ip_address("169.254.169.254"):
        reason = "link-local, the cloud metadata address"
    raise BlockedAddressError(
        f"refused: {shown} is a {reason} address; web reads reach only public addresses "
        "unless WEB_ALLOW_PRIVATE lists it"
    )
