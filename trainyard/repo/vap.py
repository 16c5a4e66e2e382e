"""The ValidatingAdmissionPolicy of base/webhook, evaluated with a real CEL library (cel-python).

kube-apiserver evaluates a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) for a
matching request like this, and :func:`check` does the same for a pod CREATE:

1. ``matchConditions`` in order: any false -> the policy does not apply; an error (none false)
   -> with ``failurePolicy: Fail`` the request is rejected.
2. ``variables`` in order (each may use the ones before it), available as ``variables.<name>``.
3. ``validations``: a false expression rejects with ``messageExpression`` (or ``message``, or
   "failed expression: ..."); an expression error is a failure under ``failurePolicy: Fail``.

Activation: ``object`` (the pod), ``oldObject`` (null for CREATE), ``params`` (the parameter
object named by the binding; here the trainyard-fabric-params ConfigMap), ``request`` (operation
and kind). The expressions use only standard CEL (``has``, ``exists``, ``all``, ``filter``,
``matches``, ``startsWith``, ``size``, ``in``), so no Kubernetes CEL library function needs to
be provided here. A binding whose parameter object is missing denies
(``parameterNotFoundAction: Deny``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import celpy
import yaml
from celpy import celtypes

from trainyard.contract.errors import UserError

POLICY_FILE = Path("base/webhook/validating-admission-policy.yaml")
POLICY_KIND = "ValidatingAdmissionPolicy"


@dataclass
class Verdict:
    matched: bool  # the policy applies to this object (match conditions true)
    failures: list[str] = field(default_factory=list)  # messages of failed validations

    @property
    def allowed(self) -> bool:
        return not self.failures


_env = celpy.Environment()


@lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    try:
        return _env.program(_env.compile(expression))
    except celpy.CELParseError as exc:
        raise UserError(f"CEL expression does not parse: {expression!r}: {exc}") from None


def compile_policy(policy: dict) -> list[str]:
    """Parse every expression of ``policy``; return the problems ('spec.x[i].expression: ...')."""
    problems = []
    for path, expr in _expressions(policy):
        try:
            _program(expr)
        except UserError as exc:
            problems.append(f"{path}: {exc}")
    return problems


def _expressions(policy: dict) -> list[tuple[str, str]]:
    spec = policy.get("spec") or {}
    out = []
    for section, key in (("matchConditions", "expression"), ("variables", "expression"),
                         ("validations", "expression"), ("validations", "messageExpression")):  # fmt: skip
        for i, item in enumerate(spec.get(section) or []):
            if isinstance(item, dict) and isinstance(item.get(key), str):
                out.append((f"spec.{section}[{i}].{key}", item[key]))
    return out


def _run(expression: str, activation: dict) -> Any:
    result = _program(expression).evaluate(activation)
    if isinstance(result, celpy.CELEvalError):
        raise result
    return result


def _params(params: object) -> Any:
    if params is None:
        return None
    if isinstance(params, dict) and ("data" in params or params.get("kind") == "ConfigMap"):
        doc = params
    elif isinstance(params, dict):
        doc = {"data": params}
    else:
        raise TypeError("params must be the parameter ConfigMap (a dict) or its data mapping")
    return celpy.json_to_cel(copy.deepcopy(doc))


def check(pod: dict, params: object, policy: dict | None = None) -> Verdict:
    """Evaluate ``policy`` (default: the repository's) for the CREATE of ``pod``."""
    policy = policy or load_policy()
    spec = policy.get("spec") or {}
    fail_closed = spec.get("failurePolicy", "Fail") == "Fail"
    name = (policy.get("metadata") or {}).get("name", "policy")
    cel_params = _params(params)
    if spec.get("paramKind") and cel_params is None:
        return Verdict(True, [f"{name}: no parameter object found (parameterNotFoundAction: Deny)"])
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(copy.deepcopy(pod)),
        "oldObject": None,
        "request": celpy.json_to_cel({"operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"}}),
    }
    if cel_params is not None:
        activation["params"] = cel_params
    errors: list[str] = []
    for cond in spec.get("matchConditions") or []:
        try:
            if not bool(_run(cond["expression"], activation)):
                return Verdict(False)
        except celpy.CELEvalError as exc:
            errors.append(f"{name}: match condition {cond.get('name')!r} failed to evaluate: {exc}")
    if errors:
        return Verdict(True, errors) if fail_closed else Verdict(False)
    variables = celtypes.MapType()
    activation["variables"] = variables
    for var in spec.get("variables") or []:
        try:
            variables[celtypes.StringType(var["name"])] = _run(var["expression"], activation)
        except celpy.CELEvalError as exc:
            # a variable is evaluated lazily by kube-apiserver: an error surfaces where it is used
            variables[celtypes.StringType(var["name"])] = exc
    failures: list[str] = []
    for i, v in enumerate(spec.get("validations") or []):
        try:
            ok = bool(_run(v["expression"], activation))
        except (celpy.CELEvalError, TypeError) as exc:
            if fail_closed:
                failures.append(f"{name}: validations[{i}] failed to evaluate: {exc}")
            continue
        if ok:
            continue
        failures.append(_message(v, activation) or f"failed expression: {v['expression']}")
    return Verdict(True, failures)


def _message(validation: dict, activation: dict) -> str | None:
    expr = validation.get("messageExpression")
    if isinstance(expr, str):
        try:
            text = str(_run(expr, activation))
        except (celpy.CELEvalError, TypeError):
            text = ""
        # kube-apiserver falls back to message when the result is blank or has a line break
        if text.strip() and "\n" not in text:
            return text
    msg = validation.get("message")
    return msg if isinstance(msg, str) and msg else None


def evaluate(pod: dict, params: object, policy: dict | None = None) -> list[str]:
    """The failure messages the policy gives for the CREATE of ``pod`` (empty: admitted, or the
    policy does not apply). ``params``: the trainyard-fabric-params ConfigMap or its data."""
    return check(pod, params, policy).failures


def webhook_matches(configuration: dict, pod: dict) -> bool:
    """Whether every matchCondition of every webhook of a MutatingWebhookConfiguration passes
    ``pod`` (an expression error counts as not passing)."""
    activation = {
        "object": celpy.json_to_cel(copy.deepcopy(pod)),
        "oldObject": None,
        "request": celpy.json_to_cel({"operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"}}),
    }
    for hook in configuration.get("webhooks") or []:
        for cond in hook.get("matchConditions") or []:
            try:
                if not bool(_run(cond["expression"], activation)):
                    return False
            except (celpy.CELEvalError, TypeError):
                return False
    return True


def load_policy(path: str | Path | None = None) -> dict:
    """The ValidatingAdmissionPolicy document of ``path`` (default: the repository's
    base/webhook/validating-admission-policy.yaml)."""
    if path is None:
        from trainyard.repo.repository import find_root

        path = find_root() / POLICY_FILE
    return copy.deepcopy(_load_policy_file(str(path)))


@lru_cache(maxsize=8)
def _load_policy_file(path: str) -> dict:
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: cannot read the admission policy: {exc}") from None
    policy = policy_from(docs)
    if policy is None:
        raise UserError(f"{path}: no {POLICY_KIND} in it")
    return policy


def policy_from(docs: list[dict]) -> dict | None:
    return next((d for d in docs if isinstance(d, dict) and d.get("kind") == POLICY_KIND), None)


# ---------------------------------------------------------------------------------------------
# Any policy with its binding: which requests it applies to, then :func:`check`.
#
# kube-apiserver applies a ValidatingAdmissionPolicy to a request when the policy's
# ``matchConstraints`` and one of its bindings' ``matchResources`` both match it (resource rules,
# namespace and object selectors, exclusions), then evaluates the policy as :func:`check` does;
# the binding's ``validationActions`` say whether a failure denies the request (``Deny``) or is
# only a warning or an audit annotation (kubernetes/api@v0.36.3:admissionregistration/v1/types.go,
# MatchResources, NamedRuleWithOperations, ValidationAction).

RULE_FIELDS = ("apiGroups", "apiVersions", "operations", "resources")


@dataclass(frozen=True)
class Request:
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


def _resource_matches(pattern: str, resource: str) -> bool:
    """``pods`` (not its subresources), ``pods/*``, ``*`` (no subresources), ``*/*``, ``*/scale``."""
    name, _, sub = resource.partition("/")
    p_name, p_slash, p_sub = pattern.partition("/")
    if not p_slash:
        return not sub and p_name in ("*", name)
    return p_name in ("*", name) and p_sub in ("*", sub) and bool(sub)


def rules_match(rules: object, request: Request) -> bool:
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
            and any(_resource_matches(str(r), request.resource) for r in rule["resources"])
        ):
            return True
    return False


def _resources_match(match: object, obj: dict, request: Request, *, default_all: bool) -> bool:
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


def binding_applies(policy: dict, binding: dict, obj: dict, request: Request) -> bool:
    """Whether ``binding`` binds ``policy`` and both match ``request`` for ``obj``."""
    if (binding.get("spec") or {}).get("policyName") != (policy.get("metadata") or {}).get("name"):
        return False
    constraints = (policy.get("spec") or {}).get("matchConstraints")
    return _resources_match(constraints, obj, request, default_all=False) and _resources_match(
        (binding.get("spec") or {}).get("matchResources"), obj, request, default_all=True
    )


def check_bound(policy: dict, binding: dict, obj: dict, request: Request, params: object = None) -> Verdict:
    """``policy`` as ``binding`` applies it to ``obj`` (a CREATE, as :func:`check` evaluates it):
    not matched when the binding or the policy's constraints do not select the request; the
    failures of :func:`check` otherwise. ``params``: the object the binding's ``paramRef`` names."""
    if not binding_applies(policy, binding, obj, request):
        return Verdict(False)
    return check(obj, params, policy)


def denies(binding: dict) -> bool:
    """Whether a failure under ``binding`` rejects the request (``validationActions: [Deny]``),
    rather than only warning or auditing."""
    return "Deny" in ((binding.get("spec") or {}).get("validationActions") or [])
