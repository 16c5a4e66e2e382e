"""The probe listener: /healthz, /readyz and /metrics over plain HTTP on a port of their own.

The kubelet's probes and Prometheus come here, not to the webhook port: a flood of connections on
the webhook port (capped there, oldest stalled ones closed first) never makes a probe wait or
fail, and the probe port itself is reached only from the node and the monitoring namespace
(base/webhook networkpolicy.yaml). It runs on a thread of its own, so it answers while the event
loop works; /healthz reports the event loop itself: it fails once the loop has not ticked for
``stall_after`` seconds (a loop stuck that long is restarted by the liveness probe).

At most ``MAX_CLIENTS`` probes are answered at once, each within ``TIMEOUT`` seconds; more are
closed unanswered.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from webhook.app import State, readiness

MAX_CLIENTS = 16
TIMEOUT = 2.0


class _Handler(BaseHTTPRequestHandler):
    server: ProbeServer
    timeout = TIMEOUT  # socket timeout: a slow client is cut
    protocol_version = "HTTP/1.1"

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
