"""The review log: one JSON line per AdmissionReview, written in batches.

A review appends its record, its time and its duration to a list (no serialisation, no
logging-module record, no write call); a background thread turns the list into
lines (one orjson dump each, in a tight loop, where the code and data stay in cache) and writes
them to stderr every ``interval`` seconds and at shutdown. Only when ``max_lines`` are waiting
(reviews faster than one server answers, over 20,000 a second) does the review that fills the
list flush it itself, waiting for a flush under way: that keeps the list bounded. A process
killed with SIGKILL loses at most ``interval`` seconds of lines; a SIGTERM loses none. The lines
have the fields of the other log lines (ts, level, logger), see server.JsonFormatter.
"""

from __future__ import annotations

import os
import threading
import time

import orjson

from webhook.review import Record

LOGGER = "trainyard.webhook.review"


CHUNK = 64  # lines serialised and written at a time: short enough a hold of the GIL


def _thousandths(x: float) -> float:
    """``x`` to three decimals (half up; a third of round(x, 3)'s cost, which the log thread pays
    per line)."""
    return int(x * 1000 + 0.5) / 1000


def line(ts: float, record: Record, elapsed: float) -> bytes:
    return orjson.dumps(
        {
            "ts": _thousandths(ts),
            "level": "info",
            "logger": LOGGER,
            "uid": record.uid,
            "namespace": record.namespace,
            "pod": record.pod,
            "profile": record.profile,
            "outcome": record.outcome,
            "ops": record.ops,
            "warnings": record.warnings,
            "reason": record.reason,
            "ms": _thousandths(elapsed * 1000),
        },
        option=orjson.OPT_APPEND_NEWLINE,
    )


class ReviewLog:
    def __init__(self, fd: int = 2, interval: float = 0.2, max_lines: int = 4096) -> None:
        self.fd, self.interval, self.max_lines = fd, interval, max_lines
        self._pending: list[tuple[float, Record, float]] = []
        self._lock = threading.Lock()  # guards _pending
        self._flushing = threading.Lock()  # one flush at a time: the lines stay in order
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainyard-review-log", daemon=True)
        self._thread.start()

    def write(self, record: Record, elapsed: float) -> None:
        """Log ``record`` (not changed afterwards) of a review that took ``elapsed`` seconds."""
        with self._lock:
            self._pending.append((time.time(), record, elapsed))
            full = len(self._pending) >= self.max_lines
        if full:
            self.flush()

    def flush(self) -> None:
        with self._flushing:
            with self._lock:
                pending, self._pending = self._pending, []
            for start in range(0, len(pending), CHUNK):
                if not self._write(b"".join(line(*p) for p in pending[start : start + CHUNK])):
                    return

    def _write(self, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except InterruptedError:
                continue
            except OSError:
                return False  # stderr gone (a closed pipe): nothing else to do with the lines
        return True

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            self.flush()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join()
        self.flush()
