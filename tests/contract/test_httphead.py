"""The strict request-head parser: mutations of a scrape's head are refused or read exactly as h11
(an independent HTTP/1.1 parser, httpx's) reads them; what RFC 9112 lets a lenient parser accept
(bare LF, folding, space before the colon) is refused; the reader keeps pipelined bytes and
refuses a head as soon as it cannot become a good one."""

from __future__ import annotations

import socket

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.contract.httphead import END, HeadError, HeadLimits, HeadReader, parse_head

# what Prometheus 3 sends for a scrape (scrape/scrape.go: Accept, Accept-Encoding, User-Agent,
# X-Prometheus-Scrape-Timeout-Seconds; Go's net/http writes Host first)
SCRAPE = (
    b"GET /metrics HTTP/1.1\r\n"
    b"Host: 10.244.1.5:9404\r\n"
    b"User-Agent: Prometheus/3.5.0\r\n"
    b"Accept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1\r\n"
    b"Accept-Encoding: gzip\r\n"
    b"X-Prometheus-Scrape-Timeout-Seconds: 10"
)
ODD = st.sampled_from([b"\r", b"\n", b" ", b"\t", b":", b"\x00", b"\x01", b"\x7f", b"\x80", b"a", b"/", b"\r\n"])


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    head = bytearray(SCRAPE)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(head)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "duplicate-line"]))
        if kind == "insert":
            head[at:at] = draw(ODD)
        elif kind == "delete" and at < len(head):
            del head[at]
        elif kind == "replace" and at < len(head):
            head[at : at + 1] = draw(ODD)
        elif kind == "duplicate-line":
            lines = bytes(head).split(b"\r\n")
            i = draw(st.integers(0, len(lines) - 1))
            head = bytearray(b"\r\n".join([*lines[: i + 1], lines[i], *lines[i + 1 :]]))
    return bytes(head)


def h11_reads(head: bytes) -> h11.Request | str:
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(head + END)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        return str(exc)
    assert isinstance(event, h11.Request)
    return event


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_a_head_is_refused_or_read_exactly_as_h11_reads_it(head: bytes) -> None:
    try:
        got = parse_head(head)
    except HeadError as exc:
        assert exc.status in (400, 414, 431)
        return
    # accepted: no line ends otherwise than in CRLF, no line is folded
    assert b"\n" not in head.replace(b"\r\n", b"") and b"\r" not in head.replace(b"\r\n", b"")
    assert not any(line[:1] in (b" ", b"\t") for line in head.split(b"\r\n"))
    theirs = h11_reads(head)
    if isinstance(theirs, str):  # h11 judges Host and framing fields, which the listeners judge after
        assert "Host" in theirs or "Content-Length" in theirs or "Transfer-Encoding" in theirs, theirs
        return
    assert (got.method, got.target, got.version) == (
        theirs.method.decode(),
        theirs.target.decode(),
        theirs.http_version.decode(),
    )
    assert list(got.fields) == [(n.decode(), v.decode("latin-1")) for n, v in theirs.headers]


def test_the_scrape_itself_is_read() -> None:
    head = parse_head(SCRAPE)
    assert (head.method, head.target, head.version) == ("GET", "/metrics", "1.1")
    assert head.one("host") == "10.244.1.5:9404" and head.one("accept-encoding") == "gzip"


@pytest.mark.parametrize(
    ("head", "status", "says"),
    [
        (b"GET /metrics HTTP/1.1\nHost: a", 400, "bare LF"),
        (b"GET /metrics HTTP/1.1\r\nHost: a\nX: 1", 400, "bare LF"),
        (b"GET /metrics HTTP/1.1\r\nHost: a\rX: 1", 400, "bare CR"),
        (b"GET /metrics HTTP/1.1\r\nHost: a\r\n continued", 400, "folded"),
        (b"GET /metrics HTTP/1.1\r\nHost : a", 400, "name: value"),
        (b"GET /metrics HTTP/1.1\r\nHost: a\x00b", 400, "control character"),
        (b"GET  /metrics HTTP/1.1", 400, "request line"),
        (b"\r\nGET /metrics HTTP/1.1", 400, "request line"),
        (b"GET /metrics HTTP/1.2", 400, "request line"),
        (b"GET /m\xe9trics HTTP/1.1", 400, "request line"),
        (b"GET /" + b"a" * 5000 + b" HTTP/1.1", 414, "request line"),
        (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 33, 431, "fields"),
        (b"GET / HTTP/1.1\r\nX: " + b"y" * 5000, 431, "line 2"),
        (b"GET / HTTP/1.1" + (b"\r\nX: " + b"y" * 4000) * 3, 431, "8192 bytes"),
    ],
)
def test_what_a_lenient_parser_would_take_is_refused(head: bytes, status: int, says: str) -> None:
    with pytest.raises(HeadError) as caught:
        parse_head(head)
    assert caught.value.status == status and says in caught.value.why


def test_repeated_fields_are_seen_and_one_refuses_them() -> None:
    head = parse_head(b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\nHost: a\r\nHost: b")
    assert head.tokens("connection") == {"keep-alive", "close"}
    with pytest.raises(HeadError, match="host field is given 2 times"):
        head.one("host")


def test_the_reader_keeps_pipelined_bytes_and_refuses_early() -> None:
    a, b = socket.socketpair()
    with a, b:
        b.sendall(SCRAPE + END + b"GET /second HTTP/1.1\r\nHost: a\r\n\r\nGET /x HTTP/1.1\nHost")
        reader = HeadReader(a, HeadLimits(head_timeout=5))
        assert reader.next(5).target == "/metrics"  # type: ignore[union-attr]
        assert reader.next(5).target == "/second"  # type: ignore[union-attr]
        with pytest.raises(HeadError, match="bare LF"):  # refused before the head could end
            reader.next(5)
    c, d = socket.socketpair()
    with c, d:
        d.sendall(b"GET / HTTP/1.1\r\nX: " + b"y" * 9000)
        with pytest.raises(HeadError) as caught:
            HeadReader(c).next(5)
        assert caught.value.status == 431
    e, f = socket.socketpair()
    with e, f:
        f.sendall(b"GET / HTTP/1.1\r\nX: y")
        with pytest.raises(HeadError) as caught:
            HeadReader(e, HeadLimits(head_timeout=0.1)).next(5)
        assert caught.value.status == 408
        f.close()
        assert HeadReader(e).next(5) is None  # the client went away
