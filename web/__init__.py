"""Looking things up: web search (SearXNG) and page reading, below agent/ and free of Telegram.

Everything here treats the network as hostile: every connection goes to an address checked at
connect time (web/addresses.py, web/fetch.py), every read is bounded in time and bytes, and the
text that comes back is untrusted data for the agent to frame, never an instruction.
"""

from primitives import MnemobotError


class WebError(MnemobotError):
    """Base of every web failure: str(error) is one sentence for the model, `kind` a short key.

    WebError                    (kind)               web/errors.py unless said otherwise
    ├── BadUrlError             bad_url              not an http(s) URL with a host
    ├── BlockedAddressError     private_address      loopback, private, link-local, … not allowed
    ├── DnsError                dns                  the name resolves to no address
    ├── ConnectFailedError      connect              refused, unreachable, reset
    ├── TlsError                tls                  certificate, name or protocol
    ├── TooManyRedirectsError   too_many_redirects   more than 5
    ├── TooLargeError           too_large            past the byte cap
    ├── TooSlowError            too_slow             past the deadline
    ├── UnsupportedTypeError    unsupported_type     not HTML, text, JSON or PDF
    ├── HttpStatusError         http_status          an error status (`status`)
    ├── EmptyTextError          empty_text           read, but no text came out
    └── SearchError             search               the backend failed, refused JSON, found
                                                     nothing
    """

    kind = "web"
