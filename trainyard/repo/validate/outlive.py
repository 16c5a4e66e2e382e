"""What would let a job outlive its folder: deleting a job folder deletes its Application, whose
finalizer makes Argo CD delete every object the folder made (base/apps/jobs.yaml). An object of a
job folder may not opt out of that.

Argo CD's rules (argo-cd@v3.6.2):

- controller/appcontroller.go shouldBeDeleted, on the Application's cascading deletion: an object
  whose ``argocd.argoproj.io/sync-options`` says ``Delete=false`` is left in the cluster, and so is
  one whose ``helm.sh/resource-policy`` says ``keep`` (util/helm/helm.go ResourcePolicyKeep);
- finalizeApplicationDeletion: while an object says ``Delete=confirm`` and nobody has approved the
  deletion (``argocd app confirm-deletion``, the ``argocd.argoproj.io/deletion-approved``
  annotation), nothing at all is deleted: the job runs on until a person acts;
- gitops-engine/v3@v3.6.2 pkg/sync/sync_context.go: ``Prune=false`` keeps an object removed from the
  folder (a job renamed in place keeps running, untracked), ``Prune=confirm`` keeps it until a person
  confirms the prune.

Each annotation is read as gitops-engine reads it (pkg/sync/resource/annotations.go
GetAnnotationCSVs: split on ',', each item trimmed, compared as an exact string; ``Delete=`` and
``Prune=`` take the first item with that prefix). An item Argo CD would not recognise (``delete=false``)
keeps nothing and is refused as an unknown option by the render's own check (syncorder.py). The
``argocd.argoproj.io/compare-options`` annotation (``IgnoreExtraneous``, ``ServerSideDiff``,
``IncludeMutationWebhook``) changes only how an object is compared, never whether it is deleted.
A finalizer in a job folder's object is refused too: no controller here removes one it does not
own, so the object, and its Application's deletion, would wait for ever.
"""

from __future__ import annotations

from trainyard.repo.upstream import syncorder
from trainyard.repo.validate import ClusterCheck

SYNC_OPTIONS = syncorder.SYNC_OPTIONS
RESOURCE_POLICY = "helm.sh/resource-policy"  # argo-cd@v3.6.2:util/helm/helm.go ResourcePolicyAnnotation
# (option prefix, value) -> what it does to a job whose folder is deleted or whose object is removed
KEEPS = {
    ("Delete", "false"): "Argo CD leaves the object in the cluster when the job folder (its Application) is deleted "
    "(appcontroller.go shouldBeDeleted): the job outlives its folder",
    ("Delete", "confirm"): "Argo CD deletes nothing of the Application until a person approves the deletion "
    "(appcontroller.go finalizeApplicationDeletion): the job runs on after its folder is deleted",
    ("Prune", "false"): "Argo CD never prunes the object once it is gone from the folder (sync_context.go): a job "
    "renamed or removed in place keeps running, untracked",
    ("Prune", "confirm"): "Argo CD prunes the object only after a person confirms (sync_context.go): a job removed "
    "from the folder keeps running until then",
}


def keeping_options(annotations: dict[str, str]) -> list[tuple[str, str]]:
    """The (item, why) of each sync option in ``annotations`` that keeps the object after its folder
    or its entry is gone, read as gitops-engine's GetAnnotationOptionValue reads ``Delete=`` and
    ``Prune=`` (the first item with the prefix wins)."""
    items = syncorder.annotation_csvs(annotations.get(SYNC_OPTIONS))
    out = []
    for option in ("Delete", "Prune"):
        first = next((item for item in items if item.startswith(option + "=")), None)
        if first is not None and (option, first[len(option) + 1 :]) in KEEPS:
            out.append((first, KEEPS[(option, first[len(option) + 1 :])]))
    return out


def check_outlive(ctx: ClusterCheck) -> None:
    """Refuse, in every object a job folder renders, what keeps it after the folder is deleted."""
    from trainyard.repo.validate.security import job_apps

    for ar in job_apps(ctx):
        for r in ar.resources:
            where, obj = r.where(), r.describe()
            ann = syncorder.annotations(r.doc)
            for item, why in keeping_options(ann):
                ctx.err(
                    where,
                    f"metadata.annotations[{SYNC_OPTIONS}]: {item}: {why}; remove {item} (a job ends when its "
                    "folder is deleted)",
                    obj,
                )
            policy = syncorder.annotation_csvs(ann.get(RESOURCE_POLICY))
            if any(item.lower() == "keep" for item in policy):
                ctx.err(
                    where,
                    f"metadata.annotations[{RESOURCE_POLICY}]: keep makes Argo CD leave the object in the cluster "
                    "when the job folder is deleted (appcontroller.go shouldBeDeleted): the job outlives its "
                    "folder; remove the annotation",
                    obj,
                )
            finalizers = r.doc["metadata"].get("finalizers") if isinstance(r.doc.get("metadata"), dict) else None
            if finalizers:
                ctx.err(
                    where,
                    f"metadata.finalizers {finalizers!r}: no controller of this platform removes a finalizer a job "
                    "folder sets, so the object (and its Application's deletion) would wait for ever once the "
                    "folder is deleted; remove metadata.finalizers",
                    obj,
                )
