"""One family of errors for everything the web tools can fail at.

Each error is one line the model can relay to the user as it is ("that address is on a private
network", "the page is larger than 5 MB"), and carries a short `kind` a test or the agent can
match. An empty page or an empty search is an error too, never an empty success: a model handed
nothing tends to invent the answer (hermes #99533).
"""

from __future__ import annotations

from web import WebError

__all__ = ["WebError"]


class BadUrlError(WebError):
    """Not an http(s) URL with a host."""

    kind = "bad_url"


class BlockedAddressError(WebError):
    """The host is (or resolves to) a loopback, private, link-local, … address not allowed."""

    kind = "private_address"


class DnsError(WebError):
    """The host name resolves to no address."""

    kind = "dns"


class ConnectFailedError(WebError):
    """No connection could be made (refused, unreachable, reset)."""

    kind = "connect"


class TlsError(WebError):
    """The TLS handshake failed (bad certificate, wrong name, old protocol)."""

    kind = "tls"


class TooManyRedirectsError(WebError):
    kind = "too_many_redirects"


class TooLargeError(WebError):
    kind = "too_large"


class TooSlowError(WebError):
    kind = "too_slow"


class UnsupportedTypeError(WebError):
    """The answer is no kind we read (HTML, text, JSON, PDF)."""

    kind = "unsupported_type"


class HttpStatusError(WebError):
    """The server answered with an error status (404, 500, …); `status` is that status."""

    kind = "http_status"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class EmptyTextError(WebError):
    """The page was read, but no text came out of it."""

    kind = "empty_text"


class SearchError(WebError):
    """The search backend failed, refused JSON, or found nothing."""

    kind = "search"
