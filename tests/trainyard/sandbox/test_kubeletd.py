"""``trainyard cluster up`` with the sandbox as its nodes' kubelet (``trainyard kubelet``): what the
repository syncs runs, Kueue admits, and ``cluster down`` stops the kubelet with its pods."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainyard.cluster.controlplane import Paths, Started, State
from trainyard.cluster.processes import wait_for
from trainyard.sandbox.localpods import isolation_available

REPO_ROOT = Path(__file__).resolve().parents[3]
available, why = isolation_available()


def trainyard(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainyard.cli", *argv], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=600)  # fmt: skip


def test_the_kubelet_without_a_cluster_says_so(tmp_path: Path) -> None:
    done = trainyard("kubelet", "--dir", str(tmp_path))
    assert done.returncode != 0
    assert (
        done.stderr.strip()
        == f"error: {tmp_path}: no cluster here (no state file): start one with trainyard cluster up"
    )


@pytest.mark.cluster
@pytest.mark.netns
@pytest.mark.skipif(not available, reason=f"needs root and ip netns: {why}")
def test_cluster_up_runs_what_it_syncs_and_down_stops_the_kubelet(tmp_path: Path) -> None:
    folder = tmp_path / "dev"
    # Argo CD left out: the demo and the cluster tier's Argo CD tests run it; this test is about the kubelet
    up = trainyard("cluster", "up", "--cluster", "dev", "--dir", str(folder), "--no-argocd")
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert "kubelet (the sandbox, pid" in up.stdout and "2 nodes Ready: lab-gpu-0, lab-gpu-1" in up.stdout
        state = State.load(folder)
        assert state is not None and state.daemons[-1].name == "kubelet"
        with Started(folder, state, Paths(folder)).client() as kube:

            def finished() -> dict | None:
                job = kube.get("/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml-training/trainjobs/smoke-ddp")
                done = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
                return job if done.get("Complete") == "True" or done.get("Failed") == "True" else None

            # the TrainJob the repository syncs: admitted by Kueue onto the registered nodes, run to its end
            job = wait_for(finished, 240, "the synced TrainJob smoke-ddp finished", interval=1)
            conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
            assert conditions.get("Complete") == "True", json.dumps(job["status"])[:2000]
            selector = {"labelSelector": "jobset.sigs.k8s.io/jobset-name=smoke-ddp"}
            pods = kube.get("/api/v1/namespaces/ml-training/pods", params=selector)
            assert {p["spec"]["nodeName"] for p in pods["items"]} == {"lab-gpu-0", "lab-gpu-1"}
            assert {p["status"]["phase"] for p in pods["items"]} == {"Succeeded"}
    finally:
        down = trainyard("cluster", "down", "--dir", str(folder))
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith("stopped: kubelet (pid")
    log = (folder / "logs" / "kubelet.log").read_text()
    assert "stopping: the pods and their network namespaces are removed" in log
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "smoke-ddp" not in namespaces and "mnist-ddp" not in namespaces
