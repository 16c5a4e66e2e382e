"""What a run reports: the run log for machines (rank 0, DIR/metrics.jsonl), the same records to
the pod's Prometheus exporter (trainer/metrics.py, every rank), and progress for people.

The run log's records and their encoding are the contract in :mod:`trainyard.contract.reports`,
which the readers (the demo, the tests, a dashboard) share.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Protocol, TextIO

from trainyard.contract import reports


class Observer(Protocol):
    """What the run log hands every record to (trainer.metrics.Exporter); it must not raise."""

    def observe(self, record: reports.Record) -> None: ...


class RunLog:
    """Rank 0 writes; other ranks only print warnings that concern them. Every rank hands each
    record to its ``exporter`` (a no-op one on the ranks that do not serve metrics)."""

    def __init__(
        self,
        path: Path | None,
        is_main: bool,
        rank: int,
        out: TextIO = sys.stdout,
        exporter: Observer | None = None,
    ) -> None:
        self.is_main = is_main
        self.rank = rank
        self.out = out
        self.exporter = exporter
        self._file = None
        if path is not None and is_main:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8", buffering=1)

    def record(self, record: reports.Step | reports.Event) -> None:
        """Write one record of the run log (rank 0 only) and export it (every rank)."""
        if self.exporter is not None:
            self.exporter.observe(record)
        if self._file is not None:
            self._file.write(reports.encode(record) + "\n")
            self._file.flush()

    def info(self, message: str) -> None:
        if self.is_main:
            print(message, file=self.out, flush=True)

    def warning(self, message: str, every_rank: bool = False) -> None:
        if self.is_main or every_rank:
            prefix = f"warning: [rank {self.rank}] " if every_rank else "warning: "
            print(prefix + message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
