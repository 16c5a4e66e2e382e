"""The MutatingAdmissionPolicies of :mod:`trainyard.repo.generate.mutating_policy`, run as
kube-apiserver runs them and compared with the webhook's engine.

The harness evaluates the generated CEL with a compiled CEL runtime (cel-expr-python, Google's
C++ CEL), implementing what it lacks of Kubernetes' CEL (see :func:`environment`), applies the
patch with the jsonpatch library, and compares the pod with the engine's (:func:`compare`),
leaving out the pods that hit one of the policy's :data:`~trainyard.repo.generate.mutating_policy.LIMITS`.
It sits beside the compiler because it reads the compiler's documents and its limits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal

from trainyard.contract.errors import UserError
from trainyard.contract.names import NETWORKS_ANNOTATION
from trainyard.contract.quantity import QuantityError, parse_quantity
from trainyard.repo.generate.mutating_policy import (
    MAX_SUMMED,
    MORE_TRAINERS,
    NETWORKS_JSON_FORM,
    PREFIX,
    REFUSAL,
    documents,
)
from trainyard.repo.model.rendered import tree_copy
from trainyard.repo.upstream.cel_runtime import string_literal_end
from webhook.policy import CompiledProfile, PolicySet


class HarnessError(UserError):
    """The generated policy does not compile or evaluate; the message names the expression."""


def struct_literals_as_maps(expression: str) -> str:
    """``JSONPatch{op: 'add', ...}`` -> ``{'op': 'add', ...}``.

    Kubernetes declares JSONPatch as a CEL object type with the fields op, path, from and value
    (apiserver pkg/cel/mutation/jsonpatch.go); the runtime here has no such type, so each
    ``JSONPatch{`` literal becomes a map literal with the same fields as string keys, and
    :func:`_as_patch` then checks what the type would have (known fields, string op/path/from).
    The rewrite reads CEL's tokens: text in string literals is never touched."""
    out: list[str] = []
    i, n = 0, len(expression)
    stack: list[bool] = []  # for each open bracket: is it a JSONPatch literal's brace
    expect_field = False
    while i < n:
        ch = expression[i]
        if ch in "'\"":
            end = string_literal_end(expression, i)
            out.append(expression[i:end])
            i = end
            expect_field = False
            continue
        if expression.startswith("JSONPatch{", i) and (
            i == 0 or not (expression[i - 1].isalnum() or expression[i - 1] in "_.")
        ):
            out.append("{")
            stack.append(True)
            i += len("JSONPatch{")
            expect_field = True
            continue
        if ch in "{[(":
            stack.append(False)
        elif ch in "}])":
            if stack:
                stack.pop()
        elif ch == "," and stack and stack[-1]:
            out.append(ch)
            i += 1
            expect_field = True
            continue
        if expect_field and (ch.isalpha() or ch == "_"):
            j = i
            while j < n and (expression[j].isalnum() or expression[j] == "_"):
                j += 1
            out.append(f"'{expression[i:j]}'")
            i = j
            expect_field = False
            continue
        if not ch.isspace():
            expect_field = False
        out.append(ch)
        i += 1
    return "".join(out)


PATCH_FIELDS = ("op", "path", "from", "value")
PATCH_OPS = ("add", "remove", "replace", "move", "copy", "test")


def _as_patch(item: object, where: str) -> dict:
    if not isinstance(item, dict) or not set(item) <= set(PATCH_FIELDS):
        raise HarnessError(f"{where}: {item!r} is not a JSONPatch (fields {', '.join(PATCH_FIELDS)})")
    if item.get("op") not in PATCH_OPS or not isinstance(item.get("path"), str):
        raise HarnessError(f"{where}: {item!r}: op must be one of {PATCH_OPS} and path a string")
    return dict(item)


def _escape_key(key: str) -> str:
    """jsonpatch.escapeKey (apiserver pkg/cel/library/jsonpatch.go): '~' -> '~0', '/' -> '~1'."""
    return key.replace("~", "~0").replace("/", "~1")


def _quantity(text: str) -> dict:
    """quantity(string) (apiserver pkg/cel/library/quantity.go): a Quantity, or an error for a
    string that is not one. The harness holds it as a tagged map only its methods read."""
    try:
        return {"kubernetes.Quantity": str(parse_quantity(text))}
    except QuantityError as exc:
        raise ValueError(f"quantity({text!r}): {exc}") from None


def _as_integer(q: dict) -> int:
    """Quantity.asInteger(): the value as int64, an error when it is not a whole number that fits."""
    value = Decimal(q["kubernetes.Quantity"])
    if value != value.to_integral_value() or not -(2**63) <= value < 2**63:
        raise ValueError(f"cannot convert value to integer: {value}")
    return int(value)


def _flatten(items: list) -> list:
    """lists ext flatten() (cel-go ext/lists.go): one level."""
    out = []
    for x in items:
        out.extend(x if isinstance(x, list) else [x])
    return out


def environment():
    """A cel-expr-python environment with what the policy uses of Kubernetes' CEL beyond the
    runtime's own: the strings extension (the runtime's), ``lists.range`` and ``flatten`` (cel-go
    ext/lists.go), ``jsonpatch.escapeKey``, ``quantity``/``asInteger`` and the ``authorizer``
    chain, each as Kubernetes defines it."""
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_optional, ext_strings

    t = cel.Type

    def decl(name: str, overload: str, ret, params, impl, member: bool = False):
        return cel.FunctionDecl(name, [cel.Overload(overload, ret, params, is_member=member, impl=impl)])

    def chain(name: str):
        return decl(name, f"authorizer_{name}", t.DYN, [t.DYN, t.STRING], lambda a, _s: a, member=True)

    ext = cel.CelExtension(
        "trainyard_kubernetes",
        [
            decl("lists.range", "lists_range", t.List(t.INT), [t.INT], lambda k: list(range(k))),
            decl("flatten", "list_flatten", t.List(t.DYN), [t.List(t.DYN)], _flatten, member=True),
            decl("jsonpatch.escapeKey", "jsonpatch_escape_key", t.STRING, [t.STRING], _escape_key),
            decl("quantity", "string_to_quantity", t.DYN, [t.STRING], _quantity),
            decl("asInteger", "quantity_as_integer", t.INT, [t.DYN], _as_integer, member=True),
            chain("group"),
            chain("resource"),
            chain("namespace"),
            chain("check"),
            decl("allowed", "decision_allowed", t.BOOL, [t.DYN], lambda a: bool(a["allowed"]), member=True),
        ],
    )
    variables = {name: t.DYN for name in ("object", "oldObject", "request", "params", "variables", "authorizer")}
    return cel.NewEnv(variables=variables, extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(), ext])


def normalise(pod: dict) -> dict:
    """The pod as kube-apiserver hands it to admission after decoding it into a typed Pod: null
    fields dropped, and a quantity written as a number (resources, emptyDir sizeLimit) held as its
    string. Both the engine and the policy are compared on this form."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [strip(v) for v in value if v is not None]
        return value

    out = strip(pod)  # a new container for every one of the pod's: a copy
    assert isinstance(out, dict)
    spec = out.get("spec") if isinstance(out.get("spec"), dict) else {}
    for group in ("containers", "initContainers"):
        for c in spec.get(group) or []:
            res = c.get("resources") if isinstance(c, dict) else None
            for section in ("limits", "requests"):
                values = res.get(section) if isinstance(res, dict) else None
                if isinstance(values, dict):
                    for k, v in values.items():
                        if isinstance(v, int | float) and not isinstance(v, bool):
                            values[k] = str(v)
    for v in spec.get("volumes") or []:
        ed = v.get("emptyDir") if isinstance(v, dict) else None
        if isinstance(ed, dict) and isinstance(ed.get("sizeLimit"), int | float):
            ed["sizeLimit"] = str(ed["sizeLimit"])
    return out


def limits_hit(pod: dict, profile: CompiledProfile | None = None) -> list[str]:
    """The rules of :data:`LIMITS` (other than refusals and warnings) a pod would hit in policy
    mode; ``profile``: the one that applies (None: any trainer image of any profile counts)."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    value = annotations.get(NETWORKS_ANNOTATION)
    out = []
    if isinstance(value, str) and any(ch in value for ch in '[{"'):
        out.append(NETWORKS_JSON_FORM)
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    if profile is not None:
        n = sum(1 for c in containers if profile.is_trainer_image(c.get("image")))
        if n > MAX_SUMMED:
            out.append(MORE_TRAINERS)
    return out


@dataclass
class Outcome:
    pod: dict  # the pod after every matching policy's mutation
    profile: str | None  # the profile whose policy matched and mutated it; None: none did
    ops: list[dict]
    errors: list[str] = field(default_factory=list)  # policies skipped for an error (failurePolicy Ignore)


def _failed(result) -> str | None:
    """The error a CEL result holds (the runtime returns errors as values), or None."""
    from cel_expr_python import cel

    return str(result.plain_value()) if result.type() == cel.Type.ERROR else None


class Harness:
    """Every profile's MutatingAdmissionPolicy, compiled once, applied as kube-apiserver applies it
    at CREATE: a policy runs when all its matchConditions are true (one that errs, and none false,
    is a failure); its variables are evaluated, then its JSONPatch mutation, whose patch is applied
    to the pod. A failure skips the policy under failurePolicy Ignore and refuses the request
    under Fail (:class:`HarnessError`)."""

    def __init__(self, docs: list[dict]) -> None:
        self.env = environment()
        self.policies = []
        for doc in docs:
            if doc.get("kind") != "MutatingAdmissionPolicy":
                continue
            name = doc["metadata"]["name"]
            spec = doc["spec"]
            compiled = {
                "name": name,
                "fail": spec.get("failurePolicy", "Fail") == "Fail",
                "conditions": [(m["name"], self._compile(name, "matchConditions", m)) for m in spec["matchConditions"]],
                "variables": [(v["name"], self._compile(name, "variables", v)) for v in spec.get("variables") or []],
                "mutations": [
                    self._compile(name, "mutations", {"name": str(i), "expression": m["jsonPatch"]["expression"]})
                    for i, m in enumerate(spec["mutations"])
                ],
            }
            self.policies.append(compiled)

    @classmethod
    def of(cls, policies: PolicySet) -> Harness:
        return cls(documents(policies))

    def _compile(self, policy: str, section: str, item: dict):
        text = struct_literals_as_maps(item["expression"])
        try:
            return self.env.compile(text)
        except Exception as exc:  # the runtime raises RuntimeError with the checker's message
            raise HarnessError(f"policy {policy}: {section}[{item['name']}] does not compile: {exc}") from None

    def admit(
        self,
        pod: dict,
        *,
        namespace: str | None,
        default: str,
        offered: dict[str, str] | None = None,
        may_opt_out: bool = False,
    ) -> Outcome:
        """``pod`` (normalised: :func:`normalise`) through every policy, at CREATE."""
        import jsonpatch

        params = {"data": {"defaultFabric": default, **{f"fabric.{k}": v for k, v in (offered or {}).items()}}}
        request = {
            "operation": "CREATE",
            "namespace": namespace or "",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
        }
        out = Outcome(tree_copy(pod), None, [])
        for p in self.policies:
            data = {
                "object": out.pod,
                "oldObject": None,
                "request": request,
                "params": params,
                "authorizer": {"allowed": may_opt_out},
                "variables": {},
            }
            conditions = [(name, expr.eval(data=data)) for name, expr in p["conditions"]]
            if any(_failed(r) is None and r.plain_value() is False for _, r in conditions):
                continue
            failed = [f"matchConditions[{name}]: {_failed(r)}" for name, r in conditions if _failed(r) is not None]
            values: dict[str, object] = {}
            broken: list[str] = []
            for name, expr in p["variables"]:
                data["variables"] = values
                result = expr.eval(data=data)
                if _failed(result) is None:  # an error matters only if the mutation reads the variable
                    values[name] = result.plain_value()
                else:
                    broken.append(f"variables[{name}]: {_failed(result)}")
            ops: list[dict] = []
            for i, expr in enumerate([] if failed else p["mutations"]):
                result = expr.eval(data=data)
                if _failed(result) is not None:
                    failed.append(f"mutations[{i}]: {_failed(result)}" + (f" ({'; '.join(broken)})" if broken else ""))
                    break
                ops += [_as_patch(op, f"policy {p['name']}: mutations[{i}]") for op in result.plain_value()]
            if failed:
                message = f"policy {p['name']}: " + "; ".join(failed)
                if p["fail"]:
                    raise HarnessError(message)
                out.errors.append(message)
                continue
            try:
                out.pod = jsonpatch.apply_patch(out.pod, ops)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise HarnessError(f"policy {p['name']}: the patch does not apply: {exc}") from None
            out.ops += ops
            out.profile = p["name"].removeprefix(PREFIX)
        return out


@dataclass
class Comparison:
    """One pod through the engine and through the policies."""

    engine: dict | None  # the engine's pod (None: the engine refused it)
    policy: dict  # the policies' pod
    excluded: list[str]  # the rules of LIMITS that keep this pod out of the comparison
    profile: str | None  # the profile the policy applied

    @property
    def same(self) -> bool:
        return bool(self.excluded) or self.engine == self.policy


def compare(harness: Harness, policies: PolicySet, pod: dict, namespace: str | None, default: str) -> Comparison:
    """Run ``pod`` through the engine and through the policies and say whether they agree, or which
    limit keeps the pod out of the comparison."""
    import jsonpatch

    from webhook.engine import MutationError, admit

    pod = normalise(pod)
    try:
        decision = admit(pod, policies, default, namespace)
    except MutationError:
        decision = None
    outcome = harness.admit(pod, namespace=namespace, default=default)
    if decision is None or decision.action == "deny":
        return Comparison(None, outcome.pod, [REFUSAL], outcome.profile)
    if decision.action == "skip":
        return Comparison(pod, outcome.pod, [], outcome.profile)
    engine_pod = jsonpatch.apply_patch(tree_copy(pod), decision.mutation.ops, in_place=True)
    excluded = limits_hit(pod, decision.profile)
    return Comparison(engine_pod, outcome.pod, excluded, outcome.profile)


def dumps(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
