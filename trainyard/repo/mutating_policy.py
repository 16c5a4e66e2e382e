"""The fabric profiles as MutatingAdmissionPolicies: ``admission: policy`` clusters, no webhook.

A cluster that declares ``admission: policy`` (clusters/<cluster>/cluster.yaml, Kubernetes 1.36+)
applies the fabric in kube-apiserver itself: one MutatingAdmissionPolicy per FabricProfile, and its
MutatingAdmissionPolicyBinding, generated here from the same compiled profile the webhook's engine
(webhook/engine.py) reads. Each policy's matchConditions select the pods the engine would mutate
with that profile (a trainer image by the one identity rule, the profile chosen by the label
trainyard.dev/fabric or, without it, by ``defaultFabric`` of the parameter ConfigMap
trainyard-fabric-params, not a mirror pod, no authorised opt-out); its one JSONPatch mutation
returns the operations that give the pod the profile's networks annotation, env, capabilities,
/dev/shm, RDMA resources, tolerations and topology, as the engine's rules do.

API (admissionregistration.k8s.io/v1, GA in 1.36; kubernetes/enhancements KEP-3962): the policy's
spec has paramKind, matchConstraints, matchConditions, variables, mutations (each with patchType
``JSONPatch`` and ``jsonPatch.expression``), failurePolicy and reinvocationPolicy; the binding's
spec has policyName, paramRef and matchResources (kubernetes/kubernetes
staging/src/k8s.io/api/admissionregistration/v1beta1/types.go, MutatingAdmissionPolicySpec,
Mutation, JSONPatch, MutatingAdmissionPolicyBindingSpec; the v1 reference page
kubernetes.io/docs/reference/kubernetes-api/admissionregistration/mutating-admission-policy-v1/).
A JSONPatch expression returns a list of ``JSONPatch{op, path, from, value}`` values, and
``jsonpatch.escapeKey`` escapes '~' and '/' in a path key (kubernetes/apiserver
pkg/cel/mutation/jsonpatch.go, pkg/cel/library/jsonpatch.go; the "Mutating Admission Policy" page
of kubernetes.io). The CEL libraries used beyond the standard ones are those of the apiserver's
base environment for 1.36 (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/cel/environment/
base.go): the strings extension (split, trim, indexOf, lastIndexOf, substring, join; version 2),
the lists extension (``lists.range``, ``flatten``; version 3, from 1.34) and the Kubernetes
quantity library (``quantity(s).asInteger()``, apiserver pkg/cel/library/quantity.go).

What the policy cannot do, by rule name (:data:`LIMITS`); the harness (:class:`Harness`) excludes
exactly these from its comparison with the engine, the README states them, and ``trainyard
validate`` warns for a policy-mode cluster whose job pods would hit one:

- ``networks-json-form``: CEL has no JSON parser, so the policy cannot read a networks annotation
  written in Multus's JSON form, nor tell which interface (``net<position>``) Multus will give the
  fabric attachment in it. Its matchConditions leave such a pod alone, and the fail-closed
  ValidatingAdmissionPolicy refuses it (no /dev/shm, no NCCL_SOCKET_IFNAME).
- ``more-trainer-containers``: CEL has no sum over a list, and the /dev/shm size sums the GPUs and
  memory limits of the trainer containers: the policy sums up to :data:`MAX_SUMMED` of them
  (written out term by term), and leaves a pod with more alone (refused by the same policy).
- ``refusal``: the engine refuses a pod it cannot read (an image that is no reference, a quantity
  Kubernetes would not accept, a networks annotation Multus would refuse or whose attachments
  clash, a label naming no profile); a mutating policy cannot refuse with a message. Those pods
  reach the ValidatingAdmissionPolicy or fail at Multus.
- ``warnings``: a mutating policy returns no warnings, so what the engine says with its patch
  (an enforced variable overridden, NCCL lint findings, /dev/shm larger than half the memory
  limit, a renamed fabric interface) is not said; the pod is mutated the same.

The harness evaluates the generated CEL with a compiled CEL runtime (cel-expr-python, Google's
C++ CEL), implementing what it lacks of Kubernetes' CEL (see :func:`environment`), applies the
patch with the jsonpatch library, and compares the pod with the engine's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal

import yaml

from trainyard.contract import cel as rules
from trainyard.contract.errors import UserError
from trainyard.contract.images import cel_pattern
from trainyard.contract.names import (
    ENV_EXPECT_TRANSPORT,
    ENV_FABRIC,
    ENV_SHM_BYTES,
    JOB_LABELS,
    KUEUE_TOPOLOGY_GATE,
    NETWORKS_ANNOTATION,
    SHM_PATH,
    SHM_VOLUME,
)
from trainyard.contract.networks import RESERVED_INTERFACES
from trainyard.contract.quantity import QuantityError, parse_quantity
from trainyard.repo import cluster_facts
from trainyard.repo.cel_runtime import string_literal_end
from trainyard.repo.rendered import tree_copy
from webhook.policy import CompiledProfile, PolicySet

API_VERSION = "admissionregistration.k8s.io/v1"
PREFIX = cluster_facts.MUTATING_POLICY_PREFIX
PARAMS = cluster_facts.PARAMS_CONFIGMAP  # the parameter ConfigMap (base/webhook/fabric-params.yaml)
PARAMS_NAMESPACE = cluster_facts.WEBHOOK_NAMESPACE
INJECTION_LABEL = cluster_facts.INJECTION_LABEL
MAX_SUMMED = 8  # trainer containers whose GPUs and memory limits the policy adds up
FOLDER = "base/mutating-policy"
FILE = "mutating-admission-policy.yaml"

NETWORKS_JSON_FORM = "networks-json-form"
MORE_TRAINERS = "more-trainer-containers"
REFUSAL = "refusal"
WARNINGS = "warnings"
LIMITS = {
    NETWORKS_JSON_FORM: "a networks annotation in Multus's JSON form: CEL cannot parse JSON, so the policy "
    "cannot tell which interface Multus gives the fabric attachment; the policy leaves the pod alone and "
    "the ValidatingAdmissionPolicy refuses it: write the annotation in the plain form (ns/name@ifname, ...)",
    MORE_TRAINERS: f"more than {MAX_SUMMED} trainer containers in one pod: CEL cannot sum a list, and the "
    "/dev/shm size adds up the trainers' GPUs and memory limits; the policy leaves the pod alone and the "
    "ValidatingAdmissionPolicy refuses it",
    REFUSAL: "a pod the engine refuses (a field it cannot read, clashing attachments, an unknown profile): a "
    "mutating policy cannot refuse with a message",
    WARNINGS: "the engine's admission warnings: a mutating policy returns none",
}


# ---------------------------------------------------------------------------------------------
# CEL building blocks


def _q(text: str) -> str:
    """A CEL string literal (single quotes; the project's CEL never needs a backslash)."""
    if "'" in text or "\\" in text or "\n" in text:
        raise ValueError(f"{text!r} cannot be written as a plain CEL string literal")
    return f"'{text}'"


def _lit(value: object) -> str:
    """A CEL literal for a JSON-like value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _q(value)
    if isinstance(value, list):
        return "[" + ", ".join(_lit(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_q(k)}: {_lit(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"no CEL literal for {value!r}")


def _patch(op: str, path: str, value: str | None = None) -> str:
    """A ``JSONPatch{...}`` value (path and value are CEL expressions)."""
    tail = "" if value is None else f", value: {value}"
    return f"JSONPatch{{op: {_q(op)}, path: {path}{tail}}}"


def _has_chain(obj: str, keys: tuple[str, ...]) -> list[str]:
    """has() of each successive key: ['has(o.a)', 'has(o.a.b)', ...]."""
    out, node = [], obj
    for key in keys:
        node = f"{node}.{key}"
        out.append(f"has({node})")
    return out


def _nested(keys: tuple[str, ...], leaf: str) -> str:
    value = leaf
    for key in reversed(keys):
        value = f"{{{_q(key)}: {value}}}"
    return value


def _pointer(path: str, keys: tuple[str, ...], tail: str = "") -> str:
    """A CEL string expression: ``path`` (itself a CEL expression) followed by ``/key...`` and ``tail``."""
    suffix = "".join("/" + k for k in keys) + tail
    return f"{path} + {_q(suffix)}" if suffix else path


def _extend(obj: str, path: str, keys: tuple[str, ...], items: str) -> str:
    """engine._extend in CEL: append the list ``items`` to ``obj.keys...``, creating what is missing
    with one nested ``add`` at the first missing level (``path``: a CEL string expression, the JSON
    pointer of ``obj``). has() is asked level by level, so a missing parent is never selected."""
    has = _has_chain(obj, keys)
    append = _patch("add", _pointer(path, keys, "/-"), "x")
    expr = f"{items}.map(x, {append})"
    for depth in reversed(range(len(keys))):
        create = _patch("add", _pointer(path, keys[: depth + 1]), _nested(keys[depth + 1 :], items))
        expr = f"!{has[depth]} ? [{create}] : ({expr})"
    return f"(size({items}) == 0 ? [] : ({expr}))"


def _merge_keys(obj: str, path: str, keys: tuple[str, ...], entries: list[tuple[str, str, str]]) -> str:
    """engine._merge in CEL for a map whose keys are known here: ``entries`` (condition, key, value)
    adds each key whose condition holds. A missing parent is created as an empty map first (CEL
    cannot build a map of only some keys), then each key is added: the same pod as the engine's
    one nested ``add``."""
    if not entries:
        return "[]"
    wanted = " || ".join(f"({c})" for c, _, _ in entries)
    has = _has_chain(obj, keys)
    creates = "[]"
    for depth in reversed(range(len(keys))):
        ops = ", ".join(_patch("add", _pointer(path, keys[: d + 1]), "{}") for d in range(depth, len(keys)))
        creates = f"(!{has[depth]} ? [{ops}] : {creates})"
    adds = []
    for cond, key, value in entries:
        target = f"{_pointer(path, keys, '/')} + jsonpatch.escapeKey({_q(key)})"
        adds.append(f"({cond} ? [{_patch('add', target, value)}] : [])")
    return f"(({wanted}) ? {creates} + {' + '.join(adds)} : [])"


# ---------------------------------------------------------------------------------------------
# The policy of one profile


def policy_name(profile: str) -> str:
    return f"{PREFIX}{profile}"


def _fraction(value: float) -> tuple[int, int]:
    """The profile's memoryLimitFraction as the engine reads it (Decimal(str(f))), as p/q."""
    p, q = Decimal(str(value)).as_integer_ratio()
    return p, q


def _is_trainer(container: str, pattern: str) -> str:
    return f"(has({container}.image) && {container}.image.matches({_q(pattern)}))"


def _quantity_of(container: str, section: str, name: str) -> str:
    res = f"{container}.resources"
    return f"has({res}) && has({res}.{section}) && {_q(name)} in {res}.{section}"


def _resource(container: str, name: str) -> str:
    """engine._resource as an int: the limit, else the request, else 0."""
    lim, req = _quantity_of(container, "limits", name), _quantity_of(container, "requests", name)
    return (
        f"({lim} ? quantity({container}.resources.limits[{_q(name)}]).asInteger() : "
        f"({req} ? quantity({container}.resources.requests[{_q(name)}]).asInteger() : 0))"
    )


def _has_resource(container: str, name: str) -> str:
    return f"(({_quantity_of(container, 'limits', name)}) || ({_quantity_of(container, 'requests', name)}))"


def _sum(items: str) -> str:
    """The sum of the int list ``items``, for at most MAX_SUMMED items (CEL has no sum; the
    matchConditions leave a pod with more trainer containers alone)."""
    return "(" + " + ".join(f"(size({items}) > {k} ? {items}[{k}] : 0)" for k in range(MAX_SUMMED)) + ")"


def _shm_mount(container: str) -> str:
    """A mount of ``container`` at /dev/shm (engine._shm_mount: the path without trailing '/')."""
    return (
        f"(has({container}.volumeMounts) && {container}.volumeMounts.exists(m, has(m.mountPath) && "
        f"m.mountPath.matches({_q('^' + SHM_PATH + '/*$')})))"
    )


def _shm_mount_name(container: str) -> str:
    return (
        f"{container}.volumeMounts.filter(m, has(m.mountPath) && "
        f"m.mountPath.matches({_q('^' + SHM_PATH + '/*$')})).map(m, has(m.name) ? m.name : '')[0]"
    )


def _format_bytes(n: str) -> str:
    """quantity.format_bytes in CEL: the shortest exact binary suffix."""
    expr = f"string({n})"
    for suffix, power in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)):
        unit = 2**power
        expr = f"({n} >= {unit} && {n} % {unit} == 0 ? string({n} / {unit}) + {_q(suffix)} : {expr})"
    return expr


def _tolerated(toleration: dict) -> str:
    """engine._tolerated for one profile toleration, over the pod's existing ones (t)."""
    key = toleration.get("key")
    exists = "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists')"
    same = f"(has(t.key) && t.key == {_q(key)})" if key else "!has(t.key)"
    return f"(has(object.spec.tolerations) && object.spec.tolerations.exists(t, {same} || {exists}))"


@dataclass(frozen=True)
class Generated:
    policy: dict
    binding: dict


def variables(profile: CompiledProfile) -> list[tuple[str, str]]:
    """The policy's variables, in order (each may use the ones before it)."""
    spec = profile.spec
    pattern = cel_pattern(sorted(profile.trainer_images))
    c = "object.spec.containers"
    ic = "object.spec.initContainers"
    nets = spec.networks
    if len({(n.name, n.namespace) for n in nets}) != len(nets):
        raise ValueError(f"profile {profile.name}: spec.networks names one network twice")

    def match(a: str, net) -> str:
        wanted = _q(net.namespace) if net.namespace else "variables.ns"
        return f"({a}.name == {_q(net.name)} && ({a}.namespace != '' ? {a}.namespace : variables.ns) == {wanted})"

    added = " + ".join(
        f"(variables.attachments.exists(a, {match('a', n)}) ? [] : "
        f"[{{'name': {_q(n.name)}, 'namespace': {_q(n.namespace or '')}, 'interface': {_q(n.interface or '')}}}])"
        for n in nets
    )
    fraction_p, fraction_q = _fraction(spec.shm.memory_limit_fraction)
    gpu = spec.gpu_resource
    wanted_env = [
        f"{{'name': {_q(name)}, 'value': {'variables.interface' if value is None else _q(value)}, "
        f"'enforced': {_lit(enforced)}}}"
        for name, value, enforced in profile.env_plan
    ]
    wanted_env += [
        f"{{'name': {_q(ENV_FABRIC)}, 'value': {_q(profile.name)}, 'enforced': true}}",
        f"{{'name': {_q(ENV_EXPECT_TRANSPORT)}, 'value': {_q(spec.transport)}, 'enforced': true}}",
        f"{{'name': {_q(ENV_SHM_BYTES)}, 'value': string(variables.shmBytes), 'enforced': true}}",
    ]
    shm_rule = (
        f"(variables.gpus * {spec.shm.per_gpu} < {spec.shm.max} ? variables.gpus * {spec.shm.per_gpu} : {spec.shm.max})"
    )
    capped = (
        f"(variables.hasMemoryLimit && variables.memoryLimit * {fraction_p} / {fraction_q} < {shm_rule} ? "
        f"variables.memoryLimit * {fraction_p} / {fraction_q} : {shm_rule})"
    )
    job = " : ".join(
        f"has(object.metadata.labels) && {_q(k)} in object.metadata.labels && "
        f"object.metadata.labels[{_q(k)}] != '' ? [{_q(k)}, object.metadata.labels[{_q(k)}]]"
        for k in JOB_LABELS
    )
    out = [
        (
            "ns",
            "request.namespace != '' ? request.namespace : (has(object.metadata.namespace) && "
            "object.metadata.namespace != '' ? object.metadata.namespace : 'default')",
        ),
        ("trainers", f"lists.range(size({c})).filter(i, {_is_trainer(f'{c}[i]', pattern)})"),
        ("inits", f"has({ic}) ? lists.range(size({ic})).filter(i, {_is_trainer(f'{ic}[i]', pattern)}) : []"),
        ("networks", rules.networks("object")),
        # Multus's plain form: [namespace/]name[@interface], comma-separated (trainyard/contract/networks.py)
        ("items", "variables.networks.split(',').map(s, s.trim()).filter(s, s != '')"),
        (
            "attachments",
            "variables.items.map(s, {"
            "'name': (s.indexOf('@') < 0 ? s : s.substring(0, s.indexOf('@'))).substring("
            "(s.indexOf('@') < 0 ? s : s.substring(0, s.indexOf('@'))).lastIndexOf('/') + 1).trim(), "
            "'namespace': (s.indexOf('@') < 0 ? s : s.substring(0, s.indexOf('@'))).lastIndexOf('/') < 0 ? '' : "
            "(s.indexOf('@') < 0 ? s : s.substring(0, s.indexOf('@'))).substring(0, "
            "(s.indexOf('@') < 0 ? s : s.substring(0, s.indexOf('@'))).lastIndexOf('/')).trim(), "
            "'interface': s.indexOf('@') < 0 ? '' : s.substring(s.indexOf('@') + 1).trim()})",
        ),
        ("added", added),
        ("all", "variables.attachments + variables.added"),
        ("fabricAt", f"lists.range(size(variables.all)).filter(i, {match('variables.all[i]', nets[0])})[0]"),
        (
            "interfaces",
            "lists.range(size(variables.all)).map(i, variables.all[i].interface != '' ? "
            "variables.all[i].interface : 'net' + string(i + 1))",
        ),
        (
            "fabricClash",
            f"variables.interfaces[variables.fabricAt] in {_lit(list(RESERVED_INTERFACES))} || "
            "lists.range(size(variables.interfaces)).exists(j, j != variables.fabricAt && "
            "variables.interfaces[j] == variables.interfaces[variables.fabricAt])",
        ),
        (
            "interface",
            "variables.fabricClash ? lists.range(size(variables.interfaces) + 1).map(j, 'net' + string(j + 1))"
            ".filter(n, !(n in variables.interfaces))[0] : variables.interfaces[variables.fabricAt]",
        ),
        (
            "rendered",
            "lists.range(size(variables.all)).map(i, (variables.all[i].namespace != '' ? "
            "variables.all[i].namespace + '/' : '') + variables.all[i].name + "
            "(i == variables.fabricAt && variables.fabricClash ? '@' + variables.interface : "
            "(variables.all[i].interface != '' ? '@' + variables.all[i].interface : ''))).join(', ')",
        ),
        ("gpuCounts", f"variables.trainers.map(i, {_resource(f'{c}[i]', gpu)})"),
        ("gpus", _sum("variables.gpuCounts")),
        ("hasMemoryLimit", f"variables.trainers.exists(i, {_quantity_of(f'{c}[i]', 'limits', 'memory')})"),
        (
            "memoryLimits",
            f"variables.trainers.filter(i, {_quantity_of(f'{c}[i]', 'limits', 'memory')}).map(i, "
            f"quantity({c}[i].resources.limits['memory']).asInteger())",
        ),
        ("memoryLimit", _sum("variables.memoryLimits")),
        ("shmRule", f"({capped} > {spec.shm.min} ? {capped} : {spec.shm.min})"),
        (
            "shmMounts",
            f"variables.trainers.filter(i, {_shm_mount(f'{c}[i]')}).map(i, {_shm_mount_name(f'{c}[i]')}) + "
            f"variables.inits.filter(i, {_shm_mount(f'{ic}[i]')}).map(i, {_shm_mount_name(f'{ic}[i]')})",
        ),
        ("volumes", "has(object.spec.volumes) ? object.spec.volumes : []"),
        (
            "shmVolume",
            f"size(variables.shmMounts) > 0 ? variables.shmMounts[0] : "
            f"lists.range(size(variables.volumes) + 1).map(n, n == 0 ? {_q(SHM_VOLUME)} : "
            f"{_q(SHM_VOLUME + '-')} + string(n + 1)).filter(x, !variables.volumes.exists(v, has(v.name) && "
            "v.name == x))[0]",
        ),
        (
            "shmSized",
            "size(variables.shmMounts) > 0 ? variables.volumes.filter(v, has(v.name) && "
            "v.name == variables.shmVolume && has(v.emptyDir) && has(v.emptyDir.medium) && "
            "v.emptyDir.medium == 'Memory' && has(v.emptyDir.sizeLimit)).map(v, "
            "quantity(v.emptyDir.sizeLimit).asInteger()) : []",
        ),
        (
            "shmBytes",
            "size(variables.shmSized) > 0 ? variables.shmSized[0] : variables.shmRule",
        ),
        ("env", "[" + ", ".join(wanted_env) + "]"),
        ("job", f"{job} : []"),
        (
            "placedByKueue",
            f"has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, has(g.name) && "
            f"g.name == {_q(KUEUE_TOPOLOGY_GATE)})",
        ),
    ]
    return out


def _group(group: str) -> tuple[str, str, str]:
    """(the index variable, the container at index i, its JSON pointer) of a container group."""
    idx = "variables.trainers" if group == "containers" else "variables.inits"
    return idx, f"object.spec.{group}[i]", f"{_q('/spec/' + group + '/')} + string(i)"


def _env_ops(group: str) -> str:
    """engine._env for every trainer container of ``group``: enforced entries set where they differ
    (a valueFrom entry replaced whole), then the missing entries appended."""
    idx, c, base = _group(group)
    entry = f"{base} + {_q('/env/')} + string(j)"
    names = f"(has({c}.env) ? {c}.env.map(e, e.name) : [])"
    new = f"variables.env.filter(w, !(w.name in {names})).map(w, {{'name': w.name, 'value': w.value}})"
    replace = _patch("replace", entry, "{'name': w.name, 'value': w.value}")
    set_value = _patch("add", f"{entry} + {_q('/value')}", "w.value")
    already = (
        f"has({c}.env[j].value) && ({c}.env[j].value == w.value || "
        f"(w.value == variables.interface && {c}.env[j].value == '=' + w.value))"
    )
    per_entry = (
        f"variables.env.filter(w, w.enforced && w.name == {c}.env[j].name).map(w, "
        f"has({c}.env[j].valueFrom) ? [{replace}] : ({already} ? [] : [{set_value}])).flatten()"
    )
    enforce = f"(has({c}.env) ? lists.range(size({c}.env)).map(j, {per_entry}).flatten() : [])"
    return f"{idx}.map(i, {enforce} + {_extend(c, base, ('env',), new)}).flatten()"


def _capability_ops(group: str, caps: list[str]) -> str:
    """engine._capabilities: the profile's capabilities a trainer container does not add yet."""
    if not caps:
        return "[]"
    idx, c, base = _group(group)
    sc = f"{c}.securityContext"
    have = f"(has({sc}) && has({sc}.capabilities) && has({sc}.capabilities.add) ? {sc}.capabilities.add : [])"
    missing = f"{_lit(caps)}.filter(x, !(x in {have}))"
    return f"{idx}.map(i, {_extend(c, base, ('securityContext', 'capabilities', 'add'), missing)}).flatten()"


def _mount_ops(group: str) -> str:
    """engine._shm: the /dev/shm mount for each trainer container without one."""
    idx, c, base = _group(group)
    mount = f"[{{'name': variables.shmVolume, 'mountPath': {_q(SHM_PATH)}}}]"
    return f"{idx}.filter(i, !{_shm_mount(c)}).map(i, {_extend(c, base, ('volumeMounts',), mount)}).flatten()"


def _rdma_ops(profile: CompiledProfile) -> str:
    """engine._rdma: the RDMA resources a GPU trainer container neither limits nor requests."""
    wanted = profile.spec.rdma_resources
    if not wanted:
        return "[]"
    _, c, base = _group("containers")
    entries = [(f"!{_has_resource(c, name)}", name, _q(qty)) for name, qty in wanted.items()]
    merge = _merge_keys(c, base, ("resources", "limits"), entries)
    return f"variables.trainers.filter(i, {_resource(c, profile.spec.gpu_resource)} > 0).map(i, {merge}).flatten()"


def _toleration_ops(profile: CompiledProfile) -> str:
    """engine._tolerations: for a GPU pod, the profile's tolerations the pod does not tolerate yet."""
    if not profile.tolerations:
        return "[]"
    missing = " + ".join(f"({_tolerated(t)} ? [] : [{_lit(t)}])" for t in profile.tolerations)
    spec_path = _q("/spec")
    return f"(variables.gpus > 0 ? {_extend('object.spec', spec_path, ('tolerations',), f'({missing})')} : [])"


def _topology_ops(profile: CompiledProfile) -> str:
    """engine._topology: co-locate the job's pods and spread them, unless Kueue places the pod."""
    topo = profile.spec.topology
    selector = "{'matchLabels': {variables.job[0]: variables.job[1]}}"
    spec_path = _q("/spec")
    parts = []
    if topo.colocate is not None:
        term = f"{{'labelSelector': {selector}, 'topologyKey': {_q(topo.colocate.key)}}}"
        pa = "object.spec.affinity.podAffinity"
        has_pa = "has(object.spec.affinity) && has(object.spec.affinity.podAffinity)"
        if topo.colocate.mode == "required":
            field = "requiredDuringSchedulingIgnoredDuringExecution"
            present = f"({has_pa} && has({pa}.{field}) && {term} in {pa}.{field})"
            item = f"[{term}]"
        else:
            field = "preferredDuringSchedulingIgnoredDuringExecution"
            present = (
                f"({has_pa} && has({pa}.{field}) && {pa}.{field}.exists(t, has(t.podAffinityTerm) && "
                f"t.podAffinityTerm == {term}))"
            )
            item = f"[{{'weight': {topo.colocate.weight}, 'podAffinityTerm': {term}}}]"
        ops = _extend("object.spec", spec_path, ("affinity", "podAffinity", field), item)
        parts.append(f"({present} ? [] : {ops})")
    if topo.spread is not None:
        present = (
            "(has(object.spec.topologySpreadConstraints) && object.spec.topologySpreadConstraints.exists(t, "
            f"has(t.topologyKey) && t.topologyKey == {_q(topo.spread.key)}))"
        )
        item = (
            f"[{{'maxSkew': 1, 'topologyKey': {_q(topo.spread.key)}, 'whenUnsatisfiable': "
            f"{_q(topo.spread.when_unsatisfiable)}, 'labelSelector': {selector}}}]"
        )
        ops = _extend("object.spec", spec_path, ("topologySpreadConstraints",), item)
        parts.append(f"({present} ? [] : {ops})")
    if not parts:
        return "[]"
    return f"(size(variables.job) == 2 && !variables.placedByKueue ? {' + '.join(parts)} : [])"


def mutation(profile: CompiledProfile) -> str:
    """The one JSONPatch expression: every operation against the pod as received, as the engine's."""
    annotation = _merge_keys(
        "object.metadata",
        _q("/metadata"),
        ("annotations",),
        [("size(variables.added) > 0 || variables.fabricClash", NETWORKS_ANNOTATION, "variables.rendered")],
    )
    volume = (
        "[{'name': variables.shmVolume, 'emptyDir': {'medium': 'Memory', 'sizeLimit': "
        + _format_bytes("variables.shmRule")
        + "}}]"
    )
    caps = list(profile.spec.capabilities)
    parts = [
        annotation,
        f"(size(variables.shmMounts) > 0 ? [] : {_extend('object.spec', _q('/spec'), ('volumes',), volume)})",
        _mount_ops("containers"),
        _mount_ops("initContainers"),
        _env_ops("containers"),
        _env_ops("initContainers"),
        _capability_ops("containers", caps),
        _capability_ops("initContainers", caps),
        _rdma_ops(profile),
        _toleration_ops(profile),
        _topology_ops(profile),
    ]
    return " +\n".join(parts)


def match_conditions(profile: CompiledProfile) -> list[dict]:
    repos = sorted(profile.trainer_images)
    pattern = cel_pattern(repos)
    networks = f"({rules.networks('object')})"
    return [
        {"name": "not-a-mirror-pod", "expression": rules.NOT_A_MIRROR_POD},
        {"name": "runs-a-trainer-image", "expression": rules.runs_a_trainer("object", repos)},
        {"name": f"fabric-is-{profile.name}", "expression": f"({rules.fabric('object')}) == {_q(profile.name)}"},
        # networks-json-form: Multus reads the JSON form when the value holds '[', '{' or '"'
        {
            "name": "networks-in-plain-form",
            "expression": f"!({networks}.contains('[') || {networks}.contains('{{') || {networks}.contains('\"'))",
        },
        # more-trainer-containers: the /dev/shm size sums at most MAX_SUMMED trainer containers
        {
            "name": f"at-most-{MAX_SUMMED}-trainer-containers",
            "expression": f"size(object.spec.containers.filter(c, {_is_trainer('c', pattern)})) <= {MAX_SUMMED}",
        },
        # last: the authorizer is asked only for trainer pods that ask to opt out
        {"name": "not-opted-out", "expression": rules.NOT_OPTED_OUT},
    ]


def generate(profile: CompiledProfile) -> Generated:
    name = policy_name(profile.name)
    policy = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "trainyard-admission-policy"}},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ]
            },
            "matchConditions": match_conditions(profile),
            "variables": [{"name": n, "expression": e} for n, e in variables(profile)],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": mutation(profile)}}],
            # the webhook fails open; so does the policy: the ValidatingAdmissionPolicy fails closed
            "failurePolicy": "Ignore",
            # the operations are idempotent: a pod already given the fabric gets none
            "reinvocationPolicy": "IfNeeded",
        },
    }
    binding = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "trainyard-admission-policy"}},
        "spec": {
            "policyName": name,
            "paramRef": {"name": PARAMS, "namespace": PARAMS_NAMESPACE, "parameterNotFoundAction": "Deny"},
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": INJECTION_LABEL, "operator": "In", "values": ["enabled"]},
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", PARAMS_NAMESPACE],
                        },
                    ]
                }
            },
        },
    }
    return Generated(policy, binding)


def documents(policies: PolicySet) -> list[dict]:
    out = []
    for name in policies.names:
        g = generate(policies.get(name))  # type: ignore[arg-type]
        out += [g.policy, g.binding]
    return out


def render(policies: PolicySet, source: str) -> str:
    head = (
        f"# Generated by `trainyard generate` from {source}; do not edit (trainyard validate fails when this\n"
        "# file differs from what the profiles generate). One MutatingAdmissionPolicy and its binding per\n"
        "# fabric profile: in clusters that declare `admission: policy` they apply the fabric in place of\n"
        "# the webhook (trainyard/repo/mutating_policy.py says how, and what they cannot express).\n"
    )
    return head + yaml.safe_dump_all(documents(policies), sort_keys=False, width=120)


COMPONENT_HEAD = "Generated by `trainyard generate`"


def component(source: str) -> str:
    """The kustomize Component a cluster's admission overlay adds to base/webhook for policy mode:
    the policies in, the webhook and what only it needs out."""
    removed = [
        ("apps/v1", "Deployment", "trainyard-webhook", True),
        ("v1", "Service", "trainyard-webhook", True),
        ("v1", "ServiceAccount", "trainyard-webhook", True),
        ("policy/v1", "PodDisruptionBudget", "trainyard-webhook", True),
        ("networking.k8s.io/v1", "NetworkPolicy", "trainyard-webhook", True),
        ("v1", "ResourceQuota", "trainyard-critical-pods", True),
        ("cert-manager.io/v1", "Issuer", "trainyard-selfsigned", True),
        ("cert-manager.io/v1", "Certificate", "trainyard-webhook-ca", True),
        ("cert-manager.io/v1", "Issuer", "trainyard-ca", True),
        ("cert-manager.io/v1", "Certificate", "trainyard-webhook", True),
        ("v1", "ConfigMap", "trainyard-policies", True),
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "trainyard-fabric", False),
    ]
    lines = [
        f"# {COMPONENT_HEAD} from {source}; do not edit.",
        "# Admission by policy (clusters whose cluster.yaml says `admission: policy`, Kubernetes 1.36+): added to",
        "# base/webhook by the cluster's admission overlay, it brings one MutatingAdmissionPolicy and binding per",
        "# fabric profile and takes out the webhook, its Service, certificates and configuration. The namespace,",
        "# the parameters (trainyard-fabric-params), the opt-out RBAC and the fail-closed",
        "# ValidatingAdmissionPolicy stay.",
        "apiVersion: kustomize.config.k8s.io/v1alpha1",
        "kind: Component",
        "resources:",
        f"  - {FILE}",
        "patches:",
    ]
    for api, kind, name, namespaced in removed:
        meta = f"{{name: {name}, namespace: {PARAMS_NAMESPACE}}}" if namespaced else f"{{name: {name}}}"
        lines.append(
            f"  - patch: |-\n      $patch: delete\n      apiVersion: {api}\n      kind: {kind}\n      metadata: {meta}"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The harness: the generated CEL evaluated with a compiled CEL runtime


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
