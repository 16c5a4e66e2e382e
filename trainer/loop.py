"""``trainer train``: the training loop of the shared image.

:func:`run` is started once per rank by torchrun (or alone, as one process). Each step:
micro-batches (data position + rank), backward, clip, AdamW, cosine LR, then ONE small all-reduce
carrying the mean loss and whether any rank received SIGTERM, so every rank stops after the same
step. Checkpoints every K steps, at the end and on SIGTERM; the run resumes from the newest
committed one. Every record of the run log also reaches the pod's Prometheus exporter
(:mod:`trainer.metrics`, served by local rank 0).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer import PROCESS_STARTED, distributed, metrics, models, options
from trainer import data as datasets
from trainer.checkpoint import Checkpointer, Progress, Saved
from trainer.options import TrainConfig
from trainer.runlog import RunLog
from trainer.schedule import warmup_cosine
from trainer.stop import StopRequest
from trainer.transport import check_after_first_collective, prepare_nccl_log
from trainyard.contract import reports
from trainyard.contract.errors import TransportMismatch, UserError
from trainyard.contract.names import ENV_EXPECT_TRANSPORT


def params_sha256(model: nn.Module, world: distributed.World) -> str | None:
    """sha256 of the model's state_dict tensors in name order (CPU, contiguous bytes); rank 0 only.

    Full tensors are gathered first, so DDP and FSDP2 give the same answer for the same weights.
    """
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not world.is_main:
        return None
    h = hashlib.sha256()
    for name in sorted(sd):
        t = sd[name].detach().cpu().contiguous()
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _wrap(model: nn.Module, cfg: TrainConfig, world: distributed.World, bf16: bool) -> nn.Module:
    if cfg.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[world.device.index] if world.device.type == "cuda" else None)
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6 keeps FSDP2 under _composable
        try:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError as exc:
            raise UserError(
                f"--strategy fsdp needs FSDP2 (fully_shard), which torch {torch.__version__} lacks"
            ) from exc
    kwargs: dict[str, Any] = {}
    if bf16:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    try:
        for unit in models.shard_units(model):
            fully_shard(unit, **kwargs)
        fully_shard(model, **kwargs)
    except Exception as exc:
        raise UserError(
            f"--strategy fsdp is not supported with backend {world.backend} here ({exc}); use --strategy ddp"
        ) from exc
    return model


class Trainer:
    def __init__(self, cfg: TrainConfig, world: distributed.World, log: RunLog, nccl_log: str | None) -> None:
        self.cfg = cfg
        self.world = world
        self.log = log
        self.nccl_log = nccl_log
        problem = options.batch_problem(cfg, world.world_size)
        if problem:
            raise UserError(problem)
        self.micro = cfg.batch_size // (world.world_size * cfg.grad_accum)
        on_gpu = world.device.type == "cuda"
        bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and on_gpu)
        if bf16 and not on_gpu:
            raise UserError("--precision bf16 is for GPUs; on CPU use --precision fp32 (or auto)")
        self.autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 and cfg.strategy == "ddp" else None

        vocab = seq_len = None
        if cfg.model in models.GPT_SIZES:
            gpt = models.GPT_SIZES[cfg.model]
            vocab, seq_len = gpt.vocab_size, cfg.seq_len or gpt.block_size
            if seq_len > gpt.block_size:
                raise UserError(f"--seq-len {seq_len} is longer than {cfg.model}'s context of {gpt.block_size} tokens")
        self.dataset = datasets.build(cfg.data, cfg.model, cfg.seed, vocab, seq_len or 0)
        self.settings = {"model": cfg.model, "seed": cfg.seed, "seq_len": seq_len, "data": cfg.data}

        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        self.model = _wrap(models.build(cfg.model).to(world.device), cfg, world, bf16)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.learning_rate, betas=(0.9, 0.95), weight_decay=cfg.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, warmup_cosine(cfg.warmup, cfg.max_steps, cfg.min_lr_ratio)
        )
        self.progress = Progress()
        self.load_ms = 0.0
        self.stopped_by: str | None = None
        self.ckpt = Checkpointer(
            cfg.checkpoint_dir,
            every=cfg.checkpoint_every,
            keep=cfg.keep,
            use_async=cfg.async_checkpoint,
            last_step=cfg.max_steps,
            state=Saved(self.model, self.optimizer, self.scheduler, self.progress, self.settings, cfg.batch_size),
            world=world,
            log=log,
        )

    # ---------------------------------------------------------------------------------- resume

    def resume(self) -> None:
        cfg, world, p = self.cfg, self.world, self.progress
        t0 = time.perf_counter()
        rng_restored = self.ckpt.resume()
        self.load_ms = (time.perf_counter() - t0) * 1000
        if p.resumed_from is None:
            torch.manual_seed(cfg.seed * 1_000_003 + world.rank + 1)  # each rank its own dropout stream
            return
        written_by = self.ckpt.state.extra["written_by"]
        if not rng_restored:
            torch.manual_seed((cfg.seed * 1_000_003 + p.step * 1_009 + world.rank) & 0x7FFFFFFF)
            self.log.warning(
                f"checkpoint {p.resumed_path} has no RNG state for rank {world.rank} (it was written by "
                f"{written_by} rank(s)); dropout streams start afresh"
            )
        self.log.info(
            f"resuming from {p.resumed_path} (step {p.step} of {cfg.max_steps}, written by {written_by} rank(s), "
            f"now {world.world_size})"
        )

    # ---------------------------------------------------------------------------------- steps

    def _sync_context(self, last_micro: bool) -> contextlib.AbstractContextManager:
        if self.cfg.strategy == "ddp" and not last_micro:
            return self.model.no_sync()  # type: ignore[operator]
        if self.cfg.strategy == "fsdp":
            self.model.set_requires_gradient_sync(last_micro)  # type: ignore[operator]
        return contextlib.nullcontext()

    def train_step(self, stop: StopRequest) -> tuple[float, bool]:
        """One optimizer step; returns (learning rate used, whether any rank asked to stop)."""
        cfg, world, p = self.cfg, self.world, self.progress
        loss_sum = torch.zeros((), device=world.device)
        for a in range(cfg.grad_accum):
            start = p.samples + a * world.world_size * self.micro + world.rank * self.micro
            x, y = self.dataset.batch(start, self.micro)
            x, y = x.to(world.device, non_blocking=True), y.to(world.device, non_blocking=True)
            with self._sync_context(a == cfg.grad_accum - 1), self.autocast or contextlib.nullcontext():
                loss = self.model(x, y)
            (loss / cfg.grad_accum).backward()
            loss_sum += loss.detach()
        if cfg.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        p.step += 1
        p.samples += cfg.batch_size
        # One small collective per step: the mean loss, and whether any rank was asked to stop.
        flags = torch.stack([loss_sum / cfg.grad_accum, torch.tensor(float(stop.requested), device=world.device)])
        dist.all_reduce(flags)
        p.loss = flags[0].item() / world.world_size
        return lr, flags[1].item() > 0

    # ---------------------------------------------------------------------------------- run

    def run(self) -> int:
        """Train to --max-steps, or until a SIGTERM on any rank; 0 either way."""
        self._announce()
        stopped_by = self.stopped_by = self._steps()
        p, log = self.progress, self.log
        if stopped_by is not None:
            saved = f"step-{p.step}" if self.ckpt.enabled else None
            log.record(reports.Stopped(signal=stopped_by, step=p.step, checkpoint=saved))
            log.info(
                f"{stopped_by}: stopped after step {p.step}"
                + (f", saved checkpoint {saved}; exiting 0" if saved else " (no --checkpoint-dir: nothing saved)")
            )
            return 0
        digest = params_sha256(self.model, self.world)
        if self.world.is_main:
            done = reports.Done(step=p.step, loss=p.loss, params_sha256=digest)
            log.record(done)
            log.info(reports.encode(done))
        return 0

    def _announce(self) -> None:
        cfg, world, log, p = self.cfg, self.world, self.log, self.progress
        log.record(
            reports.Start(
                world_size=world.world_size,
                backend=world.backend,
                device=str(world.device),
                strategy=cfg.strategy,
                model=cfg.model,
                restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                resumed_from=p.resumed_from,
                max_steps=cfg.max_steps,
                process_started=round(PROCESS_STARTED, 3),
                group_ready=round(world.group_ready, 3),
                setup_ms=round(world.setup_ms, 1),
            )
        )
        if p.resumed_from is not None:
            log.record(
                reports.Resume(
                    step=p.resumed_from,
                    path=str(p.resumed_path),
                    world_size=world.world_size,
                    load_ms=round(self.load_ms, 1),
                )
            )
        log.info(
            f"training {cfg.model} ({cfg.strategy}, {world.backend} on {world.device.type}, world size "
            f"{world.world_size}, global batch {cfg.batch_size} = {world.world_size} x {cfg.grad_accum} x "
            f"{self.micro}) from step {p.step} to {cfg.max_steps}"
        )

    def _steps(self) -> str | None:
        """The steps, each reported and checkpointed when due; returns the signal that stopped the
        run early, or None when it reached --max-steps."""
        cfg, log, p = self.cfg, self.log, self.progress
        tokens_per_step = cfg.batch_size * self.dataset.tokens_per_sample
        stop = StopRequest()
        stopped_by = None
        self.model.train()
        try:
            while p.step < cfg.max_steps:
                t0 = time.perf_counter()
                lr, stop_now = self.train_step(stop)
                step_ms = (time.perf_counter() - t0) * 1000
                if self.nccl_log is not None:
                    self._check_transport()
                    self.nccl_log = None
                blocked = self.ckpt.step(stopping=stop_now)
                tokens_per_s = tokens_per_step / (step_ms / 1000)
                log.record(
                    reports.Step(
                        step=p.step,
                        loss=p.loss,
                        lr=lr,
                        tokens_per_s=tokens_per_s,
                        step_ms=round(step_ms, 2),
                        checkpoint_ms=None if blocked is None else round(blocked, 1),
                        world_size=self.world.world_size,
                    )
                )
                if p.step % cfg.log_every == 0 or p.step == cfg.max_steps or stop_now:
                    log.info(
                        f"step {p.step}/{cfg.max_steps} loss {p.loss:.4f} lr {lr:.2e} "
                        f"tok/s {tokens_per_s:,.0f} step {step_ms:.1f} ms"
                    )
                if stop_now:
                    stopped_by = stop.signal.name if stop.signal else "SIGTERM (received by another rank)"
                    break
            self.ckpt.wait()
        finally:
            stop.restore()
            self.ckpt.close()
        return stopped_by

    def _check_transport(self) -> None:
        """After the first collective: does NCCL use what the fabric promises? All ranks stop together."""
        assert self.nccl_log is not None
        check = check_after_first_collective(
            self.nccl_log, os.environ.get(ENV_EXPECT_TRANSPORT), self.cfg.allow_transport_fallback
        )
        if self.log.exporter is not None:
            self.log.exporter.transport(check.used, check.expected)
        verdict = check.verdict
        if verdict.level == "warning":
            self.log.warning(verdict.message, every_rank=True)
        elif verdict.level == "ok":
            self.log.info(f"NCCL transport: {verdict.message}")
        bad = torch.tensor(1.0 if verdict.level == "error" else 0.0, device=self.world.device)
        dist.all_reduce(bad)
        if bad.item() > 0:
            raise TransportMismatch(
                verdict.message
                if verdict.level == "error"
                else "another rank found that NCCL does not use the fabric's transport (see its error)"
            )


def run(cfg: TrainConfig, exporter: metrics.Exporter | metrics.NullExporter | None = None) -> int:
    """Train; ``exporter``: the caller's (it stays open), else this worker's own from the env."""
    nccl_log = None
    if cfg.device != "cpu" and torch.cuda.is_available():
        nccl_log = prepare_nccl_log(os.environ)  # before NCCL reads its env
    world = distributed.init(cfg.device)
    log = RunLog(cfg.metrics_path, world.is_main, world.rank)
    own = exporter is None
    try:
        trainer = Trainer(cfg, world, log, nccl_log)
        if exporter is None:  # after the model and data are built: tokens per sample is known
            exporter = metrics.start(
                os.environ,
                rank=world.rank,
                samples_per_step=cfg.batch_size,
                tokens_per_step=cfg.batch_size * trainer.dataset.tokens_per_sample,
                checkpoint_every=cfg.checkpoint_every if cfg.checkpoint_dir else None,
            )
        log.exporter = exporter
        trainer.resume()
        code = trainer.run()
        if own and trainer.stopped_by is None:  # finished: let a scrape read the last step (not when
            exporter.linger()  # stopping: the pod's grace period is for the save)
        return code
    finally:
        log.close()
        if own and exporter is not None:
            exporter.close()
        if dist.is_initialized():
            dist.destroy_process_group()
