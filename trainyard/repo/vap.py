"""The admission configuration of base/webhook, evaluated with a real CEL runtime (cel-cpp).

kube-apiserver evaluates a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) for a
matching request like this, and :func:`check` does the same for a pod CREATE or UPDATE:

1. ``matchConditions`` in order: any false -> the policy does not apply; an error (none false)
   -> with ``failurePolicy: Fail`` the request is rejected.
2. ``variables`` in order (each may use the ones before it), available as ``variables.<name>``.
3. ``validations``: a false expression rejects with ``messageExpression`` (or ``message``, or
   "failed expression: ..."); an expression error is a failure under ``failurePolicy: Fail``.

:func:`webhook_matches` evaluates a MutatingWebhookConfiguration's ``matchConditions`` the same way.

Activation, field by field as admissionregistration/v1 types.go documents it: ``object`` (the pod),
``oldObject`` (null for CREATE, the stored pod for UPDATE), ``params`` (the parameter object named
by the binding; here the trainyard-fabric-params ConfigMap), ``request`` (the AdmissionRequest:
uid, kind, resource, requestKind, requestResource, name, namespace, operation, userInfo, dryRun,
options) and ``authorizer``. The expressions run compiled in cel-cpp (:mod:`trainyard.repo.cel_runtime`,
each compiled once per process); CEL's ``matches`` runs on RE2, as in kube-apiserver. A binding
whose parameter object is missing denies (``parameterNotFoundAction: Deny``).

``authorizer`` follows kubernetes/apiserver pkg/cel/library/authz.go: ``authorizer.group(g)
.resource(r)[.subresource(s)][.namespace(ns)][.name(n)].check(verb)``, ``authorizer.path(p)
.check(verb)``, ``authorizer.serviceAccount(ns, name)`` (the same checks for that service
account) and ``authorizer.requestResource`` (a check on the request's own resource) give a
Decision with ``allowed()``, ``reason()``, ``errored()`` and ``error()``. The decision comes from
:class:`Rbac`, kube-apiserver's RBAC authorizer on a given set of ClusterRoles, Roles and
bindings (plugin/pkg/auth/authorizer/rbac: RuleAllows; pkg/apis/rbac/v1/evaluation_helpers.go:
VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches, NonResourceURLMatches;
pkg/registry/rbac/validation/rule.go: appliesToUser). RBAC only allows: no matching rule is "no
opinion", and ``allowed()`` is then false.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainyard.contract.errors import UserError
from trainyard.repo.cel_runtime import CelEvalError, Member, Program, Runtime, inline_variables
from trainyard.repo.rendered import tree_copy

POLICY_FILE = Path("base/webhook/validating-admission-policy.yaml")
POLICY_KIND = "ValidatingAdmissionPolicy"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"  # apiserver pkg/authentication/serviceaccount


@dataclass(frozen=True)
class User:
    """authentication/v1 UserInfo of the principal making the request."""

    username: str
    groups: tuple[str, ...] = ("system:authenticated",)
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> User:
        """A service account's user as the token authenticator makes it (its groups included)."""
        return cls(
            f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        )

    def as_json(self) -> dict:
        out: dict = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra}
        return out


# Who creates the pods of a job: its controller (Training Operator v1 in kubeflow).
CONTROLLER = User.service_account("kubeflow", "training-operator")


@dataclass
class Request:
    """What of the AdmissionRequest a check needs; the rest is derived from the pod."""

    operation: str = "CREATE"  # or UPDATE
    user: User = CONTROLLER
    namespace: str | None = None  # default: the pod's metadata.namespace, else "default"
    old: dict | None = None  # the stored pod, for UPDATE

    def as_json(self, pod: dict) -> dict:
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        gvk = {"group": "", "version": "v1", "kind": "Pod"}
        gvr = {"group": "", "version": "v1", "resource": "pods"}
        return {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": str(meta.get("name") or ""),
            "namespace": self.pod_namespace(pod),
            "operation": self.operation,
            "userInfo": self.user.as_json(),
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{self.operation.capitalize()}Options"},
        }

    def pod_namespace(self, pod: dict) -> str:
        if self.namespace is not None:
            return self.namespace
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        ns = meta.get("namespace") if isinstance(meta, dict) else None
        return ns if isinstance(ns, str) and ns else "default"


# --- RBAC, as kube-apiserver's RBAC authorizer decides ---------------------------------------------


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes of one check."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


def _verb_matches(rule: dict, verb: str) -> bool:
    return any(v in ("*", verb) for v in rule.get("verbs") or [])


def _group_matches(rule: dict, group: str) -> bool:
    return any(g in ("*", group) for g in rule.get("apiGroups") or [])


def _resource_matches(rule: dict, combined: str, subresource: str) -> bool:
    for r in rule.get("resources") or []:
        if r in ("*", combined):
            return True
        if subresource and r == f"*/{subresource}":
            return True
    return False


def _name_matches(rule: dict, name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def _url_matches(rule: dict, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url in ("*", path) or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(attrs: Attributes, rule: dict) -> bool:
    if attrs.resource_request:
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        return (
            _verb_matches(rule, attrs.verb)
            and _group_matches(rule, attrs.group)
            and _resource_matches(rule, combined, attrs.subresource)
            and _name_matches(rule, attrs.name)
        )
    return _verb_matches(rule, attrs.verb) and _url_matches(rule, attrs.path)


def applies_to(user: User, subject: dict, namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return user.username == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.username == f"{SERVICE_ACCOUNT_PREFIX}{sa_namespace}:{name}"
    return False


class Rbac:
    """The RBAC authorizer over a fixed set of RBAC objects (ClusterRole, ClusterRoleBinding, Role,
    RoleBinding documents; anything else is ignored)."""

    def __init__(self, docs: Iterable[object] = ()) -> None:
        self.cluster_roles: dict[str, dict] = {}
        self.roles: dict[tuple[str, str], dict] = {}
        self.cluster_bindings: list[dict] = []
        self.bindings: list[dict] = []
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("apiVersion") != "rbac.authorization.k8s.io/v1":
                continue
            meta = doc.get("metadata") or {}
            kind, name, ns = doc.get("kind"), meta.get("name"), meta.get("namespace") or ""
            if kind == "ClusterRole":
                self.cluster_roles[name] = doc
            elif kind == "Role":
                self.roles[(ns, name)] = doc
            elif kind == "ClusterRoleBinding":
                self.cluster_bindings.append(doc)
            elif kind == "RoleBinding":
                self.bindings.append(doc)

    def _rules(self, ref: dict, namespace: str) -> list[dict]:
        if ref.get("kind") == "ClusterRole":
            role = self.cluster_roles.get(ref.get("name"))
        elif ref.get("kind") == "Role":
            role = self.roles.get((namespace, ref.get("name")))
        else:
            role = None
        return list((role or {}).get("rules") or [])

    def authorize(self, user: User, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason): allowed by the first binding whose subject is the user and whose role
        has a rule for the attributes; otherwise no opinion."""
        candidates = [(b, "") for b in self.cluster_bindings]
        if attrs.namespace:
            ns_bindings = [b for b in self.bindings if (b.get("metadata") or {}).get("namespace") == attrs.namespace]
            candidates += [(b, attrs.namespace) for b in ns_bindings]
        for binding, namespace in candidates:
            subject = next((s for s in binding.get("subjects") or [] if applies_to(user, s, namespace)), None)
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            if any(rule_allows(attrs, rule) for rule in self._rules(ref, namespace)):
                where = f" in {namespace}" if namespace else ""
                return True, (
                    f'RBAC: allowed by {binding.get("kind")} "{(binding.get("metadata") or {}).get("name")}"{where} '
                    f'of {ref.get("kind")} "{ref.get("name")}" to {subject.get("kind")} "{subject.get("name")}"'
                )
        return False, ""


# --- the authorizer CEL library -------------------------------------------------------------------
#
# kubernetes/apiserver pkg/cel/library/authz.go: ``authorizer`` (Authorizer) has group(string)
# -> GroupCheck, path(string) -> PathCheck, serviceAccount(string, string) -> Authorizer and the
# field requestResource (a ResourceCheck); GroupCheck.resource(string) -> ResourceCheck;
# ResourceCheck.subresource/namespace/name(string) -> ResourceCheck; ResourceCheck.check(string)
# and PathCheck.check(string) -> Decision; Decision.allowed() bool, reason() string, errored()
# bool, error() string. Its values are maps here (the only values the compiled runtime hands to
# Python functions), each with the kind it stands for and the principal it checks as.

KIND = "@kind"
_rbacs: weakref.WeakValueDictionary[str, Rbac] = weakref.WeakValueDictionary()


def _principal(rbac: Rbac, user: User) -> dict[str, Any]:
    token = str(id(rbac))
    _rbacs[token] = rbac
    return {"@rbac": token, "@user": user.username, "@groups": list(user.groups)}


def authorizer_value(rbac: Rbac, user: User, request_attrs: Attributes | None = None) -> dict[str, Any]:
    """``authorizer``: checks as ``user``; ``requestResource`` is a check on ``request_attrs``."""
    out: dict[str, Any] = {KIND: "Authorizer", **_principal(rbac, user)}
    if request_attrs is not None:
        out["requestResource"] = _resource_check(out, request_attrs)
    return out


def _resource_check(principal: Mapping[str, Any], attrs: Attributes) -> dict[str, Any]:
    fields = {k: principal[k] for k in ("@rbac", "@user", "@groups")}
    return {KIND: "ResourceCheck", **fields, "@attrs": dict(attrs.__dict__)}


def _expect(receiver: Mapping[str, Any], *kinds: str) -> Mapping[str, Any]:
    if not isinstance(receiver, Mapping) or receiver.get(KIND) not in kinds:
        raise TypeError(f"no such overload: applies to {' or '.join(kinds)}")
    return receiver


def _with(check: Mapping[str, Any], **changes: str) -> dict[str, Any]:
    check = _expect(check, "ResourceCheck")
    return {**check, "@attrs": {**check["@attrs"], **{k: str(v) for k, v in changes.items()}}}


def _group(receiver: Mapping[str, Any], group: str) -> dict[str, Any]:
    receiver = _expect(receiver, "Authorizer")
    return {**{k: receiver[k] for k in ("@rbac", "@user", "@groups")}, KIND: "GroupCheck", "@group": str(group)}


def _resource(receiver: Mapping[str, Any], resource: str) -> dict[str, Any]:
    receiver = _expect(receiver, "GroupCheck")
    return _resource_check(receiver, Attributes(verb="", group=receiver["@group"], resource=str(resource)))


def _path(receiver: Mapping[str, Any], path: str) -> dict[str, Any]:
    receiver = _expect(receiver, "Authorizer")
    return {**{k: receiver[k] for k in ("@rbac", "@user", "@groups")}, KIND: "PathCheck", "@path": str(path)}


def _service_account(receiver: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any]:
    receiver = _expect(receiver, "Authorizer")
    return authorizer_value(_rbac_of(receiver), User.service_account(str(namespace), str(name)))


def _rbac_of(receiver: Mapping[str, Any]) -> Rbac:
    rbac = _rbacs.get(receiver["@rbac"])
    if rbac is None:
        raise TypeError("the authorizer of this request is gone")
    return rbac


def _check(receiver: Mapping[str, Any], verb: str) -> dict[str, Any]:
    receiver = _expect(receiver, "ResourceCheck", "PathCheck")
    if receiver[KIND] == "ResourceCheck":
        attrs = Attributes(**{**receiver["@attrs"], "verb": str(verb)})
    else:
        attrs = Attributes(verb=str(verb), path=receiver["@path"], resource_request=False)
    user = User(receiver["@user"], tuple(receiver["@groups"]))
    allowed, reason = _rbac_of(receiver).authorize(user, attrs)
    return {KIND: "Decision", "@allowed": allowed, "@reason": reason}


AUTHORIZER_LIBRARY = (
    Member("group", 1, _group),
    Member("resource", 1, _resource),
    Member("subresource", 1, lambda c, s: _with(c, subresource=s)),
    Member("namespace", 1, lambda c, ns: _with(c, namespace=ns)),
    Member("name", 1, lambda c, n: _with(c, name=n)),
    Member("path", 1, _path),
    Member("serviceAccount", 2, _service_account),
    Member("check", 1, _check),
    Member("allowed", 0, lambda d: bool(_expect(d, "Decision")["@allowed"]), "bool"),
    Member("reason", 0, lambda d: str(_expect(d, "Decision")["@reason"]), "string"),
    # RBAC never errors: errored() is false and error() empty
    Member("errored", 0, lambda d: not _expect(d, "Decision"), "bool"),
    Member("error", 0, lambda d: "" if _expect(d, "Decision") else "no decision", "string"),
)


@dataclass
class Verdict:
    matched: bool  # the policy applies to this object (match conditions true)
    failures: list[str] = field(default_factory=list)  # messages of failed validations

    @property
    def allowed(self) -> bool:
        return not self.failures


_runtime: Runtime | None = None


def runtime() -> Runtime:
    """The one CEL environment of the process (compiled expressions are cached in it)."""
    global _runtime
    if _runtime is None:
        _runtime = Runtime(AUTHORIZER_LIBRARY)
    return _runtime


def _program(expression: str) -> Program:
    return runtime().program(expression)


def compile_policy(policy: dict) -> list[str]:
    """Compile every expression of ``policy``; return the problems ('spec.x[i].expression: ...')."""
    problems = []
    for path, expr in _expressions(policy):
        try:
            _program(expr)
        except UserError as exc:
            problems.append(f"{path}: {exc}")
    return problems


def require_compiles(policy: dict, where: str) -> None:
    """Raise :class:`UserError` naming ``where`` (the policy's file), the policy, and each
    expression of it that does not compile (the compiled ones are cached: this is cheap)."""
    problems = compile_policy(policy)
    if problems:
        name = (policy.get("metadata") or {}).get("name", "?")
        raise UserError(f"{where}: ValidatingAdmissionPolicy {name}: " + "; ".join(problems))


def _expressions(policy: dict) -> list[tuple[str, str]]:
    spec = policy.get("spec") or {}
    out = []
    for section, key in (("matchConditions", "expression"), ("variables", "expression"),
                         ("validations", "expression"), ("validations", "messageExpression")):  # fmt: skip
        for i, item in enumerate(spec.get(section) or []):
            if isinstance(item, dict) and isinstance(item.get(key), str):
                out.append((f"spec.{section}[{i}].{key}", item[key]))
    return out


def _run(expression: str, activation: Mapping[str, Any]) -> Any:
    return _program(expression).evaluate(activation)


def _params(params: object) -> Any:
    if params is None:
        return None
    if isinstance(params, dict) and ("data" in params or params.get("kind") == "ConfigMap"):
        return params
    if isinstance(params, dict):
        return {"data": params}
    raise TypeError("params must be the parameter ConfigMap (a dict) or its data mapping")


def _activation(pod: dict, request: Request | None, rbac: Rbac | None) -> dict[str, Any]:
    """The variables of an evaluation; the runtime converts (copies) them at each evaluation, so
    nothing here is changed by it."""
    request = request or Request()
    req = request.as_json(pod)
    attrs = Attributes(verb="", resource="pods", namespace=req["namespace"], name=req["name"])
    return {
        "object": pod,
        "oldObject": request.old,
        "request": req,
        "authorizer": authorizer_value(rbac or NO_RBAC, request.user, attrs),
    }


NO_RBAC = Rbac()


def check(
    pod: dict,
    params: object,
    policy: dict | None = None,
    request: Request | None = None,
    rbac: Rbac | None = None,
) -> Verdict:
    """Evaluate ``policy`` (default: the repository's) for ``request`` (default: a CREATE by the
    Training Operator) of ``pod``; ``rbac`` decides the authorizer's checks (default: none allowed)."""
    policy = policy or load_policy()
    spec = policy.get("spec") or {}
    fail_closed = spec.get("failurePolicy", "Fail") == "Fail"
    name = (policy.get("metadata") or {}).get("name", "policy")
    operation = (request or Request()).operation
    rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
    if not any(operation in (r.get("operations") or []) or "*" in (r.get("operations") or []) for r in rules):
        return Verdict(False)
    cel_params = _params(params)
    if spec.get("paramKind") and cel_params is None:
        return Verdict(True, [f"{name}: no parameter object found (parameterNotFoundAction: Deny)"])
    data = _activation(pod, request, rbac)
    if cel_params is not None:
        data["params"] = cel_params
    data["variables"] = {}  # every variables.<name> is inlined; an unknown name is an error
    try:
        activation = runtime().activation(data)
    except CelEvalError as exc:
        return Verdict(True, [f"{name}: the object cannot be evaluated: {exc}"]) if fail_closed else Verdict(False)
    errors: list[str] = []
    for cond in spec.get("matchConditions") or []:
        try:
            if not bool(_run_in(cond["expression"], activation)):
                return Verdict(False)
        except (CelEvalError, TypeError) as exc:
            errors.append(f"{name}: match condition {cond.get('name')!r} failed to evaluate: {exc}")
    if errors:
        return Verdict(True, errors) if fail_closed else Verdict(False)
    definitions = _definitions(tuple((v.get("name"), v.get("expression")) for v in spec.get("variables") or []))
    failures: list[str] = []
    for i, v in enumerate(spec.get("validations") or []):
        try:
            ok = bool(_run_in(_inlined(v["expression"], definitions), activation))
        except (CelEvalError, TypeError) as exc:
            if fail_closed:
                failures.append(f"{name}: validations[{i}] failed to evaluate: {exc}")
            continue
        if ok:
            continue
        failures.append(_message(v, activation, definitions) or f"failed expression: {v['expression']}")
    return Verdict(True, failures)


class _Definitions(dict):
    """A policy's variables, name -> definition with the variables before it inlined."""

    def __hash__(self) -> int:  # one per distinct variables list (cached below), hashed by identity
        return id(self)


@lru_cache(maxsize=64)
def _definitions(variables: tuple[tuple[object, object], ...]) -> _Definitions:
    out = _Definitions()
    for name, text in variables:
        if isinstance(name, str) and isinstance(text, str):
            out[name] = inline_variables(text, out)
    return out


@lru_cache(maxsize=4096)
def _inlined(text: str, definitions: _Definitions) -> str:
    return inline_variables(text, definitions)


def _run_in(expression: str, activation: Any) -> Any:
    return _program(expression).evaluate_in(activation)


def _message(validation: dict, activation: Any, definitions: _Definitions) -> str | None:
    expr = validation.get("messageExpression")
    if isinstance(expr, str):
        try:
            text = str(_run_in(_inlined(expr, definitions), activation))
        except (CelEvalError, TypeError):
            text = ""
        # kube-apiserver falls back to message when the result is blank or has a line break
        if text.strip() and "\n" not in text:
            return text
    msg = validation.get("message")
    return msg if isinstance(msg, str) and msg else None


def expression(
    text: str, pod: dict, request: Request | None = None, rbac: Rbac | None = None, params: object = None
) -> Any:
    """The value of one CEL expression with the activation :func:`check` gives (errors raise)."""
    activation = _activation(pod, request, rbac)
    if params is not None:
        activation["params"] = _params(params)
    return _run(text, activation)


def evaluate(
    pod: dict, params: object, policy: dict | None = None, request: Request | None = None, rbac: Rbac | None = None
) -> list[str]:
    """The failure messages the policy gives for ``request`` (default: a CREATE) of ``pod`` (empty:
    admitted, or the policy does not apply). ``params``: the trainyard-fabric-params ConfigMap or
    its data."""
    return check(pod, params, policy, request, rbac).failures


def webhook_matches(configuration: dict, pod: dict, request: Request | None = None, rbac: Rbac | None = None) -> bool:
    """Whether kube-apiserver would call the webhooks of a MutatingWebhookConfiguration for
    ``request`` of ``pod``: every webhook's rules name the operation on pods, and none of its
    matchConditions is false (an expression error counts as not passing: failurePolicy Ignore)."""
    operation = (request or Request()).operation
    try:
        activation = runtime().activation(_activation(pod, request, rbac))
    except CelEvalError:
        return False
    for hook in configuration.get("webhooks") or []:
        if not any(
            operation in (r.get("operations") or []) and "pods" in (r.get("resources") or [])
            for r in hook.get("rules") or []
        ):
            return False
        for cond in hook.get("matchConditions") or []:
            try:
                if not bool(_run_in(cond["expression"], activation)):
                    return False
            except (CelEvalError, TypeError):
                return False
    return True


def load_policy(path: str | Path | None = None) -> dict:
    """The ValidatingAdmissionPolicy document of ``path`` (default: the repository's
    base/webhook/validating-admission-policy.yaml)."""
    if path is None:
        from trainyard.repo.repository import find_root

        path = find_root() / POLICY_FILE
    return tree_copy(_load_policy_file(str(path)))


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


def check_bound(policy: dict, binding: dict, obj: dict, request: MatchRequest, params: object = None) -> Verdict:
    """``policy`` as ``binding`` applies it to ``obj`` (a CREATE, as :func:`check` evaluates it):
    not matched when the binding or the policy's constraints do not select the request; the
    failures of :func:`check` otherwise. ``params``: the object the binding's ``paramRef`` names."""
    if not binding_applies(policy, binding, obj, request):
        return Verdict(False)
    return check(obj, params, policy, Request(operation=request.operation))


def denies(binding: dict) -> bool:
    """Whether a failure under ``binding`` rejects the request (``validationActions: [Deny]``),
    rather than only warning or auditing."""
    return "Deny" in ((binding.get("spec") or {}).get("validationActions") or [])
