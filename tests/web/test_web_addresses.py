"""The address rules of web/addresses.py: what is refused, in every spelling, and what
WEB_ALLOW_PRIVATE lets through."""

from __future__ import annotations

import ipaddress

import pytest

from web.addresses import check_address, parse_allowance, refusal
from web.errors import BlockedAddressError

REFUSED = {
    "127.0.0.1": "loopback",
    "127.0.0.2": "loopback",
    "10.1.2.3": "private",
    "172.16.0.1": "private",
    "192.168.1.1": "private",
    "169.254.169.254": "link-local",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.254": "carrier-grade NAT",
    "224.0.0.1": "multicast",
    "0.0.0.0": "unspecified",
    "240.0.0.1": "reserved",
    "198.18.0.1": "benchmarking",  # where fake-IP proxies answer
    "192.0.2.1": "documentation",
    "::1": "loopback",
    "::": "unspecified",
    "fe80::1": "link-local",
    "fd00::1": "private",
    "ff02::1": "multicast",
    # IPv6 spellings of IPv4 addresses are judged by the IPv4 address inside.
    "::ffff:127.0.0.1": "loopback",
    "::ffff:169.254.169.254": "link-local",
    "::127.0.0.1": "loopback",
    "64:ff9b::7f00:1": "loopback",  # NAT64
    "64:ff9b:1::a9fe:a9fe": "local-use IPv4/IPv6 translation",  # refused whole
    "2002:7f00:1::": "loopback",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::": "link-local",  # 6to4 of 169.254.169.254
}
PUBLIC = ["8.8.8.8", "1.1.1.1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2606:4700::1111"]


@pytest.mark.parametrize(("address", "reason"), sorted(REFUSED.items()))
def test_every_non_public_address_is_refused_with_its_reason(address: str, reason: str) -> None:
    assert refusal(ipaddress.ip_address(address)) == reason
    with pytest.raises(BlockedAddressError):
        check_address("x.test", ipaddress.ip_address(address), parse_allowance(""))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None
    check_address("x.test", ipaddress.ip_address(address), parse_allowance(""))


def test_the_allowance_lists_names_addresses_and_networks() -> None:
    allowance = parse_allowance(" SearXNG.lan. , 192.168.1.0/24,10.0.0.5,[fd00::7], ,")
    allow = lambda host, address: check_address(host, ipaddress.ip_address(address), allowance)  # noqa: E731
    allow("searxng.lan", "172.18.0.3")  # a listed name, whatever it resolves to
    allow("x.test", "192.168.1.77")
    allow("x.test", "::ffff:192.168.1.77")  # the same address in its IPv6 spelling
    allow("x.test", "10.0.0.5")
    allow("x.test", "fd00::7")
    for host, address in (
        ("x.test", "10.0.0.6"),
        ("x.test", "192.168.2.1"),
        ("searxng.lan.evil.test", "172.18.0.3"),
        ("x.test", "169.254.169.254"),
    ):
        with pytest.raises(BlockedAddressError):
            allow(host, address)


def test_the_metadata_address_is_named_in_the_refusal() -> None:
    with pytest.raises(BlockedAddressError) as caught:
        check_address(
            "169.254.169.254", ipaddress.ip_address("169.254.169.254"), parse_allowance("")
        )
    assert "cloud metadata" in str(caught.value) and "WEB_ALLOW_PRIVATE" in str(caught.value)


# IANA's IPv4 and IPv6 Special-Purpose Address Registries, as published (address block,
# name, globally reachable), copied here independently of web/special_addresses.py. Each
# block's first and last address are its examples.
IANA_IPV4 = """
0.0.0.0/8           This network                               False
0.0.0.0/32          This host on this network                  False
10.0.0.0/8          Private-Use                                False
100.64.0.0/10       Shared Address Space                       False
127.0.0.0/8         Loopback                                   False
169.254.0.0/16      Link Local                                 False
172.16.0.0/12       Private-Use                                False
192.0.0.0/24        IETF Protocol Assignments                  False
192.0.0.0/29        IPv4 Service Continuity Prefix             False
192.0.0.8/32        IPv4 dummy address                         False
192.0.0.9/32        Port Control Protocol Anycast              True
192.0.0.10/32       Traversal Using Relays around NAT Anycast  True
192.0.0.170/32      NAT64/DNS64 Discovery                      False
192.0.0.171/32      NAT64/DNS64 Discovery                      False
192.0.2.0/24        Documentation (TEST-NET-1)                 False
192.31.196.0/24     AS112-v4                                   True
192.52.193.0/24     AMT                                        True
192.88.99.0/24      Deprecated (6to4 Relay Anycast)            False
192.88.99.2/32      6a44-relay anycast address                 True
192.168.0.0/16      Private-Use                                False
192.175.48.0/24     Direct Delegation AS112 Service            True
198.18.0.0/15       Benchmarking                               False
198.51.100.0/24     Documentation (TEST-NET-2)                 False
203.0.113.0/24      Documentation (TEST-NET-3)                 False
240.0.0.0/4         Reserved                                   False
255.255.255.255/32  Limited Broadcast                          False
"""
IANA_IPV6 = """
::1/128             Loopback Address                           False
::/128              Unspecified Address                        False
::ffff:0:0/96       IPv4-mapped Address                        False
64:ff9b::/96        IPv4-IPv6 Translat.                        True
64:ff9b:1::/48      IPv4-IPv6 Translat.                        False
100::/64            Discard-Only Address Block                 False
100:0:0:1::/64      Dummy IPv6 Prefix                          False
2001::/23           IETF Protocol Assignments                  False
2001::/32           TEREDO                                     False
2001:1::1/128       Port Control Protocol Anycast              True
2001:1::2/128       Traversal Using Relays around NAT Anycast  True
2001:1::3/128       DNS-SD Service Registration Protocol       True
2001:2::/48         Benchmarking                               False
2001:3::/32         AMT                                        True
2001:4:112::/48     AS112-v6                                   True
2001:10::/28        Deprecated (previously ORCHID)             False
2001:20::/28        ORCHIDv2                                   True
2001:30::/28        Drone Remote ID Protocol Entity Tags       True
2001:db8::/32       Documentation                              False
2002::/16           6to4                                       False
2620:4f:8000::/48   Direct Delegation AS112 Service            True
3fff::/20           Documentation                              False
5f00::/16           Segment Routing (SRv6) SIDs                False
fc00::/7            Unique-Local                               False
fe80::/10           Link-Local Unicast                         False
"""
# Refused although the registry calls them reachable: anycast inside 192.0.0.0/24 and the
# 6a44 relay inside the deprecated 6to4 relay block are no web servers.
REFUSED_ANYWAY = {"192.0.0.9/32", "192.0.0.10/32", "192.88.99.2/32"}
# Judged by the IPv4 address inside, so their examples (0.0.0.0 inside) are refused; their
# public members pass (test_public_addresses_pass).
CARRIERS = {"::ffff:0:0/96", "64:ff9b::/96", "2002::/16"}


def _registry(text: str) -> list[tuple[str, str, bool]]:
    rows = []
    for line in text.strip().splitlines():
        block, *name, reachable = line.split()
        rows.append((block, " ".join(name), reachable == "True"))
    return rows


REGISTRY = _registry(IANA_IPV4) + _registry(IANA_IPV6)
NOT_REACHABLE = [(b, n) for b, n, ok in REGISTRY if not ok or b in REFUSED_ANYWAY | CARRIERS]
REACHABLE = [(b, n) for b, n, ok in REGISTRY if ok and b not in REFUSED_ANYWAY | CARRIERS]


def _examples(block: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    network = ipaddress.ip_network(block)
    return [network[0], network[-1]]


@pytest.mark.parametrize(("block", "name"), NOT_REACHABLE)
def test_every_registry_block_not_globally_reachable_is_refused(block: str, name: str) -> None:
    for address in _examples(block):
        assert refusal(address) is not None, f"{address} ({name}) passed"


@pytest.mark.parametrize(("block", "name"), REACHABLE)
def test_the_registry_s_globally_reachable_blocks_pass(block: str, name: str) -> None:
    for address in _examples(block):
        assert refusal(address) is None, f"{address} ({name}) refused: {refusal(address)}"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("192.0.0.192", "IETF protocol assignment"),  # Oracle's metadata; global on 3.11.7
        ("192.0.0.9", "IETF protocol assignment"),
        ("192.88.99.1", "deprecated 6to4 relay anycast"),
        ("fec0::1", "deprecated site-local"),
        ("3fff::1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("5f00::1", "segment routing"),
        ("100::1", "discard-only"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),  # RFC 4380's own example
        ("4000::1", "reserved"),  # outside 2000::/3, the only global unicast space
        ("::ffff:192.0.0.192", "IETF protocol assignment"),
        ("2002:c000:00c0::", "IETF protocol assignment"),  # 6to4 of 192.0.0.192
        ("2002:c0a8:0101::1", "private"),  # 6to4 of 192.168.1.1
        ("64:ff9b::c0a8:101", "private"),  # NAT64 of 192.168.1.1
        ("::192.168.1.1", "private"),  # IPv4-compatible
        ("255.255.255.255", "broadcast"),
    ],
)
def test_what_interpreters_disagree_on_is_refused_the_same_everywhere(
    address: str, reason: str
) -> None:
    assert refusal(ipaddress.ip_address(address)) == reason
