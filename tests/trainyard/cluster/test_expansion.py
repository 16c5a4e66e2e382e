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
import threading
import time

import jsonpatch
import pytest

from trainyard.cluster.client import ApiError, Kube
from trainyard.repo.jobs import preview
from trainyard.repo.model import declared
from trainyard.sandbox.kubelet import Kubelet
from trainyard.sandbox.localpods import LocalCluster

pytestmark = pytest.mark.cluster

TOKEN_VOLUME = re.compile(r"^kube-api-access-[a-z0-9]{5}$")
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
# beta and on from 1.35: k8s.io/kubernetes@v1.36.3:pkg/features/kube_features.go)
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
    for volume in spec.get("volumes") or []:
        if TOKEN_VOLUME.match(volume["name"]):
            volume["name"] = "kube-api-access"
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for mount in c.get("volumeMounts") or []:
            if TOKEN_VOLUME.match(mount["name"]):
                mount["name"] = "kube-api-access"
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


@pytest.mark.parametrize("cluster", ["dev", "prod-roce", "prod-ib"])
def test_the_offline_expansion_makes_the_pods_the_controllers_make(clusters, nodes, cluster):
    repo = clusters.repo
    folders = sorted(p for p in (repo.root / "overlays" / cluster / "jobs").iterdir() if p.is_dir())
    assert folders
    problems: list[str] = []
    facts = declared.load(repo, cluster)
    topology_labels = tuple(map(int, facts.spec.kubernetes_version.split("."))) >= (1, 35)
    with clusters.kube(cluster) as kube:
        for folder in folders:
            for jp in preview.preview_path(repo, folder):
                namespace = jp.job.namespace or "default"
                predicted = [p.before for p in jp.pods]
                real = _job_pods(kube, namespace, jp.job.name, len(predicted))
                if len(real) != len(predicted):
                    problems.append(f"{jp.job.describe()}: {len(real)} pods made, {len(predicted)} predicted")
                    continue
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
                        name = got["metadata"]["name"]
                        listed = "\n    ".join(differences)
                        problems.append(f"{jp.job.describe()} pod {name} (predicted -> made):\n    {listed}")
    assert not problems, "\n".join(problems)
