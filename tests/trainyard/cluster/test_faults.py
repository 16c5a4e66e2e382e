"""Faults on the real control plane, with the sandbox as the nodes' kubelet and the demo's watcher
saying each step as kubectl would.

- A pod that fails its preflight: the kubelet restarts the init container with its
  CrashLoopBackOff, the Job controller counts those restarts against the Job's backoffLimit and
  fails the Job, JobSet fails the JobSet, Trainer fails the TrainJob, Kueue finishes its Workload,
  the pods are deleted and stopped.
- A node lost (``make demo DEMO=--lose-node`` does the same): Kueue's TAS node controller finds no
  replacement in the topology and evicts the Workload, which it requeues; the pods go; when the
  node returns Kueue admits the Workload again and the new pods resume from the checkpoint."""

from __future__ import annotations

import argparse
import copy
import re
import time
from collections.abc import Iterator

import pytest

from tests.trainyard.cluster.conftest import Clusters
from trainyard.cluster.client import Kube
from trainyard.contract import reports
from trainyard.repo.model import declared
from trainyard.sandbox.clusterdemo import Watcher, _last_log, holding, pod_status, sandbox_kubelet
from trainyard.sandbox.demo import RunLogFollower, trainer_config

pytestmark = pytest.mark.cluster

NAMESPACE = "ml-training"  # the dev cluster's training namespace: its quota, LocalQueue and webhook
RUNTIME = "trainyard-tcp-fail-fast"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1"
JOB_KINDS = (("trainer.kubeflow.org/v1alpha1", "trainjobs"), ("kubeflow.org/v1", "pytorchjobs"))


def _broken_job(name: str) -> dict:
    """A TrainJob whose preflight sees a variable NCCL no longer reads (a runtime patch on its init
    container, as a user may write one): preflight fails it, exit 1, on every start."""
    preflight = {"name": "preflight", "env": [{"name": "NCCL_LL_THRESHOLD", "value": "0"}]}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": "training"}},
        "spec": {
            "runtimeRef": {"name": RUNTIME},
            "trainer": {
                "numNodes": 1,
                "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                "args": ["--", "--max-steps", "2"],
            },
            "runtimePatches": [{
                "manager": "trainyard.dev/test",
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                    "spec": {"template": {"spec": {"initContainers": [preflight]}}}}}]}}},
            }],
        },
    }  # fmt: skip


def _fail_fast_runtime(kube: Kube) -> dict:
    """The dev cluster's runtime with the Job's backoffLimit at 2 instead of its default 6: the
    second restart fails the Job (the sixth comes after the kubelet's back-off of 0+10+20+40+80+160 s)."""
    runtime = kube.get(f"{TRAINJOBS}/clustertrainingruntimes/trainyard-tcp")
    spec = copy.deepcopy(runtime["spec"])
    spec["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 2
    meta = {"name": RUNTIME, "labels": runtime["metadata"].get("labels") or {}}
    return {"apiVersion": runtime["apiVersion"], "kind": runtime["kind"], "metadata": meta, "spec": spec}


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    """A dev cluster of this module's own: its tests delete the jobs git synced into it, which the
    session's clusters keep for the other modules."""
    c = Clusters(tmp_path_factory.mktemp("faults"))
    try:
        yield c
    finally:
        c.stop()


def _only_this_test(kube: Kube) -> None:
    """The cluster's own jobs (synced from git) would run beside the test's: deleted."""
    for api_version, plural in JOB_KINDS:
        for obj in kube.get(f"/apis/{api_version}/namespaces/{NAMESPACE}/{plural}")["items"]:
            kube.request("DELETE", f"/apis/{api_version}/namespaces/{NAMESPACE}/{plural}/{obj['metadata']['name']}")


def test_a_pod_that_fails_its_preflight_fails_its_job_through_the_controllers(own, tmp_path):
    started = own["dev"]
    repo = own.repo
    with started.client() as kube:
        _only_this_test(kube)
        kube.apply(_fail_fast_runtime(kube), manager="trainyard-test")
        cm = kube.get("/api/v1/namespaces/argocd/configmaps/argocd-cm").get("data") or {}
        watcher = Watcher(kube, NAMESPACE, cm)
        said: list[str] = []
        with sandbox_kubelet(kube, declared.load(repo, "dev"), tmp_path, said.append) as kubelet:
            kubelet.register()
            kubelet.provide_storage()
            kubelet.start()
            kube.create(_broken_job("broken-fabric"))
            deadline = time.monotonic() + 180
            states: set[str] = set()
            trainjob: dict = {}
            while time.monotonic() < deadline:
                said += kubelet.step(0.3)
                said += watcher.lines()
                for pod in kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]:
                    states.add(pod_status(pod)[0])
                trainjob = kube.get(f"{TRAINJOBS}/namespaces/{NAMESPACE}/trainjobs/broken-fabric")
                pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
                if holding(trainjob, "Failed") and not pods and not kubelet.cluster.pods:  # deleted and stopped
                    break
            else:
                pytest.fail("the TrainJob did not fail within 180 s:\n" + "\n".join(said[-40:]))
            said += watcher.lines()  # the end states, as they are now
            text = "\n".join(said)

            # the kubelet: preflight exited 1, was started again at once, then after 10 s of back-off,
            # which the API server held as kubectl shows it
            assert "/preflight (init) exited with 1; restarting (1)" in text
            assert "/preflight (init) exited with 1; back-off 10 s before restarting it" in text
            assert "/preflight restarted after its back-off (2)" in text
            assert "Init:CrashLoopBackOff" in states, states
            # and the end of the log the demo shows for a failed job: preflight's own words
            tail = _last_log(kubelet, "broken-fabric", argparse.Namespace(workdir=str(tmp_path)))
            assert ".preflight.log" in tail and "NCCL_LL_THRESHOLD was removed in NCCL 2.5" in tail

            # the Job controller: the restarts reached the backoffLimit
            jobs = kube.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")["items"]
            (job,) = [j for j in jobs if j["metadata"]["name"].startswith("broken-fabric-")]
            assert holding(job, "Failed")["reason"] == "BackoffLimitExceeded"
            # JobSet, Trainer and Kueue after it
            jobset = kube.get(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets/broken-fabric")
            assert holding(jobset, "Failed") is not None
            assert holding(trainjob, "Failed") is not None
            workloads = kube.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
            (workload,) = [w for w in workloads if w["metadata"]["name"].startswith("trainjob-broken-fabric-")]
            finished = {c["type"]: c for c in workload["status"]["conditions"]}["Finished"]
            assert finished["status"] == "True"

            # what the demo prints: each failure with its controller's reason
            assert f"api: Job {job['metadata']['name']}: Failed, 0 succeeded, 0 active (BackoffLimitExceeded:" in text
            assert "api: JobSet broken-fabric: Failed (" in text
            assert "api: TrainJob broken-fabric: Failed (" in text
            workload_lines = [line for line in said if line.startswith("api: Workload trainjob-broken-fabric-")]
            assert "Finished" in workload_lines[-1]
        kube.request("DELETE", f"{TRAINJOBS}/namespaces/{NAMESPACE}/trainjobs/broken-fabric")


def _smoke_job(name: str) -> dict:
    """A two-node TrainJob like the dev cluster's smoke-ddp: one GPU a node, so it needs both."""
    args = ["--", "--model", "tiny", "--data", "synthetic", "--max-steps", "120", "--checkpoint-every", "20",
            "--log-every", "20", "--checkpoint-dir", f"/checkpoints/{name}"]  # fmt: skip
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kueue.x-k8s.io/queue-name": "training"}},
        "spec": {
            "runtimeRef": {"name": "trainyard-tcp"},
            "trainer": {
                "numNodes": 2,
                "numProcPerNode": 1,
                "args": args,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1, "cpu": "2", "memory": "4Gi"}},
            },
        },
    }


def test_a_lost_node_makes_kueue_evict_and_requeue_the_job_which_resumes_when_the_node_returns(own, tmp_path):
    job = "node-loss"
    with own["dev"].client() as kube:
        _only_this_test(kube)
        cm = kube.get("/api/v1/namespaces/argocd/configmaps/argocd-cm").get("data") or {}
        watcher = Watcher(kube, NAMESPACE, cm)
        said: list[str] = []
        with sandbox_kubelet(kube, declared.load(own.repo, "dev"), tmp_path, said.append) as kubelet:
            kubelet.register()
            kubelet.provide_storage()
            kubelet.start()
            kube.create(_smoke_job(job))
            log: RunLogFollower | None = None
            lost_after: int | None = None
            evicted: dict | None = None
            trainjob: dict = {}
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                said += kubelet.step(0.3)
                said += watcher.lines()
                pods = [t.local for t in kubelet.pods.values() if t.local is not None and t.name.startswith(job)]
                if log is None and pods:
                    _, cfg = trainer_config(pods[0].spec)
                    path = kubelet.cluster.host_path(pods[0], str(cfg.metrics_path))
                    log = RunLogFollower(path) if path else None
                if log is not None:
                    log.read()
                if lost_after is None and log is not None and log.committed():
                    lost_after = log.committed()[-1]
                    said += kubelet.lose("lab-gpu-1")
                if lost_after is not None and evicted is None:
                    workloads = kube.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
                    ours = [w for w in workloads if w["metadata"]["name"].startswith(f"trainjob-{job}-")]
                    evicted = holding(ours[0], "Evicted") if ours else None
                    if evicted is not None:
                        said += watcher.lines()  # while it is evicted: Kueue admits it again at once after
                        kubelet.register()  # the node returns
                trainjob = kube.get(f"{TRAINJOBS}/namespaces/{NAMESPACE}/trainjobs/{job}")
                if holding(trainjob, "Complete") or holding(trainjob, "Failed"):
                    break
            said += watcher.lines()
            text = "\n".join(said)
            assert holding(trainjob, "Complete"), text[-6000:]
            # the node's pod died with it; Kueue found no replacement for it and evicted the job
            assert re.search(r"node-loss-node-0-1-\w+: lost with lab-gpu-1", text)
            assert evicted is not None and evicted["reason"] == "NodeFailures"
            assert (
                evicted["message"]
                == "Workload was evicted as there was no replacement for unhealthy node(s): lab-gpu-1"
            )
            assert re.search(r"api: Workload trainjob-node-loss-\w+: Evicted .*\(NodeFailures: ", text)
            # requeued and admitted again once the node was back; new pods resumed from the commit
            admitted = [line for line in said if re.match(r"api: Workload trainjob-node-loss-\w+: Admitted", line)]
            assert len(admitted) == 2, admitted
            resumes = [e for e in log.events if isinstance(e, reports.Resume)]
            assert [(r.step, r.world_size) for r in resumes] == [(lost_after, 2)]
            assert re.search(r"api: Workload trainjob-node-loss-\w+: Finished", text)
        kube.request("DELETE", f"{TRAINJOBS}/namespaces/{NAMESPACE}/trainjobs/{job}")
