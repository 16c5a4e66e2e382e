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

What the policy cannot do, by rule name (:data:`LIMITS`); the harness
(:class:`trainyard.repo.generate.mutating_harness.Harness`) excludes exactly these from its
comparison with the engine, the README states them, and ``trainyard validate`` warns for a
policy-mode cluster whose job pods would hit one:

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
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from trainyard.contract import cel as rules
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
from trainyard.repo.generate import cel_jsonpatch as cel
from trainyard.repo.generate.cel_jsonpatch import homogeneous
from trainyard.repo.model import rawyaml, rendered_facts
from webhook.policy import CompiledProfile, PolicySet

API_VERSION = "admissionregistration.k8s.io/v1"
PREFIX = rendered_facts.MUTATING_POLICY_PREFIX
PARAMS = rendered_facts.PARAMS_CONFIGMAP  # the parameter ConfigMap (base/webhook/fabric-params.yaml)
PARAMS_NAMESPACE = rendered_facts.WEBHOOK_NAMESPACE
INJECTION_LABEL = rendered_facts.INJECTION_LABEL
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
# The policy of one profile


def policy_name(profile: str) -> str:
    return f"{PREFIX}{profile}"


def _fraction(value: float) -> tuple[int, int]:
    """The profile's memoryLimitFraction as the engine reads it (Decimal(str(f))), as p/q."""
    p, q = Decimal(str(value)).as_integer_ratio()
    return p, q


def _is_trainer(container: str, pattern: str) -> str:
    return f"(has({container}.image) && {container}.image.matches({cel.q(pattern)}))"


def _quantity_of(container: str, section: str, name: str) -> str:
    res = f"{container}.resources"
    return f"has({res}) && has({res}.{section}) && {cel.q(name)} in {res}.{section}"


def _resource(container: str, name: str) -> str:
    """engine._resource as an int: the limit, else the request, else 0."""
    lim, req = _quantity_of(container, "limits", name), _quantity_of(container, "requests", name)
    return (
        f"({lim} ? quantity({container}.resources.limits[{cel.q(name)}]).asInteger() : "
        f"({req} ? quantity({container}.resources.requests[{cel.q(name)}]).asInteger() : 0))"
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
        f"m.mountPath.matches({cel.q('^' + SHM_PATH + '/*$')})))"
    )


def _shm_mount_name(container: str) -> str:
    return (
        f"{container}.volumeMounts.filter(m, has(m.mountPath) && "
        f"m.mountPath.matches({cel.q('^' + SHM_PATH + '/*$')})).map(m, has(m.name) ? m.name : '')[0]"
    )


def _format_bytes(n: str) -> str:
    """quantity.format_bytes in CEL: the shortest exact binary suffix."""
    expr = f"string({n})"
    for suffix, power in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)):
        unit = 2**power
        expr = f"({n} >= {unit} && {n} % {unit} == 0 ? string({n} / {unit}) + {cel.q(suffix)} : {expr})"
    return expr


def _tolerated(toleration: dict) -> str:
    """engine._tolerated for one profile toleration, over the pod's existing ones (t)."""
    key = toleration.get("key")
    exists = "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists')"
    same = f"(has(t.key) && t.key == {cel.q(key)})" if key else "!has(t.key)"
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
        wanted = cel.q(net.namespace) if net.namespace else "variables.ns"
        return f"({a}.name == {cel.q(net.name)} && ({a}.namespace != '' ? {a}.namespace : variables.ns) == {wanted})"

    added = " + ".join(
        f"(variables.attachments.exists(a, {match('a', n)}) ? [] : "
        f"[{{'name': {cel.q(n.name)}, 'namespace': {cel.q(n.namespace or '')}, "
        f"'interface': {cel.q(n.interface or '')}}}])"
        for n in nets
    )
    fraction_p, fraction_q = _fraction(spec.shm.memory_limit_fraction)
    gpu = spec.gpu_resource
    wanted_env = [
        f"{{'name': {cel.q(name)}, 'value': {'variables.interface' if value is None else cel.q(value)}, "
        f"'enforced': {cel.lit(enforced)}}}"
        for name, value, enforced in profile.env_plan
    ]
    wanted_env += [
        f"{{'name': {cel.q(ENV_FABRIC)}, 'value': {cel.q(profile.name)}, 'enforced': true}}",
        f"{{'name': {cel.q(ENV_EXPECT_TRANSPORT)}, 'value': {cel.q(spec.transport)}, 'enforced': true}}",
        f"{{'name': {cel.q(ENV_SHM_BYTES)}, 'value': string(variables.shmBytes), 'enforced': true}}",
    ]
    shm_rule = (
        f"(variables.gpus * {spec.shm.per_gpu} < {spec.shm.max} ? variables.gpus * {spec.shm.per_gpu} : {spec.shm.max})"
    )
    capped = (
        f"(variables.hasMemoryLimit && variables.memoryLimit * {fraction_p} / {fraction_q} < {shm_rule} ? "
        f"variables.memoryLimit * {fraction_p} / {fraction_q} : {shm_rule})"
    )
    job = " : ".join(
        f"has(object.metadata.labels) && {cel.q(k)} in object.metadata.labels && "
        # string(): kube-apiserver types a label's value dyn here, and a list literal is homogeneous
        f"object.metadata.labels[{cel.q(k)}] != '' ? [{cel.q(k)}, string(object.metadata.labels[{cel.q(k)}])]"
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
            f"variables.interfaces[variables.fabricAt] in {cel.lit(list(RESERVED_INTERFACES))} || "
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
            f"lists.range(size(variables.volumes) + 1).map(n, n == 0 ? {cel.q(SHM_VOLUME)} : "
            f"{cel.q(SHM_VOLUME + '-')} + string(n + 1)).filter(x, !variables.volumes.exists(v, has(v.name) && "
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
            f"g.name == {cel.q(KUEUE_TOPOLOGY_GATE)})",
        ),
    ]
    return out


def _group(group: str) -> tuple[str, str, str]:
    """(the index variable, the container at index i, its JSON pointer) of a container group."""
    idx = "variables.trainers" if group == "containers" else "variables.inits"
    return idx, f"object.spec.{group}[i]", f"{cel.q('/spec/' + group + '/')} + string(i)"


def _env_ops(group: str) -> str:
    """engine._env for every trainer container of ``group``: enforced entries set where they differ
    (a valueFrom entry replaced whole), then the missing entries appended."""
    idx, c, base = _group(group)
    entry = f"{base} + {cel.q('/env/')} + string(j)"
    names = f"(has({c}.env) ? {c}.env.map(e, e.name) : [])"
    new = f"variables.env.filter(w, !(w.name in {names})).map(w, {{'name': w.name, 'value': w.value}})"
    replace = cel.patch("replace", entry, "{'name': w.name, 'value': w.value}")
    set_value = cel.patch("add", f"{entry} + {cel.q('/value')}", "w.value")
    already = (
        f"has({c}.env[j].value) && ({c}.env[j].value == w.value || "
        f"(w.value == variables.interface && {c}.env[j].value == '=' + w.value))"
    )
    per_entry = (
        f"variables.env.filter(w, w.enforced && w.name == {c}.env[j].name).map(w, "
        f"has({c}.env[j].valueFrom) ? [{replace}] : ({already} ? [] : [{set_value}])).flatten()"
    )
    enforce = f"(has({c}.env) ? lists.range(size({c}.env)).map(j, {per_entry}).flatten() : [])"
    return f"{idx}.map(i, {enforce} + {cel.extend(c, base, ('env',), new)}).flatten()"


def _capability_ops(group: str, caps: list[str]) -> str:
    """engine._capabilities: the profile's capabilities a trainer container does not add yet."""
    if not caps:
        return "[]"
    idx, c, base = _group(group)
    sc = f"{c}.securityContext"
    have = f"(has({sc}) && has({sc}.capabilities) && has({sc}.capabilities.add) ? {sc}.capabilities.add : [])"
    missing = f"{cel.lit(caps)}.filter(x, !(x in {have}))"
    return f"{idx}.map(i, {cel.extend(c, base, ('securityContext', 'capabilities', 'add'), missing)}).flatten()"


def _mount_ops(group: str) -> str:
    """engine._shm: the /dev/shm mount for each trainer container without one."""
    idx, c, base = _group(group)
    mount = f"[{{'name': variables.shmVolume, 'mountPath': {cel.q(SHM_PATH)}}}]"
    return f"{idx}.filter(i, !{_shm_mount(c)}).map(i, {cel.extend(c, base, ('volumeMounts',), mount)}).flatten()"


def _rdma_ops(profile: CompiledProfile) -> str:
    """engine._rdma: the RDMA resources a GPU trainer container neither limits nor requests."""
    wanted = profile.spec.rdma_resources
    if not wanted:
        return "[]"
    _, c, base = _group("containers")
    entries = [(f"!{_has_resource(c, name)}", name, cel.q(qty)) for name, qty in wanted.items()]
    merge = cel.merge_keys(c, base, ("resources", "limits"), entries)
    return f"variables.trainers.filter(i, {_resource(c, profile.spec.gpu_resource)} > 0).map(i, {merge}).flatten()"


def _toleration_ops(profile: CompiledProfile) -> str:
    """engine._tolerations: for a GPU pod, the profile's tolerations the pod does not tolerate yet."""
    if not profile.tolerations:
        return "[]"
    missing = " + ".join(f"({_tolerated(t)} ? [] : [{cel.lit(t)}])" for t in profile.tolerations)
    spec_path = cel.q("/spec")
    return f"(variables.gpus > 0 ? {cel.extend('object.spec', spec_path, ('tolerations',), f'({missing})')} : [])"


def _topology_ops(profile: CompiledProfile) -> str:
    """engine._topology: co-locate the job's pods and spread them, unless Kueue places the pod."""
    topo = profile.spec.topology
    selector = "{'matchLabels': {variables.job[0]: variables.job[1]}}"
    spec_path = cel.q("/spec")
    parts = []
    if topo.colocate is not None:
        term = f"{{'labelSelector': {selector}, 'topologyKey': {cel.q(topo.colocate.key)}}}"
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
        ops = cel.extend("object.spec", spec_path, ("affinity", "podAffinity", field), item)
        parts.append(f"({present} ? [] : {ops})")
    if topo.spread is not None:
        present = (
            "(has(object.spec.topologySpreadConstraints) && object.spec.topologySpreadConstraints.exists(t, "
            f"has(t.topologyKey) && t.topologyKey == {cel.q(topo.spread.key)}))"
        )
        item = (
            f"[{{'maxSkew': 1, 'topologyKey': {cel.q(topo.spread.key)}, 'whenUnsatisfiable': "
            f"{cel.q(topo.spread.when_unsatisfiable)}, 'labelSelector': {selector}}}]"
        )
        ops = cel.extend("object.spec", spec_path, ("topologySpreadConstraints",), item)
        parts.append(f"({present} ? [] : {ops})")
    if not parts:
        return "[]"
    return f"(size(variables.job) == 2 && !variables.placedByKueue ? {' + '.join(parts)} : [])"


def mutation(profile: CompiledProfile) -> str:
    """The one JSONPatch expression: every operation against the pod as received, as the engine's."""
    annotation = cel.merge_keys(
        "object.metadata",
        cel.q("/metadata"),
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
        f"(size(variables.shmMounts) > 0 ? [] : {cel.extend('object.spec', cel.q('/spec'), ('volumes',), volume)})",
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
        {"name": f"fabric-is-{profile.name}", "expression": f"({rules.fabric('object')}) == {cel.q(profile.name)}"},
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
    patches = homogeneous(mutation(profile))
    if cel.object_initializers(patches):  # kubernetes#140419: see cel_jsonpatch.object_initializers
        raise ValueError(f"{name}: an Object initializer in a JSONPatch expression: write map literals")
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
            "matchConditions": [{**m, "expression": homogeneous(m["expression"])} for m in match_conditions(profile)],
            "variables": [{"name": n, "expression": homogeneous(e)} for n, e in variables(profile)],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patches}}],
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
        "# the webhook (trainyard/repo/generate/mutating_policy.py says how, and what they cannot express).\n"
    )
    return head + rawyaml.safe_dump_all(documents(policies), sort_keys=False, width=120)


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
