"""``trainyard validate``: everything a pull request must get right, checked offline.

Per cluster, on what the emulated Argo CD renders (:mod:`trainyard.repo.upstream.app_render`):

- every folder renders with kustomize; built-in kinds pass kubernetes-validate (strict, 1.30);
  cluster-scoped objects carry no namespace; namespaced objects land in a namespace that exists
  by then;
- Kubeflow jobs: every replica's pod template passes as a PodTemplateSpec, the Training
  Operator's own admission rules hold (:func:`trainyard.repo.upstream.training_operator.admission_problems`), no
  ``runPolicy.ttlSecondsAfterFinished`` (it fights Argo CD, see base/apps/jobs.yaml), job names
  and the operator's pod names unique in the cluster;
- the webhook's default profile exists in policies/, its network exists as a
  NetworkAttachmentDefinition in the training namespace, and the admission policy's parameters
  and the webhook's image match agree with policies/; NAD configs are sane;
- Argo CD: every Application has an explicit sync wave; upstream sources are pinned (a tag or a
  commit, never HEAD or a branch); projects allow what their Applications deploy; an API group
  installed by a CRD provider is used only in a later wave; sync options are ones Argo CD reads,
  ignoreDifferences pointers and jq paths valid (:mod:`trainyard.repo.upstream.argo_fields`; what
  it does not read is refused by name for the real Argo CD of the cluster tier), a rule that
  matches nothing warned of;
- every image (upstream releases' too, rendered from their pinned modules) pinned by a version tag,
  a commit tag or a digest, a refusal naming the release; the NCCL lint on every env of every
  container;
- what a cluster installs hangs together (:mod:`trainyard.repo.validate.installs`): kinds served by
  its CRDs, custom resources (Argo CD's, the generated Applications included) valid against their
  CRD's structural schema with unknown fields refused, as kube-apiserver checks them; CRD
  providers that say what they install, bindings to roles and ServiceAccounts that exist, webhooks
  that reach a Service;
- the cluster's declared facts (clusters/<cluster>/cluster.yaml: Kubernetes version, admission
  mode, node pools, topology labels) are complete and consistent;
- TrainJobs: Kubeflow Trainer's admission rules with the job's runtime, the JobSet Trainer builds
  and what Kueue would do with it (a LocalQueue that exists, a flavor with quota enough, a
  topology level the flavor's Topology has); the cluster's runtimes are those generated from the
  profiles it offers; every generated file (runtimes, Kueue queues) matches its source;
- for every job: the pods its controllers would create are rejected by the ValidatingAdmissionPolicy
  as created, and admitted (policy and Pod schema) once the webhook engine has mutated them.

Each problem names the file (and the folder built), the object and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainyard.contract.errors import CheckFailed, UserError
from trainyard.repo.generate import files
from trainyard.repo.jobs import preview
from trainyard.repo.model import declared, rendered_facts
from trainyard.repo.model.problems import Problem, error, warning
from trainyard.repo.model.rendered import Resource
from trainyard.repo.model.repository import POLICIES, Repository
from trainyard.repo.upstream import app_render, applications
from webhook.policy import PolicySet, load_policies

__all__ = ["ClusterCheck", "Report", "ValidationFailed", "summary", "validate", "write_previews"]


class ValidationFailed(CheckFailed):
    """validate (or preview) found errors: exit 1."""


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    renders: dict[str, applications.ClusterRender] = field(default_factory=dict)
    previews: dict[str, list[preview.JobPreview]] = field(default_factory=dict)

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]


@dataclass
class ClusterCheck:
    """What every check of one cluster reads (the render, the policies, the cluster's facts) and
    where it reports (problems, the job previews it made)."""

    repo: Repository
    render: applications.ClusterRender
    policies: PolicySet
    only_jobs: set[str] | None = None  # job folders whose pods to preview; None: every job
    problems: list[Problem] = field(default_factory=list)
    previews: list[preview.JobPreview] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster = self.render.cluster
        self.problems = [Problem(p.severity, p.where, p.message, p.obj, self.cluster) for p in self.render.problems]
        self.resources: list[Resource] = self.render.resources()
        self.facts = rendered_facts.collect(self.resources)
        self.declared: declared.ClusterFacts | None = None
        try:
            self.declared = declared.load(self.repo, self.cluster)
        except declared.DeclarationError as exc:
            for line in str(exc).splitlines():
                where, _, message = line.partition(": ")
                self.err(where, message)

    def err(self, where: str, message: str, obj: str | None = None) -> None:
        self.problems.append(error(where, message, obj, self.cluster))

    def warn(self, where: str, message: str, obj: str | None = None) -> None:
        self.problems.append(warning(where, message, obj, self.cluster))


def validate(
    repo: Repository, clusters: list[str] | None = None, only_jobs: dict[str, set[str]] | None = None
) -> Report:
    """Check ``clusters`` (default: all). ``only_jobs`` (cluster -> job folders), when given, limits the
    check to its clusters and the pod previews to those folders; the cluster-wide checks (names,
    capacity, Argo CD, admission configuration) still read every job."""
    from trainyard.repo.validate import argo, capacity, fabric, installs, jobs, objects, security, skew, startable

    report = Report()
    policies = load_policies(repo.root / POLICIES)
    try:
        report.problems += [error(path, message) for path, message in files.stale(repo)]
    except UserError as exc:  # a source itself is wrong: reported by the cluster checks too
        report.problems.append(error(files.RUNTIMES.as_posix(), f"cannot check the generated files: {exc}"))
    stale: list[argo.StaleCandidate] = []  # ignoreDifferences entries, warned of where no cluster uses one
    for cluster in clusters or repo.clusters():
        if only_jobs is not None and cluster not in only_jobs:
            continue
        render = app_render.render_cluster(repo, cluster)
        report.renders[cluster] = render
        ctx = ClusterCheck(repo, render, policies, only_jobs[cluster] if only_jobs is not None else None)
        for r in ctx.resources:
            objects.check_resource(ctx, r)
        argo.check_applications(ctx)
        stale += argo.check_sync_options(ctx)
        argo.check_waves_and_namespaces(ctx)
        installs.check_installs(ctx)
        fabric.check_fabric(ctx)
        security.check_security(ctx)
        jobs.check_jobs(ctx)
        capacity.check_capacity(ctx)
        startable.check_startable(ctx)
        skew.check_skew(ctx)
        for problem in ctx.problems:
            if problem not in report.problems:
                report.problems.append(problem)
        report.previews[cluster] = ctx.previews
    report.problems += argo.stale_rules(stale)
    return report


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
