"""An offline stand-in for Argo CD: what it would apply to one cluster, Application by Application.

Argo CD cannot run here, so this module follows its contract field by field, for the parts this
repository uses, and refuses (with a message) the parts it does not emulate instead of guessing:

- The entry point is ``clusters/<cluster>/``, built with the real kustomize; that is what the
  one-time bootstrap applies and what the root Application syncs afterwards.
- ``Application`` (argoproj.io/v1alpha1): ``spec.source.repoURL`` equal to this repository (see
  :mod:`trainyard.repo.model.repository`) is followed: ``spec.source.path`` is rendered as Argo CD's repo
  server does: ``.argocd-source.yaml``/``.argocd-source-<app>.yaml`` in the folder (merged into the
  source before the tool is chosen) are not emulated and refused; a folder with a file whose name
  ends in ``Chart.yaml`` would be Helm (not emulated); a folder with a kustomization is built with
  kustomize; any other folder is a directory of ``*.yaml``/``*.yml``/``*.json`` manifests
  (``directory.recurse``, ``directory.include``/``exclude``; one object per JSON file; files
  holding ``+argocd:skip-file-rendering`` skipped; ``*.jsonnet``, which Argo CD evaluates, refused).
  A job folder (an ApplicationSet's Application) is first checked on its raw files
  (:mod:`trainyard.repo.model.jobfolder`) and not built at all when that refuses it. Resources
  without a namespace get ``spec.destination.namespace``. Applications and ApplicationSets
  found among the rendered resources are followed in turn (app of apps); a path already
  rendered (the root app managing itself) is not rendered twice. Other sources (a git tag or a
  Helm chart of an upstream release) are rendered from the release's pinned Go module with the
  tool Argo CD would use (:mod:`trainyard.repo.model.upstream`); so is a platform folder whose
  kustomizations list upstream files by URL (which Argo CD's repo server downloads while
  building), each URL replaced by the file of its pinned release. A source no release pins is a
  problem, not a guess. A job folder (an ApplicationSet's) is built as it is and fails on remote
  resources: a job may not pull manifests from elsewhere. Rendered upstream objects are
  normalised as the application controller does (controller/state.go NormalizeTargetObjects).
  ``spec.sources``, ``spec.source.kustomize``/``helm``/``plugin`` on this repository's sources
  are reported as not emulated.
- ``ApplicationSet``: the git directory generator (``generators[].git.directories`` with
  ``path`` globs in Go's path.Match syntax and ``exclude: true`` entries taking precedence,
  directories whose name starts with '.' skipped) over this repository's working tree. The
  parameters are the generator's own: with ``goTemplate: true`` ``.path.path``,
  ``.path.basename``, ``.path.basenameNormalized``, ``.path.segments`` (under
  ``pathParamPrefix`` when set), rendered with :mod:`trainyard.repo.upstream.gotemplate`
  (``goTemplateOptions: [missingkey=error]`` honoured); otherwise the fasttemplate keys
  ``{{path}}``, ``{{path.basename}}``, ``{{path.basenameNormalized}}``, ``{{path[n]}}``. The
  generated Application takes the template's metadata and the ApplicationSet's namespace.
- Order: Applications by sync wave (``argocd.argoproj.io/sync-wave``) then name, as the root
  app syncs them; the resources of one Application in gitops-engine's order: phase (hooks),
  wave, kind (its fixed kind order, custom resources last), name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard.contract.errors import UserError
from trainyard.repo.model import declared, jobfolder, kustomize, upstream
from trainyard.repo.model.problems import Problem, error, warning
from trainyard.repo.model.rendered import CLUSTER_SCOPED, Resource, sync_wave, tree_copy
from trainyard.repo.model.repository import CLUSTERS, Repository
from trainyard.repo.upstream import gotemplate

ARGO_GROUP = "argoproj.io"

# gitops-engine pkg/sync/sync_tasks.go: kindOrder (from Helm's install order); kinds not listed
# (custom resources) sort after all of these.
KIND_ORDER = [
    "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
    "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList",
    "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController",
    "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
    "IngressClass", "Ingress", "APIService",
]  # fmt: skip
_KIND_RANK = {k: i - len(KIND_ORDER) for i, k in enumerate(KIND_ORDER)}
_PHASE_RANK = {"PreSync": -1, "Sync": 0, "PostSync": 1, "SyncFail": 2}
HOOK_ANNOTATION = "argocd.argoproj.io/hook"
SKIP_MARKER = "+argocd:skip-file-rendering"  # reposerver/repository/repository.go skipFileRenderingMarker
WAVE_ANNOTATION = "argocd.argoproj.io/sync-wave"


class ArgoError(UserError):
    exit_code = 1


@dataclass
class Application:
    resource: Resource
    generated_by: str | None = None  # the ApplicationSet that made it

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def spec(self) -> dict:
        spec = self.resource.doc.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def source(self) -> dict:
        src = self.spec.get("source")
        return src if isinstance(src, dict) else {}

    @property
    def destination(self) -> dict:
        dst = self.spec.get("destination")
        return dst if isinstance(dst, dict) else {}

    @property
    def project(self) -> str:
        return str(self.spec.get("project", ""))

    @property
    def wave(self) -> int:
        return sync_wave(self.resource.doc)

    @property
    def has_wave(self) -> bool:
        return WAVE_ANNOTATION in self.resource.annotations

    def where(self) -> str:
        return self.resource.where()


@dataclass
class Upstream:
    repo_url: str
    revision: str
    path: str | None = None
    chart: str | None = None
    images: tuple[str, ...] = ()  # image pins a kustomization of this repository sets on it
    remote_resource: bool = False  # fetched by kustomize while building this repository's folder

    def describe(self) -> str:
        if self.remote_resource:
            what = f"{self.repo_url} (fetched by kustomize)"
        else:
            kind = f"chart {self.chart}" if self.chart else f"path {self.path or '.'}"
            what = f"{self.repo_url} {kind} at {self.revision or '(no revision)'}"
        return what + (f", images pinned to {', '.join(self.images)}" if self.images else "")


def url_revision(url: str) -> str:
    """The git ref a remote kustomize resource is pinned to: ``?ref=`` of a git URL, the tag of a
    GitHub release asset, the ref segment of a raw.githubusercontent.com file ('' if none)."""
    if "?ref=" in url:
        return url.split("?ref=", 1)[1].split("&", 1)[0]
    m = re.match(r"https://github\.com/[^/]+/[^/]+/releases/download/([^/]+)/", url)
    if m:
        return m.group(1)
    m = re.match(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/([^/]+)/", url)
    return m.group(1) if m else ""


@dataclass
class AppRender:
    app: Application
    resources: list[Resource] = field(default_factory=list)
    upstream: list[Upstream] = field(default_factory=list)
    path: str | None = None  # the folder rendered, for apps of this repository
    self_reference: bool = False  # its path was already rendered (the root app)

    @property
    def name(self) -> str:
        return self.app.name


@dataclass
class ClusterRender:
    cluster: str
    root: list[Resource]
    apps: list[AppRender]
    problems: list[Problem] = field(default_factory=list)

    def resources(self) -> list[Resource]:
        """Everything applied: the bootstrap objects and every rendered Application's."""
        out = list(self.root)
        for a in self.apps:
            out.extend(a.resources)
        return out

    def app(self, name: str) -> AppRender | None:
        return next((a for a in self.apps if a.name == name), None)

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


# ---------------------------------------------------------------------------------------------
# Go's path.Match


def _go_match_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                raise ValueError(f"syntax error in pattern {pattern!r}")
            body = pattern[i + 1 : j]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def go_path_match(pattern: str, name: str) -> bool:
    return bool(_go_match_regex(pattern.lstrip("/")).match(name.lstrip("/")))


def list_directories(root: Path) -> list[str]:
    """Every folder of the working tree (relative, '/'-separated), without dot-folders (which
    the git directory generator skips, and which hold no tracked job folders here)."""
    out: list[str] = []
    for current, dirs, _files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        rel = Path(current).relative_to(root).as_posix()
        if rel != ".":
            out.append(rel)
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# ApplicationSet


def generate_applications(appset: Resource, repo: Repository, directories: list[str] | None = None) -> list[Resource]:
    """The Applications an ApplicationSet with git directory generators makes."""
    doc = appset.doc
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    where = appset.where()
    what = f"ApplicationSet {appset.name}"
    for unsupported in ("templatePatch",):
        if unsupported in spec:
            raise ArgoError(f"{where}: {what}: spec.{unsupported} is not emulated by trainyard render")
    template = spec.get("template")
    if not isinstance(template, dict):
        raise ArgoError(f"{where}: {what}: spec.template is required")
    go = spec.get("goTemplate") is True
    missing_error = any(str(o).replace(" ", "") == "missingkey=error" for o in (spec.get("goTemplateOptions") or []))
    generators = spec.get("generators")
    if not isinstance(generators, list) or not generators:
        raise ArgoError(f"{where}: {what}: spec.generators must list at least one generator")
    out: list[Resource] = []
    for gi, gen in enumerate(generators):
        if not isinstance(gen, dict) or set(gen) != {"git"}:
            kinds = ", ".join(gen) if isinstance(gen, dict) else type(gen).__name__
            raise ArgoError(
                f"{where}: {what}: spec.generators[{gi}] is {kinds}: only the git directory generator is emulated"
            )
        git = gen["git"]
        if not isinstance(git, dict):
            raise ArgoError(f"{where}: {what}: spec.generators[{gi}].git must be a mapping")
        if "files" in git:
            raise ArgoError(f"{where}: {what}: spec.generators[{gi}].git.files is not emulated (directories only)")
        if not repo.is_this_repo(git.get("repoURL")):
            raise ArgoError(
                f"{where}: {what}: spec.generators[{gi}].git.repoURL {git.get('repoURL')!r} is not this repository "
                f"({repo.url}, base/repo/repo.env); its folders cannot be listed offline"
            )
        dirs = git.get("directories")
        if not isinstance(dirs, list) or not dirs:
            raise ArgoError(f"{where}: {what}: spec.generators[{gi}].git.directories must list at least one path")
        include = [
            d["path"] for d in dirs if isinstance(d, dict) and isinstance(d.get("path"), str) and not d.get("exclude")
        ]
        exclude = [
            d["path"] for d in dirs if isinstance(d, dict) and isinstance(d.get("path"), str) and d.get("exclude")
        ]
        prefix = git.get("pathParamPrefix") or ""
        listing = directories if directories is not None else list_directories(repo.root)
        for path in listing:
            if any(part.startswith(".") for part in path.split("/")):
                continue  # the generator skips directories whose name starts with '.'
            if not any(go_path_match(p, path) for p in include) or any(go_path_match(p, path) for p in exclude):
                continue
            params = _params(path, go, prefix)
            try:
                if go:
                    rendered = gotemplate.render_tree(tree_copy(template), params, missing_error=missing_error)
                else:
                    rendered = gotemplate.render_fasttemplate(tree_copy(template), params)
            except gotemplate.TemplateError as exc:
                raise ArgoError(f"{where}: {what}: spec.template (for {path}): {exc}") from None
            out.append(_application_from_template(rendered, appset, path))
    return out


def _params(path: str, go: bool, prefix: str) -> dict[str, Any]:
    basename = path.rsplit("/", 1)[-1]
    if go:
        value: dict[str, Any] = {
            "path": path,
            "basename": basename,
            "basenameNormalized": gotemplate.sanitize_name(basename),
            "segments": path.split("/"),
        }
        params: dict[str, Any] = {"path": value}
        return {prefix: params} if prefix else params
    key = f"{prefix}.path" if prefix else "path"
    flat = {key: path, f"{key}.basename": basename, f"{key}.basenameNormalized": gotemplate.sanitize_name(basename)}
    for i, seg in enumerate(path.split("/")):
        if seg:
            flat[f"{key}[{i}]"] = seg
    return flat


def _application_from_template(rendered: dict, appset: Resource, path: str) -> Resource:
    tmeta = rendered.get("metadata") if isinstance(rendered.get("metadata"), dict) else {}
    metadata: dict[str, Any] = {"name": tmeta.get("name", "")}
    namespace = appset.namespace
    if namespace:
        metadata["namespace"] = namespace
    for key in ("labels", "annotations", "finalizers"):
        if tmeta.get(key):
            metadata[key] = tree_copy(tmeta[key])
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": metadata,
        "spec": tree_copy(rendered.get("spec") or {}),
    }
    return Resource(doc=doc, origin=appset.origin, source=path, app=appset.app, extra={"generated_by": appset.name})


# ---------------------------------------------------------------------------------------------
# Rendering


def sort_key(r: Resource) -> tuple:
    hook = r.annotations.get(HOOK_ANNOTATION, "Sync")
    phase = min((_PHASE_RANK.get(h.strip(), 0) for h in str(hook).split(",")), default=0)
    return (phase, sync_wave(r.doc), _KIND_RANK.get(r.kind, 0), r.name)


def _is_namespaced(r: Resource) -> bool:
    return (r.group, r.kind) not in CLUSTER_SCOPED


def _directory_files(folder: Path, directory: dict) -> list[Path]:
    recurse = directory.get("recurse") is True
    files = sorted(folder.rglob("*") if recurse else folder.iterdir())
    include = directory.get("include")
    exclude = directory.get("exclude")
    out = []
    for f in files:
        if not f.is_file() or f.suffix not in (".yaml", ".yml", ".json", ".jsonnet"):
            continue
        rel = f.relative_to(folder).as_posix()
        if include and not _glob_any(str(include), rel):
            continue
        if exclude and _glob_any(str(exclude), rel):
            continue
        out.append(f)
    return out


def _glob_any(pattern: str, name: str) -> bool:
    """Argo CD's include/exclude: a glob, with {a,b} alternatives."""
    m = re.fullmatch(r"\{(.*)\}", pattern.strip())
    options = m.group(1).split(",") if m else [pattern]
    return any(go_path_match(o.strip(), name) or go_path_match(o.strip(), name.rsplit("/", 1)[-1]) for o in options)


def render_source(repo: Repository, app: Application) -> tuple[str, list[Resource]]:
    """Render an Application whose source is this repository: (path, resources)."""
    src = app.source
    where, what = app.where(), f"Application {app.name}"
    for unsupported in ("kustomize", "helm", "plugin", "chart"):
        if unsupported in src:
            raise ArgoError(
                f"{where}: {what}: spec.source.{unsupported} on this repository is not emulated by trainyard render; "
                "put the setting in the folder's kustomization.yaml instead"
            )
    path = str(src.get("path") or ".").strip("/") or "."
    folder = (repo.root / path).resolve()
    if not folder.is_dir() or repo.root not in (folder, *folder.parents):
        raise ArgoError(f"{where}: {what}: spec.source.path {path!r} is not a folder of this repository")
    overrides = sorted(f.name for f in folder.glob(".argocd-source*.yaml") if f.is_file())
    if overrides:  # repository.go mergeSourceParameters: merged into the source before the tool is chosen
        raise ArgoError(
            f"{where}: {what}: {path}/{overrides[0]} overrides the Application's source (tool, plugin, kustomize or "
            "directory settings), which trainyard render does not emulate; put the settings in the folder's files"
        )
    charts = sorted(f.name for f in folder.iterdir() if f.name.endswith("Chart.yaml") and f.is_file())
    if kustomize.is_kustomization(folder) and not charts:
        if src.get("directory"):
            raise ArgoError(f"{where}: {what}: spec.source.directory is set but {path} is a kustomization")
        resources = kustomize.build(repo, folder)
    elif charts:  # discovery.go: a file whose name ends in Chart.yaml makes the folder a Helm chart
        raise ArgoError(f"{where}: {what}: {path} is a Helm chart ({charts[0]}); Helm sources are not emulated")
    else:
        directory = src.get("directory") if isinstance(src.get("directory"), dict) else {}
        resources = []
        for f in _directory_files(folder, directory):
            rel = repo.rel(f)
            text = f.read_text(encoding="utf-8")
            if SKIP_MARKER in text:  # repository.go: such a file is not rendered
                continue
            if f.suffix == ".jsonnet":
                raise ArgoError(f"{where}: {what}: {rel}: Jsonnet is rendered by Argo CD, not emulated by trainyard")
            docs = kustomize.load_documents(text, rel)
            if f.suffix == ".json" and len(docs) > 1:
                raise ArgoError(f"{where}: {what}: {rel}: Argo CD allows one object per JSON file")
            for doc in docs:
                resources.append(Resource(doc=doc, origin=rel, source=path))
    dest_ns = app.destination.get("namespace")
    for r in resources:
        r.app = app.name
        if dest_ns and _is_namespaced(r) and not r.namespace:
            r.doc.setdefault("metadata", {})["namespace"] = dest_ns
    resources.sort(key=sort_key)
    return path, resources


def _upstreams(app: Application) -> list[Upstream]:
    sources = app.spec.get("sources") if isinstance(app.spec.get("sources"), list) else [app.source]
    return [
        Upstream(
            repo_url=str(s.get("repoURL", "")),
            revision=str(s.get("targetRevision", "")),
            path=s.get("path"),
            chart=s.get("chart"),
        )
        for s in sources
        if isinstance(s, dict)
    ]


def _applications(resources: Iterable[Resource], repo: Repository, problems: list[Problem]) -> list[Application]:
    out: list[Application] = []
    for r in resources:
        if r.group != ARGO_GROUP:
            continue
        if r.kind == "Application":
            out.append(Application(r, generated_by=r.extra.get("generated_by")))
        elif r.kind == "ApplicationSet":
            try:
                generated = generate_applications(r, repo)
            except ArgoError as exc:
                problems.append(error(r.where(), str(exc).split(": ", 1)[-1], r.describe()))
                continue
            out.extend(Application(g, generated_by=r.name) for g in generated)
    return out


def render_cluster(repo: Repository, cluster: str, *, workers: int = 8) -> ClusterRender:
    """Everything Argo CD would apply to ``cluster``; build failures become problems."""
    repo.require_cluster(cluster)
    entry = f"{CLUSTERS.as_posix()}/{cluster}"
    root = kustomize.build(repo, entry)
    for r in root:
        r.app = "(bootstrap)"
    problems: list[Problem] = []
    render = ClusterRender(cluster=cluster, root=root, apps=[], problems=problems)
    try:  # Argo CD renders charts for the destination's Kubernetes version
        kube_version: str | None = declared.load(repo, cluster).spec.kubernetes_version
    except UserError:
        kube_version = None  # validate reports the cluster's facts on their own
    seen_paths = {entry}
    queue = _applications(root, repo, problems)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while queue:
            batch, queue = queue, []
            jobs = []
            for app in batch:
                ar = AppRender(app=app)
                render.apps.append(ar)
                src = app.spec.get("sources") or app.source
                if app.spec.get("sources") or not repo.is_this_repo(app.source.get("repoURL")):
                    if app.spec.get("sources") and any(
                        isinstance(s, dict) and repo.is_this_repo(s.get("repoURL")) for s in src
                    ):
                        problems.append(
                            error(
                                app.where(), "spec.sources (multiple sources) is not emulated", app.resource.describe()
                            )
                        )
                    ar.upstream = _upstreams(app)
                    if not app.spec.get("sources"):
                        jobs.append((ar, pool.submit(_render_upstream, app, kube_version)))
                    continue
                path = str(app.source.get("path") or ".").strip("/") or "."
                ar.path = path
                if path in seen_paths:
                    ar.self_reference = True
                    continue
                seen_paths.add(path)
                if app.generated_by:  # a job folder: untrusted, checked on its raw files before kustomize runs
                    refused = jobfolder.scan(repo, repo.root / path)
                    if refused:
                        problems += [error(p.where, p.message, app.resource.describe()) for p in refused]
                        continue
                remote = kustomize.remote_parts(repo, repo.root / path) if not app.generated_by else None
                if remote is not None and remote.urls:
                    # Argo CD's repo server fetches these when it builds the folder; offline each is
                    # read from its pinned release (upstream.render_local). Job folders, made by the
                    # ApplicationSet, are built as they are and fail on them: a job may not pull
                    # manifests from elsewhere.
                    ar.upstream = [
                        Upstream(u, url_revision(u), images=remote.images, remote_resource=True) for u in remote.urls
                    ]
                    jobs.append((ar, pool.submit(_render_local_upstream, repo, app, path)))
                    continue
                if app.source.get("targetRevision") not in (None, "", repo.revision, "HEAD"):
                    problems.append(
                        warning(
                            app.where(),
                            f"targetRevision {app.source.get('targetRevision')!r} differs from {repo.revision!r} "
                            "(base/repo/repo.env); rendered from the working tree",
                            app.resource.describe(),
                        )
                    )
                jobs.append((ar, pool.submit(render_source, repo, app)))
            for ar, fut in jobs:
                try:
                    _, ar.resources = fut.result()
                except kustomize.KustomizeError as exc:
                    located = jobfolder.locate_patch_failure(repo, repo.root / ar.path) if ar.app.generated_by else []
                    kustomize_says = re.sub(r"^.*recursed accumulation of path '[^']*': ", "", _strip_where(str(exc)))
                    for p in located:
                        problems.append(error(p.where, f"{p.message} (kustomize: {kustomize_says})",
                                              ar.app.resource.describe()))  # fmt: skip
                    if not located:
                        problems.append(error(ar.path or ar.app.where(), kustomize_says, ar.app.resource.describe()))
                    continue
                except UserError as exc:
                    problems.append(
                        error(
                            ar.path or (ar.app.where() if ar.upstream else ar.app.source.get("path")) or ar.app.where(),
                            _strip_where(str(exc)),
                            ar.app.resource.describe(),
                        )
                    )
                    continue
                queue.extend(_applications(ar.resources, repo, problems))
    render.apps.sort(key=lambda a: (a.app.wave, a.name))
    return render


def _finish(app: Application, resources: list[Resource]) -> list[Resource]:
    """An upstream render as the application controller takes it (argo-cd@v3.5.1:controller/state.go
    NormalizeTargetObjects): a namespaced object without a namespace gets the destination's, and a
    cluster-scoped object's namespace is dropped (upstream charts set one on webhook configurations;
    the repository's own objects may not, validate refuses it)."""
    dest_ns = app.destination.get("namespace")
    for r in resources:
        r.app = app.name
        if dest_ns and _is_namespaced(r) and not r.namespace:
            r.doc.setdefault("metadata", {})["namespace"] = dest_ns
        elif not _is_namespaced(r) and r.namespace:
            del r.doc["metadata"]["namespace"]
    resources.sort(key=sort_key)
    return resources


def _render_upstream(app: Application, kube_version: str | None) -> tuple[str, list[Resource]]:
    """An Application whose source is an upstream git tag or chart, read from its release's Go module."""
    try:
        _, resources = upstream.render_source(
            app.source,
            app=app.name,
            namespace=app.destination.get("namespace"),
            kube_version=kube_version,
            directory_files=_directory_files,
        )
    except upstream.UpstreamError as exc:
        raise ArgoError(str(exc)) from None
    return "", _finish(app, resources)


def _render_local_upstream(repo: Repository, app: Application, path: str) -> tuple[str, list[Resource]]:
    """A folder of this repository whose kustomizations list upstream files by URL."""
    try:
        resources = upstream.render_local(repo, repo.root / path)
    except upstream.UpstreamError as exc:
        raise ArgoError(f"{path}: {exc}") from None
    for r in resources:
        r.source = path
    return path, _finish(app, resources)


def _strip_where(message: str) -> str:
    """Drop a leading 'path: ' the message already starts with (it is reported as where)."""
    head, sep, rest = message.partition(": ")
    return rest if sep and "/" in head and " " not in head else message


def render_all(repo: Repository, clusters: list[str] | None = None) -> dict[str, ClusterRender]:
    names = clusters or repo.clusters()
    if not names:
        raise UserError(
            f"{repo.rel(repo.root / CLUSTERS)}: no clusters found (expected clusters/<name>/kustomization.yaml)"
        )
    return {c: render_cluster(repo, c) for c in names}
