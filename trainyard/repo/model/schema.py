"""Kubernetes schema validation with kubernetes-validate (strict, Kubernetes 1.30).

The schemas and the validation are kubernetes-validate's (its bundled OpenAPI-derived JSON
schemas, checked with jsonschema's Draft 2020-12 validator as its ``validate`` does). This
module only keeps the loaded schemas in memory between calls: kubernetes-validate reads its
1 MB definitions file again for every object, which is most of the time of a repository-wide
check.

Strict means unknown fields are errors, as ``kubectl apply --validate=strict`` would report them.

The same schemas are also compiled by jsonschema-rs (a Draft 2020-12 validator in Rust, hundreds
of times faster than jsonschema on a pod): an object it finds valid has no errors; an object it
finds invalid is validated again by jsonschema, whose errors are the messages (tests check that
the two agree on valid and invalid objects).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema_rs
import kubernetes_validate
import orjson
import referencing
from kubernetes_validate import utils as kv_utils

KUBERNETES_VERSION = "1.30"
STRICT = True
# Built-in kinds newer than KUBERNETES_VERSION, checked against the schemas of the release that made
# them GA. Only clusters that declare that release or later render them (trainyard/repo/model/declared.py:
# `admission: policy` needs 1.36, where MutatingAdmissionPolicy is admissionregistration.k8s.io/v1).
NEWER_KINDS = {
    ("MutatingAdmissionPolicy", "admissionregistration.k8s.io/v1"): "1.36",
    ("MutatingAdmissionPolicyBinding", "admissionregistration.k8s.io/v1"): "1.36",
}

_lock = threading.Lock()


def _schema_dir(version: str = KUBERNETES_VERSION) -> str:
    versions = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) == version]
    if not versions:
        raise RuntimeError(f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for {version}")
    return f"v{versions[-1]}-local" + ("-strict" if STRICT else "")


@lru_cache(maxsize=2)
def _registry(version: str = KUBERNETES_VERSION) -> tuple[str, referencing.Registry, Any]:
    directory = _schema_dir(version)
    defs = kv_utils.schema_contents(f"kubernetes-json-schema/{directory}/_definitions.json", version)
    registry = referencing.Resource.from_contents(defs) @ referencing.Registry()
    return directory, registry, defs


def _api_file_part(api_version: str) -> str:
    # as kubernetes-validate: rbac.authorization.k8s.io/v1 -> rbac-v1
    return re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)


@lru_cache(maxsize=256)
def _schema(kind: str, api_version: str) -> tuple[str, Any] | None:
    """The Kubernetes version whose schemas check ``kind``/``api_version`` (1.30, or its release
    in NEWER_KINDS) and the kind's schema; None for a kind with no built-in schema."""
    version = NEWER_KINDS.get((kind, api_version), KUBERNETES_VERSION)
    directory, _, _ = _registry(version)
    name = f"kubernetes-json-schema/{directory}/{kind.lower()}-{_api_file_part(api_version)}.json"
    try:
        return version, kv_utils.schema_contents(name, version)
    except FileNotFoundError:
        return None


@lru_cache(maxsize=256)
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator | None:
    found = _schema(kind, api_version)
    if found is None:
        return None
    version, schema = found
    _, registry, _ = _registry(version)
    resource = referencing.Resource.from_contents(schema)
    return jsonschema.validators.Draft202012Validator(schema, registry=resource @ registry)


@lru_cache(maxsize=256)
def _fast_validator(kind: str, api_version: str) -> Any:
    """The jsonschema-rs validator of the same schema (None when there is none)."""
    found = _schema(kind, api_version)
    if found is None:
        return None
    version, schema = found
    _, _, defs = _registry(version)
    registry = jsonschema_rs.Registry([(defs["$id"], defs)])
    return jsonschema_rs.Draft202012Validator(schema, registry=registry)


def _errors(kind: str, api_version: str, validator: jsonschema.protocols.Validator, doc: dict) -> list[str]:
    # the schemas expect JSON types (ints, not YAML's other scalars)
    data = _without_nulls(json.loads(json.dumps(doc, default=str)))
    with _lock:
        fast = _fast_validator(kind, api_version)
    if fast is not None and fast.is_valid(data):
        return []
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_path(e)}: {_message(e)}" for e in _best(errors)]


def _without_nulls(x: Any) -> Any:
    """A built-in object as kube-apiserver decodes it: a field set to null is the field left out
    (encoding/json leaves a pointer, slice, map or struct field as it was for a JSON null), so
    ``annotations:`` with nothing after it is accepted; a null list item stays (it decodes to an
    empty item, which validation then judges)."""
    if isinstance(x, dict):
        return {k: _without_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_without_nulls(v) for v in x]
    return x


def prune_nulls(x: Any, schema: dict | None) -> None:
    """Drop, in place, the nulls kube-apiserver drops from a custom resource before validating it:
    a null in a field whose schema is not ``nullable`` and has no ``default``
    (apiextensions-apiserver@v0.36.5:pkg/apiserver/schema/defaulting/prunenulls.go
    PruneNonNullableNullsWithoutDefaults; a field the schema does not know is left to pruning)."""
    if isinstance(x, dict):
        props = schema.get("properties") if isinstance(schema, dict) else None
        extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
        for k in list(x):
            sub = props.get(k) if isinstance(props, dict) and k in props else extra
            sub = sub if isinstance(sub, dict) else None
            if x[k] is None and sub is not None and not sub.get("nullable") and "default" not in sub:
                del x[k]
            else:
                prune_nulls(x[k], sub)
    elif isinstance(x, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        for v in x:
            prune_nulls(v, items if isinstance(items, dict) else None)


def has_schema(kind: str, api_version: str) -> bool:
    """Whether ``kind``/``api_version`` is a built-in Kubernetes type (of 1.30, or of NEWER_KINDS)."""
    with _lock:
        return _validator(kind, api_version) is not None


def _path(error: jsonschema.ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(object)"


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        extra = re.findall(r"'([^']+)' was unexpected", error.message)
        if extra:
            return f"unknown field {', '.join(repr(e) for e in extra)} (check its spelling and indentation)"
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    if error.validator in ("type", "enum") and len(error.message) > 200:
        return error.message[:200] + "..."
    return error.message


def _best(errors: list[jsonschema.ValidationError]) -> list[jsonschema.ValidationError]:
    """One error per path: the most specific (jsonschema's relevance)."""
    by_path: dict[str, jsonschema.ValidationError] = {}
    for e in errors:
        leaf = jsonschema.exceptions.best_match([e])
        by_path.setdefault(_path(leaf), leaf)
    return list(by_path.values())


def validate(doc: dict) -> list[str]:
    """Schema errors of a built-in object, each 'field.path: message'. An object whose kind
    has no built-in schema raises LookupError (use :func:`has_schema` first)."""
    kind, api_version = str(doc.get("kind", "")), str(doc.get("apiVersion", ""))
    with _lock:
        validator = _validator(kind, api_version)
    if validator is None:
        raise LookupError(f"no Kubernetes {KUBERNETES_VERSION} schema for {api_version} {kind}")
    return _errors(kind, api_version, validator, doc)


def validate_pod_template(template: dict) -> list[str]:
    """A Kubeflow replica's pod template checked as a core/v1 PodTemplateSpec."""
    with _lock:
        validator = _validator("PodTemplateSpec", "v1")
    if validator is None:  # pragma: no cover - every schema set has it
        raise LookupError("kubernetes-validate has no PodTemplateSpec schema")
    return _errors("PodTemplateSpec", "v1", validator, template)


# ---------------------------------------------------------------------------------------------
# Custom resources: a CRD's structural schema, as kube-apiserver validates a custom resource


def structural(schema: dict, *, root: bool = True) -> dict:
    """A CRD version's ``openAPIV3Schema`` as JSON Schema, with unknown fields refused as strict
    field validation refuses them: a field is unknown where kube-apiserver's pruning would drop it
    (apiextensions-apiserver@v0.36.5:pkg/apiserver/schema/pruning/algorithm.go: not in
    ``properties``, in an object without ``additionalProperties`` or
    ``x-kubernetes-preserve-unknown-fields``). ``metadata`` is ObjectMeta (checked on its own), at
    the root and in embedded resources; ``nullable`` admits null; int-or-string admits both."""
    out: dict[str, Any] = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    out.pop("format", None)  # kube-apiserver checks formats its own way; shapes are what matter here
    if "pattern" in out:  # a Go (RE2) regular expression, not ECMA 262: (?i) and the like
        out[GO_PATTERN] = out.pop("pattern")
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: structural(v, root=False) for k, v in out["properties"].items() if isinstance(v, dict)}
    if isinstance(out.get("items"), dict):
        out["items"] = structural(out["items"], root=False)
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(out["additionalProperties"], root=False)
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):  # value validations only: they never name new fields
            out[key] = [
                structural(s, root=False) | {"additionalProperties": True} for s in out[key] if isinstance(s, dict)
            ]
    if isinstance(out.get("not"), dict):
        out["not"] = structural(out["not"], root=False) | {"additionalProperties": True}
    if root or embedded:
        props = dict(out.get("properties") or {})
        props["metadata"] = {"type": "object"}
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        out["properties"] = props
    if schema.get("type") == "object" and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    return out


GO_PATTERN = "goPattern"


@lru_cache(maxsize=1024)
def _re2(pattern: str) -> Any:
    import re2  # google-re2: the RE2 syntax Go's regexp and so kube-apiserver accept

    return re2.compile(pattern)


class _GoPattern:
    """The ``goPattern`` keyword for jsonschema-rs."""

    def __init__(self, parent_schema: dict, value: str, schema_path: list) -> None:
        self.rx = _re2(value)

    def validate(self, instance: Any) -> None:
        if isinstance(instance, str) and not _matches(self.rx, instance):
            raise ValueError(f"{instance[:200]!r} does not match {self.rx.pattern!r}")


def _matches(rx: Any, value: str) -> bool:
    try:
        return bool(rx.search(value))
    except UnicodeEncodeError:  # a lone surrogate: not a string kube-apiserver would accept
        return False


def _go_pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Any:
    if isinstance(instance, str) and not _matches(_re2(pattern), instance):
        yield jsonschema.ValidationError(f"{instance[:200]!r} does not match {pattern!r}")


_CustomValidator = jsonschema.validators.extend(jsonschema.validators.Draft7Validator, {GO_PATTERN: _go_pattern})
_custom: dict[str, tuple[jsonschema.protocols.Validator, Any]] = {}


def _custom_validators(openapi_schema: dict) -> tuple[jsonschema.protocols.Validator, Any]:
    # keyed by the schema's text: every render (each validate, each test's copy) loads the CRDs
    # anew, and converting a large CRD again for each would cost more than the objects' checks.
    # orjson: json.dumps of the large CRDs took as long as the checks themselves (a float NaN reads
    # as null here, which no CRD kube-apiserver stores can hold: JSON has no NaN)
    try:
        text = orjson.dumps(openapi_schema, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
    except TypeError:  # an integer beyond 64 bits
        text = json.dumps(openapi_schema, sort_keys=True, default=str).encode()
    key = hashlib.sha256(text).hexdigest()
    entry = _custom.get(key)
    if entry is None:
        schema = structural(openapi_schema)
        entry = (
            _CustomValidator(schema),
            jsonschema_rs.Draft7Validator(schema, validate_formats=False, keywords={GO_PATTERN: _GoPattern}),
        )
        if len(_custom) > 512:
            _custom.clear()
        _custom[key] = entry
    return entry


def validate_custom(doc: dict, openapi_schema: dict) -> list[str]:
    """Schema errors of a custom resource against its CRD version's ``openAPIV3Schema``, each
    'field.path: message' (CEL rules, ``x-kubernetes-validations``, are not evaluated here)."""
    with _lock:
        validator, fast = _custom_validators(openapi_schema)
    data = json.loads(json.dumps(doc, default=str))
    prune_nulls(data, openapi_schema)
    if fast.is_valid(data):
        return []
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))[:_MAX_ERRORS]
    return [_capped(f"{_path(e)}: {_message(e)}") for e in _best(errors)]


_MAX_ERRORS = 50  # a hostile object reports its first problems, not all of them


def _capped(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
