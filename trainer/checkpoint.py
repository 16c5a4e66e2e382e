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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from trainer.distributed import World, broadcast_object
from trainyard.errors import UserError

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
class Resumed:
    step: int
    path: Path
    train: dict[str, Any]
    rng_restored: bool


class Checkpointer:
    def __init__(self, root: str | None, keep: int, use_async: bool, world: World, log: Any) -> None:
        self.root = Path(root) if root else None
        self.keep = keep
        self.use_async = use_async
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

    def read_train_state(self, path: Path) -> dict[str, Any]:
        """The training state alone (step, data position, settings), to check a checkpoint fits."""
        if TRAIN_KEY not in self._keys(path):
            raise UserError(
                f"{path} is not a trainyard checkpoint (no {TRAIN_KEY!r} entry); use another --checkpoint-dir"
            )
        state: dict[str, Any] = {TRAIN_KEY: b""}
        dcp.load(state, checkpoint_id=str(path), process_group=self.world.cpu_group)
        return pickle.loads(state[TRAIN_KEY])

    def load(self, step: int, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Resumed:
        keys = self._keys(path)
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
        restored = bool(state.get(rng_key))
        if restored:
            set_rng_state(state[rng_key], self.world.device)
        return Resumed(step=step, path=path, train=train, rng_restored=restored)

    # ------------------------------------------------------------------------------ save

    def _state(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, train: dict[str, Any]) -> dict:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {
            "model": model_sd,
            "optim": optim_sd,
            TRAIN_KEY: pickle.dumps(train),
            f"rng_rank{self.world.rank}": rng_state(self.world.device),
        }

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, train: dict[str, Any]) -> float:
        """Save ``step``; returns the milliseconds the training loop was blocked."""
        assert self.root is not None
        t0 = time.perf_counter()
        self.wait()  # at most one save in flight
        path = step_dir(self.root, step)
        state = self._state(model, optimizer, train)
        if self.use_async:
            future = dcp.async_save(state, checkpoint_id=str(path), process_group=self.world.cpu_group)
            blocking = (time.perf_counter() - t0) * 1000
            self._inflight = (step, path, future, t0, blocking)
            self.log.event("checkpoint", step=step, mode="async", blocking_ms=round(blocking, 1))
            return blocking
        dcp.save(state, checkpoint_id=str(path), process_group=self.world.cpu_group)
        blocking = (time.perf_counter() - t0) * 1000
        self.log.event("checkpoint", step=step, mode="sync", blocking_ms=round(blocking, 1))
        self._commit(step, path, mode="sync", blocking_ms=blocking, total_ms=blocking)
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
        self.log.event("committed", step=step, mode=mode, blocking_ms=info["blocking_ms"], total_ms=info["total_ms"])
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
