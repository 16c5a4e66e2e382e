"""``trainyard validate``: everything a pull request must get right, checked offline.

Per cluster, on what the emulated Argo CD renders (:mod:`trainyard.argocd`):

- every folder renders with kustomize; built-in kinds pass kubernetes-validate (strict, 1.30);
  cluster-scoped objects carry no namespace; namespaced objects land in a namespace that exists
  by then;
- Kubeflow jobs: every replica's pod template passes as a PodTemplateSpec, the Training
  Operator's own admission rules hold (:func:`trainyard.operator.admission_problems`), no
  ``runPolicy.ttlSecondsAfterFinished`` (it fights Argo CD, see base/apps/jobs.yaml), job names
  and the operator's pod names unique in the cluster;
- the webhook's default profile exists in policies/, its network exists as a
  NetworkAttachmentDefinition in the training namespace, and the admission policy's parameters
  and the webhook's image match agree with policies/; NAD configs are sane;
- Argo CD: every Application has an explicit sync wave; upstream sources are pinned (a tag or a
  commit, never HEAD or a branch); projects allow what their Applications deploy; an API group
  installed by a CRD provider is used only in a later wave;
- no image without a tag or with ``latest``; the NCCL lint on every env of every container;
- for every job: the pods the operator would create are rejected by the ValidatingAdmissionPolicy
  as created, and admitted (policy and Pod schema) once the webhook engine has mutated them.

Each problem names the file (and the folder built), the object and what to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from trainyard import argocd, cluster_facts, nad, operator, preview, schema, vap
from trainyard.errors import UserError
from trainyard.nccl_lint import lint_env
from trainyard.problems import Problem, error, warning
from trainyard.repository import POLICIES, Repository
from trainyard.resources import CLUSTER_SCOPED, Resource, containers, pod_templates

ARGO_GROUP = "argoproj.io"
PROVIDES_ANNOTATION = "trainyard.dev/provides"
FABRIC_LABEL = "trainyard.dev/fabric"
# Namespaces that exist before anything here is synced.
PREEXISTING_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "argocd"})
_PINNED = re.compile(r"^(v?\d+(\.\d+){1,2}([-+.][0-9A-Za-z.-]+)?|[0-9a-f]{40})$")


class ValidationFailed(UserError):
    exit_code = 1


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    renders: dict[str, argocd.ClusterRender] = field(default_factory=dict)
    previews: dict[str, list[preview.JobPreview]] = field(default_factory=dict)

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]


def validate(repo: Repository, clusters: list[str] | None = None) -> Report:
    from webhook.policy import load_policies

    report = Report()
    policies = load_policies(repo.root / POLICIES)
    for cluster in clusters or repo.clusters():
        render = argocd.render_cluster(repo, cluster)
        report.renders[cluster] = render
        checker = _ClusterCheck(repo, render, policies)
        checker.run()
        for problem in checker.problems:
            if problem not in report.problems:
                report.problems.append(problem)
        report.previews[cluster] = checker.previews
    return report


class _ClusterCheck:
    def __init__(self, repo: Repository, render: argocd.ClusterRender, policies: object) -> None:
        self.repo = repo
        self.render = render
        self.cluster = render.cluster
        self.policies = policies
        self.problems: list[Problem] = [
            Problem(p.severity, p.where, p.message, p.obj, self.cluster) for p in render.problems
        ]
        self.previews: list[preview.JobPreview] = []
        self.resources = render.resources()
        self.facts = cluster_facts.collect(self.resources)
        self.wave_of_app = {a.name: a.app.wave for a in render.apps}
        self.wave_of_app["(bootstrap)"] = min(self.wave_of_app.values(), default=0) - 1

    # helpers
    def err(self, where: str, message: str, obj: str | None = None) -> None:
        self.problems.append(error(where, message, obj, self.cluster))

    def warn(self, where: str, message: str, obj: str | None = None) -> None:
        self.problems.append(warning(where, message, obj, self.cluster))

    def run(self) -> None:
        for r in self.resources:
            self.check_resource(r)
        self.check_applications()
        self.check_waves_and_namespaces()
        self.check_fabric()
        self.check_jobs()

    # ------------------------------------------------------------------ every object
    def check_resource(self, r: Resource) -> None:
        where, obj = r.where(), r.describe()
        if not r.kind or not r.api_version:
            self.err(where, "apiVersion and kind are required", obj)
            return
        if (r.group, r.kind) in CLUSTER_SCOPED and r.namespace:
            self.err(where, f"{r.kind} is cluster-scoped but has metadata.namespace {r.namespace!r}; remove it", obj)
        if schema.has_schema(r.kind, r.api_version):
            for e in schema.validate(r.doc):
                self.err(where, f"schema (Kubernetes {schema.KUBERNETES_VERSION}, strict): {e}", obj)
        elif operator.is_job(r.doc):
            for path, tpl in pod_templates(r.doc):
                for e in schema.validate_pod_template(tpl):
                    self.err(where, f"{path} as a PodTemplateSpec: {e}", obj)
        elif nad.is_nad(r.doc):
            errors, warnings = nad.config_problems(r.doc)
            for e in errors:
                self.err(where, e, obj)
            for w in warnings:
                self.warn(where, w, obj)
        for path, tpl in pod_templates(r.doc):
            for cpath, c in containers(tpl):
                self.check_image(r, f"{path}.{cpath}".lstrip("."), c)
                if not operator.is_job(r.doc):  # jobs: linted with their fabric's transport (check_jobs)
                    self.check_env(r, f"{path}.{cpath}".lstrip("."), c)

    def check_image(self, r: Resource, path: str, c: dict) -> None:
        from webhook.images import parse_image

        image = c.get("image")
        if not isinstance(image, str) or not image:
            return  # required-ness is the schema's business
        ref = parse_image(image)
        if ref is None:
            self.err(r.where(), f"{path}.image {image!r} is not a valid image reference", r.describe())
        elif ref.digest is None and ref.tag in (None, "latest"):
            what = "has no tag (it means latest)" if ref.tag is None else "uses the tag latest"
            self.err(
                r.where(),
                f"{path}.image {image!r} {what}: pin a version tag or a digest so every node runs the same image",
                r.describe(),
            )

    def check_env(self, r: Resource, path: str, c: dict, expect: str | None = None) -> None:
        env = c.get("env")
        if not isinstance(env, list):
            return
        pairs = [
            (e["name"], e.get("value") if isinstance(e.get("value"), str) else None)
            for e in env
            if isinstance(e, dict) and isinstance(e.get("name"), str)
        ]
        for f in lint_env(pairs, expect_transport=expect):
            line = f"{path}.env {f.name}: {f.message}"
            (self.err if f.severity == "error" else self.warn)(r.where(), line, r.describe())

    # ------------------------------------------------------------------ Argo CD
    def check_applications(self) -> None:
        projects = {r.name: r for r in self.resources if r.group == ARGO_GROUP and r.kind == "AppProject"}
        names: dict[str, argocd.AppRender] = {}
        for ar in self.render.apps:
            app = ar.app
            where, obj = app.where(), app.resource.describe()
            if app.name in names:
                self.err(
                    where, f"Application name {app.name!r} is used twice (also {names[app.name].app.where()})", obj
                )
            names[app.name] = ar
            if not app.has_wave:
                self.err(
                    where, "no argocd.argoproj.io/sync-wave annotation: give every Application an explicit wave", obj
                )
            for up in ar.upstream:
                if not _PINNED.match(up.revision):
                    self.err(
                        where,
                        f"upstream source {up.repo_url} is not pinned (targetRevision {up.revision!r}): "
                        "use a release tag or a commit SHA",
                        obj,
                    )
            project = projects.get(app.project)
            if project is None:
                if app.project != "default":
                    self.err(where, f"spec.project {app.project!r} is not an AppProject of this cluster", obj)
                continue
            self.check_project(ar, project)

    def check_project(self, ar: argocd.AppRender, project: Resource) -> None:
        app, spec = ar.app, project.doc.get("spec") or {}
        where, obj = app.where(), app.resource.describe()
        repos = [str(s) for s in spec.get("sourceRepos") or []]
        urls = [u.repo_url for u in ar.upstream] or [str(app.source.get("repoURL", ""))]
        for url in urls:
            if "*" not in repos and not any(_same_repo(url, s) for s in repos):
                self.err(where, f"project {project.name} does not allow the source {url} (spec.sourceRepos)", obj)
        dest_ns = app.destination.get("namespace")
        allowed = [d.get("namespace") for d in spec.get("destinations") or [] if isinstance(d, dict)]
        if dest_ns and not any(a in ("*", dest_ns) for a in allowed):
            self.err(where, f"project {project.name} does not allow destination namespace {dest_ns!r}", obj)
        cluster_list = spec.get("clusterResourceWhitelist")
        ns_list = spec.get("namespaceResourceWhitelist")
        for r in ar.resources:
            scoped = (r.group, r.kind) in CLUSTER_SCOPED
            rules = cluster_list if scoped else ns_list
            if rules is None and not scoped:
                continue  # no namespaced whitelist: everything namespaced is allowed
            if not any(_gk_match(rule, r) for rule in rules or []):
                self.err(
                    r.where(),
                    f"project {project.name} of Application {app.name} does not allow {r.group or 'core'}/{r.kind} "
                    f"({'cluster' if scoped else 'namespace'}ResourceWhitelist); Argo CD would refuse to sync it",
                    r.describe(),
                )
            if r.namespace and not any(a in ("*", r.namespace) for a in allowed):
                self.err(r.where(), f"project {project.name} does not allow namespace {r.namespace!r}", r.describe())

    def check_waves_and_namespaces(self) -> None:
        providers: dict[str, int] = {ARGO_GROUP: -(10**6)}  # Argo CD itself provides argoproj.io
        for ar in self.render.apps:
            groups = ar.app.resource.annotations.get(PROVIDES_ANNOTATION, "")
            for g in (x.strip() for x in groups.split(",")):
                if g:
                    providers[g] = min(providers.get(g, 10**6), ar.app.wave)
            for r in ar.resources:
                if r.kind == "CustomResourceDefinition":
                    g = str((r.doc.get("spec") or {}).get("group", ""))
                    providers[g] = min(providers.get(g, 10**6), ar.app.wave)
        namespaces: dict[str, int] = {}
        for ar in self.render.apps:
            for r in ar.resources:
                if r.kind == "Namespace" and r.group == "":
                    namespaces[r.name] = min(namespaces.get(r.name, 10**6), ar.app.wave)
            if "CreateNamespace=true" in (ar.app.spec.get("syncPolicy") or {}).get("syncOptions", []):
                ns = ar.app.destination.get("namespace")
                if ns:
                    namespaces[ns] = min(namespaces.get(ns, 10**6), ar.app.wave)
        for ar in self.render.apps:
            wave = ar.app.wave
            for r in ar.resources:
                if r.group and not schema.has_schema(r.kind, r.api_version):
                    provider = providers.get(r.group)
                    if provider is None:
                        self.err(
                            r.where(),
                            f"no Application of this cluster installs the CRDs of API group {r.group!r}; add the "
                            f"provider (annotated {PROVIDES_ANNOTATION}) in an earlier sync wave",
                            r.describe(),
                        )
                    elif provider >= wave:
                        self.err(
                            r.where(),
                            f"API group {r.group!r} is installed in sync wave {provider} but used by Application "
                            f"{ar.name} in wave {wave}: the CRD provider must come in an earlier wave",
                            r.describe(),
                        )
                ns = r.namespace
                if ns and ns not in PREEXISTING_NAMESPACES:
                    created = namespaces.get(ns)
                    if created is None:
                        self.err(
                            r.where(), f"namespace {ns!r} is created by no Application of this cluster", r.describe()
                        )
                    elif created > wave:
                        self.err(
                            r.where(),
                            f"namespace {ns!r} is created in sync wave {created}, after Application {ar.name} "
                            f"(wave {wave}) that uses it",
                            r.describe(),
                        )

    # ------------------------------------------------------------------ fabric
    def check_fabric(self) -> None:
        f = self.facts
        from webhook.policy import PolicySet

        pols: PolicySet = self.policies  # type: ignore[assignment]
        if f.webhook is None:
            self.err(f"clusters/{self.cluster}", "renders no trainyard-webhook Deployment (base/webhook)")
            return
        where_params = f.params.where() if f.params else f.webhook.where()
        if not f.profile:
            self.err(
                f.webhook.where(),
                "the webhook has no --profile (set defaultFabric in trainyard-fabric-params)",
                f.webhook.describe(),
            )
            return
        profile = pols.get(f.profile)
        if profile is None:
            self.err(
                where_params,
                f"unknown fabric profile {f.profile!r} (defaultFabric / the webhook's --profile); "
                f"known profiles: {', '.join(pols.names)} ({POLICIES}/)",
                f.params.describe() if f.params else None,
            )
            return
        data = f.params_data
        if data.get("defaultFabric") != f.profile:
            self.err(
                where_params,
                f"defaultFabric {data.get('defaultFabric')!r} differs from the webhook's --profile {f.profile!r}",
            )
        offered = {k.removeprefix("fabric."): v for k, v in data.items() if k.startswith("fabric.")}
        if f.profile not in offered:
            self.err(where_params, f"no fabric.{f.profile} entry: the admission policy would reject every trainer pod")
        for name, network in offered.items():
            p = pols.get(name)
            if p is None:
                self.err(
                    where_params, f"fabric.{name}: no such profile in {POLICIES}/ (known: {', '.join(pols.names)})"
                )
                continue
            expected = p.spec.networks[0].name
            if network != expected:
                self.err(where_params, f"fabric.{name} is {network!r} but {POLICIES}/{name}.yaml attaches {expected!r}")
            self.check_network(p, where_params)
        images = sorted({img for n in offered if pols.get(n) for img in pols.get(n).spec.trainer_images})
        listed = sorted(v for k, v in data.items() if k.startswith("trainerImage."))
        if images and listed != images:
            self.err(where_params, f"trainerImage.* entries {listed} differ from the profiles' trainerImages {images}")
        if f.mutating is not None:
            for img in images:
                probe = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "probe", "namespace": cluster_facts.TRAINING_NAMESPACE},
                    "spec": {"containers": [{"name": "trainer", "image": f"{img}:1.0"}]},
                }
                if not vap.webhook_matches(f.mutating.doc, probe):
                    self.err(
                        f.mutating.where(),
                        f"matchConditions do not pass a pod running {img}:<tag> (a trainer image of the profiles); "
                        "the webhook would never see its pods",
                        f.mutating.describe(),
                    )
        else:
            self.err(f.webhook.where(), "renders no trainyard-fabric MutatingWebhookConfiguration")
        if f.policy is None or f.binding is None:
            self.err(f.webhook.where(), "renders no trainyard-fabric-required ValidatingAdmissionPolicy and binding")
        else:
            for problem in vap.compile_policy(f.policy.doc):
                self.err(f.policy.where(), problem, f.policy.describe())
        ns = f.namespaces.get(cluster_facts.TRAINING_NAMESPACE)
        if ns is None or ns.labels.get(cluster_facts.INJECTION_LABEL) != "enabled":
            self.err(
                ns.where() if ns else f"clusters/{self.cluster}",
                f"namespace {cluster_facts.TRAINING_NAMESPACE} must exist with label "
                f"{cluster_facts.INJECTION_LABEL}=enabled "
                "(the webhook and the admission policy select namespaces by it)",
            )

    def check_network(self, profile: object, where_params: str) -> None:
        net = profile.spec.networks[0]  # type: ignore[attr-defined]
        ns = net.namespace or cluster_facts.TRAINING_NAMESPACE
        found = self.facts.nads.get((ns, net.name))
        networks_app = self.render.app("trainyard-networks")
        where = networks_app.path if networks_app and networks_app.path else where_params
        if found is None:
            self.err(
                where,
                f"fabric profile {profile.name} attaches NetworkAttachmentDefinition {ns}/{net.name}, "  # type: ignore[attr-defined]
                f"which this cluster does not define; add it to the cluster's networks overlay",
            )
            return
        resource = found.doc.get("metadata", {}).get("annotations", {}).get(nad.RESOURCE_NAME_ANNOTATION)
        if resource and resource not in profile.spec.rdma_resources:  # type: ignore[attr-defined]
            self.warn(
                found.where(),
                f"the NAD asks pods for device-plugin resource {resource!r} ({nad.RESOURCE_NAME_ANNOTATION}), but "
                f"profile {profile.name} does not request it (rdmaResources); "  # type: ignore[attr-defined]
                "the CNI plugin gets no device unless the pod requests it",
                found.describe(),
            )

    # ------------------------------------------------------------------ jobs
    def check_jobs(self) -> None:
        ctx = None
        try:
            ctx = preview.load_context(self.repo, self.cluster, self.resources)
        except UserError as exc:
            self.err(f"overlays/{self.cluster}/platform/webhook", f"cannot preview jobs: {exc}")
        expect = None
        if ctx is not None:
            expect = ctx.policies.get(ctx.profile).spec.transport  # type: ignore[attr-defined]
        job_names: dict[tuple[str, str, str], Resource] = {}
        pod_names: dict[tuple[str, str], Resource] = {}
        for r in self.resources:
            if not operator.is_job(r.doc):
                continue
            where, obj = r.where(), r.describe()
            key = (r.kind, r.namespace or "default", r.name)
            if key in job_names:
                self.err(
                    where,
                    f"{r.kind} {r.name!r} is also defined in {job_names[key].where()}: job names must be unique",
                    obj,
                )
            job_names[key] = r
            problems = operator.admission_problems(r.doc)
            for p in problems:
                self.err(where, f"Training Operator {operator.OPERATOR_VERSION} would refuse it: {p}", obj)
            run_policy = (r.doc.get("spec") or {}).get("runPolicy") or {}
            if isinstance(run_policy, dict) and run_policy.get("ttlSecondsAfterFinished") is not None:
                self.err(
                    where,
                    "spec.runPolicy.ttlSecondsAfterFinished: the operator deletes the finished job and Argo CD creates "
                    "it again on the next sync (the job trains again); remove it and delete the job folder instead",
                    obj,
                )
            for path, tpl in pod_templates(r.doc):
                self.check_template_fabric(r, path, tpl)
                for cpath, c in containers(tpl):
                    self.check_env(r, f"{path}.{cpath}", c, expect)
            if problems or ctx is None:
                continue
            try:
                jp = preview.preview_job(r, ctx)
            except operator.JobError as exc:
                self.err(where, str(exc), obj)
                continue
            self.previews.append(jp)
            for pod in jp.pods:
                pkey = (pod.after["metadata"].get("namespace", "default"), pod.name)
                if pkey in pod_names and pod_names[pkey] is not r:
                    self.err(where, f"pod name {pod.name!r} is also a pod of {pod_names[pkey].describe()}", obj)
                pod_names[pkey] = r
            for p in jp.problems():
                self.err(where, p, obj)

    def check_template_fabric(self, r: Resource, path: str, tpl: dict) -> None:
        labels = (tpl.get("metadata") or {}).get("labels") or {}
        wanted = labels.get(FABRIC_LABEL)
        if wanted is None:
            return
        if self.policies.get(wanted) is None:  # type: ignore[attr-defined]
            self.err(
                r.where(),
                f"{path}.metadata.labels[{FABRIC_LABEL}]: unknown fabric profile {wanted!r} "
                f"(known: {', '.join(self.policies.names)}); the webhook would deny the pods",  # type: ignore[attr-defined]
                r.describe(),
            )
        elif f"fabric.{wanted}" not in self.facts.params_data:
            self.err(
                r.where(),
                f"{path}.metadata.labels[{FABRIC_LABEL}]: profile {wanted!r} is not offered on cluster {self.cluster} "
                "(no fabric network for it here)",
                r.describe(),
            )


def _same_repo(a: str, b: str) -> bool:
    from trainyard.repository import normalize_url

    return normalize_url(a) == normalize_url(b)


def _gk_match(rule: object, r: Resource) -> bool:
    if not isinstance(rule, dict):
        return False
    g, k = str(rule.get("group", "")), str(rule.get("kind", ""))
    return g in ("*", r.group) and k in ("*", r.kind)


# ---------------------------------------------------------------------------------------------
# Output


def write_previews(report: Report, directory: Path) -> list[Path]:
    """One text file per job (what each pod gets, with a diff) and the admitted pods as YAML."""
    written = []
    for cluster, jobs in report.previews.items():
        folder = directory / cluster
        folder.mkdir(parents=True, exist_ok=True)
        for jp in jobs:
            base = folder / f"{jp.job.name}"
            text = preview.format_job(jp, diff=True)
            base.with_suffix(".txt").write_text(text, encoding="utf-8")
            base.with_suffix(".pods.yaml").write_text(preview.pods_yaml(jp), encoding="utf-8")
            written += [base.with_suffix(".txt"), base.with_suffix(".pods.yaml")]
    return written


def summary(report: Report) -> str:
    lines = []
    for cluster, render in report.renders.items():
        n_apps = len(render.apps)
        n_res = len(render.resources())
        jobs = len(report.previews.get(cluster, []))
        upstream = sum(1 for a in render.apps if a.upstream)
        errs = sum(1 for p in report.errors() if p.cluster == cluster)
        lines.append(
            f"{cluster}: {n_apps} Applications ({upstream} upstream), {n_res} objects, {jobs} job(s) previewed, "
            f"{errs} error(s)"
        )
    return "\n".join(lines)
