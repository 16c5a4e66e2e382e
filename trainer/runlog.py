"""What a run reports: JSON lines for machines (rank 0, DIR/metrics.jsonl) and progress for people."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 6)
    return value


class RunLog:
    """Rank 0 writes; other ranks only print warnings that concern them."""

    def __init__(self, path: Path | None, is_main: bool, rank: int, out: TextIO = sys.stdout) -> None:
        self.is_main = is_main
        self.rank = rank
        self.out = out
        self._file = None
        if path is not None and is_main:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8", buffering=1)

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
            self._file.flush()

    def event(self, name: str, **fields: Any) -> None:
        if self.is_main:
            self._write({"event": name, **fields, "time": round(time.time(), 3)})

    def metrics(self, **fields: Any) -> None:
        if self.is_main:
            self._write(fields)

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
