"""The demo's proxy into the pod network: a scrape's GET is forwarded rebuilt, anything else is
refused before a connection to a pod is opened. Mutations of a scrape's head (Hypothesis) are
either refused or forwarded as exactly one clean request, read by h11 (an independent parser);
the positive control is the real Prometheus scraping the trainer's real listener through it."""

from __future__ import annotations

import ipaddress
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge

from trainer.metrics_http import MetricsServer
from trainyard.cluster.processes import wait_for
from trainyard.contract.httphead import HeadLimits
from trainyard.sandbox import monitoring, podproxy
from trainyard.sandbox.localpods import isolation_available

NETWORK = ipaddress.ip_network("10.244.99.0/24")
NETNS = isolation_available()  # (whether, why not): probed once, it adds and deletes a namespace
POD = "10.244.99.5"
# what Prometheus (Go's net/http) sends through proxy_url for a plain-HTTP target
SCRAPE = (
    f"GET http://{POD}:9404/metrics HTTP/1.1\r\n"
    f"Host: {POD}:9404\r\n"
    "User-Agent: Prometheus/2.42.0\r\n"
    "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
    "Accept-Encoding: gzip\r\n"
    "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n"
).encode()
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nup 1\n\n"


class Upstream:
    """Stands in for the pod network: every dial reaches one local server, which answers a head
    and then records every byte the proxy sent on that connection, to its end."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.asked: list[tuple[str, int]] = []
        self.received: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(4096)):
                    data += chunk
                conn.sendall(ANSWER)
                conn.shutdown(socket.SHUT_WR)  # the answer ends: the proxy closes its side
                while chunk := conn.recv(4096):
                    data += chunk
                self.received.put(data)

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        self.asked.append((host, port))
        return socket.create_connection(self.server.getsockname(), timeout=timeout)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def proxied() -> Iterator[tuple[podproxy.PodNetworkProxy, Upstream]]:
    upstream = Upstream()
    proxy = podproxy.PodNetworkProxy(upstream, NETWORK)
    yield proxy, upstream
    proxy.close()
    upstream.close()


def ask(proxy: podproxy.PodNetworkProxy, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(head)
        out = b""
        try:
            while chunk := s.recv(4096):
                out += chunk
        except ConnectionResetError:
            pass  # closed with bytes of ours unread: what was answered before is in out
    return out


def one_request(data: bytes) -> h11.Request:
    """``data`` read by h11 as a server reads it: exactly one complete GET, nothing after it."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    conn.receive_data(b"")  # the proxy closed its side: nothing more comes
    request = conn.next_event()
    assert isinstance(request, h11.Request), request
    assert isinstance(conn.next_event(), h11.EndOfMessage)
    assert conn.trailing_data == (b"", True)  # no second request, no body
    return request


def test_a_scrape_is_forwarded_rebuilt(proxied) -> None:
    proxy, upstream = proxied
    sent = SCRAPE.replace(b"\r\n\r\n", b"\r\nProxy-Connection: keep-alive\r\nCookie: a=b\r\n\r\n")
    answer = ask(proxy, sent)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"up 1\n\n")
    assert upstream.asked == [(POD, 9404)]
    request = one_request(upstream.received.get(timeout=10))
    assert (request.method, request.target, request.http_version) == (b"GET", b"/metrics", b"1.1")
    names = [n for n, _ in request.headers]
    assert names == [b"host", b"user-agent", b"accept", b"accept-encoding", b"x-prometheus-scrape-timeout-seconds",
                     b"connection"]  # fmt: skip
    assert dict(request.headers)[b"host"] == f"{POD}:9404".encode()
    assert dict(request.headers)[b"connection"] == b"close"


REFUSED = {
    b"POST http://10.244.99.5:9404/ HTTP/1.1\r\nHost: a\r\n\r\n": b"405",
    b"CONNECT 10.244.99.5:9404 HTTP/1.1\r\nHost: 10.244.99.5:9404\r\n\r\n": b"405",
    b"GET /metrics HTTP/1.1\r\nHost: 10.244.99.5:9404\r\n\r\n": b"400",  # origin form: not a proxy request
    b"GET http://127.0.0.1:22/ HTTP/1.1\r\n\r\n": b"403",
    b"GET http://10.0.0.1:80/ HTTP/1.1\r\n\r\n": b"403",
    b"GET https://10.244.99.5:9404/ HTTP/1.1\r\n\r\n": b"400",
    b"GET HTTP://10.244.99.5:9404/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://user@10.244.99.5:9404/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://10.244.99.5@127.0.0.1:22/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://010.244.99.5:9404/ HTTP/1.1\r\n\r\n": b"400",  # no octal-looking addresses
    b"GET http://10.244.99.5:99999/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://example.com/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://[::1]:80/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://\xff\xfe/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://10.244.99.5:9404/#x HTTP/1.1\r\n\r\n": b"400",
    # one GET carrying a second request: a bare LF, folding, a body, bytes after the head
    b"GET http://10.244.99.5:9404/metrics HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n": b"400",
    b"GET http://10.244.99.5:9404/metrics HTTP/1.1\nHost: a\n\nDELETE /x HTTP/1.1\n\n": b"400",
    b"GET http://10.244.99.5:9404/metrics HTTP/1.1\r\nHost: a\r\n X: 1\r\n\r\n": b"400",
    b"GET http://10.244.99.5:9404/metrics HTTP/1.1\r\nContent-Length: 18\r\n\r\nPOST /x HTTP/1.1\r\n": b"400",
    b"GET http://10.244.99.5:9404/metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n": b"400",
    b"GET http://10.244.99.5:9404/metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n": b"400",
    b"GET http://10.244.99.5:9404/metrics HTTP/1.1\r\n\r\nPOST /x HTTP/1.1\r\n\r\n": b"400",
    b"GET " + b"a" * 20000 + b" HTTP/1.1\r\n\r\n": b"431",
    b"GET http://10.244.99.5:9404/ HTTP/1.1\r\n" + b"X: y\r\n" * 5000 + b"\r\n": b"431",
}


@pytest.mark.parametrize("head", REFUSED, ids=[h[:40].decode("latin-1") for h in REFUSED])
def test_anything_but_a_scrape_is_refused_before_a_pod_is_dialled(proxied, head: bytes) -> None:
    proxy, upstream = proxied
    assert ask(proxy, head).startswith(b"HTTP/1.1 " + REFUSED[head])
    assert upstream.asked == []


ODD = st.sampled_from([b"\r", b"\n", b"\r\n", b" ", b"\t", b":", b"\x00", b"@", b"/", b"#", b"a", b"9", b"."])
SMUGGLED = st.sampled_from([b"", b"POST /admin HTTP/1.1\r\nHost: x\r\n\r\n", b"X: y\r\n\r\n", b"\n\n", b"0\r\n\r\n"])


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    head = bytearray(SCRAPE[:-4])  # without the final empty line, mutated, then ended again
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(head)))
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        if kind == "insert":
            head[at:at] = draw(ODD)
        elif at < len(head):
            head[at : at + 1] = b"" if kind == "delete" else draw(ODD)
    return bytes(head) + b"\r\n\r\n" + draw(SMUGGLED)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=mutated())
def test_a_mutated_scrape_is_refused_or_forwarded_as_one_clean_request(proxied, head: bytes) -> None:
    proxy, upstream = proxied
    upstream.asked.clear()
    answer = ask(proxy, head)
    if not upstream.asked:  # refused: with a 4xx, before a pod was dialled
        assert answer[:10] == b"HTTP/1.1 4", (head, answer[:80])
        return
    assert answer == ANSWER and len(upstream.asked) == 1
    host, port = upstream.asked[0]
    assert ipaddress.ip_address(host) in NETWORK
    request = one_request(upstream.received.get(timeout=10))
    assert request.method == b"GET" and request.target.startswith(b"/")
    assert dict(request.headers)[b"host"] == f"{host}:{port}".encode()
    assert {n for n, _ in request.headers} <= {b"host", b"connection", *(n.encode() for n in podproxy.FORWARDED)}
    assert b"POST" not in request.target and b"admin" not in request.target


def test_connections_are_capped_and_a_silent_client_is_let_go() -> None:
    upstream = Upstream()
    proxy = podproxy.PodNetworkProxy(upstream, NETWORK, max_connections=2, limits=HeadLimits(head_timeout=0.3))
    try:
        slow, silent = (socket.create_connection(("127.0.0.1", proxy.port), timeout=10) for _ in range(2))
        slow.sendall(b"GET http://10.244.99.5:9404/metrics HTTP/1.1\r\nHost: ")
        # both slots are held until their heads time out; the third is refused at once
        assert ask(proxy, SCRAPE).startswith(b"HTTP/1.1 503")
        with slow:
            assert slow.recv(100).startswith(b"HTTP/1.1 408")  # cut at the head deadline
        with silent:
            assert silent.recv(100) == b""  # a client that never spoke is let go without a word
        wait_for(lambda: ask(proxy, SCRAPE).startswith(b"HTTP/1.1 200"), 10, "a slot freed by the deadline")
    finally:
        proxy.close()
        upstream.close()


class Direct:
    """Dials on the host: the pod network of the test is loopback."""

    def connect(self, host: str, port: int, timeout: float) -> socket.socket:
        return socket.create_connection((host, port), timeout=timeout)

    def close(self) -> None:
        pass


@pytest.mark.server  # a Prometheus process: the slow tiers
@pytest.mark.skipif(not Path("/usr/bin/prometheus").exists(), reason="needs Debian's prometheus (make installs it)")
def test_the_real_prometheus_scrapes_the_trainer_listener_through_the_proxy(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    Gauge("trainyard_step", "the step", registry=registry).set(42)
    trainer = MetricsServer(registry, "127.0.0.1", 0)
    proxy = podproxy.PodNetworkProxy(Direct(), ipaddress.ip_network("127.0.0.0/8"))
    job = {
        "job_name": "pods",
        "scrape_interval": "1s",
        "proxy_url": proxy.url,
        "static_configs": [{"targets": [f"127.0.0.1:{trainer.port}"]}],
    }
    prom = monitoring.Prometheus(tmp_path, {"global": {"scrape_interval": "1s"}, "scrape_configs": [job]})
    try:
        prom.start()

        def scraped() -> bool:
            return [r["value"][1] for r in prom.query('trainyard_step{job="pods"}')] == ["42"]

        wait_for(scraped, 60, "trainyard_step scraped through the proxy")
        assert [r["value"][1] for r in prom.query('up{job="pods"}')] == ["1"]
    finally:
        prom.close()
        proxy.close()
        trainer.close()


# A pod whose listen backlog is full (its process frozen, never accepting) drops SYNs: a connect to
# it hangs. listen(0) holds one unaccepted connection; the next connect hangs.
_POD_NETWORK = """
import socket, sys, time
frozen = socket.create_server(("127.0.0.1", 0), backlog=0)
live = socket.create_server(("127.0.0.1", 0), backlog=8)
print(frozen.getsockname()[1], live.getsockname()[1], flush=True)
while True:
    conn, _ = live.accept()
    conn.close()
"""


@pytest.mark.netns
@pytest.mark.skipif(not NETNS[0], reason=f"needs root and ip netns: {NETNS[1]}")
def test_a_pod_that_drops_syns_holds_only_its_own_scrape() -> None:
    name = f"ty-dial-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    pods = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        pods = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", _POD_NETWORK],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        frozen, live = (int(p) for p in pods.stdout.readline().split())
        dialer = podproxy.Dialer(name)
        dialer.connect("127.0.0.1", frozen, 5).close()  # fills the backlog: the kernel never frees it
        hung: queue.Queue = queue.Queue()

        def dial_frozen() -> None:
            try:
                hung.put(dialer.connect("127.0.0.1", frozen, 60))
            except OSError as exc:
                hung.put(exc)

        threading.Thread(target=dial_frozen, daemon=True).start()

        def syn_sent() -> bool:
            ss = ["ip", "netns", "exec", name, "ss", "-Htn", "state", "syn-sent"]
            return f":{frozen}" in subprocess.run(ss, capture_output=True, text=True).stdout

        wait_for(syn_sent, 30, "the connect to the frozen pod waiting on its SYN")
        with dialer.connect("127.0.0.1", live, 5) as sock:  # not queued behind the hung connect
            assert sock.getpeername()[1] == live
        assert hung.empty(), "the frozen pod's connect ended first: connects are not concurrent"
        dialer.close()
    finally:
        if pods is not None:
            pods.kill()
            pods.wait()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
