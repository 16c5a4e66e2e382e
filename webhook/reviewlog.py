"""The review log: one JSON line per AdmissionReview, written in batches.

A review appends its line to a buffer (one orjson dump, no logging-module record, no write
call); a background thread writes the buffer to stderr every ``interval`` seconds, when it
grows past ``max_buffer``, and at shutdown. The event loop never waits on a write. A process
killed with SIGKILL loses at most ``interval`` seconds of lines; a SIGTERM loses none.
The lines have the fields of the other log lines (ts, level, logger), see server.JsonFormatter.
"""

from __future__ import annotations

import os
import threading
import time

import orjson

from webhook.review import Record

LOGGER = "trainyard.webhook.review"


class ReviewLog:
    def __init__(self, fd: int = 2, interval: float = 0.2, max_buffer: int = 1 << 20) -> None:
        self.fd, self.interval, self.max_buffer = fd, interval, max_buffer
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainyard-review-log", daemon=True)
        self._thread.start()

    def write(self, record: Record, elapsed: float) -> None:
        line = orjson.dumps(
            {
                "ts": round(time.time(), 3),
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
                "ms": round(elapsed * 1000, 3),
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )
        with self._lock:
            self._buffer += line
            full = len(self._buffer) >= self.max_buffer
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            data, self._buffer = bytes(self._buffer), bytearray()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except InterruptedError:
                continue
            except OSError:
                return  # stderr gone (a closed pipe): nothing else to do with the lines

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            self.flush()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join()
        self.flush()
