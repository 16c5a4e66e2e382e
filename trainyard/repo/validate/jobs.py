"""Job checks: each controller's admission rules (Kubeflow Trainer for TrainJobs, the Training
Operator for the v1 kinds), names unique in the cluster, and every job's pods through the webhook
engine and the admission policy (the previews)."""

from __future__ import annotations

from trainyard.contract.errors import UserError
from trainyard.contract.names import FABRIC_LABEL, requested_fabric
from trainyard.repo.generate import mutating_policy
from trainyard.repo.jobs import preview
from trainyard.repo.model.rendered import Resource, as_dict, as_list, containers, dig, pod_templates
from trainyard.repo.upstream import syncorder, training_operator, trainjob
from trainyard.repo.validate import ClusterCheck, outlive, priority, trainer
from trainyard.repo.validate.objects import check_env, check_image

# Argo CD deletes and re-creates a resource carrying this option (docs/user-guide/sync-options.md,
# "Replace Resource Instead Of Applying Changes" with Force=true): the way to change a TrainJob's
# immutable fields without renaming it.
# Options that keep a job after its folder is deleted are refused (outlive.py).
SYNC_OPTIONS = syncorder.SYNC_OPTIONS


def check_jobs(ctx: ClusterCheck) -> None:
    admission = None
    try:
        admission = preview.load_context(ctx.repo, ctx.cluster, ctx.resources)
    except UserError as exc:
        ctx.err(f"overlays/{ctx.cluster}/platform/webhook", f"cannot preview jobs: {exc}")
    expect = admission.policies.get(admission.profile).spec.transport if admission is not None else None
    job_names: dict[tuple[str, str, str], Resource] = {}
    pod_names: dict[tuple[str, str], Resource] = {}
    for r in ctx.resources:
        if not preview.is_job(r.doc):
            continue
        key = (r.kind, r.namespace or "default", r.name)
        if key in job_names:
            ctx.err(
                r.where(),
                f"{r.kind} {r.name!r} is also defined in {job_names[key].where()}: job names must be unique",
                r.describe(),
            )
        job_names[key] = r
        if trainjob.is_trainjob(r.doc):
            refused = check_trainjob_spec(ctx, r, expect, admission)
        else:
            refused = check_job_spec(ctx, r, expect)
        if refused or admission is None or (ctx.only_jobs is not None and r.source not in ctx.only_jobs):
            continue
        try:
            jp = preview.preview_job(r, admission)
        except (training_operator.JobError, trainjob.TrainJobError) as exc:
            ctx.err(r.where(), str(exc), r.describe())
            continue
        ctx.previews.append(jp)
        for pod in jp.pods:
            if not pod.after["metadata"].get("name"):
                continue  # generateName: the API server makes it unique
            pkey = (pod.after["metadata"].get("namespace", "default"), pod.name)
            if pkey in pod_names and pod_names[pkey] is not r:
                ctx.err(r.where(), f"pod name {pod.name!r} is also a pod of {pod_names[pkey].describe()}", r.describe())
            pod_names[pkey] = r
        for p in jp.problems():
            ctx.err(r.where(), p, r.describe())
        for pod in jp.pods:
            for notice in pod.notices:
                ctx.warn(r.where(), f"pod {pod.name}: {notice}", r.describe())
        for pod in jp.pods:  # admission: policy: what the MutatingAdmissionPolicies cannot express
            for rule in pod.limits:
                ctx.warn(
                    r.where(),
                    f"pod {pod.name}: this cluster applies the fabric by policy (admission: policy), which cannot "
                    f"handle {mutating_policy.LIMITS[rule]} [{rule}]",
                    r.describe(),
                )
        trainer.check_trainer(ctx, jp)
    check_names(ctx)
    outlive.check_outlive(ctx)
    priority.check_priority(ctx)


# What the cluster itself creates in every namespace: kube-controller-manager publishes the API server's CA
# (kubernetes/kubernetes:pkg/controller/certificates/rootcacertpublisher/publisher.go RootCACertConfigMapName).
RESERVED = {("ConfigMap", "kube-root-ca.crt"): "kube-controller-manager keeps the cluster's root CA in it"}
# What a controller does when it finds an object of the name it wants already there.
IN_THE_WAY = {
    "Service": "the controller finds it there and uses it as the job's headless Service, whose DNS names the pods "
    "rendezvous through (jobset_controller.go createHeadlessSvcIfNecessary; the v1 operator's service.go): "
    "the job's pods would not find each other",
    "ConfigMap": "the controller refuses a ConfigMap it does not own (Trainer's snapshot.go, the MPI operator's "
    "MessageResourceExists) and the job never starts",
}


def check_names(ctx: ClusterCheck) -> None:
    """No two jobs' controllers create objects of the same name, and no object of a job folder
    takes a name a controller creates for a job (its own or another's) or the cluster reserves."""
    from trainyard.repo.validate.security import job_apps

    owners: dict[tuple[str, str, str], preview.JobPreview] = {}
    for jp in ctx.previews:
        ns = jp.job.namespace or "default"
        for kind, name in jp.created:
            other = owners.setdefault((ns, kind, name), jp)
            if other is not jp and other.job.where() != jp.job.where():
                ctx.err(
                    jp.job.where(),
                    f"its controller creates {kind} {name}, as for {other.job.describe()} ({other.job.where()}); "
                    "the two jobs would share it: rename one of them",
                    jp.job.describe(),
                )
    for ar in job_apps(ctx):
        for r in ar.resources:
            if preview.is_job(r.doc):
                continue
            ns = r.namespace or "default"
            jp = owners.get((ns, r.kind, r.name)) if not r.group else None
            if jp is not None:
                ctx.err(
                    r.where(),
                    f"{r.kind} {r.name!r} has the name of the {r.kind} the controllers create for "
                    f"{jp.job.describe()} ({jp.job.where()}): "
                    + IN_THE_WAY.get(r.kind, "the controller would find it in its way")
                    + "; rename it",
                    r.describe(),
                )
            reserved = RESERVED.get((r.kind, r.name)) if not r.group else None
            if reserved:
                ctx.err(r.where(), f"{r.kind} {r.name!r} is reserved: {reserved}; rename it", r.describe())


def check_job_spec(ctx: ClusterCheck, r: Resource, expect: str | None) -> bool:
    """A v1 job as written: the operator's admission rules, runPolicy, fabric labels and env.
    Returns whether the operator would refuse it (then its pods are not previewed)."""
    where, obj = r.where(), r.describe()
    problems = training_operator.admission_problems(r.doc)
    for p in problems:
        ctx.err(where, f"Training Operator {training_operator.OPERATOR_VERSION} would refuse it: {p}", obj)
    run_policy = (r.doc.get("spec") or {}).get("runPolicy") or {}
    if isinstance(run_policy, dict) and run_policy.get("ttlSecondsAfterFinished") is not None:
        ctx.err(
            where,
            "spec.runPolicy.ttlSecondsAfterFinished: the operator deletes the finished job and Argo CD creates "
            "it again on the next sync (the job trains again); remove it and delete the job folder instead",
            obj,
        )
    unreadable = False
    for path, tpl in pod_templates(r.doc):
        check_template_fabric(ctx, r, path, tpl)
        for cpath, c in containers(tpl):
            check_env(ctx, r, f"{path}.{cpath}", c, expect)
            for p in trainer.port_shape_problems(c):  # the operator reads the ports: not previewed
                ctx.err(where, f"{path}.{cpath}.{p}: the API server refuses the job (its CRD's schema)", obj)
                unreadable = True
    return bool(problems) or unreadable


def check_trainjob_spec(ctx: ClusterCheck, r: Resource, expect: str | None, admission: preview.Context | None) -> bool:
    """A TrainJob as written: Trainer's admission rules (with its runtime when the cluster has
    it), the fabric labels of its runtime patches, the env and image of its trainer. Returns
    whether Trainer would refuse it."""
    where, obj = r.where(), r.describe()
    if patched_ports := runtime_patch_ports(r.doc):
        for path in patched_ports:
            ctx.err(
                where,
                f"{path}: a runtime patch cannot set a container's ports (Kubeflow Trainer "
                f"{trainjob.TRAINER_VERSION}'s ContainerPatch has name, env, volumeMounts and securityContext only); "
                "the API server refuses the field: the trainer's ports, the metrics port among them, come from the "
                "runtime",
                obj,
            )
        return True
    runtime = trainjob.find_runtime(r.doc, admission.runtimes) if admission is not None else None
    problems = trainjob.admission_problems(r.doc, runtime)
    for p in problems:
        ctx.err(where, f"Kubeflow Trainer {trainjob.TRAINER_VERSION} would refuse it: {p}", obj)
    spec = as_dict(r.doc.get("spec"))
    trainer = as_dict(spec.get("trainer"))
    check_env(ctx, r, "spec.trainer", trainer, expect)
    for section in ("limits", "requests"):
        for name, value in as_dict(as_dict(trainer.get("resourcesPerNode")).get(section)).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                # Trainer's defaulting webhook decodes the TrainJob into its Go types and patches back
                # what they encode: a resource.Quantity is always a string. Argo CD then sees the live
                # "1" against git's 1 forever, and its sync fails, spec.trainer being immutable (seen
                # with Argo CD itself on the local control plane: tests/trainyard/cluster/test_argocd_itself.py)
                ctx.err(
                    where,
                    f"spec.trainer.resourcesPerNode.{section}.{name}: {value!r} is a number; write it as a string "
                    f'("{value}"): Kubeflow Trainer stores quantities as strings, so Argo CD would find the TrainJob '
                    "OutOfSync forever and fail to sync it (spec.trainer is immutable)",
                    obj,
                )
    if trainer.get("image") is not None:
        check_image(ctx, r, "spec.trainer", trainer)
    for i, patch in enumerate(as_list(spec.get("runtimePatches"))):
        for j, rj in enumerate(as_list(dig(patch, "trainingRuntimeSpec", "template", "spec").get("replicatedJobs"))):
            path = f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}]...template"
            check_template_fabric(ctx, r, path, dig(rj, "template", "spec", "template"))
    if "Force=true" in r.annotations.get(SYNC_OPTIONS, "") and "Replace=true" in r.annotations.get(SYNC_OPTIONS, ""):
        ctx.warn(
            where,
            f"{SYNC_OPTIONS}: Force=true,Replace=true makes Argo CD delete and re-create this TrainJob whenever it "
            "differs from git, which restarts training (from its last checkpoint): remove the annotation once the "
            "change is synced",
            obj,
        )
    return bool(problems)


def runtime_patch_ports(doc: dict) -> list[str]:
    """The paths of ``ports`` in a TrainJob's runtime patches, which its API has no field for
    (kubeflow/trainer@v2.3.0: pkg/apis/trainer/v1alpha1/trainjob_types.go, ContainerPatch)."""
    out = []
    for i, patch in enumerate(as_list(as_dict(doc.get("spec")).get("runtimePatches"))):
        spec = dig(patch, "trainingRuntimeSpec", "template", "spec")
        for j, rj in enumerate(as_list(spec.get("replicatedJobs"))):
            pod = dig(rj, "template", "spec", "template", "spec")
            for group in ("initContainers", "containers"):
                for k, c in enumerate(as_list(pod.get(group))):
                    if isinstance(c, dict) and "ports" in c:
                        out.append(f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}]"
                                   f".template.spec.template.spec.{group}[{k}].ports")  # fmt: skip
    return out


def check_template_fabric(ctx: ClusterCheck, r: Resource, path: str, tpl: dict) -> None:
    wanted = requested_fabric((tpl.get("metadata") or {}).get("labels"))
    if wanted is None:  # absent or empty: the cluster's default profile
        return
    if ctx.policies.get(wanted) is None:
        ctx.err(
            r.where(),
            f"{path}.metadata.labels[{FABRIC_LABEL}]: unknown fabric profile {wanted!r} "
            f"(known: {', '.join(ctx.policies.names)}); "
            + (
                "no MutatingAdmissionPolicy gives the pods a fabric, and the admission policy refuses them"
                if ctx.facts.mode == "policy"
                else "the webhook would deny the pods"
            ),
            r.describe(),
        )
    elif f"fabric.{wanted}" not in ctx.facts.params_data:
        ctx.err(
            r.where(),
            f"{path}.metadata.labels[{FABRIC_LABEL}]: profile {wanted!r} is not offered on cluster {ctx.cluster} "
            "(no fabric network for it here)",
            r.describe(),
        )
