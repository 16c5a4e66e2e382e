"""Kubernetes strategic merge patch, for the types a TrainJob's ``runtimePatches`` reach.

Kubeflow Trainer applies each runtime patch to the runtime's JobSet spec with
``strategicpatch.StrategicMergePatch(source, patch, jobsetv1alpha2.JobSetSpec{})``
(kubeflow/trainer@v2.3.0:pkg/runtime/core/trainingruntime.go, mergeRuntimePatches), and merges
``trainer.resourcesPerNode`` into the node container's resources the same way
(pkg/util/trainingruntime/trainingruntime.go, MergeResourceRequirements). The rules
(k8s.io/apimachinery/pkg/util/strategicpatch, driven by the Go struct tags):

- a mapping merges key by key, recursively; ``null`` deletes the key;
- a list whose field is tagged ``patchStrategy:"merge"`` with a ``patchMergeKey`` merges item by
  item on that key: an item whose key is already there is merged into it, in place; a new item
  is appended;
- any other list is replaced whole.

The merge keys below are the struct tags of kubernetes-sigs/jobset@v0.12.0:api/jobset/v1alpha2/
jobset_types.go (``replicatedJobs``: name) and kubernetes/api@v0.36.5:core/v1/types.go (PodSpec:
``volumes``, ``initContainers``, ``containers``, ``ephemeralContainers``, ``imagePullSecrets``,
``schedulingGates``, ``resourceClaims``: name, ``hostAliases``: ip, ``topologySpreadConstraints``:
topologyKey; Container: ``env``: name, ``ports``: containerPort, ``volumeMounts``: mountPath,
``volumeDevices``: devicePath). Lists such as ``tolerations`` have no strategy and are replaced.
Patch directives (``$patch``, ``$retainKeys``, ``$setElementOrder``, ``$deleteFromPrimitiveList``)
are refused rather than guessed.
"""

from __future__ import annotations

from typing import Any

from trainyard.contract.errors import UserError
from trainyard.repo.model.rendered import tree_copy

# type -> field -> (type of the field's value or items, merge key of a merged list or None)
_POD_SPEC = {
    "volumes": ("Any", "name"),
    "initContainers": ("Container", "name"),
    "containers": ("Container", "name"),
    "ephemeralContainers": ("Container", "name"),
    "imagePullSecrets": ("Any", "name"),
    "schedulingGates": ("Any", "name"),
    "resourceClaims": ("Any", "name"),
    "hostAliases": ("Any", "ip"),
    "topologySpreadConstraints": ("Any", "topologyKey"),
}
SCHEMA: dict[str, dict[str, tuple[str, str | None]]] = {
    "JobSetSpec": {"replicatedJobs": ("ReplicatedJob", "name")},
    "ReplicatedJob": {"template": ("JobTemplateSpec", None)},
    "JobTemplateSpec": {"spec": ("JobSpec", None)},
    "JobSpec": {"template": ("PodTemplateSpec", None)},
    "PodTemplateSpec": {"spec": ("PodSpec", None)},
    "PodSpec": _POD_SPEC,
    "Container": {
        "env": ("Any", "name"),
        "ports": ("Any", "containerPort"),
        "volumeMounts": ("Any", "mountPath"),
        "volumeDevices": ("Any", "devicePath"),
    },
    "Any": {},
}
DIRECTIVES = ("$patch", "$retainKeys", "$setElementOrder", "$deleteFromPrimitiveList")


class PatchError(UserError):
    """A patch uses what this merge does not follow; the message names the path."""


def merge(original: object, patch: object, kind: str = "Any", path: str = "") -> Any:
    """``original`` with ``patch`` merged into it (neither is modified)."""
    if not isinstance(patch, dict) or not isinstance(original, dict):
        return tree_copy(patch)
    fields = SCHEMA.get(kind, {})
    out = tree_copy(original)
    for key, value in patch.items():
        where = f"{path}.{key}" if path else str(key)
        if isinstance(key, str) and (key in DIRECTIVES or key.startswith("$setElementOrder/")):
            raise PatchError(f"{where}: the strategic-merge directive {key} is not supported here; write the value")
        if value is None:
            out.pop(key, None)
            continue
        child, merge_key = fields.get(key, ("Any", None))
        if isinstance(value, list):
            current = out.get(key)
            if merge_key is not None and isinstance(current, list):
                out[key] = _merge_list(current, value, child, merge_key, where)
            else:
                out[key] = tree_copy(value)
        elif isinstance(value, dict):
            out[key] = merge(out.get(key) if isinstance(out.get(key), dict) else {}, value, child, where)
        else:
            out[key] = value
    return out


def _merge_list(current: list, patch: list, kind: str, key: str, path: str) -> list:
    out = tree_copy(current)
    for i, item in enumerate(patch):
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"{path}[{i}]: each item must be a mapping with {key!r} (the list is merged on it)")
        if any(d in item for d in DIRECTIVES):
            raise PatchError(f"{path}[{i}]: strategic-merge directives are not supported here; write the value")
        at = next((j for j, have in enumerate(out) if isinstance(have, dict) and have.get(key) == item[key]), None)
        if at is None:
            out.append(merge({}, item, kind, f"{path}[{i}]"))
        else:
            out[at] = merge(out[at], item, kind, f"{path}[{i}]")
    return out
