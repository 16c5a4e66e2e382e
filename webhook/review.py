"""The AdmissionReview contract (admission.k8s.io/v1), independent of any HTTP framework.

:func:`review` takes the raw request body and returns the HTTP status, the response body and a
record for the log line and metrics. kube-apiserver sends an AdmissionReview whose ``request``
holds the Pod; the answer is an AdmissionReview whose ``response`` carries the same ``uid``,
``allowed``, and, when the pod changes, a base64 JSONPatch with ``patchType: JSONPatch``.
"""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass, field

import orjson

from webhook.engine import Decision, MutationError, admit
from webhook.policy import PolicySet

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# A 3 MiB body of tiny JSON values ("[[],[],...]") parses into about 95 MiB of Python objects;
# counted before parsing (one pass over the bytes per character), a body with more values than
# this is refused. A pod's AdmissionReview holds a few hundred; commas inside strings count too.
MAX_JSON_VALUES = 100_000
# The patch of one pod, serialised: above it the pod is denied (engine.MAX_CONTAINERS keeps a pod
# of trainers well under it; kube-apiserver copies at most 3 MiB per patch, JSONPatchMaxCopyBytes).
MAX_PATCH_BYTES = 1024 * 1024
MAX_WARNING = 120  # Kubernetes asks webhooks to keep each warning within 120 characters
WARNING_PREFIX = "trainyard: "
# Never mutated, whatever the webhook configuration says: the cluster's own pods.
EXCLUDED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})

log = logging.getLogger("trainyard.webhook")


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 request (HTTP 400)."""


@dataclass(slots=True)
class Record:
    """What one review did, for the log line and the metrics."""

    outcome: str = "invalid"  # patched | unchanged | skipped | denied | error | invalid
    uid: str = ""
    namespace: str = ""
    pod: str = ""
    profile: str = ""
    ops: int = 0
    warnings: list[str] = field(default_factory=list)
    reason: str = ""


def _warning(text: str) -> str:
    text = WARNING_PREFIX + " ".join(text.split())
    return text if len(text) <= MAX_WARNING else text[: MAX_WARNING - 3] + "..."


def _answer(uid: str, allowed: bool, **extra: object) -> bytes:
    response: dict = {"uid": uid, "allowed": allowed}
    response.update(extra)
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def admission_review(
    obj: dict,
    namespace: str = "default",
    operation: str = "CREATE",
    kind: str = "Pod",
    group: str = "",
    **request: object,
) -> dict:
    """An AdmissionReview v1 request for ``obj``, shaped as kube-apiserver sends it (the demo, the
    benchmarks and the tests send these); ``request`` adds or overrides request fields."""
    gvk = {"group": group, "version": "v1", "kind": kind}
    gvr = {"group": group, "version": "v1", "resource": kind.lower() + "s"}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": (obj.get("metadata") or {}).get("name", "") if isinstance(obj, dict) else "",
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kubeflow:training-operator"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.capitalize()}Options"},
            **request,
        },
    }


def parse_review(body: bytes) -> dict:
    """Parse and check the envelope; return ``request``. Raise BadReview saying what is wrong.
    orjson refuses documents nested deeper than 1024 levels (since 3.9.15, CVE-2024-27454)."""
    values = body.count(b",") + body.count(b"{") + body.count(b"[")
    if values > MAX_JSON_VALUES:
        raise BadReview(f"body holds about {values:,} JSON values, more than the {MAX_JSON_VALUES:,} a review may")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadReview("body is not a JSON object")
    if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
        raise BadReview(
            f"expected apiVersion {API_VERSION} kind {KIND}, got "
            f"apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}"
        )
    request = doc.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no 'request' object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid must be a non-empty string")
    return request


def pod_name(pod: object) -> str:
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        return ""
    return str(meta.get("name") or meta.get("generateName") or "")


def review_request(request: dict, policies: PolicySet, default: str, record: Record) -> bytes:
    """Answer one (already checked) AdmissionReview request."""
    uid = record.uid = request["uid"]
    namespace = request.get("namespace")
    record.namespace = namespace if isinstance(namespace, str) else ""
    kind = request.get("kind")
    is_pod = isinstance(kind, dict) and kind.get("group", "") == "" and kind.get("kind") == "Pod"
    pod = request.get("object")
    record.pod = pod_name(pod) or str(request.get("name") or "")
    if not is_pod or request.get("operation") != "CREATE" or request.get("subResource"):
        record.outcome, record.reason = "skipped", "not a Pod CREATE"
        return _answer(uid, True)
    if record.namespace in EXCLUDED_NAMESPACES:
        record.outcome, record.reason = "skipped", f"namespace {record.namespace} is excluded"
        return _answer(uid, True)
    if not isinstance(pod, dict):
        raise BadReview("request.object must be the Pod being created")
    try:
        decision: Decision = admit(pod, policies, default, record.namespace or None)
    except MutationError as exc:
        record.outcome, record.reason = "denied", str(exc)
        return _answer(uid, False, status={"code": 400, "message": f"trainyard: {exc}"})
    except Exception:  # a bug: never admit a pod without its fabric, say so, log the traceback
        log.exception("engine failed on pod %s/%s (uid %s)", record.namespace, record.pod, uid)
        record.outcome, record.reason = "error", "internal error"
        message = f"trainyard: internal error giving the pod its fabric (review {uid}); not admitted"
        return _answer(uid, False, status={"code": 500, "message": message})
    if decision.profile is not None:
        record.profile = decision.profile.name
    if decision.action == "deny":
        record.outcome, record.reason = "denied", decision.reason
        return _answer(uid, False, status={"code": 400, "message": f"trainyard: {decision.reason}"})
    if decision.action == "skip":
        record.outcome, record.reason = "skipped", decision.reason
        return _answer(uid, True)
    mutation = decision.mutation
    assert mutation is not None
    record.ops = len(mutation.ops)
    record.warnings = [_warning(w) for w in mutation.warnings]
    extra: dict = {}
    if record.warnings:
        extra["warnings"] = record.warnings
    if mutation.ops:
        patch = orjson.dumps(mutation.ops)
        if len(patch) > MAX_PATCH_BYTES:
            reason = (
                f"the fabric patch for this pod would be {len(patch):,} bytes, over the {MAX_PATCH_BYTES:,} allowed"
            )
            record.outcome, record.reason, record.ops = "denied", reason, 0
            return _answer(uid, False, status={"code": 400, "message": f"trainyard: {reason}"})
        record.outcome = "patched"
        extra["patchType"] = "JSONPatch"
        extra["patch"] = base64.b64encode(patch).decode()
    else:
        record.outcome = "unchanged"
    return _answer(uid, True, **extra)


def review(body: bytes, policies: PolicySet, default: str) -> tuple[int, bytes, Record]:
    """HTTP status, response body and record for one POST /mutate body."""
    record = Record()
    try:
        request = parse_review(body)
        return 200, review_request(request, policies, default, record), record
    except BadReview as exc:
        record.outcome, record.reason = "invalid", str(exc)
        return 400, orjson.dumps({"error": str(exc)}), record
