"""The flags of ``train`` and the validated configuration they make. No torch import here: the CLI
builds its --help from this module."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

from trainyard.contract.errors import UserError

MODEL_CHOICES = ("tiny", "gpt-125m", "mlp")
DEFAULT_LR = {"tiny": 3e-3, "gpt-125m": 6e-4, "mlp": 1e-3}


@dataclass(frozen=True, slots=True)
class TrainConfig:
    model: str = "tiny"
    data: str = "synthetic"
    seq_len: int | None = None
    max_steps: int = 100
    batch_size: int = 16
    grad_accum: int = 1
    lr: float | None = None
    min_lr_ratio: float = 0.1
    warmup_steps: int | None = None
    weight_decay: float = 0.1
    clip_grad: float = 1.0
    seed: int = 1234
    strategy: str = "ddp"
    device: str = "auto"
    precision: str = "auto"
    checkpoint_dir: str | None = None
    checkpoint_every: int = 100
    keep: int = 3
    async_checkpoint: bool = False
    metrics: str | None = None
    log_every: int = 10
    allow_transport_fallback: bool = False

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR[self.model]

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else min(100, self.max_steps // 10)

    @property
    def metrics_path(self) -> Path | None:
        if self.metrics:
            return Path(self.metrics)
        return Path(self.checkpoint_dir) / "metrics.jsonl" if self.checkpoint_dir else None

    def to_dict(self) -> dict:
        return asdict(self)


def _positive(name: str, value: int | float, minimum: int | float = 1) -> None:
    if value < minimum:
        raise UserError(f"{name} must be at least {minimum}, not {value}")


def validate(cfg: TrainConfig) -> TrainConfig:
    _positive("--max-steps", cfg.max_steps, 0)
    _positive("--batch-size", cfg.batch_size)
    _positive("--grad-accum", cfg.grad_accum)
    _positive("--checkpoint-every", cfg.checkpoint_every)
    _positive("--log-every", cfg.log_every)
    if cfg.keep < 2:
        raise UserError(
            f"--keep {cfg.keep}: keep at least 2 checkpoints, so that one survives while the next is being written"
        )
    if cfg.lr is not None and cfg.lr <= 0:
        raise UserError(f"--lr must be positive, not {cfg.lr}")
    if not 0 <= cfg.min_lr_ratio <= 1:
        raise UserError(f"--min-lr-ratio must be between 0 and 1, not {cfg.min_lr_ratio}")
    if cfg.warmup_steps is not None and cfg.warmup_steps < 0:
        raise UserError(f"--warmup-steps must be 0 or more, not {cfg.warmup_steps}")
    if cfg.seq_len is not None and cfg.model == "mlp":
        raise UserError("--seq-len applies to the language models, not --model mlp")
    if cfg.seq_len is not None:
        _positive("--seq-len", cfg.seq_len)
    if cfg.async_checkpoint and not cfg.checkpoint_dir:
        raise UserError("--async-checkpoint needs --checkpoint-dir")
    return cfg


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and data")
    g.add_argument(
        "--model", choices=MODEL_CHOICES, default="tiny", help="tiny (tests), gpt-125m (GPUs), mlp (MNIST-shaped)"
    )
    g.add_argument(
        "--data",
        default="synthetic",
        metavar="PATH|synthetic",
        help="a file of uint16 token ids (memory-mapped), or 'synthetic': learnable data from --seed (default)",
    )
    g.add_argument("--seq-len", type=int, metavar="N", help="tokens per sample (default: the model's context length)")
    g.add_argument(
        "--seed", type=int, default=1234, help="seed of the model init, the data order and dropout (default 1234)"
    )

    g = p.add_argument_group("optimisation")
    g.add_argument("--max-steps", type=int, default=100, metavar="N", help="optimizer steps in total (default 100)")
    g.add_argument(
        "--batch-size",
        type=int,
        default=16,
        metavar="N",
        help="GLOBAL batch: samples per optimizer step over all ranks; must divide by world size x --grad-accum "
        "(default 16)",
    )
    g.add_argument("--grad-accum", type=int, default=1, metavar="N", help="micro-batches per step (default 1)")
    g.add_argument("--lr", type=float, help="peak learning rate (default: 3e-3 tiny, 6e-4 gpt-125m, 1e-3 mlp)")
    g.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor as a share of --lr (default 0.1)")
    g.add_argument(
        "--warmup-steps", type=int, metavar="N", help="linear warmup (default: 10%% of --max-steps, at most 100)"
    )
    g.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay (default 0.1)")
    g.add_argument("--clip-grad", type=float, default=1.0, help="max gradient norm; 0 turns clipping off (default 1.0)")

    g = p.add_argument_group("parallelism and hardware")
    g.add_argument(
        "--strategy",
        choices=("ddp", "fsdp"),
        default="ddp",
        help="DistributedDataParallel, or FSDP2 (fully_shard) where the backend supports it (default ddp)",
    )
    g.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when available (default)"
    )
    g.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="auto: bf16 autocast on GPU, fp32 on CPU (default)",
    )

    g = p.add_argument_group("checkpoints and output")
    g.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="save DIR/step-N/ (torch.distributed.checkpoint) and resume from the latest committed one",
    )
    g.add_argument("--checkpoint-every", type=int, default=100, metavar="K", help="save every K steps (default 100)")
    g.add_argument(
        "--keep", type=int, default=3, metavar="K", help="committed checkpoints to keep, at least 2 (default 3)"
    )
    g.add_argument(
        "--async-checkpoint",
        action="store_true",
        help="write checkpoints in the background (at most one save in flight)",
    )
    g.add_argument("--metrics", metavar="PATH", help="JSON lines of metrics (default: DIR/metrics.jsonl)")
    g.add_argument("--log-every", type=int, default=10, metavar="N", help="progress line every N steps (default 10)")
    g.add_argument(
        "--allow-transport-fallback",
        action="store_true",
        help="only warn (instead of stopping) when NCCL chose TCP sockets on a fabric that promises IB",
    )


def from_args(args: argparse.Namespace) -> TrainConfig:
    fields = TrainConfig.__dataclass_fields__
    return validate(TrainConfig(**{k: v for k, v in vars(args).items() if k in fields}))


class _RefusingParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are UserErrors (one line, exit 2) instead of an exit."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message} (see `trainyard train --help`)")


def batch_problem(cfg: TrainConfig, world_size: int) -> str | None:
    """Why the GLOBAL ``--batch-size`` cannot be split over ``world_size`` ranks x ``--grad-accum``
    micro-steps, None when it can."""
    micro_total = world_size * cfg.grad_accum
    if cfg.batch_size % micro_total == 0:
        return None
    return (
        f"--batch-size {cfg.batch_size} does not divide into {world_size} rank(s) x --grad-accum "
        f"{cfg.grad_accum}; use a multiple of {micro_total}"
    )


@functools.lru_cache(maxsize=4)
def _parser(prog: str) -> _RefusingParser:
    """Built once per program name: parsing does not change a parser, and `trainyard validate`
    parses the arguments of every trainer container of every job."""
    parser = _RefusingParser(prog=prog, add_help=False)
    add_arguments(parser)
    return parser


def parse(argv: Sequence[str], prog: str = "trainyard train") -> TrainConfig:
    """The configuration ``train`` would make of ``argv``; a UserError where train would refuse them
    (what depends on the world size, such as --batch-size, is checked when training starts)."""
    args = _parser(prog).parse_args(list(argv))
    try:
        return from_args(args)
    except UserError as exc:
        raise UserError(f"{prog}: {exc}") from None
