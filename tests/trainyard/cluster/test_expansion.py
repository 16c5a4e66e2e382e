"""The offline expansion (``trainyard validate`` / ``preview``) against the controllers themselves.

Each cluster is up with its controllers (Kueue, JobSet, Trainer, the training operator) and gets
the nodes its facts declare (kept Ready, running nothing), so Kueue admits its jobs and the
controllers create their pods. Each pod the offline expansion predicts is then created as a dry
run in the same namespace, so kube-apiserver's defaults and every admission webhook act on it as
on the real pod, and the two are compared field by field, uids and generated names aside.
"""

from __future__ import annotations

import contextlib
import copy
import re
import shutil
import threading
import time

import jsonpatch
import pytest
import yaml

from tests.trainyard.cluster.conftest import same_token_volume
from tests.trainyard.repo.conftest import COPIED
from trainyard.cluster.client import ApiError, Kube
from trainyard.repo.jobs import newjob, preview
from trainyard.repo.model import declared, kustomize, repository
from trainyard.sandbox.kubelet import Kubelet
from trainyard.sandbox.localpods import LocalCluster

pytestmark = pytest.mark.cluster

JOB_LABELS = ("jobset.sigs.k8s.io/jobset-name", "training.kubeflow.org/job-name")


@pytest.fixture(scope="module")
def nodes(clusters, tmp_path_factory):
    """Every cluster's declared nodes, Ready, for the module's tests."""
    stop = threading.Event()
    kubelets = []
    for name in ("dev", "prod-roce", "prod-ib"):
        started = clusters[name]
        kube = started.client()
        local = LocalCluster(tmp_path_factory.mktemp(f"nodes-{name}"), [], {}, isolate=False)
        kubelet = Kubelet(kube, declared.load(clusters.repo, name), local, progress=lambda _: None)
        kubelet.register()
        kubelet.provide_storage()
        kubelet.keep_ready(stop)
        kubelets.append((kubelet, local, kube))
    yield
    stop.set()
    for _, local, kube in kubelets:
        local.close()
        kube.close()


def _job_pods(kube: Kube, namespace: str, job: str, count: int, timeout: float = 90.0) -> list[dict]:
    """The pods the controllers made for ``job``, once there are ``count`` of them."""
    deadline = time.monotonic() + timeout
    while True:
        pods = []
        for label in JOB_LABELS:
            got = kube.get(f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": f"{label}={job}"})
            pods += [{"apiVersion": "v1", "kind": "Pod", **pod} for pod in got["items"]]
        if len(pods) >= count or time.monotonic() > deadline:
            return pods
        time.sleep(0.5)


def _key(pod: dict) -> tuple:
    labels = pod["metadata"].get("labels") or {}
    index = labels.get("batch.kubernetes.io/job-completion-index") or labels.get("training.kubeflow.org/replica-index")
    return (
        labels.get("training.kubeflow.org/replica-type", ""),
        labels.get("jobset.sigs.k8s.io/replicatedjob-name", ""),
        int(labels.get("jobset.sigs.k8s.io/job-index", 0) or 0),
        int(index or 0),
    )


UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# kube-apiserver's PodTopologyLabelsAdmission copies these from the node at binding (KEP-4742;
# beta and on from 1.35: k8s.io/kubernetes@v1.36.5:pkg/features/kube_features.go)
BINDING_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region")


def _comparable(pod: dict, bound_labels: bool = False) -> dict:
    """What the controllers' pod and the predicted one may not differ in: uids (in owner
    references, and the labels and annotations that carry one), generated names (the pod's, and
    the Workload's, whose suffix hashes its owner's uid), and what comes after creation."""
    out = copy.deepcopy(pod)
    meta = out["metadata"]
    for field in ("labels", "annotations"):
        for key, value in list((meta.get(field) or {}).items()):
            if UID.match(str(value)):
                meta[field][key] = "<uid>"
            if key == "kueue.x-k8s.io/workload":
                meta[field][key] = re.sub(r"-[0-9a-f]{5}$", "-<hash>", value)
    if bound_labels:
        for key in BINDING_LABELS:
            (meta.get("labels") or {}).pop(key, None)
    for key in ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields", "namespace"):
        meta.pop(key, None)
    if meta.get("generateName"):
        meta.pop("name", None)
    for ref in meta.get("ownerReferences") or []:
        ref.pop("uid", None)
    out.pop("status", None)
    spec = out["spec"]
    # where the pod runs and when it may: the scheduler's and Kueue's ungater's, after creation
    spec.pop("nodeName", None)
    spec.pop("schedulingGates", None)
    selector = spec.get("nodeSelector") or {}
    selector.pop("kubernetes.io/hostname", None)
    if not selector:
        spec.pop("nodeSelector", None)
    same_token_volume(spec)
    return out


def _diff(predicted: dict, real: dict) -> list[str]:
    return [f"{op['op']} {op['path']}: {op.get('value')!r}" for op in jsonpatch.make_patch(predicted, real).patch]


def _as_created(kube: Kube, pod: dict, namespace: str) -> dict:
    """The predicted pod as kube-apiserver would store it (defaults, every admission webhook)."""
    body = copy.deepcopy(pod)
    meta = body["metadata"]
    meta["namespace"] = namespace
    if meta.get("name"):
        meta["name"] = meta["name"][:50] + "-predict"  # the controllers' pod holds the name
    created = kube.create(body, dry_run=True)
    created["metadata"]["name"] = pod["metadata"].get("name", "")
    if not pod["metadata"].get("name"):
        created["metadata"].pop("name", None)
    return created


@contextlib.contextmanager
def _without_quota(kube: Kube, namespace: str):
    """The namespace's ResourceQuotas lifted for a while: the controllers' pods already use what
    they allow, and a dry run of the predicted pods is counted on top of them."""
    quotas = kube.get(f"/api/v1/namespaces/{namespace}/resourcequotas")["items"]
    for quota in quotas:
        kube.delete({"apiVersion": "v1", "kind": "ResourceQuota", **quota})
    try:
        yield
    finally:
        for quota in quotas:
            meta = {
                k: quota["metadata"][k]
                for k in ("name", "namespace", "labels", "annotations")
                if k in quota["metadata"]
            }
            kube.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta, "spec": quota["spec"]})


def _compare(kube: Kube, jp: preview.JobPreview, topology_labels: bool) -> list[str]:
    """How the controllers' pods of ``jp``'s job differ from the preview's (none: [])."""
    problems = []
    namespace = jp.job.namespace or "default"
    predicted = [p.before for p in jp.pods]
    assert predicted, f"{jp.job.describe()}: the preview predicts no pods ({jp.refused})"
    real = _job_pods(kube, namespace, jp.job.name, len(predicted))
    if len(real) != len(predicted):
        return [f"{jp.job.describe()}: {len(real)} pods made, {len(predicted)} predicted"]
    for want, got in zip(sorted(predicted, key=_key), sorted(real, key=_key), strict=True):
        try:
            with _without_quota(kube, namespace):
                expected = _as_created(kube, want, namespace)
        except ApiError as exc:
            problems.append(f"{jp.job.describe()}: the predicted pod is refused: {exc}")
            continue
        bound = bool(got["spec"].get("nodeName")) and topology_labels
        differences = _diff(_comparable(expected, bound), _comparable(got, bound))
        if differences:
            listed = "\n    ".join(differences)
            problems.append(f"{jp.job.describe()} pod {got['metadata']['name']} (predicted -> made):\n    {listed}")
    return problems


def _binding_labels(facts) -> bool:
    return tuple(map(int, facts.spec.kubernetes_version.split("."))) >= (1, 35)


@pytest.mark.parametrize("cluster", ["dev", "prod-roce", "prod-ib"])
def test_the_offline_expansion_makes_the_pods_the_controllers_make(clusters, nodes, cluster):
    repo = clusters.repo
    folders = sorted(p for p in (repo.root / "overlays" / cluster / "jobs").iterdir() if p.is_dir())
    assert folders
    topology_labels = _binding_labels(declared.load(repo, cluster))
    problems: list[str] = []
    with clusters.kube(cluster) as kube:
        for folder in folders:
            for jp in preview.preview_path(repo, folder):
                problems += _compare(kube, jp, topology_labels)
    assert not problems, "\n".join(problems)


# Jobs as `trainyard new-job` writes them, covering what a user sets: each kind, nodes, GPUs,
# elastic workers, the trainer's arguments; then by hand what new-job does not write.
GENERATED = [
    newjob.JobRequest("gen-train-1x1", "prod-ib", "trainjob", nodes=1, gpus=1, trainer_args=["--max-steps", "5"]),
    newjob.JobRequest("gen-train-3x8", "prod-ib", "trainjob", nodes=3, gpus=8, cpu=32, memory_gi=256),
    newjob.JobRequest("gen-pytorch", "prod-ib", "pytorch", nodes=3, gpus=4),
    newjob.JobRequest("gen-elastic", "prod-ib", "pytorch", nodes=2, gpus=8, elastic=(2, 4)),
    newjob.JobRequest("gen-tf", "prod-ib", "tf", nodes=2, gpus=2),
    newjob.JobRequest("gen-mpi", "prod-ib", "mpi", nodes=2, gpus=8),
]
# the fields new-job leaves to the user, set on a TrainJob: processes per node, a runtime patch
# of their own (a label and a toleration on the pods), no queue (Kueue then leaves it alone)
PATCHED = {
    "numProcPerNode": 2,
    "runtimePatches": [
        {
            "manager": "example.com/team-a",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {
                                        "template": {
                                            "metadata": {"labels": {"team": "a"}},
                                            "spec": {
                                                "tolerations": [
                                                    {"key": "team-a", "operator": "Exists", "effect": "NoSchedule"}
                                                ]
                                            },
                                        }
                                    }
                                },
                            }
                        ]
                    }
                }
            },
        }
    ],
}


def test_generated_jobs_become_the_pods_the_offline_expansion_predicts(clusters, nodes, tmp_path):
    for name in COPIED:
        shutil.copytree(clusters.repo.root / name, tmp_path / name)
    copy_repo = repository.load(tmp_path)
    previews: list[preview.JobPreview] = []
    for req in GENERATED:
        written = newjob.create(copy_repo, copy.deepcopy(req))
        previews += preview.preview_path(copy_repo, written[0].parent)
    # the hand-set fields, on a copy of the first TrainJob under a name of its own
    base = next(jp.job.doc for jp in previews if jp.job.kind == "TrainJob")
    for name, queued in (("gen-train-patched", True), ("gen-train-unqueued", False)):
        doc = copy.deepcopy(base)
        doc["metadata"]["name"] = name
        doc["spec"]["trainer"]["numProcPerNode"] = PATCHED["numProcPerNode"]
        doc["spec"]["runtimePatches"] = copy.deepcopy(PATCHED["runtimePatches"])
        if not queued:
            doc["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name", None)
        folder = tmp_path / "overlays" / "prod-ib" / "jobs" / name
        folder.mkdir()
        (folder / "kustomization.yaml").write_text("resources:\n  - job.yaml\n")
        (folder / "job.yaml").write_text(yaml.safe_dump(doc))
        previews += preview.preview_path(repository.load(tmp_path), folder)
    assert {jp.job.kind for jp in previews} == {"TrainJob", "PyTorchJob", "TFJob", "MPIJob"}
    created = []
    problems: list[str] = []
    with clusters.kube("prod-ib") as kube:
        try:
            for jp in previews:
                for r in kustomize.build(copy_repo, tmp_path / "overlays" / "prod-ib" / "jobs" / jp.job.name):
                    kube.create(r.doc)
                    created.append(r.doc)
            for jp in previews:
                problems += _compare(kube, jp, _binding_labels(declared.load(copy_repo, "prod-ib")))
        finally:
            for doc in reversed(created):
                kube.delete(doc)
    assert not problems, "\n".join(problems)
