"""Training data whose order is a pure function of (seed, sample index).

Step s of a run with global batch B reads samples [p, p + B) where p is the data position (the
samples consumed before the step, saved in every checkpoint). Which sample is which depends only
on the seed and its index, never on the world size or on how many times the job restarted, so a
resumed run sees exactly the data an uninterrupted one would, and a run resumed on fewer ranks
sees the same global batches.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from trainer.models import MLP_CLASSES, MLP_INPUT
from trainyard.contract.errors import UserError

NOISE = 0.1  # share of synthetic tokens drawn at random instead of following the rule


class Dataset(Protocol):
    tokens_per_sample: int

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of samples [start, start + count)."""
        ...


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(list(key))


class SyntheticTokens:
    """Learnable token sequences: each token follows a fixed random permutation of the previous one,
    except for a few random tokens. A model that learns the permutation drives the loss toward the
    entropy of the noise."""

    def __init__(self, seed: int, vocab_size: int, seq_len: int) -> None:
        self.seed = seed
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.tokens_per_sample = seq_len
        self.next_token = _rng(seed, 1).permutation(vocab_size)

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.seq_len + 1
        first = np.empty(count, dtype=np.int64)
        noisy = np.empty((count, n), dtype=bool)
        random_tokens = np.empty((count, n), dtype=np.int64)
        for row, index in enumerate(range(start, start + count)):
            rng = _rng(self.seed, 2, index)
            first[row] = rng.integers(self.vocab_size)
            noisy[row] = rng.random(n) < NOISE
            random_tokens[row] = rng.integers(self.vocab_size, size=n)
        seq = np.empty((count, n), dtype=np.int64)
        seq[:, 0] = first
        for t in range(1, n):
            seq[:, t] = np.where(noisy[:, t], random_tokens[:, t], self.next_token[seq[:, t - 1]])
        data = torch.from_numpy(seq)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()


class TokenFile:
    """A flat file of uint16 token ids, memory-mapped, read as non-overlapping windows in an order
    shuffled per epoch by the seed."""

    def __init__(self, path: str, seed: int, vocab_size: int, seq_len: int) -> None:
        p = Path(path)
        if not p.is_file():
            raise UserError(f"--data {path}: no such file; give a file of uint16 token ids or 'synthetic'")
        size = p.stat().st_size
        if size % 2:
            raise UserError(f"--data {path}: {size} bytes is not a whole number of uint16 tokens")
        self.tokens = np.memmap(p, dtype=np.uint16, mode="r")
        self.path = path
        self.seed = seed
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.tokens_per_sample = seq_len
        self.windows = (len(self.tokens) - 1) // seq_len
        if self.windows < 1:
            raise UserError(
                f"--data {path}: {len(self.tokens)} tokens, fewer than one window of --seq-len {seq_len} + 1"
            )

    @lru_cache(maxsize=2)  # noqa: B019 - a dataset lives as long as the run
    def _order(self, epoch: int) -> np.ndarray:
        return _rng(self.seed, 3, epoch).permutation(self.windows)

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for index in range(start, start + count):
            epoch, j = divmod(index, self.windows)
            w = int(self._order(epoch)[j])
            rows.append(np.asarray(self.tokens[w * self.seq_len : w * self.seq_len + self.seq_len + 1], dtype=np.int64))
        seq = np.stack(rows)
        top = int(seq.max())
        if top >= self.vocab_size:
            raise UserError(
                f"--data {self.path}: token id {top} is outside the model's vocabulary of {self.vocab_size}; "
                "tokenize for this model or pick a model with a larger vocabulary"
            )
        data = torch.from_numpy(seq)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()


class SyntheticImages:
    """MNIST-shaped images (1x28x28) of ten classes: a fixed random prototype per class plus noise."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.tokens_per_sample = 1
        self.prototypes = _rng(seed, 4).normal(size=(MLP_CLASSES, MLP_INPUT)).astype(np.float32)

    def batch(self, start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        xs = np.empty((count, MLP_INPUT), dtype=np.float32)
        ys = np.empty(count, dtype=np.int64)
        for row, index in enumerate(range(start, start + count)):
            rng = _rng(self.seed, 5, index)
            ys[row] = rng.integers(MLP_CLASSES)
            xs[row] = self.prototypes[ys[row]] + rng.normal(size=MLP_INPUT).astype(np.float32) * 1.5
        return torch.from_numpy(xs).view(count, 1, 28, 28), torch.from_numpy(ys)


def build(data: str, model: str, seed: int, vocab_size: int | None, seq_len: int) -> Dataset:
    if model == "mlp":
        if data != "synthetic":
            raise UserError(f"--model mlp trains on --data synthetic only (MNIST-shaped images), not {data!r}")
        return SyntheticImages(seed)
    assert vocab_size is not None
    if data == "synthetic":
        return SyntheticTokens(seed, vocab_size, seq_len)
    return TokenFile(data, seed, vocab_size, seq_len)
