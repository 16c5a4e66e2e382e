"""``make demo``: a TrainJob of the dev cluster through the real controllers, its worker killed after
a committed checkpoint, to Complete; then nothing of it is left running."""

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
    argv = [sys.executable, "-m", "trainyard.cli", "demo", "--workdir", str(work)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-3000:]
    # every controller of the chain, started from its release
    for name in ("kueue", "trainer-controller-manager", "jobset", "training-operator.v1"):
        assert re.search(rf"started .*{re.escape(name)} \(webhooks at https://127\.0\.0\.1:\d+\)", out), name
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
    assert "api: TrainJob smoke-ddp: Complete  [Argo CD health Healthy" in out
    assert "api: PyTorchJob mnist-ddp: Succeeded  [Argo CD health Healthy" in out
    assert re.search(r"api: Workload trainjob-smoke-ddp-\w+: Finished .*\[Argo CD health Healthy", out)
    assert processes_under(work) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "smoke-ddp" not in netns and "mnist-ddp" not in netns
