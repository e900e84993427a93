"""The deny table: IANA's IPv4 and IPv6 Special-Purpose Address Registries, written out.

Python's `ipaddress` flags (`is_private`, `is_global`, `is_reserved`) change between releases:
192.0.0.192 passed as global on 3.11.7, and fec0::/10, 3fff::/20 and 192.88.99.0/24 pass on
every release. The answer must not depend on the interpreter, so the ranges are listed here,
from the registries (iana-ipv4-special-registry, iana-ipv6-special-registry), and the most
specific entry holding an address decides:

- every entry the registry does not mark globally reachable is refused, named by its purpose;
- an entry it marks globally reachable inside a refused block (the anycast and AS112 entries
  under 2001::/23) is allowed (`None`);
- besides the registries: multicast (224.0.0.0/4, ff00::/8), the deprecated site-local
  fec0::/10 and the deprecated 6to4 relay anycast 192.88.99.0/24 are refused, and the whole of
  192.0.0.0/24 (its anycast entries included: they are no web servers; the Oracle metadata
  address 192.0.0.192 is in it);
- an IPv6 address outside 2000::/3 is refused as reserved (the IPv6 Address Space registry
  leaves all of it to the IETF), unless it only wraps an IPv4 address (web/addresses.py judges
  those by the IPv4 address inside).
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# (range, why it is refused; None: globally reachable although inside a refused range)
_IPV4: list[tuple[str, str | None]] = [
    ("0.0.0.0/8", "this-network"),
    ("0.0.0.0/32", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.0.0.0/29", "IPv4 service continuity"),
    ("192.0.0.8/32", "dummy"),
    ("192.0.0.170/31", "NAT64/DNS64 discovery"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
]
_IPV6: list[tuple[str, str | None]] = [
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy"),
    ("2001::/23", "IETF protocol assignment"),
    ("2001::/32", "Teredo"),
    ("2001:1::1/128", None),  # Port Control Protocol anycast
    ("2001:1::2/128", None),  # TURN anycast
    ("2001:1::3/128", None),  # DNS-SD service registration protocol anycast
    ("2001:2::/48", "benchmarking"),
    ("2001:3::/32", None),  # AMT
    ("2001:4:112::/48", None),  # AS112-v6
    ("2001:10::/28", "deprecated ORCHID"),
    ("2001:20::/28", None),  # ORCHIDv2
    ("2001:30::/28", None),  # drone remote ID entity tags
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing"),
    ("fc00::/7", "private"),  # unique local
    ("fe80::/10", "link-local"),
    ("fec0::/10", "deprecated site-local"),
    ("ff00::/8", "multicast"),
]
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")


def _table(rows: list[tuple[str, str | None]]) -> list[tuple[IPNetwork, str | None]]:
    """The rows as networks, most specific first: the first that holds an address decides."""
    table = [(ipaddress.ip_network(cidr), reason) for cidr, reason in rows]
    return sorted(table, key=lambda row: row[0].prefixlen, reverse=True)


_V4_TABLE = _table(_IPV4)
_V6_TABLE = _table(_IPV6)


def special_purpose(address: IPAddress) -> str | None:
    """Why the registries keep `address` off the public internet ("loopback", "private",
    "documentation", …), or None when it is globally reachable. An IPv6 address is taken as
    it is (unwrapping IPv4 forms is web/addresses.py's work)."""
    if isinstance(address, ipaddress.IPv4Address):
        table = _V4_TABLE
    else:
        table = _V6_TABLE
    for network, reason in table:
        if address in network:
            return reason
    if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST:
        return "reserved"
    return None
