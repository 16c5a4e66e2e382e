"""Which requests a ValidatingAdmissionPolicy and its binding apply to, as kube-apiserver decides.

kube-apiserver applies a ValidatingAdmissionPolicy to a request when the policy's
``matchConstraints`` and one of its bindings' ``matchResources`` both match it (resource rules,
namespace and object selectors, exclusions; kubernetes/api@v0.36.5:admissionregistration/v1/types.go,
MatchResources, NamedRuleWithOperations), then evaluates the policy as
:func:`trainyard.repo.upstream.vap.check_bound` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RULE_FIELDS = ("apiGroups", "apiVersions", "operations", "resources")


@dataclass(frozen=True)
class MatchRequest:
    """What a policy is matched against: the resource, the operation and the namespace's labels
    (for a namespace itself, its own labels)."""

    resource: str  # plural, e.g. pods; with the subresource: pods/ephemeralcontainers
    group: str = ""
    version: str = "v1"
    operation: str = "CREATE"
    namespace_labels: Mapping[str, str] | None = None  # None: a cluster-scoped object


def selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: every matchLabels pair and every matchExpression (In, NotIn,
    Exists, DoesNotExist) must hold; an empty selector matches everything, a malformed one
    nothing (LabelSelectorAsSelector fails on it)."""
    if selector is None:
        return True
    if not isinstance(selector, dict):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, dict) or not isinstance(expressions, list):
        return False
    if any(labels.get(str(k)) != str(v) for k, v in match_labels.items()):
        return False
    for e in expressions:
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            return False
        key, op, values = e["key"], e.get("operator"), e.get("values") or []
        if not isinstance(values, list):
            return False
        values = [str(v) for v in values]
        if op == "In" and not (key in labels and labels[key] in values):
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _rule_resource_matches(pattern: str, resource: str) -> bool:
    """``pods`` (not its subresources), ``pods/*``, ``*`` (no subresources), ``*/*``, ``*/scale``."""
    name, _, sub = resource.partition("/")
    p_name, p_slash, p_sub = pattern.partition("/")
    if not p_slash:
        return not sub and p_name in ("*", name)
    return p_name in ("*", name) and p_sub in ("*", sub) and bool(sub)


def rules_match(rules: object, request: MatchRequest) -> bool:
    """Whether one of ``rules`` (NamedRuleWithOperations) covers ``request``."""
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict) or not all(isinstance(rule.get(k), list) for k in RULE_FIELDS):
            continue
        scope = rule.get("scope") or "*"
        if scope == "Namespaced" and request.namespace_labels is None:
            continue
        if scope == "Cluster" and request.namespace_labels is not None:
            continue
        if (
            any(g in ("*", request.group) for g in rule["apiGroups"])
            and any(v in ("*", request.version) for v in rule["apiVersions"])
            and any(o in ("*", request.operation) for o in rule["operations"])
            and any(_rule_resource_matches(str(r), request.resource) for r in rule["resources"])
        ):
            return True
    return False


def _resources_match(match: object, obj: dict, request: MatchRequest, *, default_all: bool) -> bool:
    """MatchResources: resource rules (absent: everything when ``default_all``), exclusions,
    the namespace selector (on the namespace's labels; a cluster-scoped object passes) and the
    object selector (on the object's labels)."""
    match = match if isinstance(match, dict) else {}
    rules = match.get("resourceRules")
    if rules is None:
        if not default_all:
            return False
    elif not rules_match(rules, request):
        return False
    if rules_match(match.get("excludeResourceRules"), request):
        return False
    if request.namespace_labels is not None and not selector_matches(
        match.get("namespaceSelector"), request.namespace_labels
    ):
        return False
    labels = (obj.get("metadata") or {}).get("labels") if isinstance(obj.get("metadata"), dict) else None
    return selector_matches(match.get("objectSelector"), labels if isinstance(labels, dict) else {})


def binding_applies(policy: dict, binding: dict, obj: dict, request: MatchRequest) -> bool:
    """Whether ``binding`` binds ``policy`` and both match ``request`` for ``obj``."""
    if (binding.get("spec") or {}).get("policyName") != (policy.get("metadata") or {}).get("name"):
        return False
    constraints = (policy.get("spec") or {}).get("matchConstraints")
    return _resources_match(constraints, obj, request, default_all=False) and _resources_match(
        (binding.get("spec") or {}).get("matchResources"), obj, request, default_all=True
    )
