"""The train loop under real torchrun processes (gloo on CPU, the tiny model, a few hundred steps).

Every multi-process run goes through ``trainyard launch`` (preflight, then torchrun) with the env a
Training Operator pod would have, so these tests also cover the image's entrypoint.
"""

from __future__ import annotations

import math
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.trainer.conftest import (
    PYTHON,
    clean_env,
    committed_steps,
    events,
    max_step,
    needs_netns,
    steps,
    trainyard,
    worker_pids,
)
from trainyard.cluster.processes import free_port, wait_for

pytestmark = pytest.mark.torchrun

MAX_STEPS = 120
EVERY = 20
TRAIN = ["--model", "tiny", "--max-steps", str(MAX_STEPS), "--checkpoint-every", str(EVERY), "--log-every", "40"]


def pod_env(**extra: str) -> dict[str, str]:
    """One pod of two processes, as the Training Operator and the webhook leave it (fabric: loopback)."""
    return clean_env(PET_NNODES="1", PET_NPROC_PER_NODE="2", NCCL_SOCKET_IFNAME="lo", **extra)


def launch(runs, tmp: Path, name: str, train_args: list[str], **env: str):
    return runs(trainyard("launch", "--", *train_args), pod_env(**env), tmp / f"{name}.log")


def done_event(metrics: Path) -> dict:
    found = events(metrics, "done")
    assert found, f"no done event in {metrics}"
    return found[-1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """An uninterrupted two-rank run with synchronous checkpoints, keep 2."""
    from tests.trainer.conftest import Run

    tmp = tmp_path_factory.mktemp("reference")
    ckpt = tmp / "ckpt"
    run = Run(
        trainyard("launch", "--", *TRAIN, "--checkpoint-dir", str(ckpt), "--keep", "2"), pod_env(), tmp / "run.log"
    )
    rc = run.wait(timeout=180)
    assert rc == 0, run.output()[-3000:]
    return {
        "ckpt": ckpt,
        "metrics": ckpt / "metrics.jsonl",
        "output": run.output(),
        "done": done_event(ckpt / "metrics.jsonl"),
    }


def test_loss_falls_and_the_run_ends_with_a_done_line(reference):
    records = steps(reference["metrics"])
    assert [r["step"] for r in records] == list(range(1, MAX_STEPS + 1))
    first = sum(r["loss"] for r in records[:5]) / 5
    last = sum(r["loss"] for r in records[-5:]) / 5
    assert last < first * 0.5, (first, last)
    for r in records:
        assert r["tokens_per_s"] > 0 and r["step_ms"] > 0 and r["world_size"] == 2
        assert (r["checkpoint_ms"] is not None) == (r["step"] % EVERY == 0)
    done = reference["done"]
    lines = reference["metrics"].read_text().splitlines()
    assert lines[-1].startswith('{"event": "done"')
    assert done["step"] == MAX_STEPS and len(done["params_sha256"]) == 64
    assert math.isclose(done["loss"], records[-1]["loss"], rel_tol=1e-5)
    # the same line, for people, on stdout; and preflight ran first
    assert f'"params_sha256": "{done["params_sha256"]}"' in reference["output"]
    assert "preflight passed" in reference["output"]
    assert reference["output"].index("preflight passed") < reference["output"].index("training tiny")


def test_retention_keeps_the_latest_k_committed_steps(reference):
    ckpt = reference["ckpt"]
    assert sorted(p.name for p in ckpt.glob("step-*")) == ["step-100", "step-120"]
    assert committed_steps(ckpt) == [100, 120]
    for d in ckpt.glob("step-*"):
        assert (d / "trainyard.json").is_file()
    committed = [e["step"] for e in events(reference["metrics"], "committed")]
    assert committed == list(range(EVERY, MAX_STEPS + 1, EVERY))


@pytest.mark.timeout(240)
def test_kill_9_of_a_worker_resumes_from_the_last_committed_step_with_the_same_weights(reference, runs, tmp_path):
    ckpt = tmp_path / "ckpt"
    metrics = ckpt / "metrics.jsonl"
    # async checkpoints here (sync in the reference): the resumed weights come from an async save
    run = launch(
        runs, tmp_path, "kill", [*TRAIN, "--checkpoint-dir", str(ckpt), "--async-checkpoint"], PET_MAX_RESTARTS="1"
    )
    wait_for(
        lambda: max_step(metrics) >= 50 and committed_steps(ckpt), 120, "step 50 and a committed checkpoint", run.proc
    )
    victim = wait_for(lambda: worker_pids(run.pid).get(1), 30, "the pid of rank 1", run.proc)
    committed_before = committed_steps(ckpt)[-1]
    subprocess.run(["kill", "-9", str(victim)], check=True)
    killed_at = max_step(metrics)
    assert killed_at < MAX_STEPS, "the run ended before the kill: it proves nothing"
    rc = run.wait(timeout=180)
    assert rc == 0, run.output()[-3000:]

    starts = events(metrics, "start")
    assert [s["restart"] for s in starts] == [0, 1]
    resumed = events(metrics, "resume")
    assert len(resumed) == 1
    step = resumed[0]["step"]
    assert committed_before <= step <= killed_at
    assert step % EVERY == 0
    assert f"resuming from {ckpt}/step-{step}" in run.output()
    assert done_event(metrics)["params_sha256"] == reference["done"]["params_sha256"]


@pytest.fixture(scope="module")
def sigterm_run(tmp_path_factory) -> dict:
    """A two-rank run stopped by SIGTERM to torchrun (what a pod eviction does to PID 1)."""
    from tests.trainer.conftest import Run

    tmp = tmp_path_factory.mktemp("sigterm")
    ckpt = tmp / "ckpt"
    metrics = ckpt / "metrics.jsonl"
    # checkpoint-every 1000: the only checkpoint can come from the SIGTERM
    args = [*TRAIN, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1000"]
    run = Run(trainyard("launch", "--", *args), pod_env(), tmp / "run.log")
    try:
        wait_for(lambda: max_step(metrics) >= 30, 120, "step 30", run.proc)
        run.proc.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
    finally:
        run.kill()
    return {"ckpt": ckpt, "metrics": metrics, "output": run.output(), "tmp": tmp, "args": args}


def test_sigterm_finishes_the_step_saves_and_stops(sigterm_run):
    metrics = sigterm_run["metrics"]
    stopped = events(metrics, "stopped")
    assert len(stopped) == 1, sigterm_run["output"][-3000:]
    step = stopped[0]["step"]
    assert stopped[0]["signal"] == "SIGTERM"
    assert 30 <= step < MAX_STEPS
    assert max_step(metrics) == step  # no step after the one that was running
    assert committed_steps(sigterm_run["ckpt"]) == [step]
    assert not events(metrics, "done")
    assert f"saved checkpoint step-{step}; exiting 0" in sigterm_run["output"]


def test_resume_after_sigterm_skips_a_partial_step_and_ends_with_the_reference_weights(sigterm_run, reference, runs):
    ckpt = sigterm_run["ckpt"]
    saved = committed_steps(ckpt)[-1]
    partial = ckpt / f"step-{saved + 5}"  # a save that died before writing .metadata
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"\0" * 4096)
    run = launch(runs, sigterm_run["tmp"], "resume", sigterm_run["args"])
    rc = run.wait(timeout=180)
    out = run.output()
    assert rc == 0, out[-3000:]
    assert f"skipping partial checkpoint {partial}" in out
    assert not partial.exists()
    assert events(sigterm_run["metrics"], "resume")[-1]["step"] == saved
    assert done_event(sigterm_run["metrics"])["params_sha256"] == reference["done"]["params_sha256"]


def test_sigterm_to_a_single_process_exits_0_after_saving(runs, tmp_path):
    ckpt = tmp_path / "ckpt"
    metrics = ckpt / "metrics.jsonl"
    args = [
        PYTHON,
        "-m",
        "trainer",
        "train",
        "--max-steps",
        "100000",
        "--checkpoint-dir",
        str(ckpt),
        "--checkpoint-every",
        "100000",
    ]
    run = runs(args, clean_env(), tmp_path / "single.log")
    wait_for(lambda: max_step(metrics) >= 5, 60, "step 5", run.proc)
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait(timeout=60) == 0, run.output()
    step = events(metrics, "stopped")[0]["step"]
    assert committed_steps(ckpt) == [step]


@pytest.mark.timeout(240)
def test_two_pods_then_resume_on_one_rank(runs, tmp_path):
    """Two 'pods' (launch processes, one rank each) rendezvous over MASTER_ADDR:MASTER_PORT as the
    Training Operator sets them; the job then resumes with world size 1 (DCP resharding)."""
    ckpt = tmp_path / "ckpt"
    metrics = ckpt / "metrics.jsonl"
    port = str(free_port())
    args = ["--", "--model", "tiny", "--max-steps", "20", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10"]
    pods = [
        runs(
            trainyard("launch", *args),
            clean_env(
                PET_NNODES="2",
                PET_NPROC_PER_NODE="1",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                WORLD_SIZE="2",
                RANK=str(rank),
                NCCL_SOCKET_IFNAME="lo",
            ),
            tmp_path / f"pod{rank}.log",
        )
        for rank in (0, 1)
    ]
    for pod in pods:
        assert pod.wait(timeout=180) == 0, pod.output()[-3000:]
    assert "is_host=true" in pods[0].output() and "is_host=false" in pods[1].output()
    assert events(metrics, "start")[0]["world_size"] == 2
    two_rank_loss = done_event(metrics)["loss"]

    one = runs(
        trainyard(
            "launch",
            "--",
            "--model",
            "tiny",
            "--max-steps",
            "30",
            "--checkpoint-dir",
            str(ckpt),
            "--checkpoint-every",
            "10",
        ),
        clean_env(PET_NNODES="1", PET_NPROC_PER_NODE="1"),
        tmp_path / "one.log",
    )
    assert one.wait(timeout=120) == 0, one.output()[-3000:]
    resume = events(metrics, "resume")[-1]
    assert resume["step"] == 20 and resume["world_size"] == 1
    assert "written by 2 rank(s), now 1" in one.output()
    done = done_event(metrics)
    assert done["step"] == 30
    assert math.isfinite(done["loss"]) and done["loss"] < two_rank_loss * 1.1


@pytest.mark.timeout(240)
def test_fsdp2_trains_saves_and_resumes_on_fewer_ranks(runs, tmp_path):
    ckpt = tmp_path / "ckpt"
    metrics = ckpt / "metrics.jsonl"
    args = ["--strategy", "fsdp", "--model", "tiny", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "10"]
    two = launch(runs, tmp_path, "fsdp2", [*args, "--max-steps", "20"])
    assert two.wait(timeout=120) == 0, two.output()[-3000:]
    assert "training tiny (fsdp" in two.output()
    assert committed_steps(ckpt) == [10, 20]
    first = steps(metrics)[0]["loss"]
    one = runs(
        trainyard("launch", "--", *args, "--max-steps", "30"),
        clean_env(PET_NNODES="1", PET_NPROC_PER_NODE="1"),
        tmp_path / "fsdp1.log",
    )
    assert one.wait(timeout=120) == 0, one.output()[-3000:]
    assert events(metrics, "resume")[-1]["step"] == 20
    assert done_event(metrics)["loss"] < first


@needs_netns
@pytest.mark.netns
@pytest.mark.timeout(240)
def test_two_pods_in_network_namespaces_talk_over_net1(netns, runs, tmp_path):
    """Each 'pod' has eth0 (cluster network, MASTER_ADDR) and net1 (fabric, NCCL_SOCKET_IFNAME):
    the rendezvous goes over eth0, the collectives (gloo, following NCCL_SOCKET_IFNAME) over net1."""
    from tests.trainer.conftest import ip

    tag = uuid.uuid4().hex[:8]
    bridges = [f"ty{n}{tag}" for n in ("c", "f")]
    try:
        for br in bridges:
            ip("link", "add", br, "type", "bridge")
            ip("link", "set", br, "up")
        pods = []
        for i in range(2):
            ns = netns()
            for inside, bridge, net in (("eth0", bridges[0], "10.231.0"), ("net1", bridges[1], "10.232.0")):
                host = ns.veth(inside, address=f"{net}.{10 + i}/24")
                ip("link", "set", host, "master", bridge)
            pods.append(ns)
        ckpt = tmp_path / "ckpt"
        procs = []
        for i, ns in enumerate(pods):
            env = clean_env(
                PET_NNODES="2",
                PET_NPROC_PER_NODE="1",
                MASTER_ADDR="10.231.0.10",
                MASTER_PORT="23456",
                WORLD_SIZE="2",
                RANK=str(i),
                NCCL_SOCKET_IFNAME="net1",
            )
            argv = trainyard("launch", "--", "--model", "tiny", "--max-steps", "20", "--checkpoint-dir", str(ckpt))
            procs.append(runs(ns.exec(argv), env, tmp_path / f"pod{i}.log"))
        for p in procs:
            assert p.wait(timeout=180) == 0, p.output()[-3000:]
        assert "--local-addr 10.231.0.11" in procs[1].output()
        assert done_event(ckpt / "metrics.jsonl")["step"] == 20
        for ns in pods:
            counters = {}
            for dev in ("eth0", "net1"):
                out = subprocess.run(
                    ["ip", "netns", "exec", ns.name, "cat", f"/sys/class/net/{dev}/statistics/tx_bytes"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                counters[dev] = int(out)
            assert counters["net1"] > 20 * counters["eth0"], counters
    finally:  # the namespaces and processes are cleaned up by their fixtures
        for br in bridges:
            subprocess.run(["ip", "link", "del", br], capture_output=True)


def test_train_rejects_keep_below_two_without_a_traceback(tmp_path):
    out = subprocess.run(
        [PYTHON, "-m", "trainer", "train", "--keep", "1", "--checkpoint-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert out.returncode == 2
    assert out.stderr.startswith("error: --keep 1: keep at least 2")
    assert "Traceback" not in out.stderr


def test_checkpoint_of_another_model_is_refused_with_a_clear_error(reference, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(reference["ckpt"] / "step-120", ckpt / "step-120")
    out = subprocess.run(
        [PYTHON, "-m", "trainer", "train", "--model", "mlp", "--checkpoint-dir", str(ckpt), "--max-steps", "130"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: checkpoint {ckpt}/step-120 was written with model='tiny', this run has model='mlp'" in out.stderr
    assert "Traceback" not in out.stderr


def _single(tmp_path: Path, name: str, *args: str) -> list[dict]:
    ckpt = tmp_path / name
    out = subprocess.run(
        [PYTHON, "-m", "trainer", "train", "--checkpoint-dir", str(ckpt), "--log-every", "100", *args],
        capture_output=True,
        text=True,
        env=clean_env(OMP_NUM_THREADS="1"),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return steps(ckpt / "metrics.jsonl")


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    """mlp (no dropout): 2 micro-batches of 16 give the losses of one batch of 32."""
    common = ("--model", "mlp", "--max-steps", "8", "--batch-size", "32", "--checkpoint-every", "100")
    whole = [r["loss"] for r in _single(tmp_path, "whole", *common)]
    accumulated = [r["loss"] for r in _single(tmp_path, "accum", *common, "--grad-accum", "2")]
    assert len(whole) == len(accumulated) == 8
    assert whole[-1] < whole[0]
    assert accumulated == pytest.approx(whole, rel=1e-4)


def test_training_on_a_token_file(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = np.cumsum(rng.integers(1, 3, size=20_000)) % 256  # a learnable walk over the vocabulary
    path = tmp_path / "tokens.bin"
    tokens.astype(np.uint16).tofile(path)
    records = _single(tmp_path, "ckpt", "--data", str(path), "--max-steps", "30", "--seq-len", "32")
    assert records[-1]["step"] == 30
    assert records[-1]["loss"] < records[0]["loss"]
