"""Kueue (kueue.x-k8s.io/v1beta2, release v0.19.2): each cluster's queues, generated from its
declared facts, and what Kueue does to a TrainJob it admits, offline.

Generated per cluster (:func:`objects`, written to ``overlays/<cluster>/platform/kueue/`` by
``trainyard generate``), following kubernetes-sigs/kueue@v0.19.2:site/static/examples/tas/sample-queues.yaml:

- a ``Topology`` whose levels are the cluster's declared topology labels, outermost first, the
  host last (apis/kueue/v1beta2/topology_types.go: at most 16 levels, unique, kubernetes.io/hostname
  only as the lowest);
- a ``ResourceFlavor`` per node pool: the pool's labels that are not topology levels select its
  nodes (``nodeLabels``, at most 8, at least one when ``topologyName`` is set), and
  ``topologyName`` makes Kueue place the pods of every workload it admits on it (topology-aware
  scheduling, beta and on by default since v0.14, pkg/features/kube_features.go);
- one ``ClusterQueue`` covering every resource the pools declare, each flavor's nominal quota
  the pool's count times what one node can allocate, open to the training namespace only;
- a ``LocalQueue`` in the training namespace, which a TrainJob names with the label
  ``kueue.x-k8s.io/queue-name`` (pkg/controller/constants/constants.go QueueLabel).

What Kueue does to such a TrainJob (:func:`admit`), following
pkg/controller/jobs/trainjob/trainjob_controller.go: its webhook suspends the job and appends a
runtime patch of manager ``kueue.x-k8s.io/manager``; once the workload fits a flavor, it writes
into that patch, per replicated job, the pod labels and annotations, the flavor's node selector
and tolerations and the topology scheduling gate (pkg/podset/podset.go FromAssignment,
pkg/controller/jobframework/reconciler.go getPodSetsInfoFromStatus), then unsuspends the job.
The pods then reach admission with Kueue's gate on, which is how the webhook knows that Kueue,
not its own affinity rules, places them. Problems are the reasons Kueue would never admit the
job: a resource the ClusterQueue does not cover, more than its quota, a topology level the
flavor's Topology does not have, a required domain smaller than the job.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from decimal import Decimal

import yaml

from trainyard.contract.names import (
    KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_TOPOLOGY_GATE,
)
from trainyard.contract.quantity import QuantityError, format_bytes, parse_quantity
from trainyard.repo import declared
from trainyard.repo.rendered import Resource
from trainyard.repo.rendered import as_dict as _d
from trainyard.repo.rendered import as_list as _l
from trainyard.repo.rendered import name_of as _name

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
VERSION = "v0.19.2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGER = "kueue.x-k8s.io/manager"  # trainjob_controller.go runtimePatchManagerName
PODSET_LABEL = "kueue.x-k8s.io/podset"  # pkg/constants/constants.go PodSetLabel
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"  # topology_types.go WorkloadAnnotation
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
TOPOLOGY = "trainyard"
CLUSTER_QUEUE = "trainyard"
LOCAL_QUEUE = "training"
MAX_FLAVOR_LABELS = 8  # resourceflavor_types.go nodeLabels MaxProperties
MAX_LEVELS = 16
BYTE_RESOURCES = ("memory", "ephemeral-storage")


class GenerationError(declared.DeclarationError):
    """The declared facts cannot make valid Kueue objects; the message names the pool and what to do."""


def _quantity_text(resource: str, value: Decimal) -> str:
    if resource in BYTE_RESOURCES or resource.startswith("hugepages-"):
        return format_bytes(int(value))
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


def flavor_labels(pool: declared.NodePool, levels: list[str]) -> dict[str, str]:
    return {k: v for k, v in pool.labels.items() if k not in levels}


def objects(facts: declared.ClusterFacts, namespace: str) -> list[dict]:
    """The Topology, one ResourceFlavor per node pool, the ClusterQueue and the LocalQueue."""
    levels = list(facts.spec.topology)
    pools = facts.spec.node_pools
    if len(levels) > MAX_LEVELS:
        raise GenerationError(f"spec.topology: {len(levels)} levels; a Kueue Topology has at most {MAX_LEVELS}")
    seen: dict[tuple, str] = {}
    for pool in pools:
        labels = flavor_labels(pool, levels)
        if not labels or len(labels) > MAX_FLAVOR_LABELS:
            raise GenerationError(
                f"spec.nodePools: pool {pool.name} has {len(labels)} labels beyond the topology levels; its "
                f"ResourceFlavor needs 1 to {MAX_FLAVOR_LABELS} to select the pool's nodes"
            )
        key = tuple(sorted(labels.items()))
        if key in seen:
            raise GenerationError(
                f"spec.nodePools: pools {seen[key]} and {pool.name} have the same labels {dict(key)}: their flavors "
                "would select the same nodes; give each pool a label of its own"
            )
        seen[key] = pool.name
    resources = sorted({r for pool in pools for r in pool.allocatable})
    out: list[dict] = [
        {
            "apiVersion": API_VERSION,
            "kind": "Topology",
            "metadata": {"name": TOPOLOGY},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]},
        }
    ]
    for pool in pools:
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceFlavor",
                "metadata": {"name": pool.name},
                "spec": {"nodeLabels": flavor_labels(pool, levels), "topologyName": TOPOLOGY},
            }
        )
    out.append(
        {
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": resources,
                        "flavors": [
                            {
                                "name": pool.name,
                                "resources": [
                                    {"name": r, "nominalQuota": _quantity_text(r, pool.amount(r) * pool.count)}
                                    for r in resources
                                ],
                            }
                            for pool in pools
                        ],
                    }
                ],
            },
        }
    )
    out.append(
        {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": CLUSTER_QUEUE},
        }
    )
    return out


def render(facts: declared.ClusterFacts, namespace: str, source: str) -> str:
    head = (
        f"# Generated by `trainyard generate` from {source}; do not edit (trainyard validate fails when this\n"
        "# file differs from what the cluster's declared facts generate). Kueue queues TrainJobs labelled\n"
        f"# {QUEUE_LABEL}: {LOCAL_QUEUE} and places their pods with topology-aware scheduling.\n"
    )
    return head + yaml.safe_dump_all(objects(facts, namespace), sort_keys=False, width=120)


# ---------------------------------------------------------------------------------------------
# Admission


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
                            "metadata": {"annotations": info_annotations, "labels": {PODSET_LABEL: rjob}},
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
