"""Kueue: what it does to a TrainJob (the runtime patch it writes when it admits the job, or why it
never would), on the queues generated from a cluster's declared facts."""

from __future__ import annotations

import copy
import hashlib

import pytest

from tests.trainyard.repo.conftest import REPO_ROOT, edit
from trainyard.repo import validate
from trainyard.repo.generate import queues as generated
from trainyard.repo.generate import runtimes
from trainyard.repo.model import declared, kustomize
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import kueue, strategic_merge, trainjob
from webhook.policy import load_policies


@pytest.fixture(scope="module")
def dev(repo) -> declared.ClusterFacts:
    return declared.load(repo, "dev")


def test_pod_requests_count_init_containers_as_the_scheduler_does():
    spec = {
        "initContainers": [{"resources": {"limits": {"cpu": "4", "memory": "1Gi"}}}],
        "containers": [
            {"resources": {"limits": {"cpu": "2", "memory": "8Gi"}, "requests": {"cpu": "1"}}},
            {"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}},
        ],
    }
    requests = kueue.pod_requests(spec)
    assert requests == {"cpu": 4, "memory": 8 * 2**30, "nvidia.com/gpu": 1}


@pytest.fixture(scope="module")
def queues(dev) -> kueue.Queues:
    return kueue.Queues.collect([Resource(doc=o) for o in generated.objects(dev, "ml-training")])


@pytest.fixture(scope="module")
def runtime() -> dict:
    return runtimes.cluster_training_runtime(load_policies(REPO_ROOT / "policies").get("tcp"))


def trainjob_doc(nodes: int = 2, gpus: int = 1, queue: str | None = "training") -> dict:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "smoke", "namespace": "ml-training", "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "runtimeRef": {"name": "trainyard-tcp"},
            "trainer": {"numNodes": nodes, "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus, "memory": "8Gi"}}},
        },
    }


def test_kueue_admits_into_the_flavor_and_gates_the_pods(queues, runtime):
    job = trainjob_doc()
    admission, problems = kueue.admit(job, trainjob.build_jobset(job, runtime), queues, uid="u-1")
    assert problems == [] and admission.flavor == "lab-gpu" and admission.cluster_queue == "trainyard"
    digest = hashlib.sha1(b"TrainJob\ntrainer.kubeflow.org\nsmoke\nu-1").hexdigest()[:5]
    assert admission.workload == f"trainjob-smoke-{digest}"
    (rj,) = admission.patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = rj["template"]["spec"]["template"]
    assert admission.patch["manager"] == "kueue.x-k8s.io/manager"
    # the labels of the queues that admitted it (what Kueue v0.19.2 writes in the runtime patch; the
    # cluster tier's test_expansion compares with the real one)
    labels = {
        "kueue.x-k8s.io/podset": "node",
        "kueue.x-k8s.io/local-queue-name": "training",
        "kueue.x-k8s.io/cluster-queue-name": "trainyard",
    }
    assert pod["metadata"] == {"annotations": {"kueue.x-k8s.io/workload": admission.workload}, "labels": labels}
    assert pod["spec"] == {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                           "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]}  # fmt: skip
    # the patch merged into the runtime reaches every pod
    admitted = copy.deepcopy(job)
    admitted["spec"]["runtimePatches"] = [admission.patch]
    pods = trainjob.expand(admitted, runtime).pods
    assert all(p["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}] for p in pods)


def test_a_job_without_a_queue_is_not_kueues(queues, runtime):
    job = trainjob_doc(queue=None)
    job["metadata"]["labels"] = {}
    assert kueue.admit(job, trainjob.build_jobset(job, runtime), queues, "u") == (None, [])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda j, rt: j["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "fast"}),
         "no LocalQueue 'fast' in namespace ml-training (known: training)"),
        (lambda j, rt: j["spec"]["trainer"].update(numNodes=3), "nvidia.com/gpu 3 > 2"),
        (lambda j, rt: j["spec"]["trainer"]["resourcesPerNode"]["limits"].update({"example.com/fpga": 1}),
         "does not cover example.com/fpga"),
        (lambda j, rt: rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
         ["annotations"].update({"kueue.x-k8s.io/podset-preferred-topology": "topology.trainyard.dev/rack"}),
         "topology.trainyard.dev/rack is not a level of Topology trainyard"),
    ],
)  # fmt: skip
def test_why_kueue_would_never_admit(queues, runtime, change, message):
    job, rt = trainjob_doc(), copy.deepcopy(runtime)
    change(job, rt)
    admission, problems = kueue.admit(job, trainjob.build_jobset(job, rt), queues, "u")
    assert admission is None and any(message in p for p in problems), problems


def test_validate_refuses_a_trainjob_kueue_would_never_admit(repo_copy):
    edit(repo_copy, "overlays/dev/jobs/smoke-ddp/job.yaml", "numNodes: 2", "numNodes: 4")
    kustomize.clear_cache()
    errors = [str(p) for p in validate.validate(repo_copy, ["dev"]).errors()]
    assert any("overlays/dev/jobs/smoke-ddp" in e and "Kueue would never admit it" in e and "nvidia.com/gpu 4 > 2" in e
               for e in errors), errors  # fmt: skip


def test_strategic_merge_follows_the_struct_tags():
    original = {
        "replicatedJobs": [{"name": "a", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "env": [{"name": "X", "value": "1"}], "args": ["--a"]}],
            "tolerations": [{"key": "t"}], "nodeSelector": {"k": "v"}}}}}}]}  # fmt: skip
    patch = {"replicatedJobs": [{"name": "a", "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "env": [{"name": "Y", "value": "2"}], "args": ["--b"]}],
        "tolerations": [{"key": "u"}], "nodeSelector": {"k": None, "j": "w"}}}}}}]}  # fmt: skip
    merged = strategic_merge.merge(original, patch, "JobSetSpec")
    spec = merged["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert spec["containers"][0]["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]  # by name
    assert spec["containers"][0]["args"] == ["--b"]  # no strategy: replaced
    assert spec["tolerations"] == [{"key": "u"}]  # no strategy: replaced
    assert spec["nodeSelector"] == {"j": "w"}  # a map merges; null deletes
    assert original["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"k": "v"}
    with pytest.raises(strategic_merge.PatchError, match="must be a mapping with 'name'"):
        strategic_merge.merge(original, {"replicatedJobs": ["a"]}, "JobSetSpec")
