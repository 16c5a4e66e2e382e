"""JobSet (jobset.x-k8s.io/v1alpha2, release v0.12.0) and batch/v1 Indexed Jobs, offline.

What happens to the JobSet Kubeflow Trainer creates for a TrainJob (trainyard.repo.upstream.trainjob):
JobSet's webhook defaults it, its controller creates a headless Service and one Job per
replicated job and index, and each Indexed Job creates one pod per completion index. Each rule
cites the upstream function it follows. Objects get their UIDs from the API server; stand-ins
(a UUID derived from kind, namespace and name) fill the labels and owner references that carry one.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from trainyard.contract.errors import CheckFailed
from trainyard.contract.names import JOBSET_NAME_LABEL
from trainyard.repo.model.rendered import as_dict as _d
from trainyard.repo.model.rendered import as_list as _l
from trainyard.repo.model.rendered import meta, tree_copy
from trainyard.repo.model.rendered import name_of as _name
from trainyard.repo.model.rendered import namespace_of as _namespace

API_VERSION = "jobset.x-k8s.io/v1alpha2"

# kubernetes-sigs/jobset@v0.12.0:api/jobset/v1alpha2/jobset_types.go and pkg/constants/constants.go
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS_LABEL = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
GROUP_NAME_LABEL = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_LABEL = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_LABEL = "jobset.sigs.k8s.io/job-group-index"
RESTARTS_LABEL = "jobset.sigs.k8s.io/restart-attempt"
UNSUPPORTED_JOBSET_ANNOTATIONS = ("alpha.jobset.sigs.k8s.io/exclusive-topology",)

# kubernetes/api@v0.36.5:batch/v1/types.go
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
CONTROLLER_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"


class JobSetError(CheckFailed):
    """The JobSet uses what this expansion does not follow."""


def replicated_jobs(jobset_spec: object) -> list[dict]:
    return [rj for rj in _l(_d(jobset_spec).get("replicatedJobs")) if isinstance(rj, dict)]


def stand_in_uid(kind: str, namespace: str, name: str) -> str:
    """The UID the API server would assign, stood in by one derived from the object's identity."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"trainyard:{kind}/{namespace}/{name}"))


def owner(api_version: str, kind: str, name: str, namespace: str) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": stand_in_uid(kind, namespace, name),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def default_jobset(jobset: dict) -> dict:
    """The JobSet as stored: CRD defaults (replicas 1, groupName default) and the JobSet webhook's
    Default (jobset_webhook.go: success policy All, startup AnyOrder, Indexed completion, pod
    restart policy OnFailure, DNS hostnames and publishNotReadyAddresses on)."""
    js = tree_copy(jobset)
    spec = js.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rj in replicated_jobs(spec):
        rj.setdefault("replicas", 1)
        rj.setdefault("groupName", "default")
        jspec = rj.setdefault("template", {}).setdefault("spec", {})
        jspec.setdefault("completionMode", "Indexed")
        pod = jspec.setdefault("template", {}).setdefault("spec", {})
        if not pod.get("restartPolicy"):
            pod["restartPolicy"] = "OnFailure"
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    return js


def subdomain(jobset: dict) -> str:
    """jobset_controller.go GetSubdomain: spec.network.subdomain, else the JobSet's name."""
    return str(_d(_d(jobset.get("spec")).get("network")).get("subdomain") or _name(jobset))


def headless_service(jobset: dict) -> dict:
    """jobset_controller.go createHeadlessSvcIfNecessary (with DNS hostnames enabled)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": subdomain(jobset),
            "namespace": _namespace(jobset),
            "ownerReferences": [owner(API_VERSION, "JobSet", _name(jobset), _namespace(jobset))],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOBSET_NAME_LABEL: _name(jobset)},
            "publishNotReadyAddresses": _d(_d(jobset.get("spec")).get("network")).get("publishNotReadyAddresses", True),
        },
    }


def _jobset_labels(js: dict, rj: dict, job_index: int) -> dict[str, str]:
    """jobset_controller.go labelAndAnnotateObject (no restarts yet; RestartJob is an alpha gate, off)."""
    rjobs = replicated_jobs(js["spec"])
    name, namespace = _name(js), _namespace(js)
    group = str(rj.get("groupName", "default"))
    job_name = f"{name}-{rj['name']}-{job_index}"
    before = sum(int(r.get("replicas", 1)) for r in rjobs[: rjobs.index(rj)])
    in_group = [r for r in rjobs if str(r.get("groupName", "default")) == group]
    before_in_group = sum(int(r.get("replicas", 1)) for r in in_group[: in_group.index(rj)])
    return {
        JOBSET_NAME_LABEL: name,
        JOBSET_UID_LABEL: stand_in_uid("JobSet", namespace, name),
        REPLICATED_JOB_LABEL: str(rj["name"]),
        RESTARTS_LABEL: str(int(_d(js.get("status")).get("restarts", 0))),
        REPLICATED_JOB_REPLICAS_LABEL: str(int(rj.get("replicas", 1))),
        GLOBAL_REPLICAS_LABEL: str(sum(int(r.get("replicas", 1)) for r in rjobs)),
        JOB_INDEX_LABEL: str(job_index),
        JOB_KEY_LABEL: hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),  # jobHashKey: sha1Hash
        JOB_GLOBAL_INDEX_LABEL: str(before + job_index),
        GROUP_NAME_LABEL: group,
        GROUP_REPLICAS_LABEL: str(sum(int(r.get("replicas", 1)) for r in in_group)),
        JOB_GROUP_INDEX_LABEL: str(before_in_group + job_index),
    }


def construct_jobs(js: dict) -> list[dict]:
    """jobset_controller.go constructJob for every replicated job and index, with the labels the
    Job API adds to the pod template (kubernetes/kubernetes pkg/registry/batch/job/strategy.go
    generateSelector: job-name and controller-uid, prefixed and legacy)."""
    jobs = []
    name, namespace = _name(js), _namespace(js)
    suspended = bool(_d(js.get("spec")).get("suspend"))
    dns = _d(_d(js.get("spec")).get("network")).get("enableDNSHostnames", True)
    for key in UNSUPPORTED_JOBSET_ANNOTATIONS:
        if key in _d(meta(js).get("annotations")):
            raise JobSetError(f"JobSet annotation {key} (exclusive placement) is not emulated by trainyard")
    for rj in replicated_jobs(js["spec"]):
        for index in range(int(rj.get("replicas", 1))):
            template = tree_copy(_d(rj.get("template")))
            job_name = f"{name}-{rj['name']}-{index}"
            jset = _jobset_labels(js, rj, index)
            tmeta = _d(template.get("metadata"))
            jspec = tree_copy(_d(template.get("spec")))
            pod_tpl = jspec.setdefault("template", {})
            pmeta = pod_tpl.setdefault("metadata", {})
            pmeta["labels"] = {**_d(pmeta.get("labels")), **jset}
            pmeta["annotations"] = {**_d(pmeta.get("annotations")), **jset}
            if dns:
                pod_tpl.setdefault("spec", {})["subdomain"] = subdomain(js)
            jspec["suspend"] = suspended
            uid = stand_in_uid("Job", namespace, job_name)
            for label in JOB_NAME_LABELS:
                pmeta["labels"].setdefault(label, job_name)
            for label in CONTROLLER_UID_LABELS:
                pmeta["labels"].setdefault(label, uid)
            jspec.setdefault("selector", {"matchLabels": {CONTROLLER_UID_LABELS[0]: uid}})
            jobs.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": job_name,
                        "namespace": namespace,
                        "labels": {**_d(tmeta.get("labels")), **jset},
                        "annotations": {**_d(tmeta.get("annotations")), **jset},
                        "ownerReferences": [owner(API_VERSION, "JobSet", name, namespace)],
                    },
                    "spec": jspec,
                }
            )
    return jobs


def job_pods(job: dict) -> list[dict]:
    """The pods an Indexed Job creates, one per completion index (kubernetes/kubernetes
    pkg/controller/job/job_controller.go and indexed_job_utils.go): JOB_COMPLETION_INDEX in every
    container and init container (from the label: PodIndexLabel is GA since 1.32), the index as
    annotation and label, hostname ``<job>-<index>``, generateName ``<job>-<index>-``, the
    job-tracking finalizer (batch/v1 types.go JobTrackingFinalizer) and the Job as owner."""
    name, namespace = _name(job), _namespace(job)
    spec = _d(job.get("spec"))
    if spec.get("suspend") is True:  # job_controller.go manageJob: a suspended Job keeps no active pods
        return []
    if spec.get("completionMode") != "Indexed":
        mode = spec.get("completionMode")
        raise JobSetError(f"Job {name}: completionMode {mode!r}: only Indexed Jobs are expanded")
    template = tree_copy(_d(spec.get("template")))
    pod_spec = template.setdefault("spec", {})
    for group in ("initContainers", "containers"):
        for c in _l(pod_spec.get(group)):
            env = c.setdefault("env", [])
            if not any(_d(e).get("name") == COMPLETION_INDEX_ENV for e in env):
                env.append(
                    {
                        "name": COMPLETION_INDEX_ENV,
                        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}},
                    }
                )
    pods = []
    for index in range(int(spec.get("completions") or 1)):
        tmeta = tree_copy(_d(template.get("metadata")))
        pmeta: dict[str, Any] = {
            "generateName": f"{name}-{index}-",
            "namespace": namespace,
            "labels": {**_d(tmeta.get("labels")), COMPLETION_INDEX: str(index)},
            "annotations": {**_d(tmeta.get("annotations")), COMPLETION_INDEX: str(index)},
            "finalizers": [*_l(tmeta.get("finalizers")), JOB_TRACKING_FINALIZER],
            "ownerReferences": [owner("batch/v1", "Job", name, namespace)],
        }
        pspec = tree_copy(pod_spec)
        pspec["hostname"] = f"{name}-{index}"
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": pmeta, "spec": pspec})
    return pods


def pod_name(pod: dict) -> str:
    """How to call a pod that has no name yet (``generateName`` plus what the API server adds)."""
    m = meta(pod)
    return str(m.get("name") or (f"{m['generateName']}<generated>" if m.get("generateName") else "<unnamed>"))


def pod_dns_name(pod: dict) -> str | None:
    """``<hostname>.<subdomain>``, the name a pod of a JobSet is reached at (the headless Service)."""
    spec = _d(pod.get("spec"))
    if spec.get("hostname") and spec.get("subdomain"):
        return f"{spec['hostname']}.{spec['subdomain']}"
    return None
