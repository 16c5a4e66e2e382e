"""kill -9 of a worker, again and again: every restart resumes and ends with the weights of a run
that was never interrupted.

Under plain torchrun (the store shared with the workers across restarts, torchrun's default) a
restart used to fail about every other time (a rank read a dead peer's address, or waited
forever); 8 restarts in a row all succeed with a probability of 1/256 if that were still so. Each
restart is a fresh draw of that race, and later rounds meet the keys of every round before them.
The same under `trainyard launch`, with and without the store shared, and with two agents (two
"pods" on torchrun's c10d rendezvous), whose restart counts differ.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.trainer.conftest import (
    PYTHON,
    Run,
    clean_env,
    committed_steps,
    events,
    max_step,
    read_jsonl,
    trainyard,
    worker_pids,
)
from trainyard.cluster.processes import free_port, wait_for
from trainyard.sandbox.processes import environ

pytestmark = pytest.mark.torchrun

MAX_STEPS = 200
TRAIN = ["--model", "tiny", "--max-steps", str(MAX_STEPS), "--checkpoint-every", "5", "--log-every", "1000"]
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]


def env(**extra: str) -> dict[str, str]:
    # one thread per worker everywhere, so that every run computes the same floating-point sums
    return clean_env(OMP_NUM_THREADS="1", **extra)


def train(ckpt: Path) -> list[str]:
    return ["-m", "trainer", "train", *TRAIN, "--checkpoint-dir", str(ckpt)]


def done(metrics: Path) -> dict:
    found = events(metrics, "done")
    assert found, f"no done event in {metrics}"
    return found[-1]


def rounds_with_a_commit(metrics: Path) -> int:
    """How many rounds of workers (start events) have committed a checkpoint since they started."""
    count, committed = 0, True
    for record in read_jsonl(metrics):
        if record.get("event") == "start":
            count, committed = count + 1, False
        elif record.get("event") == "committed" and not committed:
            committed = True
    return count if committed else count - 1


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> str:
    """params_sha256 of the same run without a kill."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    run = Run([*TORCHRUN, "--standalone", "--nproc-per-node", "2", *train(tmp / "ckpt")], env(), tmp / "run.log")
    assert run.wait(timeout=120) == 0, run.output()[-3000:]
    return done(tmp / "ckpt" / "metrics.jsonl")["params_sha256"]


def kill_repeatedly(runs: list[Run], ckpt: Path, kills: int, shared_store: bool) -> dict:
    """Once each round of workers has committed a checkpoint, kill -9 one of them (rank 1, rank 0,
    rank 1, ...), ``kills`` times; then every run must exit 0, having resumed after every kill.
    The runs are killed at the end, pass or fail."""
    try:
        return _kill_repeatedly(runs, ckpt, kills, shared_store)
    finally:
        for run in runs:
            run.kill()


def _kill_repeatedly(runs: list[Run], ckpt: Path, kills: int, shared_store: bool) -> dict:
    metrics = ckpt / "metrics.jsonl"
    resumed_at_least = []
    for k in range(kills):
        wait_for(lambda k=k: rounds_with_a_commit(metrics) >= k + 1, 90, f"round {k + 1}'s checkpoint", runs[0].proc)
        workers = wait_for(
            lambda: len(w := {r: p for run in runs for r, p in worker_pids(run.pid).items()}) == 2 and w,
            30,
            "both workers",
        )
        victim = workers[(k + 1) % 2]
        assert (environ(victim).get("TORCHELASTIC_USE_AGENT_STORE") == "True") is shared_store
        resumed_at_least.append(committed_steps(ckpt)[-1])
        os.kill(victim, signal.SIGKILL)
        assert max_step(metrics) < MAX_STEPS, "the run ended before the kill: it proves nothing"
    for run in runs:
        assert run.wait(timeout=120) == 0, run.output()[-3000:]
    starts, resumed = events(metrics, "start"), events(metrics, "resume")
    assert len(starts) == kills + 1 and len(resumed) == kills, (starts, resumed)
    assert all(r["step"] >= least for r, least in zip(resumed, resumed_at_least, strict=True))
    return done(metrics)


@pytest.mark.timeout(150)
def test_plain_torchrun_resumes_after_every_one_of_8_kills(reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    argv = [*TORCHRUN, "--standalone", "--nproc-per-node", "2", "--max-restarts", "8", *train(ckpt)]
    final = kill_repeatedly([Run(argv, env(), tmp_path / "run.log")], ckpt, kills=8, shared_store=True)
    assert final["params_sha256"] == reference


@pytest.mark.timeout(150)
@pytest.mark.parametrize("shared", [False, True], ids=["launch-default", "store-shared"])
def test_trainyard_launch_resumes_after_every_one_of_3_kills(reference, tmp_path, shared):
    """launch turns torchrun's store sharing off unless the pod sets it; the second run keeps it on
    (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0)."""
    ckpt = tmp_path / "ckpt"
    pod = env(PET_NNODES="1", PET_NPROC_PER_NODE="2", PET_MAX_RESTARTS="3", NCCL_SOCKET_IFNAME="lo")
    if shared:
        pod["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "0"
    run = Run(trainyard("launch", "--", *train(ckpt)[3:]), pod, tmp_path / "run.log")
    final = kill_repeatedly([run], ckpt, kills=3, shared_store=shared)
    assert final["params_sha256"] == reference


@pytest.mark.timeout(150)
def test_two_agents_resume_although_their_restart_counts_differ(reference, tmp_path):
    """Two torchrun agents (one worker each, c10d rendezvous), as two pods run them. An agent whose
    own worker died counts a restart; the other restarts because its peer rejoined, uncounted."""
    ckpt = tmp_path / "ckpt"
    port = str(free_port())
    runs = []
    for node in (0, 1):
        argv = [*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
        argv += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-agents"]
        argv += ["--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}", "--max-restarts", "3", *train(ckpt)]
        runs.append(Run(argv, env(), tmp_path / f"agent{node}.log"))
    final = kill_repeatedly(runs, ckpt, kills=3, shared_store=True)
    assert final["params_sha256"] == reference
