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
