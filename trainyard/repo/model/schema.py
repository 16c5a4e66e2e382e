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

import json
import re
import threading
from functools import lru_cache
from typing import Any

import jsonschema
import jsonschema_rs
import kubernetes_validate
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
    data = json.loads(json.dumps(doc, default=str))
    with _lock:
        fast = _fast_validator(kind, api_version)
    if fast is not None and fast.is_valid(data):
        return []
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_path(e)}: {_message(e)}" for e in _best(errors)]


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
