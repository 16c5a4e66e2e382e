"""Whether pods fit: on a node of the cluster's declared pools, and in the namespace's ResourceQuota.

A pod asks for, per resource, the larger of the sum over its containers and its largest init
container, a container's request defaulting to its limit (k8s.io/component-helpers resource
PodRequests and PodLimits; kubernetes/api@v0.36.5:core/v1/types.go ResourceRequirements: "If Requests
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
from trainyard.repo.model.rendered import as_dict, as_list, dig, tree_copy
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


def limit_range_defaults(limit_range: dict) -> tuple[dict[str, object], dict[str, object]]:
    """(default requests, default limits) a LimitRange gives a container: its Container items in
    order, a later item's key replacing an earlier's (k8s.io/kubernetes@v1.36.5:
    plugin/pkg/admission/limitranger/admission.go defaultContainerResourceRequirements), each item
    as kube-apiserver stores it: a default limit from ``max``, a default request from the default
    limit, else from ``min`` (pkg/apis/core/v1/defaults.go SetDefaults_LimitRangeItem)."""
    requests: dict[str, object] = {}
    limits: dict[str, object] = {}
    for item in as_list(as_dict(limit_range.get("spec")).get("limits")):
        item = as_dict(item)
        if item.get("type") != "Container":
            continue
        default = {**as_dict(item.get("max")), **as_dict(item.get("default"))}
        default_request = {**as_dict(item.get("min")), **default, **as_dict(item.get("defaultRequest"))}
        requests.update({str(k): v for k, v in default_request.items()})
        limits.update({str(k): v for k, v in default.items()})
    return requests, limits


def with_defaults(pod: dict, limit_ranges: list[dict]) -> dict:
    """``pod`` as the quota judges it: a container's missing request taken from its limit
    (pkg/apis/core/v1/defaults.go SetDefaults_Pod, when kube-apiserver decodes the pod and again
    after a webhook's patch), then LimitRanger's defaults for what each container still leaves out,
    LimitRange by LimitRange, a key already set never replaced (admission.go mergeContainerResources)."""
    out = tree_copy(pod)
    spec = as_dict(out.get("spec"))
    groups = [c for g in ("containers", "initContainers") for c in as_list(spec.get(g)) if isinstance(c, dict)]
    for c in groups:
        res = c.get("resources")
        if not isinstance(res, dict):
            res = c["resources"] = {}
        for section in ("limits", "requests"):
            if not isinstance(res.get(section), dict):
                res[section] = {}
        for k, v in res["limits"].items():
            res["requests"].setdefault(k, v)
    for lr in limit_ranges:
        requests, limits = limit_range_defaults(lr)
        for c in groups:
            for k, v in limits.items():
                c["resources"]["limits"].setdefault(k, v)
            for k, v in requests.items():
                c["resources"]["requests"].setdefault(k, v)
    return out


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
    unmatched: str = ""  # when no pool's labels match the pod's node selection: which labels, in words
    absent: tuple[str, ...] = ()  # extended resources it asks for that no pool has at all


# What the kubelet labels every node with beside the pool's own labels (k8s.io/kubernetes@v1.36.5:
# pkg/kubelet/kubelet_node_status.go initialNode: hostname, os and arch, and the beta os/arch kept
# for old selectors). The facts say no architecture unless a pool's labels do: amd64 then.
KUBELET_LABELS = {
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/os": "linux",
    "beta.kubernetes.io/arch": "amd64",
}


def node_labels(pool: NodePool) -> dict[str, str]:
    labels = {**KUBELET_LABELS, **pool.labels}
    labels["beta.kubernetes.io/arch"] = labels["kubernetes.io/arch"]
    return labels


def _expression_ok(expr: dict, labels: dict[str, str]) -> bool:
    """One nodeSelectorRequirement against a node's labels (k8s.io/component-helpers
    scheduling/corev1/nodeaffinity: labels.Selector of In, NotIn, Exists, DoesNotExist, Gt, Lt).
    The host name is each node's own: any value may match it."""
    key, op = expr.get("key"), expr.get("operator")
    values = [str(v) for v in as_list(expr.get("values"))]
    if key == HOSTNAME_LABEL:
        return op != "DoesNotExist"
    value = labels.get(str(key)) if isinstance(key, str) else None
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_ok(term: object, labels: dict[str, str]) -> bool:
    """A nodeSelectorTerm: all of its requirements; an empty term matches no node. matchFields
    (metadata.name) names single nodes, which the facts do not list: taken as some node's."""
    exprs = as_list(as_dict(term).get("matchExpressions"))
    fields = as_list(as_dict(term).get("matchFields"))
    if not exprs and not fields:
        return False
    return all(_expression_ok(as_dict(e), labels) for e in exprs)


def _show_expression(expr: dict) -> str:
    key, op = expr.get("key"), expr.get("operator")
    values = ",".join(str(v) for v in as_list(expr.get("values")))
    if op == "In":
        return f"{key} in ({values})" if "," in values else f"{key}={values}"
    if op == "NotIn":
        return f"{key} not in ({values})"
    if op == "Exists":
        return f"{key} (any value)"
    if op == "DoesNotExist":
        return f"no {key}"
    return f"{key} {op} {values}"


def required_terms(spec: dict) -> list | None:
    """The pod's required node affinity terms; None when it has none."""
    required = dig(spec, "affinity", "nodeAffinity").get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return as_list(as_dict(required).get("nodeSelectorTerms"))


def selection_matches(spec: dict, labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies the pod's nodeSelector and required node affinity
    (both must hold; the affinity's terms are ORed)."""
    selector = as_dict(spec.get("nodeSelector"))
    if any(k != HOSTNAME_LABEL and labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    terms = required_terms(spec)
    return terms is None or any(_term_ok(t, labels) for t in terms)


def unmatched_selection(spec: dict, facts: ClusterFacts) -> str:
    """Why no pool's nodes satisfy the pod's node selection, naming the labels; "" when one does."""
    pools = [node_labels(p) for p in facts.spec.node_pools]
    if any(selection_matches(spec, labels) for labels in pools):
        return ""
    selector = {str(k): str(v) for k, v in as_dict(spec.get("nodeSelector")).items() if k != HOSTNAME_LABEL}
    missing = [f"{k}={v}" for k, v in selector.items() if not any(labels.get(k) == v for labels in pools)]
    if missing:
        return f"spec.nodeSelector asks for {', '.join(missing)}, which no node pool has"
    with_selector = [labels for labels in pools if all(labels.get(k) == v for k, v in selector.items())]
    if not with_selector:
        pairs = ", ".join(f"{k}={v}" for k, v in selector.items())
        return f"spec.nodeSelector asks for {pairs} together, and no node pool has all of them"
    terms = required_terms(spec) or []
    failing = []
    for term in terms:
        exprs = [as_dict(e) for e in as_list(as_dict(term).get("matchExpressions"))]
        if not exprs and not as_list(as_dict(term).get("matchFields")):
            failing.append("an empty term (it matches no node)")
            continue
        failing += [_show_expression(e) for e in exprs if not any(_expression_ok(e, lb) for lb in with_selector)]
    if not failing:
        failing = ["all of one term's requirements together"]
    return (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution asks for "
        f"{'; '.join(dict.fromkeys(failing))}, which no node pool has"
    )


def node_fit(pod: dict, facts: ClusterFacts) -> Fit:
    """Whether one node of the declared pools (whose labels match the pod's nodeSelector and
    required node affinity) can hold ``pod``. Resources no pool declares (ephemeral-storage here)
    are not judged."""
    spec = as_dict(pod.get("spec"))
    declared = {k for p in facts.spec.node_pools for k in p.allocatable}
    # an extended resource (a domain other than kubernetes.io's) no pool declares is on no node
    requested = {k: v for k, v in pod_requests(pod).items() if v > 0}
    absent = tuple(sorted(k for k in requested if k not in declared and "/" in k and "kubernetes.io/" not in k))
    wanted = {k: v for k, v in requested.items() if k in declared}
    pools = [p for p in facts.spec.node_pools if selection_matches(spec, node_labels(p))]
    if not pools:
        why = unmatched_selection(spec, facts)
        return Fit(None, why, why)
    if absent:
        return Fit(None, ", ".join(f"{k} {show(k, requested[k])}" for k in absent), absent=absent)
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
