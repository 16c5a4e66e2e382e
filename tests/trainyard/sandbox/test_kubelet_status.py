"""What the sandbox's kubelet reports for a pod, from the state of its local processes (no cluster:
the statuses are the kubelet's contract, trainyard.sandbox.kubelet's docstring cites it)."""

from __future__ import annotations

import datetime as dt
import subprocess

from trainyard.cluster.processes import CrashLoopBackOff
from trainyard.repo.model.declared import ClusterFacts
from trainyard.sandbox.kubelet import Kubelet, Tracked, node_names, node_object
from trainyard.sandbox.localpods import LocalPod

SPEC = {
    "restartPolicy": "OnFailure",
    "initContainers": [{"name": "preflight", "image": "trainer"}],
    "containers": [{"name": "node", "image": "trainer"}],
}


T0 = dt.datetime(2026, 11, 26, tzinfo=dt.UTC).timestamp()


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
    local.last_exit = {"preflight": (0, T0, T0 + 2), "node": (-9, T0 + 2, T0 + 60)}
    local.processes = {"preflight": _Done(0), "node": _Done(-9)}  # type: ignore[dict-item]
    status = _status(local)
    assert status["phase"] == "Failed"
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "Error")
    assert (terminated["startedAt"], terminated["finishedAt"]) == ("2026-11-26T00:00:02Z", "2026-11-26T00:01:00Z")
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert _status(local) == status  # nothing in it moves with the clock: it is sent once


def test_a_failing_init_container_waits_out_its_back_off_as_crash_loop_back_off():
    """As kuberuntime_manager.go doBackOff says it, with the exit before as lastState (what kubectl
    shows as Init:CrashLoopBackOff)."""
    local = LocalPod("p", "ns", {"spec": SPEC}, init_done=0, restarts={"preflight": 1})
    local.processes = {"preflight": _Done(1)}  # type: ignore[dict-item]
    local.last_exit = {"preflight": (1, T0, T0 + 3)}
    local.restart_at = {"preflight": T0 + 13}
    status = _status(local)
    assert status["phase"] == "Pending"
    preflight = status["initContainerStatuses"][0]
    assert preflight["restartCount"] == 1
    assert preflight["state"]["waiting"] == {
        "reason": "CrashLoopBackOff",
        "message": "back-off 10s restarting failed container=preflight pod=p_ns(uid)",
    }
    assert preflight["lastState"]["terminated"]["exitCode"] == 1


def test_a_running_pod_is_ready_and_counts_its_restarts():
    local = LocalPod("p", "ns", {"spec": SPEC}, init_done=1, exit_codes={"preflight": 0}, restarts={"node": 2})
    local.last_exit = {"preflight": (0, T0, T0 + 2), "node": (137, T0 + 2, T0 + 30)}
    local.started_at = {"node": T0 + 31}
    running = subprocess.Popen(["sleep", "30"])
    try:
        local.processes = {"preflight": _Done(0), "node": running}  # type: ignore[dict-item]
        status = _status(local)
    finally:
        running.kill()
        running.wait()
    assert status["phase"] == "Running"
    node = status["containerStatuses"][0]
    assert (
        node["ready"] and node["restartCount"] == 2 and node["state"]["running"]["startedAt"] == "2026-11-26T00:00:31Z"
    )
    assert node["lastState"]["terminated"]["exitCode"] == 137
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"


def test_a_pod_waiting_on_its_init_container_is_pending():
    local = LocalPod("p", "ns", {"spec": SPEC}, init_done=0, started_at={"preflight": T0})
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


def test_the_crash_loop_back_off_follows_the_kubelets_schedule():
    """At once, then 10 s doubling to 5 minutes; a container that ran 10 minutes starts over."""
    backoff = CrashLoopBackOff()
    exited, delays = 0.0, []
    for _ in range(8):
        start = backoff.restart_at(exited)
        delays.append(start - exited)
        exited = start + 1  # each run lasts a second
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300]
    assert backoff.restart_at(exited + 601) == exited + 601
    assert backoff.restart_at(exited + 602) == exited + 612
