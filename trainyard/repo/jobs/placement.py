"""Whether pods fit: on a node of the cluster's declared pools, and in the namespace's ResourceQuota.

A pod asks for, per resource, the larger of the sum over its containers and its largest init
container, a container's request defaulting to its limit (k8s.io/component-helpers resource
PodRequests and PodLimits; kubernetes/api@v0.36.3:core/v1/types.go ResourceRequirements: "If Requests
is omitted for a container, it defaults to Limits if that is explicitly specified"). A ResourceQuota
charges a pod those requests and limits under ``requests.<name>`` / ``<name>`` and ``limits.<name>``,
and one under ``pods`` (kubernetes/kubernetes pkg/quota/v1/evaluator/core/pods.go, PodUsageFunc); the
quota admission refuses a pod that would take the namespace over a hard limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from trainyard.contract.quantity import QuantityError, format_bytes, parse_quantity
from trainyard.repo.model.declared import HOSTNAME_LABEL, ClusterFacts, NodePool
from trainyard.repo.model.rendered import as_dict, as_list
from trainyard.repo.upstream import kueue

BYTE_RESOURCES = ("memory", "ephemeral-storage")


def _amounts(section: object) -> dict[str, Decimal]:
    out = {}
    for k, v in as_dict(section).items():
        try:
            out[str(k)] = parse_quantity(v)
        except QuantityError:
            continue  # the schema check reports it
    return out


def _pod_limits(spec: dict) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for c in as_list(spec.get("containers")):
        for k, v in _amounts(as_dict(as_dict(c).get("resources")).get("limits")).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in as_list(spec.get("initContainers")):
        for k, v in _amounts(as_dict(as_dict(c).get("resources")).get("limits")).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def pod_requests(pod: dict) -> dict[str, Decimal]:
    return kueue.pod_requests(as_dict(pod.get("spec")))


def pod_usage(pod: dict) -> dict[str, Decimal]:
    """What a ResourceQuota charges for ``pod``, by quota key."""
    out = {"pods": Decimal(1)}
    for k, v in pod_requests(pod).items():
        out[f"requests.{k}"] = v
        if "/" not in k and "." not in k:  # cpu, memory, ephemeral-storage also go by their plain name
            out[k] = v
    for k, v in _pod_limits(as_dict(pod.get("spec"))).items():
        out[f"limits.{k}"] = v
    return out


def show(resource: str, value: Decimal) -> str:
    """A quantity as a person writes it: 64Gi, 16, 500m."""
    name = resource.split(".", 1)[-1] if resource.startswith(("requests.", "limits.")) else resource
    if name in BYTE_RESOURCES or name.startswith("hugepages-"):
        return format_bytes(int(value)) if value == int(value) else str(value)
    if value != int(value):
        return f"{int(value * 1000)}m"
    return str(int(value))


@dataclass(frozen=True)
class Fit:
    pool: NodePool | None  # a pool one of whose nodes can hold the pod; None: none can
    short: str = ""  # when none can: what the largest candidate lacks, in words


def node_fit(pod: dict, facts: ClusterFacts) -> Fit:
    """Whether one node of the declared pools (whose labels match the pod's nodeSelector) can hold
    ``pod``. Resources no pool declares (ephemeral-storage here) are not judged."""
    declared = {k for p in facts.spec.node_pools for k in p.allocatable}
    wanted = {k: v for k, v in pod_requests(pod).items() if v > 0 and k in declared}
    selector = {k: v for k, v in as_dict(as_dict(pod.get("spec")).get("nodeSelector")).items() if k != HOSTNAME_LABEL}
    pools = [p for p in facts.spec.node_pools if all(p.labels.get(k) == str(v) for k, v in selector.items())]
    if not pools:
        return Fit(None, f"no node pool has the labels of its nodeSelector {selector}")
    for pool in pools:
        if all(pool.amount(k) >= v for k, v in wanted.items()):
            return Fit(pool)
    best = max(pools, key=lambda p: sum(1 for k, v in wanted.items() if p.amount(k) >= v))
    lacks = [f"{k} {show(k, v)} (a node of pool {best.name} has {show(k, best.amount(k))})"
             for k, v in sorted(wanted.items()) if best.amount(k) < v]  # fmt: skip
    return Fit(None, ", ".join(lacks))


def quota_hard(quota: dict) -> dict[str, Decimal]:
    """The hard limits of a ResourceQuota without scopes (a scoped one charges only some pods)."""
    spec = as_dict(quota.get("spec"))
    if spec.get("scopes") or spec.get("scopeSelector"):
        return {}
    return _amounts(spec.get("hard"))


def over(usage: dict[str, Decimal], hard: dict[str, Decimal]) -> list[str]:
    """Each hard limit ``usage`` exceeds, in words: 'requests.nvidia.com/gpu 4 > 2'."""
    return [f"{k} {show(k, usage[k])} > {show(k, v)}" for k, v in sorted(hard.items()) if usage.get(k, 0) > v]


def add(total: dict[str, Decimal], more: dict[str, Decimal]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, Decimal(0)) + v
