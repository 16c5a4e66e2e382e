"""The probe listener: /healthz, /readyz and /metrics over plain HTTP on a port of their own.

The kubelet's probes and Prometheus come here, not to the webhook port: a flood of connections on
the webhook port (capped there, oldest stalled ones closed first) never makes a probe wait or
fail, and the probe port itself is reached only from the node and the monitoring namespace
(base/webhook networkpolicy.yaml). It runs on a thread of its own, so it answers while the event
loop works; /healthz reports the event loop itself: it fails once the loop has not ticked for
``stall_after`` seconds (a loop stuck that long is restarted by the liveness probe).

At most ``MAX_CLIENTS`` probes are answered at once; more are closed unanswered. A request head is
read strictly (:mod:`trainyard.contract.httphead`: CRLF only, no folding, 4 KiB, 16 fields) and
must arrive whole within ``TIMEOUT`` seconds (a deadline for the head, not for each read: a client
sending a byte a second holds a slot for ``TIMEOUT`` seconds, not for as long as it likes); only
GET is answered, once a connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trainyard.contract.httphead import HeadError, HeadLimits, HeadReader, refusal
from webhook.app import State, readiness

MAX_CLIENTS = 16
TIMEOUT = 2.0
LIMITS = HeadLimits(max_line=2048, max_fields=16, max_head=4096, head_timeout=TIMEOUT)


class _Handler(BaseHTTPRequestHandler):
    server: ProbeServer
    timeout = TIMEOUT  # socket timeout: a slow client is cut
    protocol_version = "HTTP/1.1"

    def handle(self) -> None:
        """One request a connection, its head read by HeadReader in place of the stdlib's lenient
        reader (whose timeout is per read)."""
        with contextlib.suppress(OSError):  # the client left or stopped reading: nothing to answer
            self._handle()

    def _handle(self) -> None:
        try:
            head = HeadReader(self.connection, LIMITS).next(TIMEOUT)
            if head is None:
                return
            if head.method != "GET":
                raise HeadError(405, f"only GET is answered, not {head.method[:20]}")
            if head.values("transfer-encoding") or head.one("content-length") not in (None, "0"):
                raise HeadError(400, "a probe has no body")
        except HeadError as exc:
            self.connection.settimeout(TIMEOUT)
            self.connection.sendall(refusal(exc.status, exc.why))
            return
        self.connection.settimeout(TIMEOUT)  # the reader leaves what was left of its deadline
        self.command, self.path, self.request_version = head.method, head.target, f"HTTP/{head.version}"
        self.requestline = f"{head.method} {head.target} HTTP/{head.version}"
        self.close_connection = True
        self.do_GET()
        self.wfile.flush()

    def do_GET(self) -> None:
        state = self.server.state
        if self.path == "/healthz":
            stalled = time.monotonic() - state.heartbeat
            if stalled > self.server.stall_after:
                self._send(503, b'{"error": "the event loop has not run for %.0f s"}' % stalled)
            else:
                self._send(200, b'{"status": "ok"}')
        elif self.path == "/readyz":
            self._send(*readiness(state))
        elif self.path == "/metrics":
            self._send(200, state.metrics.render(), state.metrics.content_type)
        else:
            self._send(404, b'{"error": "not found"}')

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


class ProbeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, host: str, port: int, state: State, stall_after: float) -> None:
        super().__init__((host, port), _Handler)
        self.state, self.stall_after = state, stall_after
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self.thread = threading.Thread(target=self.serve_forever, name="trainyard-probes", daemon=True)

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def start(self) -> ProbeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
