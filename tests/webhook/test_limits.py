"""The webhook port's limits against a running ``trainyard serve``: header caps, the connection cap
and the order in which it closes connections, the TLS handshake deadline, and the bound on request
bodies held at once. No test depends on timing beyond generous deadlines."""

from __future__ import annotations

import socket
import ssl
import time

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from tests.webhook.conftest import POLICIES, example
from tests.webhook.server_process import Server, wait_for
from trainyard.cluster.processes import free_port
from webhook.app import BodyBudget, State, create_app
from webhook.certs import generate
from webhook.policy import load_policies
from webhook.probes import ProbeServer
from webhook.review import admission_review

BODY = orjson.dumps(admission_review(example("pytorchjob-worker.yaml")))


@pytest.fixture
def server(tmp_path, request):
    tls = tmp_path / "tls"
    generate(tls)
    extra = getattr(request, "param", ())
    with Server(POLICIES, tls, tls / "ca.crt", "roce", log=tmp_path / "log", extra_args=extra) as s:
        yield s


def tls_socket(server: Server) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.ssl_context().wrap_socket(raw, server_hostname="localhost")


def request_bytes(*headers: bytes, body: bytes = BODY) -> bytes:
    head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    return head + b"".join(headers) + b"Content-Length: %d\r\n\r\n" % len(body) + body


def status_of(s: socket.socket, data: bytes) -> bytes:
    s.sendall(data)
    reply = b""
    while b"\r\n" not in reply:
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    return reply.split(b"\r\n", 1)[0]


def closed_by_server(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


def metric(server: Server, line_start: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.probe_port}/metrics", timeout=10).text
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


@pytest.mark.server
def test_headers_are_capped_in_number_and_in_bytes(server):
    with tls_socket(server) as s:
        many = [b"X-A%d: v\r\n" % i for i in range(64)]
        assert status_of(s, request_bytes(*many)) == b"HTTP/1.1 431 Request Header Fields Too Large"
        assert closed_by_server(s)
    with tls_socket(server) as s:
        assert status_of(s, request_bytes(b"X-Big: " + b"a" * 20_000 + b"\r\n")).startswith(b"HTTP/1.1 431")
    with tls_socket(server) as s:  # sent a byte at a time, it is counted all the same
        s.sendall(b"POST /mutate HTTP/1.1\r\nX-Slow: ")
        for _ in range(17):
            s.sendall(b"a" * 1024)
        assert status_of(s, b"\r\n\r\n").startswith(b"HTTP/1.1 431")
    with tls_socket(server) as s:  # a normal request with a few extra headers is served
        assert status_of(s, request_bytes(*many[:40])) == b"HTTP/1.1 200 OK"


@pytest.mark.server
@pytest.mark.parametrize("server", [("--max-connections", "8")], indirect=True)
def test_at_the_cap_stalled_connections_make_room_and_kept_alive_ones_stay(server):
    kept = tls_socket(server)
    assert status_of(kept, request_bytes()) == b"HTTP/1.1 200 OK"  # a connection kube-apiserver keeps
    kept.recv(65536)
    stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(7)]
    wait_for(lambda: metric(server, "trainyard_webhook_connections ") == 8, what="8 connections")
    newcomers = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(3)]
    # the three oldest stalled connections were closed for them, oldest first
    assert [closed_by_server(s) for s in stalled[:3]] == [True, True, True]
    assert metric(server, 'trainyard_webhook_connections_closed_total{why="evicted_fresh"}') == 3
    with tls_socket(server) as s:  # a new client still gets in, and is served
        assert status_of(s, request_bytes()) == b"HTTP/1.1 200 OK"
    assert status_of(kept, request_bytes()) == b"HTTP/1.1 200 OK"  # and the kept one was never closed
    for s in [kept, *stalled, *newcomers]:
        s.close()


@pytest.mark.server
@pytest.mark.parametrize("server", [("--max-connections", "16")], indirect=True)
def test_many_idle_connections_never_keep_a_review_out(server):
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(200)]
    with server.client() as c:
        for _ in range(5):
            r = c.post("/mutate", content=BODY, headers={"content-type": "application/json"})
            assert r.status_code == 200
    assert metric(server, "trainyard_webhook_connections ") <= 16
    for s in idle:
        s.close()


@pytest.mark.server
@pytest.mark.parametrize("server", [("--tls-handshake-timeout", "0.5")], indirect=True)
def test_a_connection_that_never_completes_its_handshake_is_closed(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as silent:
        assert closed_by_server(silent)  # within the recv timeout: the deadline is 0.5 s
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as partial:
        partial.sendall(b"\x16\x03\x01\x00")  # the start of a TLS record, then nothing
        assert closed_by_server(partial)
    with server.client() as c:
        assert c.get("/healthz").status_code == 200


def test_bodies_held_at_once_are_bounded():
    state = State(policies=load_policies(POLICIES), default="roce", bodies=BodyBudget(limit=len(BODY) - 1))
    with TestClient(create_app(state)) as client:
        r = client.post("/mutate", content=BODY, headers={"content-type": "application/json"})
        assert r.status_code == 503 and "too many request bodies in flight" in r.json()["error"]
        assert state.bodies.used == 0  # given back
        state.bodies.limit = len(BODY)
        assert client.post("/mutate", content=BODY, headers={"content-type": "application/json"}).status_code == 200
        assert state.bodies.used == 0


def test_the_probe_listener_reports_a_stalled_event_loop():
    state = State(policies=load_policies(POLICIES), default="roce")
    probes = ProbeServer("127.0.0.1", free_port(), state, stall_after=10.0).start()
    try:
        base = f"http://127.0.0.1:{probes.server_address[1]}"
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        state.heartbeat = time.monotonic() - 30  # the loop has not ticked for 30 s
        r = httpx.get(f"{base}/healthz", timeout=10)
        assert r.status_code == 503 and "the event loop has not run for 30 s" in r.text
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200  # readiness is another question
        state.draining = True
        assert httpx.get(f"{base}/readyz", timeout=10).json() == {"error": "not ready: draining (shutting down)"}
    finally:
        probes.stop()
