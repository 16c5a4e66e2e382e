"""A pod's AdmissionReview read straight into the key of its kept answer (msgspec).

The full path parses the whole review into Python objects and projects the pod's shape
(:func:`webhook.engine.shape`) to find the answer :class:`webhook.plans.Plans` keep for it. For
the pods of a job that answer is there already, and most of that work is thrown away. Here the
review is decoded into typed structs instead, and each part the rules read stays the bytes it was
sent as (``msgspec.Raw``, no objects made). Two keys, tried in turn:

1. as sent: the namespace, the annotations and labels the rules read, and the bytes of the spec's
   fields they read (``R``/``r``). The pods of a Trainer v2 job (JobSet's), an MPI job's workers,
   differ only in names, hostnames and indexes: the second pod of a shape finds its answer here;
2. projected: the containers decoded, the values of the env no rule reads left out (``Q``/``O``),
   for pods whose env differs from pod to pod (a v1 PyTorchJob's RANK, set per pod).

Each comes shared (the job's name replaced as Plans replace it, so the jobs of a shape share it)
or the pod's own (its job's name in it).

Exact, as the full path is:

- Nothing is skipped. Every field of the review, the Pod, its metadata, spec and containers is
  declared (the Kubernetes v1.37 API; ``forbid_unknown_fields``): a field these lists do not know
  sends the review down the full path. A field no rule reads is decoded (its strings checked as
  UTF-8, its numbers in range) and dropped; one the rules read is kept raw and is part of the key,
  so a key found is the same bytes the full path took from an earlier review.
- Both paths read JSON with msgspec (:func:`webhook.review.parse_review`): the same rules for
  duplicate keys (the last wins), escapes, numbers and nesting.
- A key is shared among jobs only if no escape in it could spell the job's name or the
  placeholder in a way the key's bytes do not show (a ``\\/``, a ``\\uXXXX`` of a letter, digit,
  '.', '_', '-' or '/'; any backslash at all for a name of other characters); the pods of one job
  still share their answer.

Anything else (not a Pod CREATE, an excluded namespace, a value of the wrong type, a body over
:data:`webhook.review.MAX_JSON_VALUES` bytes) returns None: the full path answers it.
"""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any

import msgspec
import orjson
from msgspec import UNSET, Raw, Struct, UnsetType

from trainyard.contract.names import JOB_LABELS
from webhook.engine import ANNOTATIONS_READ, ENV_VALUES_READ_PREFIX, LABELS_READ, SPEC_READ, job_of
from webhook.review import (
    API_VERSION,
    EXCLUDED_NAMESPACES,
    KIND,
    MAX_JSON_VALUES,
    NOT_JSON,
    Answer,
    Record,
    answered,
)

# The fields of each object, as k8s.io/api v0.37 declares them (core/v1/types.go: Pod, PodSpec,
# Container, EnvVar; apimachinery meta/v1/types.go: ObjectMeta; admission/v1/types.go:
# AdmissionReview, AdmissionRequest). tests/webhook/test_quick.py checks the first five against
# the v1.37 OpenAPI schema kubernetes-validate ships.
POD_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
OBJECT_META_FIELDS = (
    "annotations", "creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp", "finalizers",
    "generateName", "generation", "labels", "managedFields", "name", "namespace", "ownerReferences",
    "resourceVersion", "selfLink", "uid",
)  # fmt: skip
POD_SPEC_FIELDS = (
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig",
    "dnsPolicy", "enableServiceLinks", "ephemeralContainers", "evictionResponders", "hostAliases",
    "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname", "hostnameOverride",
    "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "os", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resourceClaims",
    "resources", "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates",
    "schedulingGroup", "securityContext", "serviceAccount", "serviceAccountName", "setHostnameAsFQDN",
    "shareProcessNamespace", "subdomain", "terminationGracePeriodSeconds", "tolerations",
    "topologySpreadConstraints", "volumes",
)  # fmt: skip
CONTAINER_FIELDS = (
    "args", "command", "env", "envFrom", "image", "imagePullPolicy", "lifecycle", "livenessProbe",
    "name", "ports", "readinessProbe", "resizePolicy", "resources", "restartPolicy",
    "restartPolicyRules", "securityContext", "startupProbe", "stdin", "stdinOnce",
    "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts",
    "workingDir",
)  # fmt: skip
ENV_VAR_FIELDS = ("name", "value", "valueFrom")
REVIEW_FIELDS = ("apiVersion", "kind", "request", "response")
USER_INFO_FIELDS = ("extra", "groups", "uid", "username")  # authentication/v1/types.go
REQUEST_FIELDS = (
    "uid", "kind", "resource", "subResource", "requestKind", "requestResource", "requestSubResource",
    "name", "namespace", "operation", "userInfo", "object", "oldObject", "dryRun", "options",
)  # fmt: skip


class _Strict(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Every struct here: an unknown field is an error (the full path answers), an absent one is
    left out of the key."""


def _struct(name: str, fields: tuple[str, ...], types: dict[str, tuple[object, object]]) -> type:
    """A struct of ``fields``: those in ``types`` as (type, default) or (type, REQUIRED), the rest
    decoded and dropped from the key (Any, absent when not sent)."""
    unknown = set(types) - set(fields)
    assert not unknown, f"{name}: {unknown} not among its fields"
    spec = []
    for f in fields:
        type_, default = types.get(f, UNREAD)
        spec.append((f, type_) if default is REQUIRED else (f, type_, default))
    return msgspec.defstruct(name, spec, bases=(_Strict,), module=__name__)


REQUIRED = object()
UNREAD = (Any, UNSET)  # read by no rule: decoded (so checked), dropped from the key
_RAW = (Raw | UnsetType, UNSET)  # read by the rules: kept as sent, part of the key
EnvVar = _struct("EnvVar", ENV_VAR_FIELDS, {"name": (str, REQUIRED), "value": (str | None | UnsetType, UNSET)})
Container = _struct(
    "Container",
    CONTAINER_FIELDS,
    {f: _RAW for f in CONTAINER_FIELDS} | {"env": (list[EnvVar] | None | UnsetType, UNSET)},
)
# The containers are read twice over: as sent (the first key: the pods of a Trainer v2 job, an MPI
# job's workers, alike to the byte), then, for pods whose env differs (a v1 PyTorchJob's RANK),
# decoded with the values of the env no rule reads left out (the second key).
PodSpec = _struct("PodSpec", POD_SPEC_FIELDS, {f: _RAW for f in SPEC_READ})
assert SPEC_READ[:2] == ("containers", "initContainers")  # Quick._project replaces these two
_CONTAINERS = list[Container] | None
decode_containers = msgspec.json.Decoder(_CONTAINERS).decode
decode_string = msgspec.json.Decoder(str).decode
# The keys' view of a spec: the fields the rules read, nothing else (as sent, or with the
# containers projected: encoded by what they hold).
Read = msgspec.defstruct("Read", [(f, Raw | UnsetType, UNSET) for f in SPEC_READ], omit_defaults=True)
_read_fields = attrgetter(*SPEC_READ)
_STRING_MAP = (dict[str, str] | None, None)
ObjectMeta = _struct(
    "ObjectMeta",
    OBJECT_META_FIELDS,
    {f: (str | None, None) for f in ("name", "generateName", "namespace")}
    | {"labels": _STRING_MAP, "annotations": _STRING_MAP},
)
Pod = _struct("Pod", POD_FIELDS, {"metadata": (ObjectMeta | None, None), "spec": (PodSpec | None, None)})
# The request's parts typed as admission/v1 declares them (metav1.GroupVersionKind and
# GroupVersionResource, authentication/v1 UserInfo): decoded for less than as untyped JSON.
GroupVersionKind = _struct(
    "GroupVersionKind", ("group", "version", "kind"), {f: (str, "") for f in ("group", "version", "kind")}
)
GroupVersionResource = _struct(
    "GroupVersionResource", ("group", "version", "resource"), {f: (str, "") for f in ("group", "version", "resource")}
)
UserInfo = _struct(
    "UserInfo",
    USER_INFO_FIELDS,
    {"extra": (dict[str, list[str]] | None, None), "groups": (list[str] | None, None)}
    | {f: (str | None, None) for f in ("uid", "username")},
)
_KIND, _RESOURCE = (GroupVersionKind | None, None), (GroupVersionResource | None, None)
Request = _struct(
    "Request",
    REQUEST_FIELDS,
    {
        "uid": (str, ""),
        "kind": _KIND,
        "resource": _RESOURCE,
        "requestKind": _KIND,
        "requestResource": _RESOURCE,
        "subResource": (str | None, None),
        "requestSubResource": (str | None, None),
        "name": (str | None, None),
        "namespace": (str | None, None),
        "operation": (str | None, None),
        "userInfo": (UserInfo | None, None),
        "object": (Pod | None, None),
        "dryRun": (bool | None, None),
    },
)
Review = _struct("Review", REVIEW_FIELDS, {"request": (Request | None, None)})

_decode = msgspec.json.Decoder(Review).decode
_encode = msgspec.json.Encoder().encode
# Stands for the job's name in a key and answer shared by jobs (webhook/plans.py); a label value
# cannot hold '/', so no real job has it (a hostile pod that writes it anyway is checked for).
JOB_PLACEHOLDER = "trainyard.dev/plans/job-name"
_PLACEHOLDER = JOB_PLACEHOLDER.encode()
_ANNOTATIONS_READ = frozenset(ANNOTATIONS_READ)
# A name of these characters (all a Kubernetes label value may hold) can be spelled otherwise in
# JSON only with \uXXXX escapes of them; the placeholder with those, or with \/ for its '/'.
_PLAIN_NAME_JSON = re.compile(rb'"[A-Za-z0-9._-]+"')
_PLAIN_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/")
_UNICODE_ESCAPE = re.compile(rb"\\u([0-9A-Fa-f]{4})")


def plain(name_json: bytes) -> bool:
    """Whether the job's name serialised as ``name_json`` is of the plain characters alone."""
    return _PLAIN_NAME_JSON.fullmatch(name_json) is not None


def _hiding_escape(key: bytes) -> bool:
    """Whether an escape in ``key`` could spell a plain name or the placeholder: a \\/, or a
    \\uXXXX of one of their characters (a \\" or \\n, or the \\u0026 Go writes for '&', cannot).
    A backslash escaped itself only makes this say yes more often."""
    if b"\\/" in key:
        return True
    return b"\\u" in key and any(int(h, 16) in _PLAIN_CHARS for h in _UNICODE_ESCAPE.findall(key))


class Quick:
    """A review read for the keys of its kept answer: :meth:`key` gives them, first as sent
    (``projected=False``), then with the values of the env no rule reads left out."""

    __slots__ = (
        "_head",
        "_labels",
        "_projected",
        "_values_read",
        "job",
        "name_json",
        "namespace",
        "pod",
        "spec",
        "uid",
    )

    def __init__(
        self, uid: str, namespace: str, pod: str, spec: object, head: tuple, labels: dict | None, values_read: frozenset
    ) -> None:
        self.uid, self.namespace, self.pod, self.spec, self._head = uid, namespace, pod, spec, head
        self._values_read, self._projected = values_read, None
        if labels is None:
            self._labels, self.job, self.name_json = 0, None, b""  # 0: as engine.shape has it
            return
        self._labels = {k: labels[k] for k in LABELS_READ if k in labels}
        job = job_of(labels)
        self.job = None if job is None else job[1]
        self.name_json = b"" if job is None else orjson.dumps(job[1])

    def key(self, projected: bool, shared: bool) -> bytes | None:
        """The key of the answer the pod's job shares with the jobs of its shape (``shared``: its
        name replaced as Plans replace it; None for a pod of no job), or of the pod's own answer.
        None too when the projection fails (a value of the wrong type: the full path answers)."""
        labels = self._labels
        if shared:
            if self.job is None:
                return None
            labels = {k: JOB_PLACEHOLDER if v == self.job and k in JOB_LABELS else v for k, v in labels.items()}
        if not projected:
            return (b"R" if shared else b"r") + _encode((*self._head, labels, Read(*_read_fields(self.spec))))
        if self._projected is None:
            self._projected = self._project()
        if self._projected is False:
            return None
        return (b"Q" if shared else b"O") + _encode((*self._head, labels, self._projected))

    def shareable(self, key: bytes) -> bool:
        """Whether the answer of job key ``key`` may be shared among jobs: nothing in the key
        holds the job's name or the placeholder but the labels replaced, and no escape could spell
        them in a way the bytes do not show."""
        replaced = sum(1 for label in JOB_LABELS if self._labels.get(label) == self.job)
        if self.name_json in key or key.count(_PLACEHOLDER) != replaced:
            return False
        return b"\\" not in key or (plain(self.name_json) and not _hiding_escape(key))

    def may_share(self, key: bytes) -> bool:
        """Whether this pod may take the answer kept under the shared job key ``key`` (its other
        checks held for the pod it was kept for, :meth:`shareable`): its job's name stands nowhere
        in the key, and no escape in it could spell the name (the kept pod's check covers a plain
        name; a name of other characters takes a key without escapes)."""
        return self.name_json not in key and (b"\\" not in key or plain(self.name_json))

    def values_left_out(self) -> dict[str, list[list[bool]]]:
        """Of each container and init container, by env entry: whether the projected key leaves
        its value out (no rule reads it); empty when the projection fails."""
        if self._projected is None:
            self._projected = self._project()
        if self._projected is False:
            return {}
        return {
            field: [[isinstance(e, str) for e in c.env or ()] for c in getattr(self._projected, field) or ()]
            for field in ("containers", "initContainers")
        }

    def _project(self) -> object:
        spec, values_read = self.spec, self._values_read
        groups = []
        for raw in (spec.containers, spec.initContainers):
            try:
                containers = UNSET if raw is UNSET else decode_containers(raw)
            except (*NOT_JSON, RecursionError):
                return False
            for c in containers or ():
                if c.env:  # engine.env_value_read, inlined: of the env no rule reads, only the names
                    c.env = [
                        e if e.name in values_read or e.name.startswith(ENV_VALUES_READ_PREFIX) else e.name
                        for e in c.env
                    ]
            groups.append(containers)
        return Read(*groups, *_read_fields(spec)[2:])

    def answer(self, answer: Answer) -> tuple[bytes, Record]:
        """The response body and record of this review, answered with ``answer``."""
        return answered(answer, self.uid, self.namespace, self.pod)


def read(body: bytes, values_read: frozenset[str]) -> Quick | None:
    """``body`` read for the keys of its answer, a Pod CREATE the webhook looks into; None: the
    full path answers it (see the module's docstring)."""
    if len(body) > MAX_JSON_VALUES:
        return None
    try:
        review = _decode(body)
    except (*NOT_JSON, RecursionError):
        return None
    request = review.request
    if request is None or not request.uid or review.apiVersion != API_VERSION or review.kind != KIND:
        return None
    kind, pod = request.kind, request.object
    if kind is None or kind.kind != "Pod" or kind.group != "":
        return None
    if pod is None or pod.spec is None or request.operation != "CREATE" or request.subResource:
        return None
    namespace = request.namespace or ""
    if namespace in EXCLUDED_NAMESPACES:
        return None
    meta = pod.metadata
    if meta is None:
        return Quick(
            request.uid, namespace, str(request.name or ""), pod.spec, (namespace or None, 0), None, values_read
        )
    annotations = meta.annotations
    if annotations is not None:
        found = annotations.keys() & _ANNOTATIONS_READ
        annotations = {k: annotations[k] for k in ANNOTATIONS_READ if k in found} if found else {}
    pod_name = meta.name or meta.generateName or str(request.name or "")
    head = (namespace or meta.namespace, 0 if annotations is None else annotations)
    return Quick(request.uid, namespace, pod_name, pod.spec, head, meta.labels, values_read)
