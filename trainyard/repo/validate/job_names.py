"""Job folder names: what the ApplicationSet makes of them must be a valid Application.

The job ApplicationSet (base/apps/jobs.yaml) turns each folder overlays/<cluster>/jobs/<job> into
an Application whose name and labels its template renders from the folder's path. The check reads
the Applications the emulation generated from the repository's own template
(:mod:`trainyard.repo.upstream.appset`), so a change of the template is followed, and applies the
rules kube-apiserver applies when the ApplicationSet controller creates them:

- the name of a custom resource is a DNS-1123 subdomain (kubernetes/apiextensions-apiserver@v0.36.5
  pkg/registry/customresource/validator.go: ``ValidateObjectMetaAccessor(..., NameIsDNSSubdomain)``;
  argo-cd@v3.6.2 util/argo/argo.go IsValidAppName is the same rule);
- label keys are qualified names and label values at most 63 characters of ``[A-Za-z0-9-_.]``
  starting and ending with an alphanumeric (apimachinery validation.go IsQualifiedName,
  IsValidLabelValue); annotation keys are qualified names.

Why it matters more than for one job: argo-cd@v3.6.2 applicationset/controllers/
applicationset_controller.go Reconcile calls createOrUpdateInCluster, which returns the first
Application kube-apiserver refused, and the reconcile returns before deleteInCluster: while one
folder's Application is refused, no Application of a deleted folder is deleted, so deleted jobs
keep running (seen with Argo CD itself: tests/trainyard/cluster/test_argocd_itself.py).
"""

from __future__ import annotations

from trainyard.contract.k8s import label_value_problem, qualified_name_problem, subdomain_problem
from trainyard.repo.validate import ClusterCheck

CONSEQUENCE = (
    "kube-apiserver refuses the Application, and while it does Argo CD's ApplicationSet controller stops "
    "before deleting the Applications of deleted folders (their jobs keep running)"
)
FIX = "rename the folder: lower case letters, digits and '-', starting and ending with a letter or digit"


def folder_name_problems(app: dict) -> list[str]:
    """Why the Application an ApplicationSet generated (a rendered object) would be refused by
    kube-apiserver: its name, label keys and values, annotation keys."""
    meta = app.get("metadata") if isinstance(app.get("metadata"), dict) else {}
    out = []
    name = meta.get("name")
    problem = subdomain_problem(name) if isinstance(name, str) else f"{name!r} is not a string"
    if problem:
        out.append(f"Application name {problem}")
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    for key, value in labels.items():
        if (problem := qualified_name_problem(str(key))) is not None:
            out.append(f"label key {problem}")
        if (problem := label_value_problem(str(value))) is not None:
            out.append(f"label {key}: {problem}")
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    for key in annotations:
        if (problem := qualified_name_problem(str(key))) is not None:
            out.append(f"annotation key {problem}")
    return out


def check_job_folder_names(ctx: ClusterCheck) -> None:
    for ar in ctx.render.apps:
        if not ar.app.generated_by:
            continue
        folder = ar.app.resource.source or ar.path or ar.app.where()
        basename = folder.rstrip("/").rpartition("/")[2]
        for problem in folder_name_problems(ar.app.resource.doc):
            ctx.err(
                folder,
                f"job folder name {basename!r}: ApplicationSet {ar.app.generated_by} makes it an Application whose "
                f"{problem}; {CONSEQUENCE}; {FIX}",
                f"Application {ar.app.name}"[:200],
            )
    jobs = ctx.repo.root / "overlays" / ctx.cluster / "jobs"
    hidden = sorted(p.name for p in jobs.iterdir() if p.name.startswith(".") and p.is_dir()) if jobs.is_dir() else []
    for name in hidden:
        # argo-cd@v3.6.2 reposerver/repository/repository.go GetGitDirectories (utils.go walkDirectoryTree)
        # skips hidden folders: no Application, no error, the job never runs (the emulation skips it
        # too, so nothing else says so)
        ctx.err(
            f"overlays/{ctx.cluster}/jobs/{name}"[:300],
            f"job folder name {name[:80]!r} starts with '.': Argo CD's git generator skips hidden folders, so no "
            f"Application is made and the job never runs; {FIX}",
        )
