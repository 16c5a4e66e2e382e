"""Argo CD checks: explicit sync waves, pinned upstream sources, projects that allow what their
Applications deploy, CRD providers and namespaces ordered before their users."""

from __future__ import annotations

import re
from collections.abc import Iterable

from trainyard.contract.images import floating
from trainyard.repo.model import declared, schema
from trainyard.repo.model.giturl import UrlNotEmulated, normalize_git_url
from trainyard.repo.model.problems import Problem, warning
from trainyard.repo.model.rendered import CLUSTER_SCOPED, Resource, as_dict
from trainyard.repo.upstream import argo_fields
from trainyard.repo.upstream.applications import ARGO_GROUP, AppRender
from trainyard.repo.upstream.go_path import PatternNotRead, path_match
from trainyard.repo.validate import ClusterCheck, job_names

PROVIDES_ANNOTATION = "trainyard.dev/provides"
# Namespaces that exist before anything here is synced.
PREEXISTING_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease", "argocd"})
_PINNED = re.compile(r"^(v?\d+(\.\d+){1,2}([-+.][0-9A-Za-z.-]+)?|[0-9a-f]{40})$")


def check_applications(ctx: ClusterCheck) -> None:
    projects = {r.name: r for r in ctx.resources if r.group == ARGO_GROUP and r.kind == "AppProject"}
    names: dict[str, AppRender] = {}
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
                why = floating(image)  # the rule every rendered image meets
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
    job_names.check_job_folder_names(ctx)


def check_project(ctx: ClusterCheck, ar: AppRender, project: Resource) -> None:
    """What the application controller checks against the Application's AppProject before it syncs
    (argo-cd@v3.6.2:util/argo/argo.go ValidatePermissions, controller/sync.go validateSyncPermissions):
    every source's repoURL (IsSourcePermitted), the destination cluster and namespace
    (IsDestinationPermitted), and each rendered object: its kind (IsGroupKindNamePermitted) and, for a
    namespaced kind, its namespace as a destination. Each refusal carries Argo CD's own message."""
    app, spec = ar.app, as_dict(project.doc.get("spec"))
    where, obj, name = app.where(), app.resource.describe(), project.name
    repos, destinations, bad = _project_lists(spec)
    if bad:
        ctx.err(project.where(), f"AppProject {name}: {bad}; Argo CD cannot read the project", project.describe())
        return
    if spec.get("permitOnlyProjectScopedClusters") is True:
        ctx.err(where, f"project {name} sets permitOnlyProjectScopedClusters, which trainyard does not emulate "
                "(it needs the project's cluster secrets)", obj)  # fmt: skip
        return
    if "sourceHydrator" in app.spec:
        ctx.err(where, "spec.sourceHydrator is not emulated by trainyard", obj)
        return
    sources = app.spec.get("sources")
    multiple = isinstance(sources, list) and len(sources) > 0  # ApplicationSpec.HasMultipleSources
    for source in sources if multiple else [app.source]:
        source = as_dict(source)
        condition = _source_condition(source, multiple)
        if condition:
            ctx.err(where, condition, obj)
            return  # ValidatePermissions stops at the first malformed source
        url = source.get("repoURL") if isinstance(source.get("repoURL"), str) else ""
        try:
            permitted = is_source_permitted(repos, url)
        except (UrlNotEmulated, GlobNotRead) as exc:
            ctx.err(where, f"project {name}: cannot check the source {url!r} against spec.sourceRepos: {exc}", obj)
            continue
        if not permitted:
            ctx.err(where, f"application repo {url} is not permitted in project '{name}' (spec.sourceRepos)", obj)
    cluster, why = destination_cluster(app.destination)
    if cluster is None:
        ctx.err(where, why, obj)
        return
    server, cluster_name = cluster
    namespace = app.destination.get("namespace") if isinstance(app.destination.get("namespace"), str) else ""
    try:
        if not is_destination_permitted(destinations, server, cluster_name, namespace):
            shown = cluster_name if app.destination.get("name") else server
            ctx.err(where, f"application destination server '{shown}' and namespace '{namespace}' do not match any of "
                    f"the allowed destinations in project '{name}' (spec.destinations)", obj)  # fmt: skip
        for r in ar.resources:
            scoped = (r.group, r.kind) in CLUSTER_SCOPED
            if not project_permits(spec, r):
                ctx.err(
                    r.where(),
                    f"project {name} of Application {app.name} does not allow {r.group or 'core'}/{r.kind} "
                    f"({'cluster' if scoped else 'namespace'}ResourceWhitelist/Blacklist); Argo CD would refuse to "
                    "sync it",
                    r.describe(),
                )
            elif not scoped and not is_destination_permitted(destinations, server, cluster_name, r.namespace or ""):
                ctx.err(r.where(), f"namespace {r.namespace or ''} is not permitted in project '{name}' "
                        "(spec.destinations)", r.describe())  # fmt: skip
    except GlobNotRead as exc:
        ctx.err(where, f"project {name}: spec.destinations: {exc}", obj)


def _project_lists(spec: dict) -> tuple[list[str], list[dict], str]:
    """spec.sourceRepos and spec.destinations, or what makes the AppProject unreadable."""
    repos = spec.get("sourceRepos") or []
    if not isinstance(repos, list) or not all(isinstance(r, str) for r in repos):
        return [], [], "spec.sourceRepos must be a list of strings"
    destinations = spec.get("destinations") or []
    if not isinstance(destinations, list) or not all(
        isinstance(d, dict) and all(isinstance(d.get(k, ""), str) for k in ("server", "name", "namespace"))
        for d in destinations
    ):
        return [], [], "spec.destinations must be a list of mappings of server, name and namespace strings"
    return repos, destinations, ""


def _source_condition(source: dict, multiple: bool) -> str:
    """argo-cd@v3.6.2:util/argo/argo.go validateSourcePermissions."""
    repo, path, chart, ref = (str(source.get(k) or "") for k in ("repoURL", "path", "chart", "ref"))
    if multiple:
        if not repo or (not path and not chart and not ref):
            return "spec.source.repoURL and either source.path, source.chart, or source.ref are required for source"
    elif not repo or (not path and not chart):
        return "spec.source.repoURL and either spec.source.path or spec.source.chart are required"
    if chart and not source.get("targetRevision"):
        return "spec.source.targetRevision is required if the manifest source is a helm chart"
    return ""


IN_CLUSTER_SERVER = "https://kubernetes.default.svc"  # pkg/apis/application/v1alpha1 KubernetesInternalAPIServerAddr
IN_CLUSTER_NAME = "in-cluster"  # KubernetesInClusterName


def destination_cluster(destination: dict) -> tuple[tuple[str, str] | None, str]:
    """argo-cd@v3.6.2:util/argo/argo.go GetDestinationCluster: (server, name) of the cluster the
    destination names, or (None, Argo CD's error). Only the cluster Argo CD runs in is known here (the
    repository declares no cluster secrets), as util/db/cluster.go describes it without a secret."""
    name = destination.get("name") if isinstance(destination.get("name"), str) else ""
    server = destination.get("server") if isinstance(destination.get("server"), str) else ""
    if name and server:
        return None, f"application destination can't have both name and server defined: {name} {server}"
    if server:
        if server.rstrip("/") == IN_CLUSTER_SERVER:
            return (IN_CLUSTER_SERVER, IN_CLUSTER_NAME), ""
        return None, (f"error getting cluster by server {server!r}: trainyard knows only the cluster Argo CD runs in "
                      f"({IN_CLUSTER_SERVER}); no cluster secret of this repository declares another")  # fmt: skip
    if name:
        if name == IN_CLUSTER_NAME:
            return (IN_CLUSTER_SERVER, IN_CLUSTER_NAME), ""
        return None, f"error getting cluster by name {name!r}: there are no clusters with this name: {name}"
    return None, "Destination server missing from app spec"


class GlobNotRead(ValueError):
    """An AppProject pattern beyond the forms the offline check reads; the message names it."""


# Argo CD matches these patterns with gobwas/glob (argo-cd@v3.6.2:util/glob/glob.go Match). This
# repository's AppProjects write only literal text and "*" alone (and "!" before literal text is
# Argo CD's own negation, not a glob), so any other glob is refused rather than emulated.
_GLOB_CHARS = re.compile(r"[*?\[\]{}\\\x00\ufffd]")


def glob_match(pattern: str, value: str, allow_negation: bool) -> bool:
    """argo-cd@v3.6.2:pkg/apis/application/v1alpha1/app_project_types.go globMatch: a pattern starting
    with '!' (where negation is allowed) matches what the rest does not; "*" matches everything;
    literal text matches itself. Any other glob raises :class:`GlobNotRead`."""
    if allow_negation and pattern.startswith("!"):
        return not _literal_match(pattern[1:], value)
    if pattern == "*":
        return True
    return _literal_match(pattern, value)


def _refuse_glob(pattern: str) -> None:
    if _GLOB_CHARS.search(pattern):
        raise GlobNotRead(
            f"the pattern {pattern!r} is a glob beyond literal text and '*' alone, which the offline check "
            f"does not read; {argo_fields.CLUSTER_TIER}"
        )


def _literal_match(pattern: str, value: str) -> bool:
    _refuse_glob(pattern)
    return pattern == value


def is_source_permitted(source_repos: list[str], repo_url: str) -> bool:
    """app_project_types.go IsSourcePermitted: both sides normalised (util/git NormalizeGitURL), the
    entries matched in order (:func:`glob_match`); a ``!`` entry that matches denies at once, one
    that does not match permits; otherwise the source is permitted when any entry matched."""
    normalized_source = normalize_git_url(repo_url)
    matched_any = False
    for entry in source_repos:
        deny = entry.startswith("!")
        if entry not in ("*", "!*"):
            _refuse_glob(entry.removeprefix("!"))  # before normalising, which could hide a glob character
        normalized = "!" + normalize_git_url(entry[1:]) if deny else normalize_git_url(entry)
        matched = glob_match(normalized, normalized_source, True)
        if matched:
            matched_any = True
        elif normalized.startswith("!"):
            return False
    return matched_any


def is_destination_permitted(destinations: list[dict], server: str, name: str, namespace: str) -> bool:
    """argo-cd@v3.6.2:pkg/apis/application/v1alpha1/app_project_types.go isDestinationMatched
    (IsDestinationPermitted without project-scoped clusters). Where an entry's namespace matches, a
    deny pattern on its name or server that names the cluster refuses at once, even when the other
    identifier matches (new in v3.6.2); otherwise a deny entry on name or server refuses when it does
    not match and the namespace does, one on the namespace when the server matched."""
    matched_any = False
    for item in destinations:
        item_name, item_server, item_ns = (str(item.get(k) or "") for k in ("name", "server", "namespace"))
        name_matched = name != "" and glob_match(item_name, name, True)
        server_matched = server != "" and glob_match(item_server, server, True)
        namespace_matched = glob_match(item_ns, namespace, True)
        if namespace_matched and (
            (item_name.startswith("!") and name != "" and _literal_match(item_name[1:], name))
            or (item_server.startswith("!") and server != "" and _literal_match(item_server[1:], server))
        ):
            return False
        name_or_server_denied = (not name_matched and item_name.startswith("!")) or (
            not server_matched and item_server.startswith("!")
        )
        if (server_matched or name_matched) and namespace_matched:
            matched_any = True
        elif (name_or_server_denied and namespace_matched) or (
            not namespace_matched and item_ns.startswith("!") and server_matched
        ):
            return False
    return matched_any


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
    """Argo CD's AppProject.IsGroupKindNamePermitted (argo-cd@v3.6.2 pkg/apis/application/v1alpha1/
    app_project_types.go): a namespaced kind is allowed when namespaceResourceWhitelist is absent
    (everything) or lists it (an empty list allows nothing), and namespaceResourceBlacklist does not;
    a cluster-scoped kind only when clusterResourceWhitelist lists it (by group, kind and name glob)
    and clusterResourceBlacklist does not."""
    spec = as_dict(spec)
    if (r.group, r.kind) in CLUSTER_SCOPED:
        white, black = spec.get("clusterResourceWhitelist"), spec.get("clusterResourceBlacklist")
        allowed = bool(white) and any(_gk_match(rule, r, named=True) for rule in white)
        return allowed and not any(_gk_match(rule, r, named=True) for rule in black or [])
    white, black = spec.get("namespaceResourceWhitelist"), spec.get("namespaceResourceBlacklist")
    allowed = white is None or (bool(white) and any(_gk_match(rule, r) for rule in white))
    return allowed and not any(_gk_match(rule, r) for rule in black or [])


def _gk_match(rule: object, r: Resource, *, named: bool = False) -> bool:
    """A whitelist or blacklist item: group and kind patterns (filepath.Match: literal text and '*'
    are read, anything else raises GlobNotRead), and for cluster-scoped items a name pattern (absent:
    any name) (argo-cd@v3.6.2:pkg/apis/application/v1alpha1/types.go isResourceInList,
    isNamedResourceInList)."""
    if not isinstance(rule, dict):
        return False
    g, k, name = str(rule.get("group", "")), str(rule.get("kind", "")), rule.get("name")
    try:
        if not (path_match(k, r.kind) and path_match(g, r.group)):
            return False
        return not named or not name or path_match(str(name), r.name)
    except PatternNotRead as exc:
        raise GlobNotRead(f"resource list pattern: {exc}; {argo_fields.CLUSTER_TIER}") from None


StaleCandidate = tuple[tuple[str, ...], Problem | None]


def check_sync_options(ctx: ClusterCheck) -> list[StaleCandidate]:
    """What Argo CD reads by name, checked offline as far as this repository uses it
    (trainyard/repo/upstream/argo_fields.py): every Application's sync options are options Argo CD
    knows (it ignores any other string in silence; an object's sync-options annotation is checked with
    the render, syncorder.py); every ignoreDifferences entry has the shape of a
    ResourceIgnoreDifferences, a literal group and kind, valid JSON pointers (Argo CD skips one that
    names nothing) and jq paths of the forms the offline check reads; argocd-cm holds no diff
    settings. What is not read offline is refused by name: the real Argo CD judges it in the cluster
    tier. Returns, for each ignoreDifferences entry, its key and the warning that it matches no object
    of its Application (of any Application an ApplicationSet generates), or None where it matches
    one: :func:`stale_rules` warns of those no checked cluster uses (an Application in a shared base
    may ignore what only some clusters render)."""
    generated: dict[str, dict[str, tuple]] = {}  # ApplicationSet -> rule -> (used, rule, where, obj)
    out: list[StaleCandidate] = []
    for ar in ctx.render.apps:
        app = ar.app
        where, obj = app.where(), app.resource.describe()
        try:
            options = argo_fields.sync_options(app.spec, f"Application {app.name}")
        except argo_fields.FieldError as exc:
            ctx.err(where, str(exc).split(": ", 1)[-1], obj)
            options = []
        for i, option in enumerate(options):
            problem = argo_fields.sync_option_problem(option)
            if problem:
                ctx.err(where, f"spec.syncPolicy.syncOptions[{i}]: {problem}", obj)
        try:
            rules = list(
                argo_fields.parse_ignore_differences(app.spec.get("ignoreDifferences"), f"Application {app.name}")
            )
        except argo_fields.FieldError as exc:
            ctx.err(where, str(exc).split(": ", 1)[-1], obj)
            rules = []
        for rule in rules:
            if app.generated_by is None or app.generated_by not in generated:
                _check_rule(ctx, rule, where, obj)  # an ApplicationSet's template: once
            if app.generated_by is not None:  # stale only if no Application of the ApplicationSet uses it
                seen = generated.setdefault(app.generated_by, {})
                seen[rule.where] = (seen.get(rule.where, (False,))[0] or _rule_used(rule, ar), rule, where, obj)
            else:
                stale = warning(where, _stale(rule, f"that Application {app.name} renders"), obj, ctx.cluster)
                out.append((("Application", app.name, rule.where), None if _rule_used(rule, ar) else stale))
    for appset, seen in generated.items():
        for used, rule, where, obj in seen.values():
            stale = warning(where, _stale(rule, f"that any Application of ApplicationSet {appset} renders"), obj,
                            ctx.cluster)  # fmt: skip
            out.append((("ApplicationSet", appset, rule.where), None if used else stale))
    for r in ctx.resources:
        if r.kind == "ConfigMap" and r.group == "" and r.name == "argocd-cm":
            try:
                problems = argo_fields.argocd_cm_problems(r.doc.get("data") or {})
            except argo_fields.FieldError as exc:
                problems = [str(exc)]
            for problem in problems:
                ctx.err(r.where(), problem, r.describe())
    return out


def stale_rules(candidates: Iterable[StaleCandidate]) -> list[Problem]:
    """The warnings of :func:`check_sync_options` for the rules no checked cluster uses."""
    by_key: dict[tuple[str, ...], list[Problem | None]] = {}
    for key, problem in candidates:
        by_key.setdefault(key, []).append(problem)
    return [p for problems in by_key.values() if None not in problems for p in problems if p is not None]


def _rule_used(rule: argo_fields.Rule, ar: AppRender) -> bool:
    """Whether ``rule`` matches an object ``ar`` renders (True where nothing was rendered, or where
    the rule's group or kind is a glob: the render's or the rule's own problem is reported)."""
    if not ar.resources or argo_fields.rule_problems(rule):
        return True
    return any(rule.matches(*argo_fields.identity(r.doc)) for r in ar.resources)


def _stale(rule: argo_fields.Rule, whose: str) -> str:
    named = "/".join(x for x in (rule.group or "core", rule.kind, rule.namespace, rule.name) if x)
    return f"{rule.where} ({named}) matches no object {whose}: a stale rule?"


def _check_rule(ctx: ClusterCheck, rule: argo_fields.Rule, where: str, obj: str) -> None:
    for problem in argo_fields.rule_problems(rule):
        ctx.err(where, problem, obj)
    for j, pointer in enumerate(rule.json_pointers):
        for problem in argo_fields.pointer_problems(pointer):
            ctx.err(where, f"{rule.where}.jsonPointers[{j}] {pointer!r}: {problem}", obj)
    for j, expression in enumerate(rule.jq_paths):
        for problem in argo_fields.jq_problems(expression):
            ctx.err(where, f"{rule.where}.jqPathExpressions[{j}] {expression!r}: {problem}", obj)
