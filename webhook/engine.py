"""The mutation engine: (pod, profile, namespace) -> JSONPatch operations + warnings.

Pure: no I/O, no globals, no framework types. The server, ``trainyard mutate``,
``trainyard preview`` and the tests all call :func:`mutate` (or :func:`admit`, which first
decides whether and with which profile a pod is mutated).

Which pods: those with a container running a trainer image by the one identity rule
(trainyard/contract/images.py), except mirror pods. The opt-out annotation is not the engine's to
honour: kube-apiserver skips the webhook for a user authorized to opt out (the matchConditions of
base/webhook), so a pod that asks for it here was not allowed to, and gets the fabric with a
warning. A pod the engine cannot read where it must (a container image that is no image
reference, a quantity Kubernetes would not accept, a networks annotation Multus would refuse, more
containers than :data:`MAX_CONTAINERS`) is denied with a message naming the field: never
admitted without its fabric.

Rules (each a function below, applied to the trainer containers only; other containers and
sidecars are never touched; an init container that runs a trainer image, such as a TrainJob
runtime's preflight, gets the env, the /dev/shm mount and the capabilities, so that it checks
the pod its trainer will run in):

- networks: keep every attachment the pod asks for, in order; add the profile's; give the fabric
  attachment an interface that no other attachment gets and that is not ``eth0`` or ``lo``
  (renamed, with a warning); deny a pod whose other attachments clash among themselves;
- env: the profile's values where the pod has none; enforced keys (NCCL_SOCKET_IFNAME always)
  overridden with a warning; TRAINYARD_* for the trainer's start-up checks;
- capabilities: the profile's (IPC_LOCK) appended to ``securityContext.capabilities.add``;
- /dev/shm: a memory-backed emptyDir sized by the profile's rule, unless one is mounted;
- RDMA resources for containers that ask for GPUs; a GPU toleration for GPU pods;
- topology: co-locate the job's pods, spread them over hosts; nothing when Kueue places the pod
  (its topology scheduling gate is on the pod): Kueue has already chosen the pod's domain.

The patch is built from explicit ``add`` operations against the pod as received (one
``replace`` where an enforced env var comes from ``valueFrom``): never by diffing documents.
A pod the engine already mutated yields no operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal

from trainyard.contract import networks as netann
from trainyard.contract.images import parse_image
from trainyard.contract.names import (
    ENV_EXPECT_TRANSPORT,
    ENV_FABRIC,
    ENV_SHM_BYTES,
    FABRIC_LABEL,
    JOB_LABELS,
    KUEUE_TOPOLOGY_GATE,
    MIRROR_ANNOTATION,
    OPT_OUT_ANNOTATION,
    OPT_OUT_GROUP,
    OPT_OUT_RESOURCE,
    OPT_OUT_VALUE,
    OPT_OUT_VERB,
    SHM_PATH,
    SHM_VOLUME,
    asks_opt_out,
    requested_fabric,
)
from trainyard.contract.nccl import lint_env
from trainyard.contract.quantity import QuantityError, format_bytes, parse_quantity
from webhook.policy import CompiledProfile, PolicySet

Op = dict[str, Any]
NO_TRAINER = "no container runs a trainer image"
# A pod with more containers than this is denied before any work: it bounds the engine's time and
# the patch (no trainer pod comes near it; Kubernetes sets no limit of its own).
MAX_CONTAINERS = 256
OPT_OUT_IGNORED = (
    f'{OPT_OUT_ANNOTATION}: "{OPT_OUT_VALUE}" ignored: the requester may not {OPT_OUT_VERB} '
    f"{OPT_OUT_RESOURCE}.{OPT_OUT_GROUP} (RBAC); fabric given"
)


@dataclass(slots=True)
class Mutation:
    ops: list[Op] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    interface: str | None = None  # the fabric interface the pod's trainers will use


class MutationError(ValueError):
    """The pod cannot be given its fabric as it stands; the message names the field."""


@dataclass(slots=True)
class Decision:
    """What to do with one pod: mutate it with ``profile``, leave it (skip, saying why in
    ``reason``), or deny it. The one place a skip is represented."""

    action: Literal["mutate", "skip", "deny"]
    profile: CompiledProfile | None = None
    reason: str = ""
    mutation: Mutation | None = None


def escape(token: str) -> str:
    """JSON Pointer token escaping (RFC 6901): '~' -> '~0', '/' -> '~1'."""
    return token.replace("~", "~0").replace("/", "~1")


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _walk(parent: object, path: str, keys: tuple[str, ...]) -> tuple[object, str, int]:
    """Follow ``keys`` through existing mappings: (deepest node, its path, keys found)."""
    node = parent
    for depth, key in enumerate(keys):
        child = node.get(key) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            return node, path, depth
        node, path = child, f"{path}/{escape(key)}"
    return node, path, len(keys)


def _create(ops: list[Op], path: str, keys: tuple[str, ...], leaf: Any) -> None:
    """One op that creates ``keys[0]`` under ``path`` with ``leaf`` nested under the rest
    (``add`` on a null member replaces it)."""
    value = leaf
    for key in reversed(keys[1:]):
        value = {key: value}
    ops.append({"op": "add", "path": f"{path}/{escape(keys[0])}", "value": value})


def _merge(ops: list[Op], parent: object, path: str, keys: tuple[str, ...], items: dict) -> None:
    """Add each of ``items`` to the mapping at ``parent[keys...]``, creating what is missing."""
    if not items:
        return
    _, path, depth = _walk(parent, path, keys)
    if depth < len(keys):
        _create(ops, path, keys[depth:], dict(items))
        return
    ops.extend({"op": "add", "path": f"{path}/{escape(k)}", "value": v} for k, v in items.items())


def _extend(ops: list[Op], parent: object, path: str, keys: tuple[str, ...], items: list) -> None:
    """Append ``items`` to the list at ``parent[keys...]``, creating it and its parents if missing."""
    if not items:
        return
    node, path, depth = _walk(parent, path, keys[:-1])
    if depth < len(keys) - 1:
        _create(ops, path, keys[depth:], list(items))
        return
    current = node.get(keys[-1]) if isinstance(node, dict) else None
    if isinstance(current, list):
        ops.extend({"op": "add", "path": f"{path}/{escape(keys[-1])}/-", "value": v} for v in items)
    else:
        ops.append({"op": "add", "path": f"{path}/{escape(keys[-1])}", "value": list(items)})


def _quantity(value: object, field: str) -> Decimal | None:
    """A quantity the engine reads; MutationError naming ``field`` if Kubernetes would not take it."""
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise MutationError(f"{field}: {exc}") from None


def _resource(container: dict, index: int, name: str) -> Decimal | None:
    resources = _dict(container.get("resources"))
    found = None
    for section in ("limits", "requests"):
        q = _quantity(_dict(resources.get(section)).get(name), f"spec.containers[{index}].resources.{section}[{name}]")
        if found is None:
            found = q
    return found


def _cname(container: dict, index: int) -> str:
    name = container.get("name")
    return name if isinstance(name, str) and name else f"#{index}"


def _what(container: dict, index: int, group: str) -> str:
    return f"{'init container' if group == 'initContainers' else 'container'} {_cname(container, index)}"


# ---------------------------------------------------------------------------------------------
# Decision: which pods, which profile


def trainer_indices(pod: dict, profile: CompiledProfile, group: str = "containers") -> list[int]:
    containers = _list(_dict(pod.get("spec")).get(group))
    return [i for i, c in enumerate(containers) if isinstance(c, dict) and profile.is_trainer_image(c.get("image"))]


def _uninterpretable(pod: dict) -> str | None:
    """Why the engine cannot tell which containers are trainers, naming the field; None if it can."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, list):
        return "spec.containers must be a list of containers"
    inits = spec.get("initContainers")
    if inits is None:
        inits = []
    if not isinstance(inits, list):
        return "spec.initContainers must be a list of containers"
    for group, items in (("containers", containers), ("initContainers", inits)):
        if len(items) > MAX_CONTAINERS:
            return f"spec.{group}: {len(items):,} containers; the fabric webhook takes at most {MAX_CONTAINERS}"
        for i, c in enumerate(items):
            if not isinstance(c, dict):
                return f"spec.{group}[{i}] must be a container (an object)"
            image = c.get("image")
            if image is None or image == "":
                continue  # kube-apiserver refuses it; not a trainer either way
            if parse_image(image) is None:
                shown = repr(image) if len(repr(image)) <= 60 else f"{repr(image)[:50]}... ({len(image):,} characters)"
                return f"spec.{group}[{i}].image: {shown} is not an image reference a container runtime can pull"
    return None


def admit(pod: object, policies: PolicySet, default: str, namespace: str | None) -> Decision:
    """Decide what to do with a pod at CREATE and, when it is to be mutated, mutate it."""
    if not isinstance(pod, dict):
        return Decision("skip", reason="the object is not a Pod")
    meta = _dict(pod.get("metadata"))
    annotations = _dict(meta.get("annotations"))
    if MIRROR_ANNOTATION in annotations:
        return Decision("skip", reason="mirror pod")
    problem = _uninterpretable(pod)
    if problem is not None:
        return Decision("deny", reason=problem)
    wanted = requested_fabric(meta.get("labels"))
    if wanted is not None and not isinstance(wanted, str):
        return Decision("deny", reason=f"metadata.labels[{FABRIC_LABEL}] must be a string")
    name = default if wanted is None else wanted
    profile = policies.get(name)
    if profile is None:
        if not any(trainer_indices(pod, p) for p in policies.profiles.values()):
            return Decision("skip", reason=NO_TRAINER)
        return Decision(
            "deny",
            reason=(
                f"label {FABRIC_LABEL}={name!r} names no fabric profile; known profiles: {', '.join(policies.names)}"
            ),
        )
    trainers = trainer_indices(pod, profile)
    if not trainers:
        return Decision("skip", profile=profile, reason=NO_TRAINER)
    mutation = _mutate(pod, profile, namespace, trainers)
    if asks_opt_out(annotations):
        mutation.warnings.insert(0, OPT_OUT_IGNORED)
    return Decision("mutate", profile=profile, mutation=mutation)


# ---------------------------------------------------------------------------------------------
# The rules


def mutate(pod: dict, profile: CompiledProfile, namespace: str | None) -> Mutation:
    """The JSONPatch operations that give ``pod`` the fabric of ``profile``, and warnings (none
    for a pod without a trainer container: :func:`admit` decides which pods are mutated)."""
    return _mutate(pod, profile, namespace, trainer_indices(pod, profile))


def _mutate(pod: dict, profile: CompiledProfile, namespace: str | None, trainers: list[int]) -> Mutation:
    out = Mutation()
    if not trainers:
        return out
    meta = _dict(pod.get("metadata"))
    spec = _dict(pod.get("spec"))
    containers = spec["containers"]
    ns = namespace or meta.get("namespace") or "default"
    try:
        out.interface = _networks(out, meta, profile, ns)
    except netann.NetworksError as exc:
        raise MutationError(f"annotation {netann.ANNOTATION}: {exc}") from None
    inits = trainer_indices(pod, profile, "initContainers")
    gpus = sum((_resource(containers[i], i, profile.spec.gpu_resource) or 0) for i in trainers)
    shm_bytes = _shm(out, spec, containers, trainers, profile, gpus, inits)
    for group, indices in (("containers", trainers), ("initContainers", inits)):
        _env(out, spec[group] if indices else [], indices, profile, out.interface, shm_bytes, group)
        _capabilities(out, spec[group] if indices else [], indices, profile, group)
    _rdma(out, containers, trainers, profile)
    if gpus > 0:
        _tolerations(out, spec, profile)
    job = job_of(meta.get("labels"))
    if job is not None and not _placed_by_kueue(spec):
        _topology(out, spec, profile, *job)
    return out


def job_of(labels: object) -> tuple[str, str] | None:
    """The label naming the pod's job and its value, the first of JOB_LABELS set to a non-empty
    string; the topology rules key on it."""
    if not isinstance(labels, dict):
        return None
    for key in JOB_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value:
            return key, value
    return None


def _placed_by_kueue(spec: dict) -> bool:
    """Kueue chose this pod's topology domain: its scheduling gate is on the pod until Kueue pins
    the pod there (kubernetes-sigs/kueue@v0.19.2:pkg/podset/podset.go, FromAssignment)."""
    return any(isinstance(g, dict) and g.get("name") == KUEUE_TOPOLOGY_GATE for g in _list(spec.get("schedulingGates")))


def _networks(out: Mutation, meta: dict, profile: CompiledProfile, namespace: str) -> str:
    annotations = meta.get("annotations")
    current = netann.parse(_dict(annotations).get(netann.ANNOTATION))
    attachments = current.attachments
    changed = False
    fabric_position = None
    for k, net in enumerate(profile.spec.networks):
        wanted_ns = net.namespace or namespace
        position = next(
            (i for i, a in enumerate(attachments) if a.name == net.name and (a.namespace or namespace) == wanted_ns),
            None,
        )
        if position is None:
            attachments.append(netann.Attachment(net.name, net.namespace, net.interface))
            position = len(attachments) - 1
            changed = True
        if k == 0:
            fabric_position = position
    # Multus names unnamed attachments net<position>; an interface that exists already (eth0, lo)
    # or that two attachments get fails the pod's network setup. The fabric attachment is the
    # engine's to name: it gets a free name. A clash among the others is the pod's: denied.
    fabric = attachments[fabric_position]
    names = current.interfaces()
    mine = names[fabric_position]
    why = current.clashes().get(fabric_position)
    if why is not None:
        taken = set(names)
        free = next(f"net{j}" for j in range(1, len(names) + 2) if f"net{j}" not in taken)
        out.warnings.append(f"attachment {fabric.name}: {why}; its interface is {free} instead")
        fabric.interface = mine = free
        changed = True
    clashes = current.clashes()
    if clashes:
        i = min(clashes)
        raise netann.NetworksError(
            f"attachment {attachments[i].plain()}: {clashes[i]}; Multus would fail the pod's network setup: "
            "give it an interface of its own (name@netN)"
        )
    if changed:
        _merge(out.ops, meta, "/metadata", ("annotations",), {netann.ANNOTATION: current.render()})
    return mine


def _env(
    out: Mutation,
    containers: list,
    trainers: list[int],
    profile: CompiledProfile,
    interface: str,
    shm_bytes: int,
    group: str = "containers",
) -> None:
    wanted = [(name, interface if value is None else value, enforced) for name, value, enforced in profile.env_plan]
    wanted += [
        (ENV_FABRIC, profile.name, True),
        (ENV_EXPECT_TRANSPORT, profile.spec.transport, True),
        (ENV_SHM_BYTES, str(shm_bytes), True),
    ]
    for i in trainers:
        c = containers[i]
        env = _list(c.get("env"))
        seen: dict[str, list[int]] = {}
        nccl: list[tuple[str, str | None]] = []
        for j, e in enumerate(env):
            name = e.get("name") if isinstance(e, dict) else None
            if isinstance(name, str):
                seen.setdefault(name, []).append(j)
                if name.startswith("NCCL_"):
                    value = e.get("value")
                    nccl.append((name, value if isinstance(value, str) else None))
        new = []
        for name, value, enforced in wanted:
            if name not in seen:
                new.append({"name": name, "value": value})
            elif enforced:
                for j in seen[name]:
                    _enforce(out, c, (group, i, j), value, profile.name, interface)
        _extend(out.ops, c, f"/spec/{group}/{i}", ("env",), new)
        if nccl:
            what = _what(c, i, group)
            out.warnings += [f"{what}: {m}" for m in _lint(tuple(nccl), profile.spec.transport)]


@lru_cache(maxsize=256)  # the pods of a job carry the same variables: lint each set once
def _lint(pairs: tuple[tuple[str, str | None], ...], transport: str) -> tuple[str, ...]:
    return tuple(finding.message for finding in lint_env(pairs, expect_transport=transport))


def _enforce(out: Mutation, c: dict, at: tuple[str, int, int], value: str, fabric: str, interface: str) -> None:
    """Make env entry ``j`` of container ``i`` of ``group`` say ``value``, with a warning saying from what."""
    group, i, j = at
    e = c["env"][j]
    name, have = e["name"], e.get("value")
    path = f"/spec/{group}/{i}/env/{j}"
    if e.get("valueFrom") is not None:
        out.ops.append({"op": "replace", "path": path, "value": {"name": name, "value": value}})
        have = "valueFrom"
    elif have == value or (value == interface and isinstance(have, str) and have == f"={value}"):
        return  # "=net1" is NCCL's exact-match form of "net1"
    else:
        out.ops.append({"op": "add", "path": f"{path}/value", "value": value})
    out.warnings.append(f"{_what(c, i, group)}: {name} {have or '(empty)'} -> {value} (enforced by fabric {fabric})")


def _capabilities(
    out: Mutation, containers: list, trainers: list[int], profile: CompiledProfile, group: str = "containers"
) -> None:
    caps = profile.spec.capabilities
    if not caps:
        return
    for i in trainers:
        c = containers[i]
        have = _list(_dict(_dict(c.get("securityContext")).get("capabilities")).get("add"))
        missing = [cap for cap in caps if cap not in have]
        _extend(out.ops, c, f"/spec/{group}/{i}", ("securityContext", "capabilities", "add"), missing)


def _shm_mount(container: dict) -> str | None:
    for m in _list(container.get("volumeMounts")):
        if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == SHM_PATH:
            name = m.get("name")
            return name if isinstance(name, str) else ""
    return None


def shm_size(profile: CompiledProfile, gpus: Decimal | int, memory_limit: Decimal | None) -> int:
    """The profile's /dev/shm rule: min(perGPU x GPUs, max), capped at a fraction of the memory
    limit when there is one, at least min."""
    rule = profile.spec.shm
    size = min(int(rule.per_gpu * gpus), rule.max)
    if memory_limit is not None:
        size = min(size, int(memory_limit * Decimal(str(rule.memory_limit_fraction))))
    return max(size, rule.min)


def _shm(
    out: Mutation,
    spec: dict,
    containers: list,
    trainers: list[int],
    profile: CompiledProfile,
    gpus: Decimal,
    inits: Sequence[int] = (),
) -> int:
    limits = [q for i in trainers if (q := _memory_limit(containers[i], i)) is not None]
    memory_limit = sum(limits) if limits else None
    size = shm_size(profile, gpus, memory_limit)
    fraction = profile.spec.shm.memory_limit_fraction
    if memory_limit is not None and size > memory_limit * Decimal(str(fraction)):
        out.warnings.append(
            f"/dev/shm of {format_bytes(size)} (the profile's minimum) is more than {fraction:g} of the "
            f"trainers' memory limit {format_bytes(int(memory_limit))}: raise the limit"
        )
    mounts = {("containers", i): _shm_mount(containers[i]) for i in trainers}
    mounts.update({("initContainers", i): _shm_mount(spec["initContainers"][i]) for i in inits})
    volumes = _list(spec.get("volumes"))
    existing = next((v for v in mounts.values() if v is not None), None)
    if existing is None:
        taken = {v["name"] for v in volumes if isinstance(v, dict) and isinstance(v.get("name"), str)}
        name, n = SHM_VOLUME, 1
        while name in taken:
            n += 1
            name = f"{SHM_VOLUME}-{n}"
        volume = {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": format_bytes(size)}}
        _extend(out.ops, spec, "/spec", ("volumes",), [volume])
    else:
        name = existing
        where, volume = next(
            ((k, v) for k, v in enumerate(volumes) if isinstance(v, dict) and v.get("name") == name), (-1, {})
        )
        empty_dir = volume.get("emptyDir")
        if not isinstance(empty_dir, dict) or empty_dir.get("medium") != "Memory":
            out.warnings.append(
                f"volume {name} mounted at /dev/shm is not a memory-backed emptyDir: "
                "NCCL and DataLoader workers will be slow or fail"
            )
        else:
            limit = _quantity(empty_dir.get("sizeLimit"), f"spec.volumes[{where}].emptyDir.sizeLimit")
            if limit is not None:
                if memory_limit is not None and limit > memory_limit * Decimal(str(fraction)):
                    out.warnings.append(
                        f"/dev/shm sizeLimit {empty_dir.get('sizeLimit')} is more than {fraction:g} of the "
                        f"trainers' memory limit {format_bytes(int(memory_limit))}: the pod can be OOM-killed"
                    )
                size = int(limit)
    for (group, i), mounted in mounts.items():
        if mounted is None:
            _extend(
                out.ops,
                spec[group][i],
                f"/spec/{group}/{i}",
                ("volumeMounts",),
                [{"name": name, "mountPath": SHM_PATH}],
            )
    return size


def _memory_limit(container: dict, index: int) -> Decimal | None:
    limits = _dict(_dict(container.get("resources")).get("limits"))
    return _quantity(limits.get("memory"), f"spec.containers[{index}].resources.limits[memory]")


def _rdma(out: Mutation, containers: list, trainers: list[int], profile: CompiledProfile) -> None:
    wanted = profile.spec.rdma_resources
    if not wanted:
        return
    for i in trainers:
        c = containers[i]
        if not (_resource(c, i, profile.spec.gpu_resource) or 0) > 0:
            continue
        missing = {name: qty for name, qty in wanted.items() if _resource(c, i, name) is None}
        if missing:
            _merge(out.ops, c, f"/spec/containers/{i}", ("resources", "limits"), missing)


def _tolerated(existing: Iterable[object], key: str | None) -> bool:
    for t in existing:
        if not isinstance(t, dict):
            continue
        if t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"):
            return True
    return False


def _tolerations(out: Mutation, spec: dict, profile: CompiledProfile) -> None:
    existing = _list(spec.get("tolerations"))
    missing = [dict(t) for t in profile.tolerations if not _tolerated(existing, t.get("key"))]
    _extend(out.ops, spec, "/spec", ("tolerations",), missing)


def _topology(out: Mutation, spec: dict, profile: CompiledProfile, label: str, job: str) -> None:
    selector = {"matchLabels": {label: job}}
    colocate = profile.spec.topology.colocate
    if colocate is not None:
        term = {"labelSelector": selector, "topologyKey": colocate.key}
        affinity = _dict(_dict(spec.get("affinity")).get("podAffinity"))
        if colocate.mode == "required":
            terms = _list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
            if term not in terms:
                _extend(
                    out.ops,
                    spec,
                    "/spec",
                    ("affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
                    [term],
                )
        else:
            terms = _list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
            if not any(isinstance(t, dict) and t.get("podAffinityTerm") == term for t in terms):
                _extend(
                    out.ops,
                    spec,
                    "/spec",
                    ("affinity", "podAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
                    [{"weight": colocate.weight, "podAffinityTerm": term}],
                )
    spread = profile.spec.topology.spread
    if spread is not None:
        constraints = _list(spec.get("topologySpreadConstraints"))
        if not any(isinstance(c, dict) and c.get("topologyKey") == spread.key for c in constraints):
            _extend(
                out.ops,
                spec,
                "/spec",
                ("topologySpreadConstraints",),
                [
                    {
                        "maxSkew": 1,
                        "topologyKey": spread.key,
                        "whenUnsatisfiable": spread.when_unsatisfiable,
                        "labelSelector": selector,
                    }
                ],
            )
