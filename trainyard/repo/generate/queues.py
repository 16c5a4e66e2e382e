"""Each cluster's Kueue queues (kueue.x-k8s.io/v1beta2, release v0.19.2), generated from its
declared facts.

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

What Kueue then does with a TrainJob is :mod:`trainyard.repo.upstream.kueue`.
"""

from __future__ import annotations

from decimal import Decimal

from trainyard.contract.quantity import format_bytes
from trainyard.repo.model import declared, rawyaml
from trainyard.repo.upstream.kueue import API_VERSION, QUEUE_LABEL

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
    return head + rawyaml.safe_dump_all(objects(facts, namespace), sort_keys=False, width=120)
