"""Checkpoints with torch.distributed.checkpoint (DCP): DIR/step-N/, resume, retention, async.

Layout and rules (torchtitan style):

- ``DIR/step-N/`` holds the DCP shards and ``.metadata``. DCP writes ``.metadata`` last, by an
  atomic rename, after every rank's shards are written: a step directory counts (is *committed*)
  only once ``.metadata`` exists. ``trainyard.json`` (step, time, world size, mode) is written
  after that, for people and tools.
- On start, rank 0 picks the newest committed step; step directories without ``.metadata`` are
  partial saves of a run that died: they are skipped with a warning and removed.
- After each commit rank 0 keeps the newest ``keep`` committed steps and deletes the rest.
- Async saves: at most one in flight; a new save first waits for the previous one.

The :class:`Checkpointer` owns what it saves and decides when, like torchtitan's
CheckpointManager (torchtitan/components/checkpoint.py): it is given the model, the optimizer,
the scheduler and the run's :class:`Progress` once; the loop only calls :meth:`Checkpointer.step`
after each optimizer step (it saves every ``every`` steps, at the last step and when told the run
stops) and :meth:`Checkpointer.resume` once at start.

What is saved: model and optimizer (through the torch.distributed.checkpoint.state_dict helpers,
so DDP and FSDP2 state load into any world size), the training state (step, data position,
scheduler, last loss, run settings) and each rank's RNG state under its own key.
"""

from __future__ import annotations

import json
import pickle
import random
import re
import shutil
import sys
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from trainer.distributed import World, broadcast_object
from trainer.runlog import RunLog
from trainyard.contract import reports
from trainyard.contract.errors import UserError

STEP_DIR = re.compile(r"^step-(\d+)$")
METADATA = ".metadata"
INFO = "trainyard.json"
TRAIN_KEY = "train"


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step}"


def scan(root: Path) -> tuple[list[tuple[int, Path]], list[tuple[int, Path]]]:
    """(committed, partial) step directories under ``root``, each sorted by step."""
    committed, partial = [], []
    if not root.is_dir():
        return committed, partial
    for entry in root.iterdir():
        m = STEP_DIR.match(entry.name)
        if not m or not entry.is_dir():
            continue
        (committed if (entry / METADATA).is_file() else partial).append((int(m.group(1)), entry))
    return sorted(committed), sorted(partial)


def rng_state(device: torch.device) -> bytes:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return pickle.dumps(state)


def set_rng_state(blob: bytes, device: torch.device) -> None:
    state = pickle.loads(blob)
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


@dataclass(slots=True)
class Progress:
    """Where the run is: the loop advances it, the checkpointer saves and restores it."""

    step: int = 0
    samples: int = 0  # the data position: samples consumed by the steps done
    loss: float = float("nan")
    resumed_from: int | None = None
    resumed_path: str | None = None


@dataclass(slots=True)
class Saved:
    """What the run is made of, handed to the checkpointer once."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    progress: Progress
    settings: dict[str, Any]  # model, seed, seq_len, data: a checkpoint of another model is refused
    batch_size: int
    extra: dict[str, Any] = field(default_factory=dict)


class Checkpointer:
    def __init__(
        self,
        root: str | None,
        every: int,
        keep: int,
        use_async: bool,
        last_step: int,
        state: Saved,
        world: World,
        log: RunLog,
    ) -> None:
        self.root = Path(root) if root else None
        self.every = every
        self.keep = keep
        self.use_async = use_async
        self.last_step = last_step
        self.state = state
        self.world = world
        self.log = log
        self._inflight: tuple[int, Path, Future, float, float] | None = None

    @property
    def enabled(self) -> bool:
        return self.root is not None

    # ------------------------------------------------------------------------------ resume

    def latest(self) -> tuple[int, Path] | None:
        """The newest committed step, agreed by all ranks (rank 0 decides and cleans up)."""
        if self.root is None:
            return None
        choice = None
        if self.world.is_main:
            self.root.mkdir(parents=True, exist_ok=True)
            committed, partial = scan(self.root)
            for _, path in partial:
                self.log.warning(
                    f"skipping partial checkpoint {path}: it has no {METADATA}, so its save never finished "
                    "(the run was killed while writing); removing it"
                )
                shutil.rmtree(path, ignore_errors=True)
            if committed:
                choice = committed[-1]
        return broadcast_object(choice, self.world)  # type: ignore[return-value]

    def _keys(self, path: Path) -> set[str]:
        try:
            return set(FileSystemReader(str(path)).read_metadata().state_dict_metadata)
        except Exception as exc:  # unreadable metadata: say which file
            raise UserError(
                f"cannot read checkpoint {path}/{METADATA}: {exc}; move the directory away to start from the "
                "previous checkpoint"
            ) from exc

    def _train_state(self, path: Path) -> dict[str, Any]:
        """The training state alone (step, data position, settings), to check a checkpoint fits."""
        if TRAIN_KEY not in self._keys(path):
            raise UserError(
                f"{path} is not a trainyard checkpoint (no {TRAIN_KEY!r} entry); use another --checkpoint-dir"
            )
        state: dict[str, Any] = {TRAIN_KEY: b""}
        dcp.load(state, checkpoint_id=str(path), process_group=self.world.cpu_group)
        return pickle.loads(state[TRAIN_KEY])

    def _check_fits(self, path: Path, saved: dict[str, Any]) -> None:
        settings = self.state.settings
        for key in ("model", "seq_len"):
            if saved["settings"].get(key) != settings[key]:
                raise UserError(
                    f"checkpoint {path} was written with {key}={saved['settings'].get(key)!r}, this run has "
                    f"{key}={settings[key]!r}; use the same settings or another --checkpoint-dir"
                )
        if saved["settings"].get("seed") != settings.get("seed") or saved["settings"].get("data") != settings.get(
            "data"
        ):
            self.log.warning(f"resuming {path} with a different --seed or --data than it was written with")
        if saved["batch_size"] != self.state.batch_size:
            self.log.warning(
                f"--batch-size changed from {saved['batch_size']} to {self.state.batch_size}; the data position "
                f"({saved['samples']} samples) carries over"
            )

    def resume(self) -> bool:
        """Load the newest committed checkpoint into the state this checkpointer owns.

        Returns whether the RNG streams were restored too (False when the run starts afresh, or
        when the checkpoint was written by another world size and has no state for this rank).
        """
        latest = self.latest()
        if latest is None:
            return False
        step, path = latest
        self._check_fits(path, self._train_state(path))
        keys = self._keys(path)
        model, optimizer = self.state.model, self.state.optimizer
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd, TRAIN_KEY: b""}
        rng_key = f"rng_rank{self.world.rank}"
        if rng_key in keys:
            state[rng_key] = b""
        try:
            dcp.load(state, checkpoint_id=str(path), process_group=self.world.cpu_group)
        except Exception as exc:
            raise UserError(
                f"checkpoint {path} does not fit this run ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}); "
                "it was written for another model or optimizer: use a new --checkpoint-dir or the same settings"
            ) from exc
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        train = pickle.loads(state[TRAIN_KEY])
        self.state.scheduler.load_state_dict(train["scheduler"])
        progress = self.state.progress
        progress.step, progress.samples, progress.loss = step, train["samples"], train["loss"]
        progress.resumed_from, progress.resumed_path = step, str(path)
        self.state.extra["written_by"] = train["world_size"]
        restored = bool(state.get(rng_key))
        if restored:
            set_rng_state(state[rng_key], self.world.device)
        return restored

    # ------------------------------------------------------------------------------ save

    def _snapshot(self) -> dict:
        s, p = self.state, self.state.progress
        model_sd, optim_sd = get_state_dict(s.model, s.optimizer)
        train = {
            "step": p.step,
            "samples": p.samples,
            "loss": p.loss,
            "scheduler": s.scheduler.state_dict(),
            "batch_size": s.batch_size,
            "world_size": self.world.world_size,
            "settings": s.settings,
        }
        return {
            "model": model_sd,
            "optim": optim_sd,
            TRAIN_KEY: pickle.dumps(train),
            f"rng_rank{self.world.rank}": rng_state(self.world.device),
        }

    def step(self, stopping: bool = False) -> float | None:
        """After an optimizer step: save when it is time (every ``every`` steps, the last step, or
        the run ``stopping``), else commit a finished background save. Returns the milliseconds the
        loop was blocked by a save, or None when there was none."""
        if self.root is None:
            return None
        step = self.state.progress.step
        if step % self.every == 0 or step == self.last_step or stopping:
            return self.save()
        self.poll()
        return None

    def save(self) -> float:
        """Save the current step; returns the milliseconds the training loop was blocked."""
        assert self.root is not None
        step = self.state.progress.step
        t0 = time.perf_counter()
        self.wait()  # at most one save in flight
        path = step_dir(self.root, step)
        state = self._snapshot()
        if self.use_async:
            future = dcp.async_save(state, checkpoint_id=str(path), process_group=self.world.cpu_group)
            blocking = (time.perf_counter() - t0) * 1000
            self._inflight = (step, path, future, t0, blocking)
            self.log.record(reports.Checkpoint(step=step, mode="async", blocking_ms=round(blocking, 1)))
        else:
            dcp.save(state, checkpoint_id=str(path), process_group=self.world.cpu_group)
            blocking = (time.perf_counter() - t0) * 1000
            self.log.record(reports.Checkpoint(step=step, mode="sync", blocking_ms=round(blocking, 1)))
            self._commit(step, path, mode="sync", blocking_ms=blocking, total_ms=blocking)
        mode = "async" if self.use_async else "sync"
        self.log.info(f"checkpoint step-{step}: {mode} save, training blocked {blocking:.0f} ms")
        return blocking

    def poll(self) -> None:
        """Commit the in-flight async save if it has finished (cheap; call every step)."""
        if self._inflight is not None and self._inflight[2].done():
            self.wait()

    def wait(self) -> None:
        if self._inflight is None:
            return
        step, path, future, t0, blocking = self._inflight
        self._inflight = None
        future.result()  # raises what the background save raised
        self._commit(step, path, mode="async", blocking_ms=blocking, total_ms=(time.perf_counter() - t0) * 1000)

    def _commit(self, step: int, path: Path, mode: str, blocking_ms: float, total_ms: float) -> None:
        if not self.world.is_main:
            return
        if not (path / METADATA).is_file():
            raise RuntimeError(f"checkpoint {path} finished without {METADATA}")
        info = {
            "step": step,
            "world_size": self.world.world_size,
            "mode": mode,
            "blocking_ms": round(blocking_ms, 1),
            "total_ms": round(total_ms, 1),
            "time": time.time(),
        }
        tmp = path / (INFO + ".tmp")
        tmp.write_text(json.dumps(info) + "\n")
        tmp.replace(path / INFO)
        self.log.record(
            reports.Committed(step=step, mode=mode, blocking_ms=info["blocking_ms"], total_ms=info["total_ms"])
        )
        self._retain(protect=path)

    def _retain(self, protect: Path) -> None:
        assert self.root is not None
        committed, partial = scan(self.root)
        newest = committed[-1][0] if committed else -1
        doomed = [p for _, p in committed[: -self.keep]] + [p for s, p in partial if s < newest]
        for p in doomed:
            if p != protect:
                shutil.rmtree(p, ignore_errors=True)

    def close(self) -> None:
        try:
            self.wait()
        except Exception as exc:  # the run is ending anyway; say what was lost
            print(f"warning: the last checkpoint could not be completed: {exc}", file=sys.stderr)
