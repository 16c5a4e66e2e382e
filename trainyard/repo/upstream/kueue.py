"""What Kueue (kueue.x-k8s.io/v1beta2, release v0.19.2) does to a TrainJob it admits, offline.

:func:`admit` follows pkg/controller/jobs/trainjob/trainjob_controller.go: Kueue's webhook
suspends the job and appends a runtime patch of manager ``kueue.x-k8s.io/manager``; once the
workload fits a flavor, it writes into that patch, per replicated job, the pod labels and
annotations, the flavor's node selector and tolerations and the topology scheduling gate
(pkg/podset/podset.go FromAssignment, pkg/controller/jobframework/reconciler.go
getPodSetsInfoFromStatus), then unsuspends the job. The pods then reach admission with Kueue's
gate on, which is how the webhook knows that Kueue, not its own affinity rules, places them.
Problems are the reasons Kueue would never admit the job: a resource the ClusterQueue does not
cover, more than its quota, a topology level the flavor's Topology does not have, a required
domain smaller than the job.

The queues a cluster renders are generated from its declared facts by
:mod:`trainyard.repo.generate.queues`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from decimal import Decimal

from trainyard.contract.k8s import is_dns1123_label
from trainyard.contract.names import (
    KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_TOPOLOGY_GATE,
)
from trainyard.contract.quantity import QuantityError, parse_quantity
from trainyard.repo.model.rendered import Resource
from trainyard.repo.model.rendered import as_dict as _d
from trainyard.repo.model.rendered import as_list as _l
from trainyard.repo.model.rendered import name_of as _name

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
VERSION = "v0.19.2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGER = "kueue.x-k8s.io/manager"  # trainjob_controller.go runtimePatchManagerName
PODSET_LABEL = "kueue.x-k8s.io/podset"  # pkg/constants/constants.go PodSetLabel
# the queues that admitted the pod's workload (constants.go LocalQueueLabel, ClusterQueueLabel; set
# by jobframework/reconciler.go assignQueueLabels under AssignQueueLabelsForPods, on by default)
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # topology_types.go WorkloadAnnotation
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"


@dataclass
class Queues:
    """The Kueue objects a cluster renders, by kind and name."""

    local: dict[tuple[str, str], Resource] = field(default_factory=dict)  # (namespace, name)
    cluster: dict[str, Resource] = field(default_factory=dict)
    flavors: dict[str, Resource] = field(default_factory=dict)
    topologies: dict[str, Resource] = field(default_factory=dict)

    @classmethod
    def collect(cls, resources: list[Resource]) -> Queues:
        q = cls()
        for r in resources:
            if r.group != GROUP:
                continue
            if r.kind == "LocalQueue":
                q.local[(r.namespace or "default", r.name)] = r
            elif r.kind == "ClusterQueue":
                q.cluster[r.name] = r
            elif r.kind == "ResourceFlavor":
                q.flavors[r.name] = r
            elif r.kind == "Topology":
                q.topologies[r.name] = r
        return q


@dataclass
class Admission:
    """What Kueue writes into a TrainJob it admits: its runtime patch, and the flavor chosen."""

    patch: dict
    flavor: str
    cluster_queue: str
    workload: str


def queue_name(job: dict) -> str | None:
    value = _d(_d(job.get("metadata")).get("labels")).get(QUEUE_LABEL)
    return value if isinstance(value, str) and value else None


def workload_name(job: dict, uid: str) -> str:
    """pkg/controller/jobframework/workload_names.go GetWorkloadNameForOwnerWithGVK (ShortWorkloadNames
    is an alpha gate, off: names up to 253 characters)."""
    name = _name(job)
    prefix = f"trainjob-{name}"[: 253 - 1 - 5]
    digest = hashlib.sha1(f"TrainJob\ntrainer.kubeflow.org\n{name}\n{uid}".encode()).hexdigest()  # getHash
    return f"{prefix}-{digest[:5]}"


def pod_requests(pod_spec: dict) -> dict[str, Decimal]:
    """What one pod asks for (k8s.io/component-helpers resource PodRequests, as Kueue counts it):
    per resource the larger of the sum over containers and the largest init container; a
    container's request defaults to its limit."""

    def of(container: dict) -> dict[str, Decimal]:
        res = _d(container.get("resources"))
        merged = {**_d(res.get("limits")), **_d(res.get("requests"))}
        out = {}
        for k, v in merged.items():
            try:
                out[str(k)] = parse_quantity(v)
            except QuantityError:
                continue
        return out

    total: dict[str, Decimal] = {}
    for c in _l(pod_spec.get("containers")):
        for k, v in of(_d(c)).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in _l(pod_spec.get("initContainers")):
        for k, v in of(_d(c)).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def _quota(flavor: dict) -> dict[str, Decimal]:
    out = {}
    for r in _l(flavor.get("resources")):
        try:
            out[str(_d(r).get("name"))] = parse_quantity(_d(r).get("nominalQuota"))
        except QuantityError:
            continue
    return out


def admit(job: dict, jobset: dict, queues: Queues, uid: str) -> tuple[Admission | None, list[str]]:
    """Kueue's admission of ``job`` whose JobSet (without Kueue's patch) is ``jobset``: the runtime
    patch it writes, or the reasons it never admits the job (or does not manage it: no problems,
    no admission)."""
    name = queue_name(job)
    if name is None:
        return None, []
    namespace = str(_d(job.get("metadata")).get("namespace") or "default")
    label = f"metadata.labels[{QUEUE_LABEL}]"
    lq = queues.local.get((namespace, name))
    if lq is None:
        known = ", ".join(sorted(n for ns, n in queues.local if ns == namespace)) or "none"
        return None, [
            f"{label}: no LocalQueue {name!r} in namespace {namespace} (known: {known}); the job stays queued"
        ]
    cq = queues.cluster.get(str(_d(lq.doc.get("spec")).get("clusterQueue")))
    if cq is None:
        return None, [f"{label}: LocalQueue {name} points at no ClusterQueue of this cluster"]
    podsets = []
    for rj in _l(_d(jobset.get("spec")).get("replicatedJobs")):
        tpl = _d(_d(_d(rj.get("template")).get("spec")).get("template"))
        count = int(_d(_d(rj.get("template")).get("spec")).get("parallelism") or 1) * int(rj.get("replicas", 1))
        podsets.append((str(rj.get("name")), count, tpl))
    needed: dict[str, Decimal] = {}
    for _, count, tpl in podsets:
        for k, v in pod_requests(_d(tpl.get("spec"))).items():
            needed[k] = needed.get(k, Decimal(0)) + v * count
    problems: list[str] = []
    chosen = None
    for group in _l(_d(cq.doc.get("spec")).get("resourceGroups")):
        covered = set(_l(_d(group).get("coveredResources")))
        missing = sorted(k for k, v in needed.items() if v > 0 and k not in covered)
        if missing:
            problems.append(
                f"ClusterQueue {cq.name} does not cover {', '.join(missing)}: Kueue never admits a workload "
                "that asks for a resource its queue does not cover"
            )
            continue
        for flavor in _l(_d(group).get("flavors")):
            quota = _quota(_d(flavor))
            short = [f"{k} {needed[k].normalize()} > {quota.get(k, 0)}" for k in needed if needed[k] > quota.get(k, 0)]
            if not short:
                chosen = str(_d(flavor).get("name"))
                break
            problems.append(
                f"flavor {_d(flavor).get('name')} of ClusterQueue {cq.name} has less quota than the job asks for "
                f"({'; '.join(short)}): Kueue never admits it"
            )
        if chosen:
            break
    if chosen is None:
        return None, problems or [f"ClusterQueue {cq.name} has no flavor"]
    flavor = queues.flavors.get(chosen)
    if flavor is None:
        return None, [f"ClusterQueue {cq.name} names ResourceFlavor {chosen}, which this cluster does not define"]
    fspec = _d(flavor.doc.get("spec"))
    topology = queues.topologies.get(str(fspec.get("topologyName"))) if fspec.get("topologyName") else None
    if fspec.get("topologyName") and topology is None:
        return None, [f"ResourceFlavor {chosen} names Topology {fspec['topologyName']}, which this cluster lacks"]
    levels = [str(_d(lv).get("nodeLabel")) for lv in _l(_d(topology.doc.get("spec")).get("levels"))] if topology else []
    workload = workload_name(job, uid)
    rjobs = []
    for rjob, _, tpl in podsets:
        annotations = _d(_d(tpl.get("metadata")).get("annotations"))
        request = {k: annotations[k] for k in (KUEUE_REQUIRED_TOPOLOGY_ANNOTATION, KUEUE_PREFERRED_TOPOLOGY_ANNOTATION)
                   if k in annotations}  # fmt: skip
        for key, level in request.items():
            if topology is None:
                problems.append(f"replicated job {rjob}: {key}: {level}, but flavor {chosen} has no topology")
            elif level not in levels:
                problems.append(
                    f"replicated job {rjob}: {key}: {level} is not a level of Topology {topology.name} "
                    f"({', '.join(levels)}): Kueue cannot place the pods"
                )
        info_annotations = {WORKLOAD_ANNOTATION: workload}
        info_labels = {PODSET_LABEL: rjob, LOCAL_QUEUE_LABEL: name}
        if is_dns1123_label(cq.name):  # a ClusterQueue name that is no label value is left out
            info_labels[CLUSTER_QUEUE_LABEL] = cq.name
        if topology is not None and not request:
            info_annotations[UNCONSTRAINED_ANNOTATION] = "true"
        pod_spec: dict = {}
        if _d(fspec.get("nodeLabels")):
            pod_spec["nodeSelector"] = dict(fspec["nodeLabels"])
        if _l(fspec.get("tolerations")):
            pod_spec["tolerations"] = list(fspec["tolerations"])
        if topology is not None:
            pod_spec["schedulingGates"] = [{"name": KUEUE_TOPOLOGY_GATE}]
        rjobs.append(
            {
                "name": rjob,
                "template": {
                    "spec": {
                        "template": {
                            "metadata": {"annotations": info_annotations, "labels": info_labels},
                            "spec": pod_spec,
                        }
                    }
                },
            }
        )
    if problems:
        return None, problems
    patch = {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": rjobs}}}}
    return Admission(patch=patch, flavor=chosen, cluster_queue=cq.name, workload=workload), []
