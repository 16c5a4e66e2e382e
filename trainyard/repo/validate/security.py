"""What a job folder may do: the job namespaces' admission policies and the jobs AppProject agree with
what validate checks, and every object of a job folder passes the policies bound to its namespace.

- The AppProject of the job Applications (the ApplicationSet's) lets them create exactly the kinds
  validate knows how to check (:data:`JOB_FOLDER_KINDS`), no cluster-scoped kind, in named namespaces.
- Each namespace it deploys to is bound by the pod security policy (``trainyard-pod-security``,
  generated from policies/, rendered exactly as generated) and the Service policy
  (``trainyard-job-services``), both with ``validationActions: [Deny]``; its PodSecurity labels
  warn and audit at ``baseline`` and enforce ``privileged`` (baseline would refuse IPC_LOCK, which
  every trainer pod gets: the pod security policy enforces baseline instead).
- Every object a job folder renders is evaluated with the cluster's bound policies, as
  kube-apiserver would on its creation (the pods are, in the previews).
"""

from __future__ import annotations

from trainyard.repo.generate import pod_security
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import bindings, matching, vap
from trainyard.repo.upstream.applications import ARGO_GROUP, AppRender
from trainyard.repo.validate import ClusterCheck

SERVICES_POLICY = "trainyard-job-services"
# What a job folder may create: the kinds validate expands and checks (jobs), and the ConfigMaps and
# Services a job may bring (checked against the Service policy and the names the controllers create).
JOB_FOLDER_KINDS = frozenset(
    {
        ("trainer.kubeflow.org", "TrainJob"),
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "TFJob"),
        ("kubeflow.org", "MPIJob"),
        ("", "ConfigMap"),
        ("", "Service"),
    }
)
ENFORCE = "pod-security.kubernetes.io/enforce"
Labels = dict[str, dict[str, str]]  # namespace -> its labels
PSA_LEVELS = {"warn": "pod-security.kubernetes.io/warn", "audit": "pod-security.kubernetes.io/audit"}


def job_apps(ctx: ClusterCheck) -> list[AppRender]:
    """The Applications made by an ApplicationSet: one per job folder."""
    return [ar for ar in ctx.render.apps if ar.app.generated_by]


def check_security(ctx: ClusterCheck) -> None:
    apps = job_apps(ctx)
    projects = {r.name: r for r in ctx.resources if r.group == ARGO_GROUP and r.kind == "AppProject"}
    labels = bindings.namespace_labels(ctx.resources)
    bound = bindings.collect(ctx.resources)
    namespaces: set[str] = set()
    for name in sorted({ar.app.project for ar in apps}):
        project = projects.get(name)
        if project is not None:
            namespaces |= check_jobs_project(ctx, project)
    namespaces |= {str(ar.app.destination.get("namespace")) for ar in apps if ar.app.destination.get("namespace")}
    for ns in sorted(namespaces):
        check_namespace(ctx, ns, labels, bound)
    applied: dict[tuple[str, str, str, str], AppRender] = {}
    for ar in ctx.render.apps:
        for r in ar.resources:
            applied.setdefault((r.group, r.kind, r.namespace or "", r.name), ar)
    for ar in apps:
        for r in ar.resources:
            other = applied.get((r.group, r.kind, r.namespace or "", r.name))
            if other is not None and other is not ar:
                ctx.err(
                    r.where(),
                    f"Application {other.name} ({other.path or other.app.where()}) applies this object too: two "
                    "Applications would overwrite each other's version of it; rename it",
                    r.describe(),
                )
            for failure in bindings.evaluate(bound, r.doc, labels):
                policy, _, message = failure.partition(": ")
                ctx.err(r.where(), f"the admission policy {policy} rejects it: {message}", r.describe())


def check_jobs_project(ctx: ClusterCheck, project: Resource) -> set[str]:
    """The job Applications' project allows exactly what validate checks; returns its namespaces."""
    spec = project.doc.get("spec") or {}
    where, obj = project.where(), project.describe()
    white = spec.get("namespaceResourceWhitelist")
    if white is None:
        ctx.err(where, "job Applications use this project, which sets no namespaceResourceWhitelist: Argo CD "
                "would let a job folder create any namespaced kind; list the job kinds", obj)  # fmt: skip
    for rule in white or []:
        group, kind = str((rule or {}).get("group", "")), str((rule or {}).get("kind", ""))
        if (group, kind) not in JOB_FOLDER_KINDS:
            known = ", ".join(f"{g or 'core'}/{k}" for g, k in sorted(JOB_FOLDER_KINDS))
            ctx.err(
                where,
                f"namespaceResourceWhitelist allows {group or 'core'}/{kind} to job folders, which trainyard validate "
                f"does not check (it checks {known}); remove it, or teach validate the kind first",
                obj,
            )
    if spec.get("clusterResourceWhitelist"):
        ctx.err(where, "clusterResourceWhitelist must be empty for job Applications: a job folder creates no "
                "cluster-scoped object", obj)  # fmt: skip
    out = set()
    for d in spec.get("destinations") or []:
        ns = d.get("namespace") if isinstance(d, dict) else None
        if not ns or any(c in str(ns) for c in "*?["):
            ctx.err(where, f"destinations: namespace {ns!r}: name the job namespaces, so that their admission "
                    "policies can be checked", obj)  # fmt: skip
        else:
            out.add(str(ns))
    return out


def check_namespace(ctx: ClusterCheck, ns: str, labels: Labels, bound: list[bindings.Bound]) -> None:
    where = f"overlays/{ctx.cluster}/platform/namespaces"
    ns_labels = labels.get(ns)
    if ns_labels is None:
        ctx.err(where, f"namespace {ns}, where job folders deploy, is created by no Application of this cluster")
        return
    for policy, resource in ((pod_security.NAME, "pods"), (SERVICES_POLICY, "services")):
        request = matching.MatchRequest(resource=resource, namespace_labels=ns_labels)
        probe = {"apiVersion": "v1", "metadata": {"name": "probe", "namespace": ns}}
        found = [b for b in bound if b.name == policy]
        if not any(matching.binding_applies(b.policy.doc, b.binding.doc, probe, request) and vap.denies(b.binding.doc)
                   for b in found):  # fmt: skip
            ctx.err(
                where,
                f"namespace {ns}, where job folders deploy, is not bound by the ValidatingAdmissionPolicy {policy} "
                "with validationActions [Deny]; its kustomization must include base/namespaces (which brings "
                "base/pod-security and base/job-services) and the binding must select the namespace",
            )
    rendered = next((b.policy for b in bound if b.name == pod_security.NAME), None)
    if rendered is not None and rendered.doc != pod_security.policy(ctx.policies):
        ctx.err(
            rendered.where(),
            f"ValidatingAdmissionPolicy {pod_security.NAME} differs from what policies/ generates: do not patch it; "
            "change the profiles and run trainyard generate",
            rendered.describe(),
        )
    level = ns_labels.get(ENFORCE, "privileged")
    if level != "privileged":
        ctx.err(
            where,
            f"namespace {ns}: PodSecurity enforce {level} refuses the IPC_LOCK capability the webhook gives every "
            f"trainer pod; enforce privileged there ({pod_security.NAME} enforces baseline plus the fabric instead)",
        )
    for mode, key in PSA_LEVELS.items():
        if ns_labels.get(key) not in ("baseline", "restricted"):
            ctx.err(
                where,
                f"namespace {ns}: label {key} is {ns_labels.get(key)!r}; keep PodSecurity {mode} at baseline, so that "
                "what baseline alone would refuse is still reported",
            )
