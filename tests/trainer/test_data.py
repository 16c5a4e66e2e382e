"""Data order is a pure function of (seed, sample index): what makes resumes exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.data import SyntheticImages, SyntheticTokens, TokenFile, build
from trainer.schedule import warmup_cosine
from trainyard.contract.errors import UserError


def test_synthetic_tokens_do_not_depend_on_how_the_batch_is_split():
    data = SyntheticTokens(seed=7, vocab_size=256, seq_len=32)
    x, y = data.batch(100, 8)
    parts = [data.batch(100 + i * 2, 2) for i in range(4)]  # e.g. 4 ranks x 2 samples
    assert torch.equal(x, torch.cat([p[0] for p in parts]))
    assert torch.equal(y, torch.cat([p[1] for p in parts]))
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_synthetic_tokens_depend_on_the_seed_and_are_learnable():
    a = SyntheticTokens(seed=1, vocab_size=256, seq_len=64)
    x, y = a.batch(0, 64)
    assert torch.equal(x, SyntheticTokens(seed=1, vocab_size=256, seq_len=64).batch(0, 64)[0])
    assert not torch.equal(x, SyntheticTokens(seed=2, vocab_size=256, seq_len=64).batch(0, 64)[0])
    # most next tokens follow the seed's permutation: a model can learn them
    follows = (torch.from_numpy(a.next_token)[x] == y).float().mean().item()
    assert 0.85 < follows < 0.95


def test_token_file_reads_every_window_once_per_epoch(tmp_path):
    seq_len, windows = 4, 10
    tokens = np.arange(windows * seq_len + 1, dtype=np.uint16)
    path = tmp_path / "tokens.bin"
    tokens.tofile(path)
    data = TokenFile(str(path), seed=3, vocab_size=1000, seq_len=seq_len)
    x, y = data.batch(0, windows)
    starts = sorted(int(row[0]) for row in x)
    assert starts == [w * seq_len for w in range(windows)]
    assert torch.equal(x[:, 1:], y[:, :-1])
    second_epoch, _ = data.batch(windows, windows)
    assert not torch.equal(x, second_epoch)  # reshuffled
    assert sorted(int(r[0]) for r in second_epoch) == starts


def test_token_file_errors_name_the_file_and_the_fix(tmp_path):
    path = tmp_path / "t.bin"
    np.array([1, 2, 3000, 4, 5], dtype=np.uint16).tofile(path)
    with pytest.raises(UserError, match="token id 3000 is outside the model's vocabulary of 256"):
        TokenFile(str(path), seed=0, vocab_size=256, seq_len=4).batch(0, 1)
    with pytest.raises(UserError, match="fewer than one window"):
        TokenFile(str(path), seed=0, vocab_size=256, seq_len=64)
    with pytest.raises(UserError, match="no such file"):
        TokenFile(str(tmp_path / "missing.bin"), seed=0, vocab_size=256, seq_len=4)
    with pytest.raises(UserError, match="--model mlp trains on --data synthetic only"):
        build(str(path), "mlp", 0, None, 0)


def test_images_are_mnist_shaped_and_split_independent():
    data = SyntheticImages(seed=5)
    x, y = data.batch(10, 6)
    assert x.shape == (6, 1, 28, 28) and y.shape == (6,)
    x2, _ = data.batch(13, 3)
    assert torch.equal(x[3:], x2)


def test_warmup_then_cosine_to_the_floor():
    f = warmup_cosine(warmup=10, total=110, min_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.55)
    assert f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)
