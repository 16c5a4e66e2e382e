"""Sync a cluster's rendered repository into a real API server, the way Argo CD does.

The order is Argo CD's (:mod:`trainyard.repo.upstream.syncorder`): the bootstrap (``kubectl apply
-k clusters/<cluster>``), then the root Application's steps (phase and wave), each step's
Applications in task order, each followed by what it starts (an ApplicationSet's Applications),
and inside one Application its objects in sync order. An object is applied server-side as field
manager ``argocd-controller`` (argo-cd@v3.6.2:common/common.go ArgoCDSSAManager) where its
Application asks for ``ServerSideApply=true``; one whose ``argocd.argoproj.io/sync-options`` say
``Replace=true`` is created, as Argo CD creates such an object not there yet (gitops-engine
sync_context.go applyObject); the others as ``kubectl apply`` would on an empty cluster, with
strict field validation (Argo CD's default ``Validate=true``). ``CreateNamespace=true`` creates the
destination namespace first.

Argo CD waits between steps for every object of a step to be Healthy (sync_context.go Sync); no
Argo CD controller writes an Application's health here and no pod runs during the sync, so a step
ends once every object is accepted, CRDs served, and started upstream controllers ready. A hook
is refused, not run, as the render refuses it in this repository's Applications.

What nothing here would answer (upstream controllers' webhook configurations) is sent with
``dryRun=All``, so kube-apiserver still validates it. Upstream Applications bring their release's
CRDs and their destination namespace; when their wave comes, the caller may install and start
their controllers (controllers.py). A refusal keeps kube-apiserver's own message, placed at the
file and line of the object (and field, where the API server names one) that caused it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from trainyard.cluster.client import ApiError, Kube
from trainyard.repo.jobs.preview import is_job
from trainyard.repo.model import rawyaml
from trainyard.repo.model.rendered import Resource, tree_copy
from trainyard.repo.upstream import applications, syncorder

SSA_MANAGER = "argocd-controller"
CRD = "CustomResourceDefinition"
WEBHOOK_KINDS = frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"})

Progress = Callable[[str], None]


class LocalWebhook(Protocol):
    """A webhook served by a local process: its configuration is applied as rendered, then
    ``serve`` routes its Service there and injects its CA, and says what it did."""

    def answers(self, doc: dict) -> bool: ...

    def serve(self, kube: Kube, doc: dict) -> str: ...


@dataclass
class Refusal:
    """kube-apiserver refused one object."""

    resource: Resource
    message: str
    where: str  # file:line

    def __str__(self) -> str:
        return f"{self.where}: {self.resource.describe()}: {self.message}"


@dataclass
class Report:
    applied: int = 0
    dry_run: int = 0
    crds: int = 0
    refusals: list[Refusal] = field(default_factory=list)


def _sync_options(app: applications.Application) -> set[str]:
    options = (app.spec.get("syncPolicy") or {}).get("syncOptions") or []
    return {str(o) for o in options}


# --- where a refusal points ---------------------------------------------------------------------

_INDEX = re.compile(r"\[(\d+)\]")


def _field_path(path: str) -> list[str | int]:
    """``spec.containers[0].image`` -> ["spec", "containers", 0, "image"]."""
    out: list[str | int] = []
    for part in path.split("."):
        name = _INDEX.split(part)
        if name[0]:
            out.append(name[0])
        out += [int(i) for i in _INDEX.findall(part)]
    return out


def _walk(node: yaml.Node | None, steps: list[str | int]) -> tuple[int, int]:
    """How many of ``steps`` lead through ``node``, and the line of the last node reached."""
    depth, line = 0, rawyaml.line(node) if node is not None else 0
    for step in steps:
        if isinstance(step, int):
            values = node.value if isinstance(node, yaml.SequenceNode) else []
            node = values[step] if step < len(values) else None
        else:
            node = rawyaml.get(node, step)
        if node is None:
            break
        depth, line = depth + 1, rawyaml.line(node)
    return depth, line


def _in_document(doc: yaml.Node, resource: Resource, steps: list[str | int]) -> tuple[int, int] | None:
    """(depth, line) of ``steps`` in ``doc``: the object itself or a patch of it (strategic merge
    or JSON 6902); None if the document is neither."""
    if isinstance(doc, yaml.SequenceNode):  # a JSON patch: each op's path, then into its value
        best = None
        for op in doc.value:
            path = rawyaml.scalar(rawyaml.get(op, "path")) or ""
            pointer: list[str | int] = [int(t) if t.isdigit() else t.replace("~1", "/").replace("~0", "~")
                                        for t in path.strip("/").split("/") if t]  # fmt: skip
            if pointer != steps[: len(pointer)]:
                continue
            value = rawyaml.get(op, "value")
            depth, line = _walk(value, steps[len(pointer) :])
            # the field itself where the value reaches it, else the value the op sets, else the op
            found = (len(pointer) + depth, line if depth else rawyaml.line(value if value is not None else op))
            best = max(best or found, found)
        return best
    if rawyaml.scalar(rawyaml.get(doc, "kind")) != resource.kind:
        return None
    if rawyaml.scalar(rawyaml.get(rawyaml.get(doc, "metadata"), "name")) not in (resource.name, None):
        return None
    depth, line = _walk(doc, steps)
    return depth, line if depth else rawyaml.line(doc)


def locate(repo_root: Path, resource: Resource, field_path: str = "") -> str:
    """``file:line`` of ``field_path`` of ``resource``: in the folder that was built (a job folder's
    patch sets most fields) or else in the file the object came from."""
    steps = _field_path(field_path.lstrip(".")) if field_path else []
    files: list[str] = []
    if resource.source and resource.origin and not resource.origin.startswith(resource.source.rstrip("/") + "/"):
        folder = repo_root / resource.source
        files += sorted(str(p.relative_to(repo_root)) for p in folder.glob("*.y*ml") if p.stem != "kustomization")
    if resource.origin:
        files.append(resource.origin)
    best: tuple[int, int, str] | None = None
    for rel in files:
        try:
            docs = rawyaml.load((repo_root / rel).read_text(encoding="utf-8"))
        except (OSError, rawyaml.YamlRefused, UnicodeDecodeError):
            continue
        for doc in docs:
            found = _in_document(doc, resource, steps)
            if found and (best is None or found[0] > best[0]):
                best = (found[0], found[1], rel)
    if best is None:
        return resource.where()
    return f"{best[2]}:{best[1]}"


def _field_of(exc: ApiError) -> str:
    """The field kube-apiserver names in a refusal ('' if none)."""
    for cause in exc.causes:
        named = re.search(r'unknown field "([^"]+)"', cause.message) or re.search(r"^\.?([\w.\[\]-]+):", cause.field)
        if named:
            return named.group(1)
        if cause.field:
            return cause.field
    named = (
        re.search(r'unknown field "([^"]+)"', exc.message)
        # a controller's webhook that cannot decode the object: Go's encoding/json UnmarshalTypeError
        # ("json: cannot unmarshal string into Go struct field Trainer.spec.trainer.numNodes ...")
        or re.search(r"Go struct field \w+\.((?:spec|metadata|data)(?:\.[\w-]+)*)", exc.message)
        or re.search(r"(?:^|[\s:])\.?((?:spec|metadata|data|webhooks|rules)(?:\.[\w-]+|\[\d+\])*)", exc.message)
    )
    return named.group(1) if named else ""


# --- applying ------------------------------------------------------------------------------------


class Syncer:
    def __init__(self, kube: Kube, repo_root: Path, progress: Progress = print) -> None:
        self.kube = kube
        self.repo_root = repo_root
        self.progress = progress
        self.report = Report()

    def _refused(self, resource: Resource, exc: ApiError) -> None:
        where = locate(self.repo_root, resource, _field_of(exc))
        self.report.refusals.append(Refusal(resource, str(exc), where))

    def namespace(self, name: str) -> None:
        self.kube.create_if_absent({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def crds(self, docs: list[dict]) -> int:
        if not docs:
            return 0
        for doc in docs:
            self.kube.apply(doc, manager=SSA_MANAGER)
        self.kube.wait_served(docs)
        self.report.crds += len(docs)
        return len(docs)

    def one(self, resource: Resource, *, server_side: bool, dry_run: bool) -> bool:
        doc = resource.doc
        try:
            if syncorder.replace(resource):  # Replace=true: Argo CD creates an object not there yet
                self.kube.create(doc, dry_run=dry_run)
            elif server_side:
                self.kube.apply(doc, manager=SSA_MANAGER, dry_run=dry_run)
            else:
                self.kube.client_side_apply(doc, dry_run=dry_run)
        except ApiError as exc:
            self._refused(resource, exc)
            return False
        if dry_run:
            self.report.dry_run += 1
        else:
            self.report.applied += 1
        if resource.kind == "CustomResourceDefinition" and not dry_run:
            self.kube.wait_served([doc])
        return True

    def hook(self, resource: Resource) -> None:
        phases = ", ".join(syncorder.sync_phases(syncorder.annotations(resource.doc)))
        message = f"Argo CD resource hook ({phases}): trainyard's sync does not run hooks"
        self.report.refusals.append(Refusal(resource, message, locate(self.repo_root, resource)))

    def objects(
        self,
        resources: list[Resource],
        *,
        server_side: bool,
        local: LocalWebhook | None = None,
        app: applications.Application | None = None,
    ) -> tuple[int, int]:
        """Apply ``resources`` in order; ``server_side``: the Application's ServerSideApply=true.
        Each object carries ``app``'s tracking id."""
        applied = dry = 0
        for r in resources:
            if syncorder.is_hook(syncorder.annotations(r.doc)):
                self.hook(r)
                continue
            if app is not None:
                r = Resource(doc=tracked(r.doc, app), origin=r.origin, source=r.source, app=r.app, extra=r.extra)
            served = r.kind in WEBHOOK_KINDS and local is not None and local.answers(r.doc)
            dry_run = r.kind in WEBHOOK_KINDS and not served  # nothing here would answer it
            if self.one(r, server_side=server_side, dry_run=dry_run):
                if dry_run:
                    dry += 1
                else:
                    applied += 1
                if served:
                    self.progress(f"  {local.serve(self.kube, r.doc)}")  # type: ignore[union-attr]
        return applied, dry


TRACKING_ANNOTATION = "argocd.argoproj.io/tracking-id"  # argo-cd@v3.6.2:common/common.go AnnotationKeyAppInstance


def tracked(doc: dict, app: applications.Application) -> dict:
    """``doc`` with the tracking id Argo CD v3 writes on every object of an Application (its
    default tracking method is the annotation): ``<app>:<group>/<kind>:<namespace>/<name>``, the
    destination namespace standing in for a cluster-scoped object's (argo-cd@v3.6.2:
    util/argo/resource_tracking.go BuildAppInstanceValue, UnstructuredToAppInstanceValue;
    controller/state.go sets it on every target object). Without it Argo CD would not count the
    object as the Application's, and would sync it again to adopt it."""
    out = tree_copy(doc)
    meta = out.setdefault("metadata", {})
    api_version = str(out.get("apiVersion", ""))
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    namespace = meta.get("namespace") or app.destination.get("namespace") or ""
    value = f"{app.name}:{group}/{out.get('kind', '')}:{namespace}/{meta.get('name', '')}"
    meta["annotations"] = {**(meta.get("annotations") or {}), TRACKING_ANNOTATION: value}
    return out


def sync(
    kube: Kube,
    repo_root: Path,
    render: applications.ClusterRender,
    *,
    bootstrap_crds: list[dict],
    local: LocalWebhook | None = None,
    upstream_app: Callable[[str], str | None] | None = None,
    before_jobs: Callable[[], None] | None = None,
    progress: Progress = print,
) -> Report:
    """Apply ``render`` as Argo CD would; refusals are collected, not raised. ``upstream_app``
    installs and starts an upstream Application's release (by name) when its wave comes, and says
    what it did; None where nothing runs it here. ``before_jobs`` runs once before the first
    Application that holds a job."""
    s = Syncer(kube, repo_root, progress)
    # What the Argo CD install provides before `kubectl apply -k clusters/<cluster>`: its
    # namespace and its CRDs (Application, ApplicationSet, AppProject). The upstream releases'
    # CRDs (rendered from their pinned modules like the rest of their objects) go with them: CRDs
    # first, as gitops-engine orders a sync, and all of them waited for once (a CRD's storage
    # takes about two seconds to start, for any number of CRDs at once).
    upstream = {ar.name: [tree_copy(r.doc) for r in ar.resources if r.kind == CRD] for ar in render.apps if ar.upstream}
    s.namespace("argocd")
    for ar in render.apps:
        namespace = str(ar.app.destination.get("namespace") or "")
        if ar.upstream and namespace:
            s.namespace(namespace)
    s.crds(bootstrap_crds + [doc for docs in upstream.values() for doc in docs])
    # the root Application manages the bootstrap's objects: tracked as its first sync leaves them
    root = next((ar.app for ar in render.apps if ar.self_reference), None)
    applied, _ = s.objects(render.root, server_side=False, local=local, app=root)
    progress(f"bootstrap (kubectl apply -k clusters/{render.cluster}): {applied} objects applied")
    steps = [step for step in syncorder.cluster_steps(render) if step.apps]
    for i, step in enumerate(steps):
        for ar in step.apps:
            before_jobs = _sync_app(s, ar, upstream, local, upstream_app, before_jobs, progress)
        if i + 1 < len(steps):
            # Argo CD waits here for the step's Applications to be Healthy; nothing writes their health here
            progress(f"step {step.phase} wave {step.wave}: applied; the next step starts without waiting for health")
    return s.report


def _sync_app(
    s: Syncer,
    ar: applications.AppRender,
    upstream: dict[str, list[dict]],
    local: LocalWebhook | None,
    upstream_app: Callable[[str], str | None] | None,
    before_jobs: Callable[[], None] | None,
    progress: Progress,
) -> Callable[[], None] | None:
    """One Application's sync; returns ``before_jobs``, or None once it ran."""
    head = f"wave {ar.app.wave:>3} {ar.name}"
    if ar.upstream:
        namespace = str(ar.app.destination.get("namespace") or "-")
        ran = upstream_app(ar.name) if upstream_app else None
        progress(f"{head}: upstream release: {len(upstream[ar.name])} CRDs and namespace {namespace}; "
                 + (ran or "its controller is not run here"))  # fmt: skip
        return before_jobs
    if ar.self_reference:
        return before_jobs
    if before_jobs is not None and any(is_job(r.doc) for r in ar.resources):
        # once, before the first job: what creates pods is applied only once the admission
        # that must see them is live (kube-apiserver takes a new webhook configuration or
        # policy a moment after it is stored; a job's controller may create pods sooner)
        before_jobs()
        before_jobs = None
    options = _sync_options(ar.app)
    namespace = str(ar.app.destination.get("namespace") or "")
    if namespace and "CreateNamespace=true" in options:
        s.namespace(namespace)
    server_side = "ServerSideApply=true" in options
    applied, dry = s.objects(ar.resources, server_side=server_side, local=local, app=ar.app)
    how = "server-side" if server_side else "client-side"  # the Application's; an object may say otherwise
    extra = f", {dry} dry-run only" if dry else ""
    progress(f"{head}: {applied} objects applied ({how}){extra}")
    return before_jobs
