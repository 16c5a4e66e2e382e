"""Learning-rate schedule: linear warmup, then cosine decay to a floor."""

from __future__ import annotations

import math
from collections.abc import Callable


def warmup_cosine(warmup: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """The multiplier of the peak learning rate for step index ``i`` (0 for the first step).

    A plain function (not a callable object) so that LambdaLR's state_dict, which the checkpoints
    save, holds only the step count: the current run's flags define the curve.
    """

    def factor(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        progress = min(1.0, (i - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
