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
    "240.0.0.1": "private",  # reserved (Python files it under private too)
    "198.18.0.1": "private",  # benchmarking: where fake-IP proxies answer
    "192.0.2.1": "private",  # documentation
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
    "64:ff9b:1::a9fe:a9fe": "link-local",  # local-use NAT64
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
