"""``make demo``: a TrainJob of the dev cluster pushed to the cluster's repository, synced by Argo CD,
run through the real controllers, its worker killed after a committed checkpoint, to Complete; then
nothing of it is left running."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.e2e.test_demo import processes_under
from tests.trainyard.repo.conftest import REPO_ROOT

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="the pods' network namespaces need root"),
]


def test_the_demo_runs_a_trainjob_through_the_controllers_to_complete(tmp_path):
    work = tmp_path / "work"
    report = tmp_path / "report"
    argv = [sys.executable, "-m", "trainyard.cli", "demo", "--workdir", str(work), "--report-dir", str(report)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-3000:]
    # every controller of the chain, started from its release
    for name in ("kueue", "trainer-controller-manager", "jobset", "training-operator.v1"):
        assert re.search(rf"started .*{re.escape(name)} \(webhooks at https://127\.0\.0\.1:\d+\)", out), name
    # Argo CD took the cluster over, then made and synced the pushed job's Application
    assert re.search(r"Argo CD has taken over: \d+ Applications Synced", out), out[-4000:]
    pushed = re.search(
        r"pushed ([0-9a-f]{12}); the ApplicationSet trainyard-jobs makes Application dev-job-smoke-ddp", out
    )
    assert pushed, out[-4000:]
    assert f"argocd: dev-job-smoke-ddp: sync Succeeded at {pushed.group(1)}" in out
    assert re.search(r"argocd: dev-job-smoke-ddp: .*now Synced, health", out), out[-4000:]
    assert "argocd: dev-job-smoke-ddp:   TrainJob ml-training/smoke-ddp: Synced" in out
    # Kueue admitted the TrainJob into a topology domain of the declared nodes
    assert re.search(r"api: Workload trainjob-smoke-ddp-\w+: Admitted into lab-gpu-\d, lab-gpu-\d", out), out
    # the webhook's fabric is in the pods kube-apiserver stores, and they ran with net1
    assert re.search(r"smoke-ddp-node-0-0-\w+ \(eth0 [\d.]+, net1 [\d.]+\): networks training-network; .*NCCL_", out)
    # the kill, the kubelet's restart reported to the API server, the resume from the commit
    killed = re.search(r"fault: kill -9 of (smoke-ddp-node-0-1-\w+)'s container .* after step (\d+) was committed", out)
    assert killed, out[-4000:]
    assert f"api: Pod {killed.group(1)}: Running on lab-gpu-" in out and "restarts 1" in out
    assert f"resumed from committed step {killed.group(2)}" in out
    # Argo CD's health checks, run on the live objects, follow the job to its end
    # the controllers' Deployments are Available once their pods answer their readiness probes
    # (played by the controllers up runs): Argo CD finds those Applications Healthy
    healthy = re.search(r"argocd: Healthy: (.*)", out)
    assert healthy, out[-4000:]
    for app in ("trainyard-trainer", "trainyard-training-operator", "dev-job-smoke-ddp"):
        assert app in healthy.group(1).split(", "), healthy.group(1)
    assert "api: TrainJob smoke-ddp: Complete  [Argo CD health Healthy" in out
    assert "api: PyTorchJob mnist-ddp: Succeeded  [Argo CD health Healthy" in out
    assert re.search(r"api: Workload trainjob-smoke-ddp-\w+: Finished .*\[Argo CD health Healthy", out)
    # a real Prometheus scraped both pods as the PodMonitor says (job_name and cluster from its
    # relabelings) and the webhook as its ServiceMonitor says; the report gives what PromQL answers
    figures = {m.group(1).strip(): m.group(2) for m in re.finditer(r"^ {5}(\S.*?)  +(\S.*?) {2,}\S.*\(", out, re.M)}
    assert figures["trainer pods scraped"] == "2", out[-3000:]
    assert figures["steps"] == "300"
    assert float(figures["throughput, mean over the run"].split()[0].replace(",", "")) > 0
    # the last scrape, which each pod waits for before it ends, read the run's last values
    assert figures["loss, last"] == re.search(r"done: step 300, loss (\S+)", out).group(1)
    assert figures["last committed checkpoint"] == "step 300"
    assert figures["pods that resumed a checkpoint"] == "2"  # the killed pod's and its peer's workers
    assert int(figures["webhook reviews that patched a pod"]) >= 2
    assert (report / "smoke-ddp.txt").read_text().splitlines()[0] == "== report: smoke-ddp"
    assert (report / "smoke-ddp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert processes_under(work) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "smoke-ddp" not in netns and "mnist-ddp" not in netns
