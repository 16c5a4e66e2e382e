"""Argo CD checks: explicit sync waves, pinned upstream sources, projects that allow what their
Applications deploy, CRD providers and namespaces ordered before their users."""

from __future__ import annotations

import re

from trainyard.repo.model import declared, schema
from trainyard.repo.model.rendered import CLUSTER_SCOPED, Resource
from trainyard.repo.model.repository import normalize_url
from trainyard.repo.upstream import argocd
from trainyard.repo.validate import ClusterCheck
from trainyard.repo.validate.objects import floating

ARGO_GROUP = "argoproj.io"
PROVIDES_ANNOTATION = "trainyard.dev/provides"
# Namespaces that exist before anything here is synced.
PREEXISTING_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "argocd"})
_PINNED = re.compile(r"^(v?\d+(\.\d+){1,2}([-+.][0-9A-Za-z.-]+)?|[0-9a-f]{40})$")


def check_applications(ctx: ClusterCheck) -> None:
    projects = {r.name: r for r in ctx.resources if r.group == ARGO_GROUP and r.kind == "AppProject"}
    names: dict[str, argocd.AppRender] = {}
    for ar in ctx.render.apps:
        app = ar.app
        where, obj = app.where(), app.resource.describe()
        if app.name in names:
            ctx.err(where, f"Application name {app.name!r} is used twice (also {names[app.name].app.where()})", obj)
        names[app.name] = ar
        if not app.has_wave:
            ctx.err(where, "no argocd.argoproj.io/sync-wave annotation: give every Application an explicit wave", obj)
        for up in ar.upstream:
            if not _PINNED.match(up.revision):
                ctx.err(
                    where,
                    f"upstream source {up.repo_url} is not pinned (targetRevision {up.revision!r}): "
                    "use a release tag or a commit SHA",
                    obj,
                )
            for image in up.images:
                why = floating(image)  # the rule every rendered image meets (objects.py)
                if why:
                    ctx.err(
                        where,
                        f"image pin {image!r} for {up.repo_url} is a moving tag ({why}): pin a release tag or a digest",
                        obj,
                    )
        project = projects.get(app.project)
        if project is None:
            if app.project != "default":
                ctx.err(where, f"spec.project {app.project!r} is not an AppProject of this cluster", obj)
            continue
        check_project(ctx, ar, project)


def check_project(ctx: ClusterCheck, ar: argocd.AppRender, project: Resource) -> None:
    app, spec = ar.app, project.doc.get("spec") or {}
    where, obj = app.where(), app.resource.describe()
    repos = [str(s) for s in spec.get("sourceRepos") or []]
    # the Application's own sources; what kustomize fetches while building one is not a source
    urls = [u.repo_url for u in ar.upstream if not u.remote_resource] or [str(app.source.get("repoURL", ""))]
    for url in urls:
        if "*" not in repos and not any(_same_repo(url, s) for s in repos):
            ctx.err(where, f"project {project.name} does not allow the source {url} (spec.sourceRepos)", obj)
    dest_ns = app.destination.get("namespace")
    allowed = [d.get("namespace") for d in spec.get("destinations") or [] if isinstance(d, dict)]
    if dest_ns and not any(a in ("*", dest_ns) for a in allowed):
        ctx.err(where, f"project {project.name} does not allow destination namespace {dest_ns!r}", obj)
    for r in ar.resources:
        if not project_permits(spec, r):
            scoped = (r.group, r.kind) in CLUSTER_SCOPED
            ctx.err(
                r.where(),
                f"project {project.name} of Application {app.name} does not allow {r.group or 'core'}/{r.kind} "
                f"({'cluster' if scoped else 'namespace'}ResourceWhitelist/Blacklist); Argo CD would refuse to sync it",
                r.describe(),
            )
        if r.namespace and not any(a in ("*", r.namespace) for a in allowed):
            ctx.err(r.where(), f"project {project.name} does not allow namespace {r.namespace!r}", r.describe())


def check_waves_and_namespaces(ctx: ClusterCheck) -> None:
    providers: dict[str, int] = {ARGO_GROUP: -(10**6)}  # Argo CD itself provides argoproj.io
    operator = ctx.declared is not None and ctx.declared.prometheus_operator
    if operator:  # so does Prometheus Operator its group, installed outside where the facts say so
        providers[declared.MONITORING_GROUP] = -(10**6)
    for ar in ctx.render.apps:
        groups = ar.app.resource.annotations.get(PROVIDES_ANNOTATION, "")
        for g in (x.strip() for x in groups.split(",")):
            if g:
                providers[g] = min(providers.get(g, 10**6), ar.app.wave)
        for r in ar.resources:
            if r.kind == "CustomResourceDefinition":
                g = str((r.doc.get("spec") or {}).get("group", ""))
                providers[g] = min(providers.get(g, 10**6), ar.app.wave)
    namespaces: dict[str, int] = {}
    for ar in ctx.render.apps:
        for r in ar.resources:
            if r.kind == "Namespace" and r.group == "":
                namespaces[r.name] = min(namespaces.get(r.name, 10**6), ar.app.wave)
        if "CreateNamespace=true" in (ar.app.spec.get("syncPolicy") or {}).get("syncOptions", []):
            ns = ar.app.destination.get("namespace")
            if ns:
                namespaces[ns] = min(namespaces.get(ns, 10**6), ar.app.wave)
    for ar in ctx.render.apps:
        wave = ar.app.wave
        for r in ar.resources:
            if r.group and not schema.has_schema(r.kind, r.api_version):
                provider = providers.get(r.group)
                if provider is None and r.group == declared.MONITORING_GROUP:
                    pass  # installs.check_served names the fact to set
                elif provider is None:
                    ctx.err(
                        r.where(),
                        f"no Application of this cluster installs the CRDs of API group {r.group!r}; add the "
                        f"provider (annotated {PROVIDES_ANNOTATION}) in an earlier sync wave",
                        r.describe(),
                    )
                elif provider >= wave:
                    ctx.err(
                        r.where(),
                        f"API group {r.group!r} is installed in sync wave {provider} but used by Application "
                        f"{ar.name} in wave {wave}: the CRD provider must come in an earlier wave",
                        r.describe(),
                    )
            ns = r.namespace
            if ns and ns not in PREEXISTING_NAMESPACES:
                created = namespaces.get(ns)
                if created is None:
                    ctx.err(r.where(), f"namespace {ns!r} is created by no Application of this cluster", r.describe())
                elif created > wave:
                    ctx.err(
                        r.where(),
                        f"namespace {ns!r} is created in sync wave {created}, after Application {ar.name} "
                        f"(wave {wave}) that uses it",
                        r.describe(),
                    )


def project_permits(spec: dict, r: Resource) -> bool:
    """Argo CD's AppProject.IsGroupKindNamePermitted (argo-cd@v3.5.1 pkg/apis/application/v1alpha1/
    app_project_types.go): a namespaced kind is allowed when namespaceResourceWhitelist is absent
    (everything) or lists it (an empty list allows nothing), and namespaceResourceBlacklist does not;
    a cluster-scoped kind only when clusterResourceWhitelist lists it (by group, kind and name glob)
    and clusterResourceBlacklist does not."""
    if (r.group, r.kind) in CLUSTER_SCOPED:
        white, black = spec.get("clusterResourceWhitelist"), spec.get("clusterResourceBlacklist")
        allowed = bool(white) and any(_gk_match(rule, r, named=True) for rule in white)
        return allowed and not any(_gk_match(rule, r, named=True) for rule in black or [])
    white, black = spec.get("namespaceResourceWhitelist"), spec.get("namespaceResourceBlacklist")
    allowed = white is None or (bool(white) and any(_gk_match(rule, r) for rule in white))
    return allowed and not any(_gk_match(rule, r) for rule in black or [])


def _same_repo(a: str, b: str) -> bool:
    return normalize_url(a) == normalize_url(b)


def _gk_match(rule: object, r: Resource, *, named: bool = False) -> bool:
    """A whitelist or blacklist item: group and kind globs (filepath.Match), and for cluster-scoped
    items a name glob (absent: any name)."""
    if not isinstance(rule, dict):
        return False
    g, k = str(rule.get("group", "")), str(rule.get("kind", ""))
    if not (argocd.go_path_match(g, r.group) and argocd.go_path_match(k, r.kind)):
        return False
    name = rule.get("name")
    return not named or not name or argocd.go_path_match(str(name), r.name)
