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
# A 3 MiB body of tiny JSON values ("[[],[],...]") parses into tens of times its size in objects;
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


@dataclass(frozen=True, slots=True)
class Answer:
    """The decision about one pod: the review's ``response`` except its uid, and what the log line
    and the metrics record of it."""

    response: dict  # allowed, and status, warnings, patchType and patch where they apply
    outcome: str  # patched | unchanged | skipped | denied
    reason: str = ""
    profile: str = ""
    ops: int = 0
    warnings: tuple[str, ...] = ()

    @classmethod
    def of(cls, allowed: bool, outcome: str, extra: dict | None = None, **record: object) -> Answer:
        return cls({"allowed": allowed, **(extra or {})}, outcome, **record)

    def fill(self, record: Record) -> None:
        record.outcome, record.reason, record.ops, record.warnings = (
            self.outcome,
            self.reason,
            self.ops,
            list(self.warnings),
        )
        if self.profile:
            record.profile = self.profile


def _respond(uid: str, response: dict) -> bytes:
    """The AdmissionReview answering review ``uid`` with ``response``."""
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": uid, **response}})


def _denial(reason: str, profile: str = "") -> Answer:
    return Answer.of(
        False, "denied", {"status": {"code": 400, "message": f"trainyard: {reason}"}}, reason=reason, profile=profile
    )


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
    orjson refuses documents nested deeper than 1024 levels (since 3.9.15, CVE-2024-27454) and
    strings that are not UTF-8."""
    if len(body) > MAX_JSON_VALUES:  # each counted byte is one value at most: a shorter body needs no count
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


def decide(pod: dict, policies: PolicySet, default: str, namespace: str | None) -> Answer:
    """The answer for a Pod CREATE the webhook looks into: the engine's decision, the patch
    serialised. An exception other than MutationError is a bug, the caller's to report."""
    try:
        decision: Decision = admit(pod, policies, default, namespace)
    except MutationError as exc:
        return _denial(str(exc))
    profile = decision.profile.name if decision.profile is not None else ""
    if decision.action == "deny":
        return _denial(decision.reason, profile)
    if decision.action == "skip":
        return Answer.of(True, "skipped", reason=decision.reason, profile=profile)
    mutation = decision.mutation
    assert mutation is not None
    warnings = tuple(_warning(w) for w in mutation.warnings)
    extra: dict = {"warnings": list(warnings)} if warnings else {}
    if not mutation.ops:
        return Answer.of(True, "unchanged", extra, profile=profile, warnings=warnings)
    patch = orjson.dumps(mutation.ops)
    if len(patch) > MAX_PATCH_BYTES:
        return _denial(
            f"the fabric patch for this pod would be {len(patch):,} bytes, over the {MAX_PATCH_BYTES:,} allowed",
            profile,
        )
    extra["patchType"] = "JSONPatch"
    extra["patch"] = base64.b64encode(patch).decode()
    return Answer.of(True, "patched", extra, profile=profile, ops=len(mutation.ops), warnings=warnings)


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
        return _respond(uid, {"allowed": True})
    if record.namespace in EXCLUDED_NAMESPACES:
        record.outcome, record.reason = "skipped", f"namespace {record.namespace} is excluded"
        return _respond(uid, {"allowed": True})
    if not isinstance(pod, dict):
        raise BadReview("request.object must be the Pod being created")
    try:
        answer = decide(pod, policies, default, record.namespace or None)
    except Exception:  # a bug: never admit a pod without its fabric, say so, log the traceback
        log.exception("engine failed on pod %s/%s (uid %s)", record.namespace, record.pod, uid)
        record.outcome, record.reason = "error", "internal error"
        message = f"trainyard: internal error giving the pod its fabric (review {uid}); not admitted"
        return _respond(uid, {"allowed": False, "status": {"code": 500, "message": message}})
    answer.fill(record)
    return _respond(uid, answer.response)


def review(body: bytes, policies: PolicySet, default: str) -> tuple[int, bytes, Record]:
    """HTTP status, response body and record for one POST /mutate body."""
    record = Record()
    try:
        request = parse_review(body)
        return 200, review_request(request, policies, default, record), record
    except BadReview as exc:
        record.outcome, record.reason = "invalid", str(exc)
        return 400, orjson.dumps({"error": str(exc)}), record
