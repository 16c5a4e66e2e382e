"""SIGTERM (pod eviction, node drain, torchrun forwarding it): finish the step, save, exit 0.

The handler only records the signal; the train loop folds the flag into the per-step all-reduce,
so every rank stops after the same step even when the signal reaches them at different times.
"""

from __future__ import annotations

import signal
from types import FrameType


class StopRequest:
    def __init__(self, signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)) -> None:
        self.signal: signal.Signals | None = None
        self._previous = {}
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signal.Signals(signum)

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
