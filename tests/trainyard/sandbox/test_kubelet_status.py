"""What the sandbox's kubelet reports for a pod, from the state of its local processes (no cluster:
the statuses are the kubelet's contract, trainyard.sandbox.kubelet's docstring cites it)."""

from __future__ import annotations

import subprocess

from trainyard.repo.model.declared import ClusterFacts
from trainyard.sandbox.kubelet import Kubelet, Tracked, node_names, node_object
from trainyard.sandbox.localpods import LocalPod

SPEC = {
    "restartPolicy": "OnFailure",
    "initContainers": [{"name": "preflight", "image": "trainer"}],
    "containers": [{"name": "node", "image": "trainer"}],
}


class _Done:
    """A finished process, as subprocess.Popen reports one."""

    def __init__(self, code: int) -> None:
        self.returncode = code

    def poll(self) -> int:
        return self.returncode


def _status(local: LocalPod | None, waiting: str = "") -> dict:
    kubelet = Kubelet.__new__(Kubelet)
    tracked = Tracked("uid", "p", "ns", "n0", local, SPEC, "2026-11-26T00:00:00Z", waiting=waiting)
    return Kubelet.status(kubelet, tracked, SPEC)


def test_a_container_killed_by_a_signal_reports_128_plus_the_signal_and_the_pod_fails():
    local = LocalPod("p", "ns", {"spec": SPEC}, init_done=1, exit_codes={"preflight": 0, "node": -9})
    local.processes = {"preflight": _Done(0), "node": _Done(-9)}  # type: ignore[dict-item]
    status = _status(local)
    assert status["phase"] == "Failed"
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_a_running_pod_is_ready_and_counts_its_restarts():
    local = LocalPod("p", "ns", {"spec": SPEC}, init_done=1, exit_codes={"preflight": 0}, restarts={"node": 2})
    running = subprocess.Popen(["sleep", "30"])
    try:
        local.processes = {"preflight": _Done(0), "node": running}  # type: ignore[dict-item]
        status = _status(local)
    finally:
        running.kill()
        running.wait()
    assert status["phase"] == "Running"
    node = status["containerStatuses"][0]
    assert node["ready"] and node["restartCount"] == 2 and "running" in node["state"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"


def test_a_pod_waiting_on_its_init_container_is_pending():
    local = LocalPod("p", "ns", {"spec": SPEC}, init_done=0)
    running = subprocess.Popen(["sleep", "30"])
    try:
        local.processes = {"preflight": running}  # type: ignore[dict-item]
        status = _status(local)
    finally:
        running.kill()
        running.wait()
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}


def test_a_pod_that_cannot_start_says_why_as_the_kubelet_would():
    status = _status(None, waiting="pod p: container node: no command and no local entrypoint for 'busybox'")
    waiting = status["containerStatuses"][0]["state"]["waiting"]
    assert status["phase"] == "Pending" and waiting["reason"] == "ErrImagePull" and "busybox" in waiting["message"]
    status = _status(None, waiting="pod p: volume tls of type secret is not supported locally")
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"


def test_nodes_are_the_declared_pools_with_their_labels_and_allocatable():
    facts = ClusterFacts.model_validate(
        {
            "apiVersion": "trainyard.dev/v1alpha1",
            "kind": "ClusterFacts",
            "metadata": {"name": "t"},
            "spec": {
                "kubernetesVersion": "1.36",
                "nodePools": [
                    {
                        "name": "gpu",
                        "count": 3,
                        "labels": {"topology.kubernetes.io/zone": "z1"},
                        "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"},
                    }
                ],
                "topology": ["topology.kubernetes.io/zone", "kubernetes.io/hostname"],
            },
        }
    )
    names = node_names(facts)
    assert [n for n, _ in names] == ["gpu-0", "gpu-1", "gpu-2"]
    node = node_object(*names[1])
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "gpu-1" and labels["topology.kubernetes.io/zone"] == "z1"
    assert node["status"]["allocatable"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8", "pods": "110"}
