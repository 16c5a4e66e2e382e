"""The listener of the trainer's metrics: ``GET /metrics`` (and HEAD) over plain HTTP, bounded.

Any pod may reach this port where the cluster enforces no NetworkPolicy, so what a client can hold
is bounded (prometheus_client's ``start_http_server``, used before, kept a thread per connection for
as long as the client kept it open, with no cap and no timeout):

- at most ``max_connections`` connections at once, a thread each. A new one at the cap closes the
  connection that has waited longest for a request (one that connected and stalls, or a kept-alive
  one idle between scrapes); a connection being answered is never closed. When every one is being
  answered, the new one is closed at once. A flood of idle connections thus never keeps a scrape
  that comes after it out.
- a request head is read strictly (:mod:`trainyard.contract.httphead`: CRLF only, no folding, at
  most 8 KiB and 32 fields) and must end within ``head_timeout`` seconds of its first byte; a new
  connection must start one within ``head_timeout``, a kept-alive one within ``idle_timeout``;
- the answer is written within ``write_timeout`` seconds (a client that stops reading is cut);
- only ``GET`` or ``HEAD`` of ``METRICS_PATH`` are answered (405, 404 otherwise); a request with a
  body, or HTTP/1.1 without exactly one Host, is refused (400) and the connection closed.

The answer is what ``start_http_server`` gave: prometheus_client's content negotiation
(``choose_encoder``: OpenMetrics when the Accept asks for it), gzip when Accept-Encoding allows it,
and ``name[]`` query parameters restricting the families.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import itertools
import socket
import threading
import time
import urllib.parse
from collections import OrderedDict, deque

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest, gzip_accepted

from trainyard.contract.httphead import HeadError, HeadLimits, HeadReader, RequestHead, reason, refusal
from trainyard.contract.metrics import METRICS_PATH, SCRAPE_TIMEOUT_FIELD, scrape_timeout

MAX_CONNECTIONS = 8  # Prometheus keeps one; a few more for people and a second Prometheus
LIMITS = HeadLimits(max_line=4096, max_fields=32, max_head=8192, head_timeout=5.0)
IDLE_TIMEOUT = 75.0  # a kept-alive scrape connection outlives one 30 s..60 s scrape interval
WRITE_TIMEOUT = 10.0
BACKLOG = 16
ALLOW = (("Allow", "GET, HEAD"),)


def _in_time(head: RequestHead, took: float) -> bool:
    """Whether the scraper still took the answer that took ``took`` seconds from the head: within
    half its timeout (its clock started before the head reached us), or any time when it names none."""
    timeout = scrape_timeout(head.values(SCRAPE_TIMEOUT_FIELD))
    return timeout is None or took <= timeout / 2


class MetricsServer:
    """Serves ``registry`` on ``addr:port`` (port 0: any free one) from a daemon thread.
    OSError when the port cannot be bound."""

    def __init__(
        self,
        registry: CollectorRegistry,
        addr: str,
        port: int,
        *,
        max_connections: int = MAX_CONNECTIONS,
        limits: HeadLimits = LIMITS,
        idle_timeout: float = IDLE_TIMEOUT,
        write_timeout: float = WRITE_TIMEOUT,
    ) -> None:
        self.registry, self.limits = registry, limits
        self.max_connections, self.idle_timeout, self.write_timeout = max_connections, idle_timeout, write_timeout
        self._listener = socket.create_server((addr, port), backlog=BACKLOG)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._waiting: OrderedDict[int, socket.socket] = OrderedDict()  # oldest wait first
        self._busy: dict[int, socket.socket] = {}
        self._keys = itertools.count()
        self._closed = False
        self.refused = 0  # connections closed at the cap (new or evicted), for tests and debugging
        # When scrapes (GETs answered 200) began, and the begin of the last answered in full: what
        # a finished run waits on so that its last values reach Prometheus before the pod ends.
        self._scrapes = threading.Condition(self._lock)
        self.scrape_begins: deque[float] = deque(maxlen=2)
        self._answered_begin = float("-inf")
        self._thread = threading.Thread(target=self._accept, name="trainyard-metrics", daemon=True)
        self._thread.start()

    # --------------------------------------------------------------------------- connections

    def connections(self) -> int:
        with self._lock:
            return len(self._waiting) + len(self._busy)

    def scrape_interval(self) -> float | None:
        """Seconds between the last two scrapes; None before two."""
        with self._lock:
            return self.scrape_begins[1] - self.scrape_begins[0] if len(self.scrape_begins) == 2 else None

    def scraped(self) -> bool:
        with self._lock:
            return bool(self.scrape_begins)

    def wait_scrape(self, since: float, begin_within: float, answer_within: float) -> bool:
        """Wait for a scrape that begins at or after ``since`` (monotonic) within ``begin_within``
        seconds, then for its answer to be written in full within ``answer_within``: such a scrape
        read every value set before ``since``. True when one was answered."""
        with self._scrapes:
            if not self._scrapes.wait_for(lambda: bool(self.scrape_begins) and self.scrape_begins[-1] >= since,
                                          begin_within):  # fmt: skip
                return False
            return self._scrapes.wait_for(lambda: self._answered_begin >= since, answer_within)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError as exc:
                if self._closed:
                    return
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.1)  # out of descriptors: let the connections being closed free some
                continue
            key = next(self._keys)
            if not self._admit(key, conn):
                _drop(conn)
                continue
            try:
                threading.Thread(
                    target=self._serve, args=(key, conn), name="trainyard-metrics-conn", daemon=True
                ).start()
            except RuntimeError:  # no thread to be had (the process is at its limit): this one is let go
                with self._lock:
                    self._waiting.pop(key, None)
                _drop(conn)

    def _admit(self, key: int, conn: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            if len(self._waiting) + len(self._busy) >= self.max_connections:
                self.refused += 1
                if not self._waiting:
                    return False
                _, victim = self._waiting.popitem(last=False)
                _wake(victim)  # its thread's recv sees the end, and that thread closes it
            self._waiting[key] = conn
            return True

    def _state(self, key: int, busy: bool) -> bool:
        """Move a connection between waiting and busy; False when it was evicted meanwhile."""
        with self._lock:
            conn = self._waiting.pop(key, None) or self._busy.pop(key, None)
            if conn is None:
                return False
            (self._busy if busy else self._waiting)[key] = conn
            return True

    def _serve(self, key: int, conn: socket.socket) -> None:
        reader = HeadReader(conn, self.limits)
        wait = self.limits.head_timeout
        try:
            while True:
                try:
                    head = reader.next(wait)
                except HeadError as exc:
                    self._send(conn, refusal(exc.status, exc.why))
                    return
                if head is None or not self._state(key, busy=True):
                    return
                if not self._answer(conn, head) or not self._state(key, busy=False):
                    return
                wait = self.idle_timeout
        except OSError:
            return  # the client went away, or was too slow to read the answer
        finally:
            with self._lock:
                self._waiting.pop(key, None)
                self._busy.pop(key, None)
            _drop(conn)

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.settimeout(self.write_timeout)  # sendall's timeout bounds the whole send (Python >= 3.5)
        conn.sendall(data)

    # --------------------------------------------------------------------------- requests

    def _answer(self, conn: socket.socket, head: RequestHead) -> bool:
        """Answer one request; True when the connection stays open for the next."""
        try:
            problem = _problem(head)
        except HeadError as exc:
            problem = (exc.status, exc.why)
        if problem is not None:
            status, why = problem
            self._send(conn, refusal(status, why, ALLOW if status == 405 else ()))
            return False
        query = urllib.parse.parse_qs(head.target.partition("?")[2])
        registry = self.registry
        if "name[]" in query:
            registry = registry.restricted_registry(query["name[]"])  # type: ignore[assignment]
        try:
            encoder, content_type = choose_encoder(", ".join(head.values("accept")))
        except (TypeError, ValueError):  # prometheus_client compares a version it could not parse
            encoder, content_type = generate_latest, CONTENT_TYPE_PLAIN_0_0_4
        begin = time.monotonic()
        if head.method == "GET":
            with self._scrapes:
                self.scrape_begins.append(begin)
                self._scrapes.notify_all()
        try:
            body = encoder(registry)
        except Exception:  # a collector failed: an answer, not a traceback on the trainer's stderr
            self._send(conn, refusal(500, "the metrics could not be rendered"))
            return False
        extra = []
        if gzip_accepted(", ".join(head.values("accept-encoding"))):
            body = gzip.compress(body)
            extra.append("Content-Encoding: gzip")
        keep = head.version == "1.1" and "close" not in head.tokens("connection")
        if not keep:
            extra.append("Connection: close")
        lines = [f"HTTP/1.1 200 {reason(200)}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}", *extra]
        response = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self._send(conn, response if head.method == "HEAD" else response + body)
        if head.method == "GET" and _in_time(head, time.monotonic() - begin):
            with self._scrapes:
                self._answered_begin = max(self._answered_begin, begin)
                self._scrapes.notify_all()
        return keep

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [*self._waiting.values(), *self._busy.values()]
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() (Linux)
        self._listener.close()
        for conn in conns:
            _wake(conn)
        self._thread.join(5)


def _problem(head: RequestHead) -> tuple[int, str] | None:
    """Why a request is not a scrape: (status, why), or None."""
    if head.method not in ("GET", "HEAD"):
        return 405, f"only GET and HEAD of {METRICS_PATH} are answered, not {head.method[:20]}"
    if head.target.partition("?")[0] != METRICS_PATH:
        return 404, f"only {METRICS_PATH} is served"
    if head.version == "1.1" and head.one("host") is None:  # RFC 9112 3.2: MUST answer 400
        return 400, "an HTTP/1.1 request without a Host field"
    if head.values("transfer-encoding"):
        return 400, "a scrape has no body: Transfer-Encoding is refused"
    if (length := head.one("content-length")) is not None and length != "0":
        return 400, "a scrape has no body: Content-Length other than 0 is refused"
    return None


def _wake(conn: socket.socket) -> None:
    """End a connection another thread owns: shut down, not closed (its descriptor stays that
    thread's until it closes it, so no other socket can take the number meanwhile)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def _drop(conn: socket.socket) -> None:
    _wake(conn)
    conn.close()
