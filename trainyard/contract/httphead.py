"""One HTTP/1.1 request head read strictly and within bounds (RFC 9112), for the small plain-HTTP
listeners that are not the webhook's: the trainer's metrics endpoint and the demo's proxy into the
pod network.

Strict where RFC 9112 lets a recipient be lenient, because two parsers that disagree about where a
request or a line ends let one request carry another (request smuggling, RFC 9112 section 11.2):

- a line ends in CRLF and nothing else: a bare LF (section 2.2 lets a recipient accept one) or a
  bare CR anywhere in the head is refused;
- the request line is ``method SP request-target SP HTTP-version`` with one SP each (section 3),
  the method a token, the target visible ASCII, the version HTTP/1.0 or HTTP/1.1; no empty line
  before it (section 2.2 lets a server skip some; a client of ours never sends one);
- obsolete line folding (a field line that starts with SP or HTAB) is refused (section 5.2 lets a
  server reject it), and so is whitespace between a field name and its colon (section 5.1: MUST);
- a field value holds no control character but HTAB (RFC 9110 section 5.5);
- at most ``max_line`` bytes a line, ``max_fields`` field lines and ``max_head`` bytes in all, and
  the whole head within ``head_timeout`` seconds of its first byte, so a client sending a byte at a
  time holds a reader for that long at most.

Standard library only (floor 0): the trainer image installs nothing for HTTP.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 5.6.2 tchar
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) HTTP/(1\.[01])")
_FIELD_NAME = re.compile(_TOKEN)
_FIELD_VALUE = re.compile(rb"[\x20-\x7e\x80-\xff\t]*")  # VCHAR, obs-text, SP, HTAB
_BARE_EOL = re.compile(rb"\r(?!\n)|(?<!\r)\n")
END = b"\r\n\r\n"


@dataclass(frozen=True)
class HeadLimits:
    max_line: int = 4096  # a scrape's longest line (its Accept) is about 200 bytes
    max_fields: int = 32
    max_head: int = 8192
    head_timeout: float = 5.0  # seconds from a head's first byte to its end


class HeadError(Exception):
    """A request head refused: ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str  # "1.0" or "1.1"
    fields: tuple[tuple[str, str], ...]  # (name in lower case, value without surrounding whitespace)

    def values(self, name: str) -> list[str]:
        return [v for n, v in self.fields if n == name]

    def one(self, name: str) -> str | None:
        """The field's value, None when absent; a HeadError when it is given twice."""
        found = self.values(name)
        if len(found) > 1:
            raise HeadError(400, f"the {name} field is given {len(found)} times")
        return found[0] if found else None

    def tokens(self, name: str) -> set[str]:
        """A comma-separated list field (Connection) as lower-case tokens."""
        return {t.strip().lower() for v in self.values(name) for t in v.split(",") if t.strip()}


def parse_head(head: bytes, limits: HeadLimits = HeadLimits()) -> RequestHead:
    """``head``: the bytes of one request head without its final empty line (CRLF CRLF)."""
    if len(head) + len(END) > limits.max_head:
        raise HeadError(431, f"the request head is over {limits.max_head} bytes")
    if bare := _BARE_EOL.search(head):
        what = "LF" if head[bare.start() : bare.start() + 1] == b"\n" else "CR"
        raise HeadError(400, f"a bare {what} at byte {bare.start()}: only CRLF ends a line")
    request_line, *lines = head.split(b"\r\n")
    if len(request_line) > limits.max_line:
        raise HeadError(414, f"the request line is over {limits.max_line} bytes")
    if not (match := _REQUEST_LINE.fullmatch(request_line)):
        raise HeadError(400, "the request line is not `METHOD SP target SP HTTP/1.1`")
    if len(lines) > limits.max_fields:
        raise HeadError(431, f"more than {limits.max_fields} header fields")
    fields = []
    for number, line in enumerate(lines, start=2):
        if len(line) > limits.max_line:
            raise HeadError(431, f"line {number} is over {limits.max_line} bytes")
        if line[:1] in (b" ", b"\t"):
            raise HeadError(400, f"line {number} is folded (starts with whitespace): obsolete line folding is refused")
        name, colon, value = line.partition(b":")
        if not colon or not _FIELD_NAME.fullmatch(name):
            raise HeadError(400, f"line {number} is not `name: value` (a token, then the colon at once)")
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise HeadError(400, f"line {number}: the value of {name.decode('ascii')} holds a control character")
        fields.append((name.decode("ascii").lower(), value.decode("latin-1")))
    method, target, version = (part.decode("ascii") for part in match.groups())
    return RequestHead(method, target, version, tuple(fields))


class HeadReader:
    """The request heads of one connection, one after another; bytes after a head (a pipelined
    request) are kept for the next."""

    def __init__(self, sock: socket.socket, limits: HeadLimits = HeadLimits()) -> None:
        self.sock, self.limits = sock, limits
        self.buffer = b""

    def _recv(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        return self.sock.recv(4096)

    def next(self, wait: float) -> RequestHead | None:
        """The next head. None when the client closed (or reset) the connection, or sent nothing
        for ``wait`` seconds; a HeadError when the head is refused or does not end in time (408)."""
        if not self.buffer:
            try:
                self.buffer = self._recv(wait)
            except OSError:  # a timeout is an OSError: an idle client is let go in silence
                return None
            if not self.buffer:
                return None
        deadline = time.monotonic() + self.limits.head_timeout
        while (end := self.buffer.find(END)) < 0:
            self._check_partial()
            left = deadline - time.monotonic()
            if left <= 0:
                raise HeadError(408, f"the request head did not end within {self.limits.head_timeout:g} s")
            try:
                chunk = self._recv(left)
            except TimeoutError:
                raise HeadError(408, f"the request head did not end within {self.limits.head_timeout:g} s") from None
            except OSError:
                return None
            if not chunk:
                return None  # closed mid-head: nobody is left to answer
            self.buffer += chunk
        head, self.buffer = self.buffer[:end], self.buffer[end + len(END) :]
        return parse_head(head, self.limits)

    def _check_partial(self) -> None:
        """Refuse an unfinished head as soon as it cannot become a good one, rather than wait."""
        if len(self.buffer) >= self.limits.max_head:
            raise HeadError(431, f"the request head is over {self.limits.max_head} bytes")
        # a CR at the very end may yet be followed by its LF
        if bare := _BARE_EOL.search(self.buffer, 0, len(self.buffer) - self.buffer.endswith(b"\r")):
            what = "LF" if self.buffer[bare.start() : bare.start() + 1] == b"\n" else "CR"
            raise HeadError(400, f"a bare {what} at byte {bare.start()}: only CRLF ends a line")
        if len(self.buffer) - (self.buffer.rfind(b"\r\n") + 2) > self.limits.max_line:
            raise HeadError(431, f"a line of the request head is over {self.limits.max_line} bytes")


def reason(status: int) -> str:
    return _REASONS.get(status, "Error")


_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def refusal(status: int, why: str, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A complete response that refuses a request and closes the connection."""
    body = (why + "\n").encode("utf-8", "replace")
    lines = [f"HTTP/1.1 {status} {reason(status)}", "Content-Type: text/plain; charset=utf-8"]
    lines += [f"{k}: {v}" for k, v in extra]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body
