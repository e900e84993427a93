"""Looking things up: web search (SearXNG) and page reading, below agent/ and free of Telegram.

Everything here treats the network as hostile: every connection goes to an address checked at
connect time (web/addresses.py, web/fetch.py), every read is bounded in time and bytes, and the
text that comes back is untrusted data for the agent to frame, never an instruction.
"""


class WebError(Exception):
    """Base of every web failure: str(error) is one sentence for the model, `kind` a short key.

    WebError               (kind)               web/errors.py unless said otherwise
    ├── BadUrl             bad_url              not an http(s) URL with a host
    ├── BlockedAddress     private_address      loopback, private, link-local, … not allowed
    ├── DnsFailure         dns                  the name resolves to no address
    ├── ConnectFailure     connect              refused, unreachable, reset
    ├── TlsFailure         tls                  certificate, name or protocol
    ├── TooManyRedirects   too_many_redirects   more than 5
    ├── TooLarge           too_large            past the byte cap
    ├── TooSlow            too_slow             past the deadline
    ├── UnsupportedType    unsupported_type     not HTML, text, JSON or PDF
    ├── HttpStatus         http_status          an error status (`status`)
    ├── EmptyText          empty_text           read, but no text came out
    └── SearchFailure      search               the backend failed, refused JSON, found nothing
    """

    kind = "web"
