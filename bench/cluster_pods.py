"""Pods as kube-apiserver sends them to a mutating webhook, made from the repository's own jobs.

The pods are the ones ``trainyard preview`` makes of every job folder (overlays/*/jobs/*), as the
jobs' controllers create them (Training Operator, JobSet and the Job controller). Between the
controller's POST and the webhook, kube-apiserver changes each pod; what follows is taken from
the upstream sources (paths in kubernetes/kubernetes):

- decoding applies the v1 defaults (pkg/apis/core/v1/defaults.go: requests from limits,
  enableServiceLinks, dnsPolicy, restartPolicy, securityContext, terminationGracePeriodSeconds,
  schedulerName, a container's imagePullPolicy and termination message, port protocols, volume
  modes); quantities are sent as strings;
- the create handler (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go) wipes the
  system fields, adds the requester's managedFields entry and runs mutating admission before the
  storage's create (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go), which
  is where uid and creationTimestamp are set and a generateName becomes a name: a pod created with
  generateName reaches the webhook with no name, and the request's name is empty;
- the in-tree mutating admission plugins run before the webhooks:
  ServiceAccount (plugin/pkg/admission/serviceaccount/admission.go) sets serviceAccountName
  ``default`` and adds a projected volume ``kube-api-access-`` + 5 random characters
  (staging/src/k8s.io/apiserver/pkg/storage/names/generate.go, the characters of
  staging/src/k8s.io/apimachinery/pkg/util/rand/rand.go) holding a token (expirationSeconds 3607,
  pkg/serviceaccount/claims.go WarnOnlyBoundTokenExpirationSeconds), kube-root-ca.crt's ca.crt and
  the namespace, mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount in every init
  container and container; DefaultTolerationSeconds
  (plugin/pkg/admission/defaulttolerationseconds/admission.go) tolerates not-ready and unreachable
  nodes for 300 s; Priority (plugin/pkg/admission/priority/admission.go) sets priority 0 where no
  class is named.

So no two pods are alike: each has a token volume of its own, and each review a uid of its own.
The managedFields entry is built as the field manager writes one (each field the controller set,
lists of containers, env and volumes keyed by name, mounts by path, ports by port and protocol);
its details do not matter to the webhook, its size does.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]

TOKEN_VOLUME_PREFIX = "kube-api-access-"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_EXPIRATION_SECONDS = 3607
NAME_CHARACTERS = "bcdfghjklmnpqrstvwxz2456789"  # rand.String: no vowels, no 0, 1 or 3
SUFFIX_LENGTH = 5
DEFAULT_MODE = 0o644  # ProjectedVolumeSourceDefaultMode, and the secret, configMap and downwardAPI modes
NO_EXECUTE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
DEFAULT_TOLERATION_SECONDS = 300
# Who creates the pods: the Job controller (JobSet's and Trainer's pods), else the Training Operator.
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
TRAINING_OPERATOR = "system:serviceaccount:kubeflow:training-operator"
# The placeholders of a template (wrk's script fills them per request): the review's uid and the
# random part of the token volume's name.
UID, TOKEN = "@UID@", "@TOKEN@"
# Lists the field manager keys by some of their fields (sigs.k8s.io/structured-merge-diff's "k:").
KEYED_LISTS = {
    "containers": ("name",),
    "initContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "ports": ("containerPort", "protocol"),
    "ownerReferences": ("uid",),
}


def job_pods(root: Path = ROOT, cluster: str = "*") -> list[dict]:
    """The pods of every job folder of the repository (or of ``cluster``), as their controllers
    create them, job by job."""
    from trainyard.repo.jobs.preview import cluster_job_pods
    from trainyard.repo.model.repository import load

    pods = cluster_job_pods(load(root), cluster)
    if not pods:
        raise SystemExit(f"{root}/overlays/{cluster}/jobs/*: no job folder makes a pod")
    return pods


def suffix(rng: random.Random) -> str:
    """Five random characters, as kube-apiserver's name generator appends them."""
    return "".join(rng.choice(NAME_CHARACTERS) for _ in range(SUFFIX_LENGTH))


def _default_container(c: dict) -> None:
    resources = c.setdefault("resources", {})
    if resources.get("limits"):
        requests = resources.setdefault("requests", {})
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)
    image = str(c.get("image") or "")
    tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
    latest = not tagged or image.endswith(":latest")
    c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")


def _default(pod: dict) -> None:
    """The v1 defaults decoding applies to a Pod (pkg/apis/core/v1/defaults.go)."""
    spec = pod.setdefault("spec", {})
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            _default_container(c)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    for v in spec.get("volumes") or []:
        sources = [k for k in v if k != "name"]
        if not sources:
            v["emptyDir"] = {}
        for kind in ("secret", "configMap", "downwardAPI", "projected"):
            if isinstance(v.get(kind), dict):
                v[kind].setdefault("defaultMode", DEFAULT_MODE)


def _fields(node: object, key: str | None = None) -> dict:
    """The FieldsV1 of ``node``: what a field manager records as set."""
    if isinstance(node, dict):
        out = {".": {}} if key in ("labels", "annotations") else {}
        out.update({f"f:{k}": _fields(v, k) for k, v in node.items()})
        return out
    if isinstance(node, list) and key in KEYED_LISTS:
        items = {}
        for item in node:
            if isinstance(item, dict):
                ident = orjson.dumps({k: item.get(k) for k in KEYED_LISTS[key]}).decode()
                items[f"k:{ident}"] = {".": {}, **_fields(item)}
        return items
    return {}


def _managed_fields(pod: dict, manager: str, now: str) -> list[dict]:
    body = {k: v for k, v in pod.items() if k not in ("apiVersion", "kind", "status")}
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields(body),
        }
    ]


def _service_account(spec: dict, namespace_token: str) -> None:
    """The ServiceAccount admission plugin: the default service account and its token volume."""
    spec.setdefault("serviceAccountName", "default")
    if spec.get("automountServiceAccountToken") is False:
        return
    volumes = spec.setdefault("volumes", [])
    existing = next((v["name"] for v in volumes if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX)), None)
    name = existing or TOKEN_VOLUME_PREFIX + namespace_token
    mount = {"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH}
    mounted = False
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            mounts = c.setdefault("volumeMounts", [])
            if not any(m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                mounts.append(dict(mount))
                mounted = True
    if mounted and existing is None:
        volumes.append(
            {
                "name": name,
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": DEFAULT_MODE,
                },
            }
        )


def _tolerations(spec: dict) -> None:
    """The DefaultTolerationSeconds admission plugin."""
    tolerations = spec.setdefault("tolerations", [])
    for taint in NO_EXECUTE_TAINTS:
        tolerated = any(
            t.get("key", "") in (taint, "") and t.get("effect", "") in ("NoExecute", "") for t in tolerations
        )
        if not tolerated:
            tolerations.append(
                {
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }
            )


def requester(pod: dict) -> str:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return JOB_CONTROLLER if any(o.get("kind") == "Job" for o in owners) else TRAINING_OPERATOR


def admitted(pod: dict, token: str, now: str | None = None) -> dict:
    """``pod`` (as its controller creates it) as the mutating webhooks receive it, its token volume
    named with ``token``."""
    from trainyard.repo.generate.mutating_harness import normalise

    pod = normalise(pod)  # decoded into a typed Pod: nulls dropped, numeric quantities as strings
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    meta = pod.setdefault("metadata", {})
    for system in ("uid", "creationTimestamp", "resourceVersion", "generation", "managedFields"):
        meta.pop(system, None)
    if meta.get("generateName"):
        meta.pop("name", None)
    _default(pod)
    manager = "kube-controller-manager" if requester(pod) == JOB_CONTROLLER else "training-operator"
    now = now or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta["managedFields"] = _managed_fields(pod, manager, now)
    meta["creationTimestamp"] = None  # wiped before admission, set by the storage's create after it
    pod["status"] = {}
    spec = pod["spec"]
    _service_account(spec, token)
    if not spec.get("priorityClassName"):
        spec.setdefault("priority", 0)
    _tolerations(spec)
    return pod


def review(pod: dict, uid: str, token: str) -> dict:
    """The AdmissionReview kube-apiserver sends for the CREATE of ``pod`` (its controller's form)."""
    from webhook.review import admission_review

    sent = admitted(pod, token)
    meta = sent["metadata"]
    user = requester(pod)
    account_namespace = user.split(":")[2]
    return admission_review(
        sent,
        meta.get("namespace") or "default",
        uid=uid,
        name=meta.get("name", ""),
        userInfo={
            "username": user,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, user)),
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}", "system:authenticated"],
        },
    )


def template(pod: dict) -> bytes:
    """The review body of ``pod`` with :data:`UID` and :data:`TOKEN` where each request has its own."""
    body = orjson.dumps(review(pod, UID, TOKEN))
    assert body.count(UID.encode()) == 1, "the uid placeholder stands once"
    return body


def fill(template_: bytes, rng: random.Random) -> bytes:
    """A request made from ``template_``: a uid and a token volume of its own."""
    uid = str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()
    return template_.replace(UID.encode(), uid).replace(TOKEN.encode(), suffix(rng).encode())


def bodies(templates: list[bytes], count: int, seed: int = 0) -> list[bytes]:
    """``count`` requests, the templates in turn (the pods of a job arrive together)."""
    rng = random.Random(seed)
    return [fill(templates[i % len(templates)], rng) for i in range(count)]


# The wrk script of a request stream: the templates in turn, each request with a uid and a token
# volume of its own; with a rate, requests are sent on a schedule (in bursts of ``burst`` at once)
# whatever the answers' latency, as pods are created in a cluster. wrk's delay() counts whole
# milliseconds; the schedule itself is kept in fractions of one (a monotonic clock through
# LuaJIT's ffi), so the rate holds.
WRK_LUA = r"""
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } trainyard_timespec;
int clock_gettime(int clock, trainyard_timespec *tp);
]]
local ts = ffi.new("trainyard_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts)  -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end
math.randomseed(tonumber(ts.tv_nsec) + now_ms())

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local templates = {}
for line in io.lines("{templates}") do templates[#templates + 1] = line end
local characters = "{characters}"
local hex = "0123456789abcdef"

local function pick(set, n)
  local out = {}
  for i = 1, n do
    local k = math.random(#set)
    out[i] = set:sub(k, k)
  end
  return table.concat(out)
end

local n = 0
request = function()
  local body = templates[n % #templates + 1]
  n = n + 1
  local uid = pick(hex, 8) .. "-" .. pick(hex, 4) .. "-4" .. pick(hex, 3) .. "-" .. pick("89ab", 1)
    .. pick(hex, 3) .. "-" .. pick(hex, 12)
  body = body:gsub("{uid}", uid, 1):gsub("{token}", pick(characters, {length}))
  return wrk.format(nil, nil, nil, body)
end

local rate, burst = {rate}, {burst}
if rate > 0 then
  local period = burst * 1000 / rate
  local start, k = nil, 0
  delay = function()
    local now = now_ms()
    start = start or now
    local at = start + math.floor(k / burst) * period
    k = k + 1
    if at <= now then return 0 end
    return math.ceil(at - now)
  end
end
"""


def wrk_script(folder: Path, templates: list[bytes], rate: int = 0, burst: int = 1) -> Path:
    """Write the wrk script (and its templates, one a line) of a request stream to ``folder``: as
    fast as the connections go, or ``rate`` requests a second in bursts of ``burst``."""
    lines = folder / "templates.jsonl"
    if not lines.exists():
        lines.write_bytes(b"\n".join(templates) + b"\n")
    script = folder / f"cluster-pods-{rate}-{burst}.lua"
    script.write_text(
        WRK_LUA.replace("{templates}", str(lines))
        .replace("{characters}", NAME_CHARACTERS)
        .replace("{length}", str(SUFFIX_LENGTH))
        .replace("{uid}", UID)
        .replace("{token}", TOKEN)
        .replace("{rate}", str(rate))
        .replace("{burst}", str(burst))
    )
    return script
