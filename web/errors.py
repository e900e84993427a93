"""One family of errors for everything the web tools can fail at.

Each error is one line the model can relay to the user as it is ("that address is on a private
network", "the page is larger than 5 MB"), and carries a short `kind` a test or the agent can
match. An empty page or an empty search is an error too, never an empty success: a model handed
nothing tends to invent the answer (hermes #99533).
"""

from __future__ import annotations

from web import WebError

__all__ = ["WebError"]


class BadUrl(WebError):
    """Not an http(s) URL with a host."""

    kind = "bad_url"


class BlockedAddress(WebError):
    """The host is (or resolves to) a loopback, private, link-local, … address not allowed."""

    kind = "private_address"


class DnsFailure(WebError):
    """The host name resolves to no address."""

    kind = "dns"


class ConnectFailure(WebError):
    """No connection could be made (refused, unreachable, reset)."""

    kind = "connect"


class TlsFailure(WebError):
    """The TLS handshake failed (bad certificate, wrong name, old protocol)."""

    kind = "tls"


class TooManyRedirects(WebError):
    kind = "too_many_redirects"


class TooLarge(WebError):
    kind = "too_large"


class TooSlow(WebError):
    kind = "too_slow"


class UnsupportedType(WebError):
    """The answer is no kind we read (HTML, text, JSON, PDF)."""

    kind = "unsupported_type"


class HttpStatus(WebError):
    """The server answered with an error status (404, 500, …); `status` is that status."""

    kind = "http_status"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class EmptyText(WebError):
    """The page was read, but no text came out of it."""

    kind = "empty_text"


class SearchFailure(WebError):
    """The search backend failed, refused JSON, or found nothing."""

    kind = "search"
