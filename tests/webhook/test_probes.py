"""The probe listener reads request heads strictly and within one deadline: a head dripped a byte
at a time is cut at ``TIMEOUT`` (the stdlib's reader timed out each read alone), a bare LF, another
method or a body is refused; the kubelet's GET and Prometheus's scrape still work."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.webhook.conftest import POLICIES
from webhook.app import State
from webhook.policy import load_policies
from webhook.probes import TIMEOUT, ProbeServer


@pytest.fixture
def probes() -> Iterator[ProbeServer]:
    state = State(policies=load_policies(POLICIES), default="roce")
    server = ProbeServer("127.0.0.1", 0, state, stall_after=10.0).start()
    yield server
    server.stop()


def exchange(probes: ProbeServer, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", probes.server_address[1]), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_probes_and_scrapes_are_answered(probes: ProbeServer) -> None:
    base = f"http://127.0.0.1:{probes.server_address[1]}"
    assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
    assert httpx.get(f"{base}/metrics", timeout=10).status_code == 200
    assert httpx.get(f"{base}/nothing", timeout=10).status_code == 404


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", b"405"),
        (b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nabcd", b"400"),
        (b"GET /healthz HTTP/1.1\nHost: a\n\n", b"400"),
        (b"GET /healthz HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", b"400"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 40 + b"\r\n", b"431"),
    ],
)
def test_what_is_not_a_probe_is_refused(probes: ProbeServer, data: bytes, status: bytes) -> None:
    assert exchange(probes, data).startswith(b"HTTP/1.1 " + status)


def test_a_head_dripped_a_byte_at_a_time_is_cut_at_the_deadline(probes: ProbeServer) -> None:
    with socket.create_connection(("127.0.0.1", probes.server_address[1]), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        sent = 0
        while not select.select([sock], [], [], 0.05)[0]:  # a byte per 50 ms until the server speaks
            sock.sendall(b"a")
            sent += 1
            assert sent < 40 * TIMEOUT * 10, "the listener never cut a client that drips its head"
        assert sock.recv(100).startswith(b"HTTP/1.1 408")
