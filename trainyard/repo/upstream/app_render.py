"""The offline render of Applications: what Argo CD would apply to one cluster, Application by
Application, for the sources this repository uses (the real Argo CD judges it in the cluster tier,
tests/trainyard/cluster/test_argocd_itself.py).

- ``clusters/<cluster>/``, built with the real kustomize, is what the bootstrap applies and the
  root Application syncs afterwards.
- An Application of this repository: ``spec.source.path`` must hold a kustomization, built as Argo
  CD's repo server builds it; resources without a namespace get the destination's. Refused by
  name: ``.argocd-source*.yaml`` overrides (argo-cd@v3.6.2:reposerver/repository/repository.go
  mergeSourceParameters), a Helm chart folder, a directory source, source tool settings,
  ``spec.sources``, a symbolic link that is absolute or leads out of the repository
  (util/app/path/path.go CheckOutOfBoundsSymlinks), an object repeated within one Application. A
  job folder is first checked on its raw files (:mod:`trainyard.repo.model.jobfolder`).
  Applications and ApplicationSets among the rendered resources are followed in turn; a path
  already rendered (the root app managing itself) is not rendered twice.
- Upstream sources (a git tag, a Helm chart, a platform folder listing upstream files by URL) are
  rendered from the release's pinned Go module (:mod:`trainyard.repo.model.upstream`); a source no
  release pins is a problem, not a guess.
- ApplicationSets: :mod:`trainyard.repo.upstream.appset`; the order and what trainyard's sync does
  not follow: :mod:`trainyard.repo.upstream.syncorder`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainyard.contract.errors import UserError
from trainyard.repo.model import declared, jobfolder, kustomize, upstream
from trainyard.repo.model.jobfolder import printable
from trainyard.repo.model.problems import Problem, error, warning
from trainyard.repo.model.rendered import CLUSTER_SCOPED, Resource, meta
from trainyard.repo.model.repository import CLUSTERS, Repository
from trainyard.repo.upstream import syncorder
from trainyard.repo.upstream.applications import ARGO_GROUP, Application, AppRender, ArgoError, ClusterRender, Upstream
from trainyard.repo.upstream.appset import generate_applications  # the ApplicationSet controller


def url_revision(url: str) -> str:
    """The tag of a raw.githubusercontent.com file, the only form of remote resource this
    repository's kustomizations list ('' for another URL)."""
    m = re.match(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/([^/]+)/", url)
    return m.group(1) if m else ""


# ---------------------------------------------------------------------------------------------
# Rendering


def _is_namespaced(r: Resource) -> bool:
    return (r.group, r.kind) not in CLUSTER_SCOPED


def out_of_bounds_symlink(root: Path) -> str | None:
    """The first symbolic link argo-cd@v3.6.2:util/app/path/path.go CheckOutOfBoundsSymlinks refuses:
    an absolute target, or a relative one that steps out of the repository at any point. The repo
    server runs it over the whole checkout (``.git`` skipped) before rendering any Application of the
    repository (reposerver/repository/repository.go). Git-ignored build outputs are not part of a
    checkout: what the root ``.gitignore``'s patterns name is skipped."""
    root = Path(os.path.realpath(root))
    try:
        ignored = {line.strip().strip("/") for line in (root / ".gitignore").read_text(errors="replace").splitlines()}
    except OSError:
        ignored = set()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            names = sorted(os.listdir(folder), key=lambda n: n.encode("utf-8", "surrogateescape"))
        except OSError:
            continue
        for name in names:
            path = folder / name
            rel = path.relative_to(root).as_posix()
            if rel == ".git" or any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p) for p in ignored):
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                target, here = os.readlink(path), str(folder)
                if os.path.isabs(target):
                    return printable(rel)
                for part in target.split("/"):
                    here = os.path.normpath(os.path.join(here, part))
                    if os.path.relpath(here, root).split(os.sep)[0] == "..":
                        return printable(rel)
            elif stat.S_ISDIR(info.st_mode):
                stack.append(path)
    return None


def render_source(repo: Repository, app: Application, link: str | None) -> tuple[str, list[Resource]]:
    """Render an Application whose source is this repository: (path, resources). ``link``: what
    :func:`out_of_bounds_symlink` found in the checkout, run once for all its Applications (as the
    repo server does per revision; run per Application it made a render quadratic in the job
    folders)."""
    src = app.source
    where, what = app.where(), f"Application {app.name}"
    _refuse_link(app, link)
    for unsupported in ("kustomize", "helm", "plugin", "chart", "directory"):
        if unsupported in src:
            raise ArgoError(
                f"{where}: {what}: spec.source.{unsupported} on this repository is not rendered offline by trainyard; "
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
            "directory settings), which trainyard does not render offline; put the settings in the folder's files"
        )
    charts = sorted(f.name for f in folder.iterdir() if f.name.endswith("Chart.yaml") and f.is_file())
    if charts:  # util/app/discovery/discovery.go: a file whose name ends in Chart.yaml makes the folder Helm
        raise ArgoError(f"{where}: {what}: {path} is a Helm chart ({charts[0]}), which trainyard does not render "
                        "offline")  # fmt: skip
    if not kustomize.is_kustomization(folder):
        raise ArgoError(
            f"{where}: {what}: {path} has no kustomization: Argo CD would read it as a directory source, which "
            "trainyard does not render offline; add a kustomization.yaml listing its files"
        )
    resources = kustomize.build(repo, folder)
    dest_ns = app.destination.get("namespace")
    for r in resources:
        r.app = app.name
        if not isinstance(r.doc.get("metadata", {}), dict):
            raise ArgoError(f"{where}: {what}: {r.origin or path}: {r.kind}: metadata is not a mapping; the API server "
                            "refuses the object")  # fmt: skip
        if dest_ns and _is_namespaced(r) and not r.namespace:
            r.doc.setdefault("metadata", {})["namespace"] = dest_ns
    _refuse_repeated(resources, f"{where}: {what}")
    return path, resources


def _refuse_repeated(resources: list[Resource], what: str) -> None:
    """argo-cd@v3.6.2:controller/state.go NormalizeTargetObjects keys the objects by group, kind, namespace
    (none for cluster-scoped kinds) and name (generateName and the position when there is no name), keeps
    only the last of a repeated key and reports RepeatedResourceWarning: refused here, naming the files."""
    seen: dict[tuple[str, str, str, str], list[Resource]] = {}
    for i, r in enumerate(resources):
        generate = meta(r.doc).get("generateName")
        name = r.name or (f"{generate}{i}" if isinstance(generate, str) and generate else "")
        key = (r.group, r.kind, (r.namespace or "") if _is_namespaced(r) else "", name)
        seen.setdefault(key, []).append(r)
    for (group, kind, namespace, name), found in seen.items():
        if len(found) > 1:
            files = ", ".join(dict.fromkeys(r.origin or "(rendered)" for r in found))
            raise ArgoError(
                f"{what}: {group or 'core'}/{kind} {namespace + '/' if namespace else ''}{name} appears {len(found)} "
                f"times ({files}): Argo CD keeps only the last one and reports RepeatedResourceWarning; remove the "
                "repeats"
            )


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
    link = out_of_bounds_symlink(repo.root)  # the whole checkout, once for all its Applications
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while queue:
            batch, queue = queue, []
            jobs = []
            for app in batch:
                ar = AppRender(app=app)
                render.apps.append(ar)
                if "sources" in app.spec:  # no Application of this repository has several
                    problems.append(error(app.where(), "spec.sources (multiple sources) is not emulated by "
                                          "trainyard; use spec.source", app.resource.describe()))  # fmt: skip
                    continue
                src = app.source
                if not repo.is_this_repo(src.get("repoURL")):
                    ar.upstream = [Upstream(str(src.get("repoURL", "")), str(src.get("targetRevision", "")),
                                            path=src.get("path"), chart=src.get("chart"))]  # fmt: skip
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
                    jobs.append((ar, pool.submit(_render_local_upstream, repo, app, path, link)))
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
                jobs.append((ar, pool.submit(render_source, repo, app, link)))
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
    syncorder.order_cluster(render)  # objects and Applications in Argo CD's sync order
    return render


def _finish(app: Application, resources: list[Resource]) -> list[Resource]:
    """An upstream render as the application controller takes it (argo-cd@v3.6.2:controller/state.go
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
    return resources


def _render_upstream(app: Application, kube_version: str | None) -> tuple[str, list[Resource]]:
    """An Application whose source is an upstream git tag or chart, read from its release's Go module."""
    try:
        _, resources = upstream.render_source(
            app.source,
            app=app.name,
            namespace=app.destination.get("namespace"),
            kube_version=kube_version,
        )
    except upstream.UpstreamError as exc:
        raise ArgoError(str(exc)) from None
    return "", _finish(app, resources)


def _refuse_link(app: Application, link: str | None) -> None:
    if link is not None:
        raise ArgoError(
            f"{app.where()}: Application {app.name}: repository contains out-of-bounds symlinks. file: {link}: Argo "
            "CD's repo server renders no Application of this repository while it holds a symbolic link that is "
            "absolute or leads out of it; replace the link by the file"
        )


def _render_local_upstream(
    repo: Repository, app: Application, path: str, link: str | None
) -> tuple[str, list[Resource]]:
    """A folder of this repository whose kustomizations list upstream files by URL."""
    _refuse_link(app, link)  # the repo server checks the checkout for any source of this repository
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
