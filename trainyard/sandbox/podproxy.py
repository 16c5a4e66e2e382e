"""The demo's way from the host into the pod network: an HTTP forward proxy on loopback (the
``proxy_url`` of the demo Prometheus's scrape jobs) that opens each connection from a network
namespace on the cluster bridge, as a pod of the monitoring stack would, and only to the pod
network's addresses.

It forwards exactly what a scrape is and nothing else. Through ``proxy_url`` Prometheus's HTTP
client (Go's net/http) sends a plain-HTTP request in absolute form: ``GET http://<pod ip>:<port>
<path> HTTP/1.1``, then Host, User-Agent, Accept, Accept-Encoding and
X-Prometheus-Scrape-Timeout-Seconds (Go's src/net/http/request.go ``Request.write``: with
``usingProxy`` the request URI is ``scheme + "://" + host + RequestURI``; prometheus@v2.42.0, the
demo's, scrape/scrape.go ``targetScraper.scrape`` sets the scrape's fields). So:

- the head is read strictly (:mod:`trainyard.contract.httphead`: CRLF only, no folding, 8 KiB and
  32 fields at most, the whole head within ``head_timeout`` seconds);
- the method is GET (CONNECT, a tunnel, and every other method: 405), the target
  ``http://<IPv4>[:port]/path`` with the address inside the pod network (403 otherwise; an
  origin-form, https, a name or userinfo in the authority: 400 or 403), no body
  (Content-Length other than 0, Transfer-Encoding: 400) and nothing after the head;
- what reaches the pod is a request built anew from the parsed head: ``GET <path> HTTP/1.1``,
  Host from the target (RFC 9112 3.2.2: a proxy replaces Host with the target's authority), the
  scrape's own fields from the list above re-written one per line, ``Connection: close``. Other
  fields (Proxy-*, Cookie, ...) are dropped;
- at most ``max_connections`` clients at once (more are answered 503 and closed); the pod's
  answer is relayed until it closes, within ``answer_timeout`` seconds in all, or within the
  scrape's own timeout (the connect included) where it names one: Prometheus has given up by then.

Connections to pods are opened in parallel: a connect that hangs holds only its own scrape. One
hangs whenever a target's address answers nothing: a finished pod's network is gone before the
discovery drops it (no neighbour answers for its IP), or a frozen process's listen backlog is full.
Opened one after another, each such connect would stall every other pod's scrape for its
whole timeout (a demo's report then lost the last half of its job).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import queue
import re
import socket
import socketserver
import threading
import time
from typing import Any, Protocol

from trainyard.contract.errors import UserError
from trainyard.contract.httphead import HeadError, HeadLimits, HeadReader, RequestHead, refusal
from trainyard.contract.metrics import SCRAPE_TIMEOUT_FIELD, scrape_timeout

CLONE_NEWNET = 0x40000000  # linux/sched.h
LIMITS = HeadLimits(max_line=4096, max_fields=32, max_head=8192, head_timeout=10.0)
MAX_CONNECTIONS = 16  # one Prometheus scrapes a handful of pods at once
ANSWER_TIMEOUT = 60.0  # a scrape's timeout is 10 s by default; a pod that trickles is cut here
CONNECT_TIMEOUT = 5.0
FORWARDED = ("user-agent", "accept", "accept-encoding", SCRAPE_TIMEOUT_FIELD)
# absolute-form as Go writes it for an http target: lower-case scheme, an IPv4 address, a port
_TARGET = re.compile(r"http://([0-9]{1,3}(?:\.[0-9]{1,3}){3})(?::([0-9]{1,5}))?(/[!-\"$-~]*)?")  # no fragment


class Connects(Protocol):
    def connect(self, host: str, port: int, timeout: float) -> socket.socket: ...

    def close(self) -> None: ...


class Dialer:
    """Connections opened from inside one network namespace. A socket belongs to the namespace of
    the thread that created it (setns(2) moves only the calling thread), so one thread that entered
    the namespace creates the sockets, at once, and each caller connects its own on its thread."""

    def __init__(self, netns: str) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._ready = threading.Event()
        self._error: str | None = None
        self._thread = threading.Thread(target=self._serve, args=(netns,), name=f"dialer-{netns}", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error:
            raise UserError(f"cannot enter network namespace {netns}: {self._error}")

    def _serve(self, netns: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        except OSError as exc:
            self._error = str(exc)
            self._ready.set()
            return
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                self._error = os.strerror(ctypes.get_errno())
        finally:
            os.close(fd)
        self._ready.set()
        if self._error:
            return
        while (reply := self._requests.get()) is not None:
            try:
                reply.put(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            except OSError as exc:
                reply.put(exc)

    def connect(self, host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> socket.socket:
        reply: queue.Queue = queue.Queue(maxsize=1)
        self._requests.put(reply)
        try:
            made = reply.get(timeout=10)
        except queue.Empty:
            raise OSError("the network namespace's thread made no socket in 10 s") from None
        if isinstance(made, OSError):
            raise made
        try:
            made.settimeout(timeout)
            made.connect((host, port))
        except OSError:
            made.close()
            raise
        return made

    def close(self) -> None:
        self._requests.put(None)


def plan(head: RequestHead, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> tuple[str, int, bytes]:
    """(address, port, the request to send there) for a scrape; a HeadError saying why not."""
    if head.method != "GET":
        what = "a tunnel (CONNECT)" if head.method == "CONNECT" else head.method[:20]
        raise HeadError(405, f"only GET is proxied, not {what}")
    if not (match := _TARGET.fullmatch(head.target)):
        raise HeadError(400, "the target is not http://<IPv4 address>[:port]/path (absolute form)")
    address, port_text, path = match.groups()
    try:
        host = ipaddress.IPv4Address(address)
    except ValueError:
        raise HeadError(400, f"{address} is not an IPv4 address") from None
    port = int(port_text) if port_text else 80
    if not 0 < port < 65536:
        raise HeadError(400, f"port {port_text} is not 1-65535")
    if host not in network:
        raise HeadError(403, f"only http:// to {network} is proxied")
    if len(head.values("host")) > 1:
        raise HeadError(400, "the Host field is given twice")
    if head.values("transfer-encoding") or head.one("content-length") not in (None, "0"):
        raise HeadError(400, "a scrape has no body: Content-Length other than 0 and Transfer-Encoding are refused")
    authority = f"{host}:{port}"
    lines = [f"GET {path or '/'} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{_CANONICAL[name]}: {value}" for name, value in head.fields if name in _CANONICAL]
    lines += ["Connection: close", "", ""]
    return str(host), port, "\r\n".join(lines).encode("latin-1")


_CANONICAL = {name: "-".join(part.capitalize() for part in name.split("-")) for name in FORWARDED}


class PodNetworkProxy:
    """The proxy (see the module docstring) on 127.0.0.1, any free port: ``url`` is its address."""

    def __init__(
        self,
        dialer: Connects,
        network: ipaddress.IPv4Network | ipaddress.IPv6Network,
        *,
        max_connections: int = MAX_CONNECTIONS,
        limits: HeadLimits = LIMITS,
        answer_timeout: float = ANSWER_TIMEOUT,
    ) -> None:
        self.dialer, self.network, self.limits, self.answer_timeout = dialer, network, limits, answer_timeout
        proxy = self
        slots = threading.BoundedSemaphore(max_connections)

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 32

            def process_request(self, request: Any, client_address: Any) -> None:
                if not slots.acquire(blocking=False):
                    with contextlib.suppress(OSError):
                        request.settimeout(1)
                        request.sendall(refusal(503, f"more than {max_connections} connections at once"))
                    self.shutdown_request(request)
                    return
                super().process_request(request, client_address)

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    slots.release()

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a scrape cut short (a pod killed mid-answer) is Prometheus's to count as down

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="pod-network-proxy", daemon=True)
        self._thread.start()

    def _handle(self, conn: socket.socket) -> None:
        reader = HeadReader(conn, self.limits)
        try:
            head = reader.next(self.limits.head_timeout)
            if head is None:
                return
            if reader.buffer:
                raise HeadError(400, "bytes follow the request head (a body or a second request): one GET a connection")
            host, port, request = plan(head, self.network)
        except HeadError as exc:
            with contextlib.suppress(OSError):
                conn.settimeout(5)
                conn.sendall(refusal(exc.status, exc.why))
            return
        # Prometheus gives up at its timeout, counted from before the head reached us
        named = scrape_timeout(head.values(SCRAPE_TIMEOUT_FIELD))
        deadline = time.monotonic() + min(self.answer_timeout, named or self.answer_timeout)
        try:
            upstream = self.dialer.connect(host, port, max(min(CONNECT_TIMEOUT, deadline - time.monotonic()), 0.001))
        except OSError as exc:
            with contextlib.suppress(OSError):
                conn.settimeout(5)
                conn.sendall(refusal(502, f"cannot connect to {host}:{port}: {exc}"))
            return
        with upstream, contextlib.suppress(OSError):  # either end gone: the scrape fails, nothing else
            upstream.settimeout(max(deadline - time.monotonic(), 0.001))
            upstream.sendall(request)
            while (left := deadline - time.monotonic()) > 0:
                upstream.settimeout(left)
                if not (chunk := upstream.recv(65536)):
                    break
                conn.settimeout(left)
                conn.sendall(chunk)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.dialer.close()
