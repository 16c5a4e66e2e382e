"""The trainer's metrics listener against hostile clients: idle floods, a head dripped a byte at a
time, oversized heads, other methods and paths, bodies, pipelined junk; and, as the positive
control, real scrapes (plain, gzip, OpenMetrics, kept alive) parsed by prometheus_client's parsers."""

from __future__ import annotations

import gzip
import select
import socket
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from trainer.metrics_http import MetricsServer
from trainyard.contract import metrics as m
from trainyard.contract.httphead import HeadLimits
from trainyard.contract.metrics import METRICS_PATH

LOCAL = "127.0.0.1"
GET = b"GET /metrics HTTP/1.1\r\nHost: pod:9404\r\n\r\n"


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Gauge("trainyard_step", "the step", registry=reg).set(7)
    Counter("trainyard_steps", "steps", registry=reg).inc(3)
    return reg


@pytest.fixture
def serve() -> Iterator:
    made: list[MetricsServer] = []

    def make(**kwargs) -> MetricsServer:
        made.append(MetricsServer(registry(), LOCAL, 0, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


def connect(server: MetricsServer) -> socket.socket:
    sock = socket.create_connection((LOCAL, server.port), timeout=10)
    return sock


def exchange(server: MetricsServer, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes the connection."""
    with connect(server) as sock:
        sock.sendall(data)
        return read_to_end(sock)


def read_to_end(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def ended(sock: socket.socket) -> bool:
    """The server closed the connection without a word (EOF, or a reset where bytes were unread)."""
    try:
        return read_to_end(sock) == b""
    except ConnectionResetError:
        return True


def families(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_a_scrape_returns_the_registry_parsed_by_prometheus_client(serve) -> None:
    server = serve()
    with urllib.request.urlopen(f"http://{LOCAL}:{server.port}{METRICS_PATH}", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        got = families(resp.read().decode())
    assert got["trainyard_step"] == 7 and got["trainyard_steps_total"] == 3


def test_gzip_openmetrics_and_head_are_negotiated_as_start_http_server_did(serve) -> None:
    server = serve()
    request = urllib.request.Request(
        f"http://{LOCAL}:{server.port}{METRICS_PATH}",
        headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5", "Accept-Encoding": "gzip"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        text = gzip.decompress(resp.read()).decode()
    assert {s.name: s.value for f in openmetrics_families(text) for s in f.samples}["trainyard_step"] == 7
    head = exchange(server, b"HEAD /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    status, _, body = head.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200") and b"Content-Length: " in status and body == b""
    only = exchange(server, b"GET /metrics?name[]=trainyard_step HTTP/1.0\r\n\r\n")
    assert only.startswith(b"HTTP/1.1 200") and b"trainyard_step 7" in only and b"trainyard_steps_total" not in only


def test_an_accept_prometheus_client_cannot_read_gets_the_text_format(serve) -> None:
    # prometheus_client's choose_encoder raises TypeError on a version that is not numbers
    server = serve()
    for accept in (b"application/openmetrics-text;version=abc", b"text/plain;version=x.y"):
        answer = exchange(server, b"GET /metrics HTTP/1.0\r\nAccept: " + accept + b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200") and b"Content-Type: text/plain; version=0.0.4" in answer
        assert families(answer.partition(b"\r\n\r\n")[2].decode())["trainyard_step"] == 7


def test_a_collector_that_fails_gets_a_500_not_a_traceback(serve) -> None:
    class Broken:
        def collect(self) -> list:
            raise RuntimeError("boom")

    server = serve()
    server.registry.register(Broken())  # type: ignore[arg-type]
    assert exchange(server, GET).startswith(b"HTTP/1.1 500")


def test_a_kept_alive_connection_answers_pipelined_scrapes_then_is_closed_when_idle(serve) -> None:
    server = serve(idle_timeout=0.2)
    with connect(server) as sock:
        sock.sendall(GET + GET)
        answers = read_to_end(sock)  # both answered; then nothing comes, and the idle timeout closes it
    assert answers.count(b"HTTP/1.1 200 OK") == 2 and answers.count(b"trainyard_step 7") == 2


def test_many_idle_connections_never_keep_a_scrape_out(serve) -> None:
    server = serve(max_connections=4)
    idle = [connect(server) for _ in range(12)]
    try:
        answer = exchange(server, GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        assert answer.startswith(b"HTTP/1.1 200") and b"trainyard_step 7" in answer
        # the listener accepts in order, so by the scrape's answer the oldest idle ones were closed
        for sock in idle[:8]:
            assert read_to_end(sock) == b""
        assert server.refused >= 9 and server.connections() <= 4
    finally:
        for sock in idle:
            sock.close()


def test_a_head_dripped_a_byte_at_a_time_is_cut_at_the_head_timeout(serve) -> None:
    server = serve(limits=HeadLimits(head_timeout=0.3))
    with connect(server) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
        sent = 0
        # one byte per 50 ms, for ever: only the server's deadline ends this loop
        while not select.select([sock], [], [], 0.05)[0]:
            sock.sendall(b"a")
            sent += 1
            assert sent < 2000, "the server never cut a client that drips its head"
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]


def test_a_connection_that_sends_nothing_is_closed(serve) -> None:
    server = serve(limits=HeadLimits(head_timeout=0.2))
    with connect(server) as sock:
        assert read_to_end(sock) == b""


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", b"405"),
        (b"DELETE /metrics HTTP/1.1\r\nHost: a\r\n\r\n", b"405"),
        (b"CONNECT pod:9404 HTTP/1.1\r\nHost: a\r\n\r\n", b"405"),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", b"404"),
        (b"GET /metrics/../admin HTTP/1.1\r\nHost: a\r\n\r\n", b"404"),
        (b"GET http://pod:9404/metrics HTTP/1.1\r\nHost: a\r\n\r\n", b"404"),
        (b"GET /metrics HTTP/1.1\r\n\r\n", b"400"),  # no Host
        (b"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", b"400"),
        (b"GET /metrics HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\nHost: a\n\n", b"400"),  # bare LF
        (b"GET /metrics HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/2.0\r\nHost: a\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n", b"431"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 10_000, b"431"),  # refused before it ends
        (b"GET /" + b"m" * 10_000 + b" HTTP/1.1\r\n\r\n", b"431"),
    ],
)
def test_anything_but_a_scrape_is_refused_and_the_connection_closed(serve, request_bytes: bytes, status: bytes) -> None:
    server = serve()
    answer = exchange(server, request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:120]
    assert answer.count(b"\r\n\r\n") == 1 and b"Connection: close" in answer  # one answer, then the end
    if status == b"405":
        assert b"Allow: GET, HEAD" in answer


def test_pipelined_junk_after_a_scrape_gets_a_refusal_and_the_end(serve) -> None:
    server = serve()
    answer = exchange(server, GET + b"GARBAGE\r\n\r\n" + GET)
    first, _, rest = answer.partition(b"HTTP/1.1 400")
    assert first.startswith(b"HTTP/1.1 200") and b"trainyard_step 7" in first
    assert rest and b"HTTP/1.1 200" not in rest  # the scrape after the junk is never answered


def test_close_ends_every_connection(serve) -> None:
    server = serve()
    idle = connect(server)
    with idle:
        idle.sendall(b"GET /metr")
        server.close()
        assert ended(idle)
    with pytest.raises(OSError):
        socket.create_connection((LOCAL, server.port), timeout=2).close()


def test_an_answer_later_than_the_scrapers_timeout_is_not_a_delivered_scrape(serve) -> None:
    """Prometheus drops an answer that ends after the timeout it names in the request, so a run
    waiting for its last values to be scraped must wait for a scrape answered in time."""
    import threading
    import time

    slow = threading.Event()

    class Slow:
        def describe(self) -> list:
            return []

        def collect(self) -> list:
            if slow.is_set():
                time.sleep(0.4)
            return []

    server = serve()
    server.registry.register(Slow())  # type: ignore[arg-type]
    timed = b"GET /metrics HTTP/1.1\r\nHost: pod:9404\r\nX-Prometheus-Scrape-Timeout-Seconds: 0.5\r\n\r\n"
    slow.set()
    since = time.monotonic()
    exchange(server, timed.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1))
    assert not server.wait_scrape(since, begin_within=5, answer_within=0.2)  # 0.4 s > half of 0.5 s
    # the same slow answer to a scraper that names no timeout, or a longer one, was delivered
    for head in (GET, timed.replace(b": 0.5", b": 10")):
        since = time.monotonic()
        exchange(server, head.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1))
        assert server.wait_scrape(since, begin_within=5, answer_within=5)
    # an unreadable timeout is no timeout: never a reason to wait for ever
    for odd in (b"nan", b"-1", b"1e9", b"0x10", b"9" * 40):
        since = time.monotonic()
        exchange(server, timed.replace(b"0.5", odd).replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1))
        assert server.wait_scrape(since, begin_within=5, answer_within=5), odd


@pytest.mark.parametrize(
    ("values", "seconds"),
    [
        (["10"], 10.0),
        (["0.5"], 0.5),
        (["2.000000001"], 2.000000001),
        ([], None),  # not a Prometheus scrape
        (["1", "2"], None),  # repeated: which one?
        (["0"], None),  # no time at all is no timeout
        (["1e3"], None),
        (["-1"], None),
        ([" 1"], None),
        (["1."], None),
        (["inf"], None),
        (["nan"], None),
        (["١"], None),  # Arabic-Indic one: a digit to str.isdigit, not to Prometheus
        (["9" * 7], None),
        (["1." + "0" * 10], None),
        (["1" * 100_000], None),
    ],
)
def test_the_scrape_timeout_is_a_plain_decimal_named_once(values, seconds) -> None:
    assert m.scrape_timeout(values) == seconds
