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
options) and ``authorizer`` (kube-apiserver's RBAC authorizer behind the CEL library of
:mod:`trainyard.repo.upstream.rbac`). The expressions run compiled in cel-cpp
(:mod:`trainyard.repo.upstream.cel_runtime`, each compiled once per process); CEL's ``matches`` runs
on RE2, as in kube-apiserver. A binding whose parameter object is missing denies
(``parameterNotFoundAction: Deny``).

:func:`check_bound` applies a policy through one of its bindings, matched as
:mod:`trainyard.repo.upstream.matching` says.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainyard.contract.errors import UserError
from trainyard.repo.model.rendered import tree_copy
from trainyard.repo.upstream.cel_runtime import CelEvalError, Program, Runtime, inline_variables
from trainyard.repo.upstream.matching import MatchRequest, binding_applies
from trainyard.repo.upstream.rbac import AUTHORIZER_LIBRARY, Attributes, Rbac, User, authorizer_value

POLICY_FILE = Path("base/webhook/validating-admission-policy.yaml")
POLICY_KIND = "ValidatingAdmissionPolicy"

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
        from trainyard.repo.model.repository import find_root

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
# Any policy with its binding: matched (:mod:`trainyard.repo.upstream.matching`), then :func:`check`.
# The binding's ``validationActions`` say whether a failure denies the request (``Deny``) or is
# only a warning or an audit annotation (kubernetes/api@v0.36.5:admissionregistration/v1/types.go,
# ValidationAction).


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
