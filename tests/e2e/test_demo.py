"""``make demo OFFLINE=1``, reduced: the path of a job without Kubernetes, and nothing left behind.

The same command a user runs (``trainyard demo --offline``), with fewer steps: render and
validate the dev cluster, the webhook over TLS, the job's pods through admission, the pods in
network namespaces, training with a worker killed halfway, the report. Then the machine is
checked for leftovers (namespaces, links, hosts files, processes). The default job is a TrainJob;
the v1 path (a PyTorchJob through the Training Operator's expansion) runs once too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.sandbox.localpods import STATE_DIR

pytestmark = pytest.mark.e2e

STEPS, EVERY = 60, 10
DEMO = [sys.executable, "-m", "trainyard.cli", "demo", "--offline"]  # make demo OFFLINE=1


def demo(*args: str) -> subprocess.CompletedProcess:
    """``trainyard demo --offline ARGS`` as a user runs it (make demo OFFLINE=1)."""
    argv = [*DEMO, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)


def leftovers(run_id: str, workdir: Path) -> list[str]:
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"netns {line.split()[0]}" for line in netns.splitlines() if f"ty-{run_id}-" in line]
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if f"ty{run_id}" in line]
    found += [f"/etc/netns/{p.name}" for p in Path("/etc/netns").glob(f"ty-{run_id}-*")]
    found += [f"state {p}" for p in STATE_DIR.glob(f"{run_id}.json")]
    found += [f"process {p}" for p in processes_under(workdir)]
    return found


def processes_under(folder: Path) -> list[str]:
    """Processes (but this one) whose command line names ``folder``: "pid: command"."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if str(folder).encode() in cmdline:
                found.append(f"{proc.name}: {cmdline.replace(bytes(1), b' ')[:120]!r}")
    return found


def test_demo_end_to_end(tmp_path):
    workdir, summary_file = tmp_path / "work", tmp_path / "summary.json"
    r = demo(
        "--max-steps",
        str(STEPS),
        "--checkpoint-every",
        str(EVERY),
        "--workdir",
        str(workdir),
        "--summary",
        str(summary_file),
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.loads(summary_file.read_text())

    # admission: the policy rejects every pod as JobSet's Jobs create it and admits it as mutated;
    # the API server names the pods from their generateName
    assert [re.sub(r"[a-z0-9]{5}$", "*", p["name"]) for p in s["pods"]] == [
        "smoke-ddp-node-0-0-*",
        "smoke-ddp-node-0-1-*",
    ]
    for pod in s["pods"]:
        assert pod["policy_before"] and pod["policy_after"] == [] and pod["schema_errors"] == []
        assert "container node: env NCCL_SOCKET_IFNAME=net1" in pod["injected"]
        assert "container node: mount trainyard-shm at /dev/shm" in pod["injected"]
        assert "init container preflight: the same env and /dev/shm mount as container node" in pod["injected"]
        assert pod["exit_code"] == 0
        assert any(line.startswith("shm pass:") for line in pod["preflight"])
    # Kueue admitted the TrainJob and placed the pods; the runtime's preflight ran first in each pod
    assert "Kueue: LocalQueue training -> ClusterQueue trainyard" in r.stdout
    assert "Kueue's ungater lifts its topology gate from 2 pods" in r.stdout
    for pod in s["pods"]:
        assert f"pod event: {pod['name']}/preflight (init) completed" in r.stdout
    # the collective traffic went over the fabric interface
    if s["isolated"]:
        for pod in s["pods"]:
            net1, eth0 = pod["counters"]["net1"], pod["counters"]["eth0"]
            assert net1["tx"] > 50 * eth0["tx"] and net1["rx"] > 50 * eth0["rx"], pod["counters"]
            assert any(line.startswith("interface pass:") and "net1 up" in line for line in pod["preflight"])
    else:
        assert s["why_not_isolated"]
    # the worker was killed halfway and the job resumed from the last committed step
    killed = s["killed"]
    assert killed and killed["pod"] == s["pods"][1]["name"]
    assert s["resumed_from"] == killed["last_committed"] >= STEPS // 2 and s["resumed_from"] % EVERY == 0
    events = [json.loads(line) for line in (workdir / "pvc/training-checkpoints/smoke-ddp/metrics.jsonl").open()]
    committed = [e["step"] for e in events if e.get("event") == "committed"]
    resume_at = next(i for i, e in enumerate(events) if e.get("event") == "resume")
    assert [e["step"] for e in events[:resume_at] if e.get("event") == "committed"][-1] == s["resumed_from"]
    assert committed[-1] == STEPS and s["done_step"] == STEPS
    assert s["last_loss"] < s["first_loss"]
    assert "resumed from committed step" in r.stdout
    n = s["resumed_from"]  # the report names the same step twice: what was committed, what resumed
    assert f"fault: killed {killed['pod']} after step {n} was committed; resumed from committed step {n}" in r.stdout
    assert "collective traffic: net1 carried" in r.stdout or not s["isolated"]
    assert leftovers(s["cluster_id"], workdir) == []


def test_the_v1_path_a_pytorchjob_end_to_end(tmp_path):
    """The legacy operator's path: the Training Operator's pods (its init container waits for the
    master's name), the webhook's own affinity, training to the end (the fault is the TrainJob's test)."""
    summary_file = tmp_path / "summary.json"
    work = str(tmp_path / "work")
    r = demo("--job", "mnist-ddp", "--no-fault", "--max-steps", "20", "--checkpoint-every", "5", "--workdir", work,
             "--summary", str(summary_file))  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[3/6] admission: PyTorchJob mnist-ddp" in r.stdout
    s = json.loads(summary_file.read_text())
    assert [p["name"] for p in s["pods"]] == ["mnist-ddp-master-0", "mnist-ddp-worker-0"]
    for pod in s["pods"]:
        assert "container pytorch: env NCCL_SOCKET_IFNAME=net1" in pod["injected"] and pod["exit_code"] == 0
        assert any("co-locate the job's pods (podAffinity on training.kubeflow.org/job-name)" in line
                   for line in pod["injected"])  # fmt: skip
    assert "pod event: mnist-ddp-worker-0/init-pytorch (init) completed" in r.stdout
    assert s["killed"] is None and s["done_step"] == 20 and leftovers(s["cluster_id"], Path(work)) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the cleanup of namespaces needs root")
def test_ctrl_c_cleans_up_and_a_second_run_works(tmp_path):
    workdir = tmp_path / "work"
    proc = subprocess.Popen(
        [*DEMO, "--max-steps", "2000", "--no-fault", "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
    )
    metrics = workdir / "pvc/training-checkpoints/smoke-ddp/metrics.jsonl"
    output, run_id = [], None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until training runs (a step line in the metrics)
        line = proc.stdout.readline()
        output.append(line)
        if m := re.search(r"\(ty-([0-9a-f]+)-\*\)", line):
            run_id = m.group(1)
        if run_id and metrics.exists() and b'"step": 3,' in metrics.read_bytes():
            break
        assert proc.poll() is None, "".join(output)
    assert run_id, "".join(output)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(output) + rest
    assert "everything the demo started was stopped and removed" in rest
    assert leftovers(run_id, workdir) == []
    second = subprocess.run(
        [*DEMO, "--max-steps", "10", "--no-fault", "--workdir", str(tmp_path / "again")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]


def test_a_failed_run_cleans_up(tmp_path):
    workdir = tmp_path / "work"
    r = demo("--max-steps", "100000", "--no-fault", "--timeout", "15", "--workdir", str(workdir))
    # which deadline a slow machine meets first (torch's import alone may take seconds) is not the
    # point: either refusal is a failed run, and it must leave nothing behind
    said = ("error: the job did not finish in time", "error: training did not start in time")
    assert r.returncode == 2 and any(s in r.stderr for s in said), r.stdout[-2000:] + r.stderr
    run_id = re.search(r"\(ty-([0-9a-f]+)-\*\)", r.stdout)
    assert leftovers(run_id.group(1) if run_id else "none", workdir) == []


def test_without_network_namespaces_the_demo_says_so_and_still_trains(tmp_path):
    summary_file = tmp_path / "summary.json"
    work = str(tmp_path / "work")
    # the fault needs a commit in [max/2, max) seen before the last: 3 such commits, 10 steps apart
    r = demo(
        "--no-netns", "--max-steps", "60", "--checkpoint-every", "10", "--workdir", work, "--summary", str(summary_file)
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "LOCAL PROCESSES on 127.0.0.1, not isolated (asked not to isolate)" in r.stdout
    s = json.loads(summary_file.read_text())
    assert not s["isolated"] and s["done_step"] == 60 and s["resumed_from"] == s["killed"]["last_committed"]
    assert "no per-pod interfaces or counters" in r.stdout


def test_max_steps_below_two_is_refused_before_anything_runs():
    r = demo("--max-steps", "0")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1] == "trainyard demo: error: argument --max-steps: must be at least 2, not 0"


def test_an_mpijob_is_refused_with_the_reason(tmp_path):
    r = demo("--cluster", "prod-ib", "--job", "horovod", "--workdir", str(tmp_path / "work"))
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stderr.startswith("error: pod horovod-launcher: container mpi runs 'mpirun', not the trainer image's")
    assert "an MPIJob's launcher runs mpirun" in r.stderr and "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize(("cluster", "job", "pods"), [("prod-ib", "horovod", 3), ("dev", "smoke-ddp", 2)])
def test_demo_policy_path(cluster, job, pods):
    """``--admission policy``: the job's pods through the MutatingAdmissionPolicies' CEL, offline; each is
    the engine's pod, a second pass changes nothing, the ValidatingAdmissionPolicy admits it."""
    r = demo("--admission", "policy", "--cluster", cluster, "--job", job)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if "operations; engine:" in line]
    assert len(lines) == pods, r.stdout
    for line in lines:
        assert "engine: same pod; second pass: no change; admission policy: admits" in line, line
    mode = "applies the fabric by policy" if cluster == "prod-ib" else "runs the webhook (admission: webhook)"
    assert mode in r.stdout
    assert "+ container" in r.stdout and "env NCCL_SOCKET_IFNAME=net1" in r.stdout
