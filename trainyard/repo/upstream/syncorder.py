"""Argo CD's sync order, as gitops-engine computes it (argo-cd/gitops-engine@v3.6.2).

- **Which objects.** Every object once per phase; a hook (``argocd.argoproj.io/hook``, or failing
  any known type there the Helm ``helm.sh/hook``) once per phase it names (pkg/sync/hook/hook.go,
  pkg/sync/sync_phase.go syncPhases).
- **When.** One task per (object, phase), sorted by phase (PreSync, Sync, PostSync), wave
  (``argocd.argoproj.io/sync-wave`` read by Go's strconv.Atoi, else ``helm.sh/hook-weight``, else
  0), kind (Helm's install order, any other kind after it) and name (pkg/sync/sync_tasks.go Less);
  then a Namespace moves up to the first task in it, and a CRD to the first object of its kind,
  taking that task's phase and wave (syncTasks.Sort, adjustDeps). Each (phase, wave) is one step:
  the next starts once every object of this one is Healthy (pkg/sync/sync_context.go Sync).
- **Ties.** Less orders nothing further and sort.Sort is not stable, so among tasks equal in all
  four Argo CD's order changes from sync to sync; the render breaks the tie by group, kind and
  namespace, one of the orders Argo CD may take.
- **Applications.** An Application (or ApplicationSet) is a resource of the Application whose
  render holds it, so the root app syncs its children in this same order and waits for each step
  to be Healthy; for an Application only the argocd-cm health check
  ``resource.customizations.health.argoproj.io_Application`` says so (Argo CD assesses no
  Application health since 1.8: argo-cd/gitops-engine@v3.6.2:pkg/health/health.go
  GetHealthCheckFunc). The Applications an ApplicationSet generates start when it is applied.

Refused by name (:func:`problems`), as no manifest of this repository needs them: hooks in this
repository's Applications (trainyard's sync applies objects; it runs no hook), hook types other
than PreSync, Sync, PostSync and Helm's install and upgrade hooks (SyncFail, Skip, PreDelete,
PostDelete, unknown ones), object sync options other than Prune/Delete (trainyard's sync never
prunes or deletes) and Replace/Force, waves so far apart that Less's Go subtraction overflows, and
annotations that are not strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainyard.repo.model import rendered
from trainyard.repo.model.problems import Problem, error, warning
from trainyard.repo.model.rendered import Resource, meta
from trainyard.repo.upstream.applications import ARGO_GROUP, SYNC_WAVE

if TYPE_CHECKING:
    from trainyard.repo.upstream.applications import AppRender, ClusterRender

# argo-cd/gitops-engine@v3.6.2:pkg/sync/common/types.go
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
HOOK = "argocd.argoproj.io/hook"
HELM_HOOK = "helm.sh/hook"  # pkg/sync/hook/helm/type.go
HELM_HOOK_WEIGHT = "helm.sh/hook-weight"  # pkg/sync/hook/helm/weight.go
APP_HEALTH_KEY = "resource.customizations.health.argoproj.io_Application"

# sync_tasks.go syncPhaseOrder, less SyncFail (refused): the hook types followed
PHASE_ORDER = {"PreSync": -1, "Sync": 0, "PostSync": 1}
# helm/type.go hookTypes: the Helm hooks Argo CD maps to a phase (cert-manager's chart uses post-install)
HELM_HOOK_TYPES = {"pre-install": "PreSync", "pre-upgrade": "PreSync", "post-upgrade": "PostSync",
                   "post-install": "PostSync"}  # fmt: skip

# sync_tasks.go kindOrder (Helm's install order); a kind not listed (custom resources) ranks 0, last
KIND_ORDER = [
    "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
    "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList",
    "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController",
    "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
    "IngressClass", "Ingress", "APIService",
]  # fmt: skip
KIND_RANK = {k: i - len(KIND_ORDER) for i, k in enumerate(KIND_ORDER)}

# Per-object sync options (argocd.argoproj.io/sync-options) trainyard's sync follows: Prune/Delete
# only matter when pruning or deleting, which it never does; Replace=true creates an object not
# there yet and Force=true changes only what happens to a live one (sync_context.go applyObject),
# and the sync fills an empty cluster. Others Argo CD reads are refused by name.
FOLLOWED_OPTIONS = ("Prune=false", "Prune=confirm", "Delete=false", "Delete=confirm", "Replace=true", "Force=true")
NOT_EMULATED_OPTIONS = ("ServerSideApply=true", "ServerSideApply=false", "PruneLast=true", "Validate=false",
                        "SkipDryRunOnMissingResource=true")  # fmt: skip
# Whitespace Go's strings.TrimSpace removes (unicode.IsSpace); Python's str.strip removes more (\x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


# ---------------------------------------------------------------------------------------------
# Reading annotations


# Go's strconv.Atoi, unstructured.GetAnnotations and syncwaves/waves.go Wave live with the objects
go_atoi, annotations, wave = rendered.go_atoi, rendered.go_annotations, rendered.wave_of


def annotation_csvs(value: str | None) -> list[str]:
    """pkg/sync/resource/annotations.go GetAnnotationCSVs: split on ',', trimmed, empty items
    dropped, duplicates dropped, order kept."""
    out: list[str] = []
    for item in (value or "").split(","):
        item = item.strip(_GO_SPACE)
        if item and item not in out:
            out.append(item)
    return out


def has_option(ann: dict[str, str], option: str) -> bool:
    """annotations.go HasAnnotationOption."""
    return option in annotation_csvs(ann.get(SYNC_OPTIONS))


def hook_types(ann: dict[str, str]) -> list[str]:
    """hook/hook.go Types: the followed types of argocd.argoproj.io/hook; when it names none, the
    phases of the Helm hooks helm.sh/hook names (Argo CD's annotation wins over Helm's)."""
    types = [t for t in annotation_csvs(ann.get(HOOK)) if t in PHASE_ORDER]
    if not types:
        types = [HELM_HOOK_TYPES[t] for t in annotation_csvs(ann.get(HELM_HOOK)) if t in HELM_HOOK_TYPES]
    return types


def is_hook(ann: dict[str, str]) -> bool:
    """hook/hook.go IsHook (Skip is refused): argocd.argoproj.io/hook present (any value); else
    helm.sh/hook present and not ``crd-install`` (hook/helm/hook.go IsHook)."""
    return HOOK in ann or (HELM_HOOK in ann and ann[HELM_HOOK] != "crd-install")


def unfollowed_hook_types(ann: dict[str, str]) -> list[str]:
    """The hook types named that trainyard does not follow (all refused by name)."""
    if not is_hook(ann):
        return []
    out = [t for t in annotation_csvs(ann.get(HOOK)) if t not in PHASE_ORDER]
    out += [t for t in annotation_csvs(ann.get(HELM_HOOK)) if t not in HELM_HOOK_TYPES]
    return out if out or hook_types(ann) else ["(none)"]


def sync_phases(ann: dict[str, str]) -> list[str]:
    """sync_phase.go syncPhases, in phase order: each phase a hook names (once), Sync for any
    other object."""
    if is_hook(ann):
        return sorted(set(hook_types(ann)), key=PHASE_ORDER.__getitem__)
    return ["Sync"]


def replace(resource: Resource) -> bool:
    """sync_context.go applyObject shouldReplace, from the object's own sync options."""
    return has_option(annotations(resource.doc), "Replace=true")


# ---------------------------------------------------------------------------------------------
# Tasks and their order


@dataclass
class Task:
    """One sync task: an object in one phase (sync_task.go syncTask)."""

    resource: Resource
    phase: str = "Sync"
    wave: int = 0  # syncwaves.Wave, or the wave adjustDeps gave it
    namespace: str = ""  # metadata.namespace, else the destination's (getSyncTasks sets it on every object)

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def name(self) -> str:
        return self.resource.name

    def key(self) -> tuple:
        """Less, then the tie-break Less leaves open (see the module docstring)."""
        r = self.resource
        return (PHASE_ORDER.get(self.phase, 0), self.wave, KIND_RANK.get(r.kind, 0), r.name, r.group, r.kind,
                self.namespace)  # fmt: skip


@dataclass
class Step:
    """One (phase, wave) of a sync: its tasks, or (for the root) the Applications it starts."""

    phase: str
    wave: int
    tasks: list[Task] = field(default_factory=list)
    apps: list[AppRender] = field(default_factory=list)


def tasks(resources: Iterable[Resource], namespace: str = "") -> list[Task]:
    """The sync tasks of ``resources`` (one Application's, destination ``namespace``) in the order
    gitops-engine runs them (sync_context.go getSyncTasks, syncTasks.Sort)."""
    out = []
    for r in resources:
        ann = annotations(r.doc)
        out.extend(Task(r, phase, wave(ann), r.namespace or namespace) for phase in sync_phases(ann))
    return sort_tasks(out)


def sort_tasks(items: list[Task]) -> list[Task]:
    """syncTasks.Sort: Less, then Namespaces before the first task in them and CRDs before the
    first object of their kind (in place; returns ``items``)."""
    items.sort(key=Task.key)
    _adjust_deps(items, _namespace_dep, lambda t: t.namespace or None)
    _adjust_deps(items, _crd_dep, lambda t: f"{t.resource.group}/{t.kind}")
    return items


def _namespace_dep(t: Task) -> str | None:
    return t.name if t.kind == "Namespace" and t.resource.group == "" else None


def _crd_dep(t: Task) -> str | None:
    r = t.resource
    if r.kind != "CustomResourceDefinition" or r.group != "apiextensions.k8s.io":
        return None
    spec = r.doc.get("spec")
    group = spec.get("group") if isinstance(spec, dict) else None
    names = spec.get("names") if isinstance(spec, dict) else None
    kind = names.get("kind") if isinstance(names, dict) else None
    # unstructured.NestedString: both must be strings
    return f"{group}/{kind}" if isinstance(group, str) and isinstance(kind, str) else None


def _adjust_deps(items: list[Task], is_dep: Callable[[Task], str | None], refs: Callable[[Task], str | None]) -> None:
    """sync_tasks.go adjustDeps, step for step: a dependency found after the first task that
    refers to it moves in front of that task and takes its wave and phase."""
    first: dict[str, int] = {}
    for i in range(len(items)):
        t = items[i]
        dep = is_dep(t)
        if dep is not None:
            index = first.get(dep)
            if index is not None:
                t.wave, t.phase = items[index].wave, items[index].phase
                items.insert(index, items.pop(i))
                for key, at in first.items():
                    if at >= index:
                        first[key] = at + 1
        else:
            ref = refs(t)
            if ref is not None and ref not in first:
                first[ref] = i


def steps(items: list[Task]) -> list[Step]:
    """The (phase, wave) steps of sorted ``items``; each waits for the one before to be Healthy
    (sync_context.go Sync: tasks.Split on phase and wave)."""
    out: list[Step] = []
    for t in items:
        if not out or (out[-1].phase, out[-1].wave) != (t.phase, t.wave):
            out.append(Step(t.phase, t.wave))
        out[-1].tasks.append(t)
    return out


def order(resources: Iterable[Resource], namespace: str = "") -> list[Resource]:
    """What one sync of an Application applies, in order: each object once, at its first task;
    objects with no task are left out."""
    out: list[Resource] = []
    seen: set[int] = set()
    for t in tasks(resources, namespace):
        if id(t.resource) not in seen:
            seen.add(id(t.resource))
            out.append(t.resource)
    return out


# ---------------------------------------------------------------------------------------------
# A cluster: the root app's steps and every Application's order


def _root_namespace(render: ClusterRender) -> str:
    root = next((ar for ar in render.apps if ar.self_reference), None)
    return str(root.app.destination.get("namespace") or "") if root else ""


def cluster_steps(render: ClusterRender) -> list[Step]:
    """The root app's steps (its bootstrap objects as Argo CD syncs them), each with the
    Applications it starts: those it holds, each followed by what they start in turn (their own
    Applications, an ApplicationSet's generated ones). Applications no step reaches come last."""
    by_object = {id(ar.app.resource): ar for ar in render.apps if not ar.app.generated_by}
    generated: dict[tuple[str | None, str], list[AppRender]] = {}
    for ar in render.apps:
        if ar.app.generated_by:
            generated.setdefault((ar.app.resource.app, ar.app.generated_by), []).append(ar)
    seen: set[int] = set()

    def started_by(r: Resource) -> list[AppRender]:
        if r.group != ARGO_GROUP:
            return []
        if r.kind == "Application":
            found = [by_object[id(r)]] if id(r) in by_object else []
        elif r.kind == "ApplicationSet":  # the ApplicationSet controller makes them all at once
            found = sorted(generated.get((r.app, r.name), []), key=lambda a: a.name)
        else:
            return []
        out = []
        for ar in found:
            if id(ar) in seen:
                continue
            seen.add(id(ar))
            out.append(ar)
            if not ar.self_reference:
                for t in tasks(ar.resources, str(ar.app.destination.get("namespace") or "")):
                    out += started_by(t.resource)
        return out

    out = steps(tasks(render.root, _root_namespace(render)))
    for step in out:
        for t in step.tasks:
            step.apps += started_by(t.resource)
    rest = sorted((ar for ar in render.apps if id(ar) not in seen), key=lambda a: (a.app.wave, a.name))
    if rest:
        out.append(Step("Sync", max((s.wave for s in out), default=0), apps=rest))
    return out


def order_cluster(render: ClusterRender) -> None:
    """Put every Application's objects and the Applications themselves in Argo CD's order, and add
    to ``render.problems`` what trainyard does not follow (:func:`problems`)."""
    found = problems(render)
    for ar in render.apps:
        if not ar.self_reference:
            ar.resources = order(ar.resources, str(ar.app.destination.get("namespace") or ""))
    render.apps = [ar for step in cluster_steps(render) for ar in step.apps]
    render.problems.extend(p for p in found if p not in render.problems)


# ---------------------------------------------------------------------------------------------
# What is refused


def _string_problems(r: Resource) -> list[Problem]:
    value = meta(r.doc).get("annotations")
    if value is None:
        return []
    if not isinstance(value, dict):
        return [error(r.where(), f"metadata.annotations is a {type(value).__name__}, not a mapping", r.describe())]
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            what = repr(k)[:80] if isinstance(k, str) else f"a {type(k).__name__} key"
            return [
                error(
                    r.where(),
                    f"metadata.annotations[{what}] is a {type(v).__name__}, not a string: the API server refuses it, "
                    "and Argo CD reads no annotation of the object (unstructured GetAnnotations fails), so none of "
                    "its sync-wave, hook or sync-options annotations would count",
                    r.describe(),
                )
            ]
    return []


def _short(value: str) -> str:
    return repr(value if len(value) <= 60 else value[:60] + "...")


def object_problems(r: Resource, *, synced_here: bool) -> list[Problem]:
    """What trainyard does not follow in one object's Argo CD annotations. ``synced_here``: its
    Application's objects are applied by trainyard's sync (trainyard/cluster/sync.py), which
    runs no hook."""
    found = _string_problems(r)
    if found:
        return found
    ann, where, obj = annotations(r.doc), r.where(), r.describe()
    out: list[Problem] = []
    for key in (SYNC_WAVE, HELM_HOOK_WEIGHT):
        if key in ann and go_atoi(ann[key]) is None:
            out.append(
                warning(
                    where,
                    f"{key} {_short(ann[key])} is not an integer as Go's strconv.Atoi reads it (an optional sign "
                    f"and decimal digits, no spaces, within int64): Argo CD puts the object in wave {wave(ann)} "
                    "(gitops-engine syncwaves/waves.go Wave)",
                    obj,
                )
            )
            break  # the first unreadable one explains the wave
    unfollowed = unfollowed_hook_types(ann)
    if unfollowed:
        key = HOOK if HOOK in ann and unfollowed[0] not in annotation_csvs(ann.get(HELM_HOOK)) else HELM_HOOK
        out.append(
            error(
                where,
                f"{key} {_short(ann[key])}: hook type {_short(unfollowed[0])} is not followed by trainyard (it "
                "follows PreSync, Sync, PostSync; Helm: pre-install, pre-upgrade, post-install, post-upgrade); "
                "SyncFail, Skip, PreDelete and PostDelete hooks are not emulated",
                obj,
            )
        )
    phases = sync_phases(ann)
    if is_hook(ann) and phases and synced_here:
        out.append(
            error(
                where,
                f"Argo CD resource hook ({', '.join(phases)}): trainyard's sync (trainyard/cluster/sync.py) applies "
                "objects and does not run hooks (waiting for one to complete, the hook finalizer, "
                "hook-delete-policy); make it a plain object or leave it out",
                obj,
            )
        )
    elif is_hook(ann) and phases and not r.name:
        out.append(
            error(
                where,
                "hook without metadata.name: Argo CD names it from generateName, the revision and the sync's start "
                "time (gitops-engine sync_context.go getSyncTasks), so its place in the sync order is not known",
                obj,
            )
        )
    for item in annotation_csvs(ann.get(SYNC_OPTIONS)):
        if item in FOLLOWED_OPTIONS:
            continue
        if item in NOT_EMULATED_OPTIONS:
            what = f"{SYNC_OPTIONS} {item} is not emulated by trainyard's sync (trainyard/cluster/sync.py)"
        else:
            what = (f"{SYNC_OPTIONS} {_short(item)} is no sync option Argo CD reads from an object (it reads "
                    f"{', '.join([*FOLLOWED_OPTIONS, *NOT_EMULATED_OPTIONS])}; others belong in an Application's "
                    "spec.syncPolicy.syncOptions)")  # fmt: skip
        out.append(error(where, what, obj))
    return out


def _overflow(resources: list[Resource], what: str) -> list[Problem]:
    """Less compares waves as ``tA.wave() - tB.wave()`` in Go's int: past int64 the difference
    wraps and the order is not defined."""
    waves = [(wave(annotations(r.doc)), r) for r in resources if sync_phases(annotations(r.doc))]
    if not waves:
        return []
    low, high = min(waves, key=lambda x: x[0]), max(waves, key=lambda x: x[0])
    if high[0] - low[0] <= INT64_MAX:
        return []
    return [
        error(
            high[1].where(),
            f"sync waves {low[0]} ({low[1].describe()}) and {high[0]} in {what}: gitops-engine compares waves by "
            "subtracting them in Go's int (sync_tasks.go Less), which overflows here, so Argo CD's order is not "
            "defined; keep waves within about ±4.6e18",
            high[1].describe(),
        )
    ]


def problems(render: ClusterRender) -> list[Problem]:
    """Everything in ``render`` that trainyard's emulation of the sync order does not follow."""
    out: list[Problem] = []
    for r in render.root:  # the bootstrap is kubectl; then the root app syncs the same objects
        out += object_problems(r, synced_here=True)
    out += _overflow(render.root, "the root Application")
    for ar in render.apps:
        if ar.self_reference:
            continue
        synced_here = not ar.upstream
        for r in ar.resources:
            out += object_problems(r, synced_here=synced_here)
        out += _overflow(ar.resources, f"Application {ar.name}")
    # the root waits for a step's Applications only where argocd-cm assesses their health
    gated = [s for s in steps(tasks(render.root, _root_namespace(render)))
             if any(t.kind == "Application" and t.resource.group == ARGO_GROUP for t in s.tasks)]  # fmt: skip
    cm = next((r for r in render.resources() if (r.group, r.kind, r.namespace, r.name) == ("", "ConfigMap", "argocd",
               "argocd-cm")), None)  # fmt: skip
    data = cm.doc.get("data") if cm is not None else None
    if len(gated) > 1 and not (isinstance(data, dict) and data.get(APP_HEALTH_KEY)):
        later = next(t.resource for t in gated[1].tasks if t.kind == "Application")
        out.append(
            error(
                later.where(),
                f"the root Application has Applications in sync waves {', '.join(str(s.wave) for s in gated)}, but "
                f"no argocd-cm of this cluster sets {APP_HEALTH_KEY}: Argo CD assesses no Application health since "
                "1.8 (argo-cd/gitops-engine@v3.6.2:pkg/health/health.go GetHealthCheckFunc), so it would not wait "
                "for one wave's Applications to be Healthy before the next (add base/argocd)",
                later.describe(),
            )
        )
    return out
