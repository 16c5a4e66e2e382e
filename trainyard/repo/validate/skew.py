"""Known skews of the pinned releases, refused before merge while a pin carries them.

Each rule answers one known issue of :mod:`trainyard.repo.model.releases` and names it in its
message; it stops refusing once the pin of its release reaches the issue's ``fixed_in``
(:func:`releases.still_open`), so moving a pin past a fix retires the rule without an edit here.

- kubernetes#140419: an ``Object`` initializer in a MutatingAdmissionPolicy's JSONPatch value
  panics kube-apiserver v1.36.0-v1.36.4 (a cluster declares its minor version only);
- Kueue v0.19.2 with Trainer v2.3.0: the issues ``KUEUE_*`` and ``TRAINER_PATCH_WRITE_BACK``.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainyard.contract.quantity import QuantityError, round_trip
from trainyard.repo.generate.cel_jsonpatch import object_initializers
from trainyard.repo.model import releases
from trainyard.repo.model.rendered import Resource, as_dict, as_list, dig, pod_templates
from trainyard.repo.upstream import kueue, trainjob
from trainyard.repo.validate import ClusterCheck

KUEUE_TRAINJOB_WEBHOOK = "mtrainjob.kb.io"  # kueue@v0.19.2:charts/kueue/templates/webhook/manifests.yaml
# PodSpecPatch fields Trainer v2.3.0 holds immutable (trainer@v2.3.0:pkg/apis/trainer/v1alpha1/
# trainjob_types.go, `self == oldSelf` on each)
IMMUTABLE_PATCH_FIELDS = (
    "containers",
    "initContainers",
    "volumes",
    "imagePullSecrets",
    "securityContext",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
)
FIXED_MUTATING_POLICY = (1, 37)  # the first minor whose every patch has kubernetes#140419's fix


def check_skew(ctx: ClusterCheck) -> None:
    _mutating_policies(ctx)
    kueue_release = [r for r in ctx.resources if (rel := releases.of_upstream(r)) and rel.key == "kueue"]
    if not kueue_release:
        return
    if releases.still_open("kueue", releases.KUEUE_MANAGER_ENTRY):
        for r in kueue_release:
            _reinvoked_trainjob_webhook(ctx, r)
    runtimes = [r.doc for r in ctx.resources if trainjob.is_runtime(r.doc)]
    tolerating_flavors = sorted(
        r.name for r in ctx.resources if r.kind == "ResourceFlavor" and dig(r.doc, "spec").get("tolerations")
    )
    for r in ctx.resources:
        if trainjob.is_trainjob(r.doc):
            _trainjob(ctx, r, runtimes, tolerating_flavors)


def _mutating_policies(ctx: ClusterCheck) -> None:
    declared = ctx.declared.spec.kubernetes_version if ctx.declared else "1.36"
    if tuple(int(p) for p in declared.split(".")[:2]) >= FIXED_MUTATING_POLICY:
        return
    for r in ctx.resources:
        if r.kind != "MutatingAdmissionPolicy" or r.group != "admissionregistration.k8s.io":
            continue
        for i, m in enumerate(as_list(as_dict(r.doc.get("spec")).get("mutations"))):
            expression = dig(m, "jsonPatch").get("expression")
            found = object_initializers(expression) if isinstance(expression, str) else []
            if found:
                ctx.err(
                    r.where(),
                    f"spec.mutations[{i}].jsonPatch.expression: {found[0]}{{...}}: kube-apiserver v1.36.0-v1.36.4 "
                    "panics on an Object initializer inside a list or map of a JSONPatch value, failurePolicy "
                    f"notwithstanding (kubernetes/kubernetes#140419, fixed in v1.36.5), and this cluster declares "
                    f"Kubernetes {declared} without its patch: write the value as a map literal "
                    "({'key': dyn(value)}), as trainyard generate does",
                    r.describe(),
                )


def _reinvoked_trainjob_webhook(ctx: ClusterCheck, r: Resource) -> None:
    if r.kind != "MutatingWebhookConfiguration":
        return
    for i, hook in enumerate(as_list(r.doc.get("webhooks"))):
        hook = as_dict(hook)
        if hook.get("name") == KUEUE_TRAINJOB_WEBHOOK and hook.get("reinvocationPolicy") == "IfNeeded":
            ctx.err(
                r.where(),
                f"webhooks[{i}] ({KUEUE_TRAINJOB_WEBHOOK}).reinvocationPolicy: IfNeeded: Kueue "
                f"{releases.BY_KEY['kueue'].version} appends its runtime patch on each call, and a second one "
                f"makes kube-apiserver refuse the TrainJob ({releases.KUEUE_MANAGER_ENTRY.ref}); set the chart "
                "value mutatingWebhook.reinvocationPolicy to Never",
                r.describe(),
            )


def _trainjob(ctx: ClusterCheck, r: Resource, runtimes: list[dict], tolerating_flavors: list[str]) -> None:
    spec = as_dict(r.doc.get("spec"))
    patches = [(i, as_dict(p)) for i, p in enumerate(as_list(spec.get("runtimePatches")))]
    kueue_version = releases.BY_KEY["kueue"].version
    if releases.still_open("kueue", releases.KUEUE_MANAGER_ENTRY):
        for i, p in patches:
            if p.get("manager") == kueue.MANAGER:
                ctx.err(
                    r.where(),
                    f"spec.runtimePatches[{i}].manager: {kueue.MANAGER} is Kueue's own entry: Kueue "
                    f"{kueue_version}'s webhook adds it again on create and kube-apiserver refuses the TrainJob "
                    f"({releases.KUEUE_MANAGER_ENTRY.ref}); leave it out of the manifest",
                    r.describe(),
                )
    if kueue.queue_name(r.doc) is None:  # Kueue suspends and resumes only the jobs it queues
        return
    if releases.still_open("kueue", releases.TRAINER_PATCH_WRITE_BACK):
        for i, p in patches:
            if p.get("manager") == kueue.MANAGER:
                continue
            for where, pod_spec in _patch_pod_specs(p):
                for name in IMMUTABLE_PATCH_FIELDS:
                    if name in pod_spec:
                        ctx.err(
                            r.where(),
                            f"spec.runtimePatches[{i}].{where}.{name}: Kueue {kueue_version} writes the TrainJob "
                            f"back from Trainer v2.2.1's types to resume it, Trainer "
                            f"{trainjob.TRAINER_VERSION} holds this field immutable and refuses the update, so "
                            f"the TrainJob stays suspended ({releases.TRAINER_PATCH_WRITE_BACK.ref}); set it in a "
                            "runtime of the job's own",
                            r.describe(),
                        )
    if releases.still_open("kueue", releases.KUEUE_TRAINER_WRITE_BACK):
        for where, problem in _written_back_differently(as_dict(spec.get("trainer"))):
            ctx.err(
                r.where(),
                f"spec.trainer.{where}: {problem}: Kueue {kueue_version} writes the TrainJob back to resume it, "
                f"spec.trainer is immutable, and the TrainJob stays suspended "
                f"({releases.KUEUE_TRAINER_WRITE_BACK.ref})",
                r.describe(),
            )
    if tolerating_flavors and releases.still_open("kueue", releases.KUEUE_FLAVOR_TOLERATIONS):
        runtime = trainjob.find_runtime(r.doc, runtimes)
        given = [
            f"its runtime {runtime.get('kind')} {dig(runtime, 'metadata').get('name')} ({path})"
            for path, tpl in (pod_templates(runtime) if runtime else ())
            if dig(tpl, "spec").get("tolerations")
        ]
        given += [
            f"spec.runtimePatches[{i}].{where}.tolerations"
            for i, p in patches
            if p.get("manager") != kueue.MANAGER
            for where, pod_spec in _patch_pod_specs(p)
            if pod_spec.get("tolerations")
        ]
        if given:
            ctx.err(
                r.where(),
                f"tolerations from {given[0]}: Kueue {kueue_version} replaces them with the tolerations of the "
                f"ResourceFlavor that admits the TrainJob (this cluster's {', '.join(tolerating_flavors)} have "
                f"some), so the pods lose them ({releases.KUEUE_FLAVOR_TOLERATIONS.ref}); put them in the "
                "flavor, or give the flavor none",
                r.describe(),
            )


def _patch_pod_specs(patch: dict) -> Iterator[tuple[str, dict]]:
    """(path, pod spec) of each replicated job a runtime patch changes."""
    for j, _, pod_spec in trainjob.patch_replicated_jobs(patch):
        yield f"{trainjob.PATCH_REPLICATED_JOBS}[{j}].{trainjob.PATCH_POD_SPEC}", pod_spec


def _written_back_differently(trainer: dict) -> Iterator[tuple[str, str]]:
    """What a Go client writes back differently in a TrainJob's spec.trainer: an explicit empty env
    value (EnvVar.Value is omitempty) and a quantity whose text it rewrites (round_trip)."""
    for i, e in enumerate(as_list(trainer.get("env"))):
        if isinstance(e, dict) and e.get("value") == "":
            yield f"env[{i}].value", 'an empty value comes back absent; leave "value" out'
    resources = as_dict(trainer.get("resourcesPerNode"))
    for section in ("limits", "requests"):
        for name, q in as_dict(resources.get(section)).items():
            try:
                text = round_trip(q)
            except QuantityError:
                continue  # refused as a quantity by the TrainJob checks
            if text != q:
                yield f"resourcesPerNode.{section}[{name}]", f"{q!r} comes back as {text!r}; write {text!r}"
