"""What a cluster installs hangs together, upstream releases included (they are rendered from their
pinned modules like the repository's own objects):

- every object of a custom API group is served by a CRD the cluster installs, at its version (or one
  installed before the bootstrap: Argo CD's, and Prometheus Operator's where the cluster's facts say
  it runs);
- and passes that CRD version's structural schema, unknown fields refused (strict field
  validation, which Argo CD's default ``Validate=true`` asks of kube-apiserver);
- the monitoring Application is installed exactly where the facts say Prometheus Operator runs;
- an Application annotated ``trainyard.dev/provides`` installs exactly the CRD groups it names (the
  sync-wave check orders Applications by that annotation);
- a RoleBinding or ClusterRoleBinding names a role that exists (rendered, or one kube-apiserver
  bootstraps) and ServiceAccounts that exist;
- a webhook (admission, CRD conversion, aggregated API) points at a Service that exists, on a
  port it serves.

A failure here is an install that would sync and then not work: a controller denied, a webhook
that cannot be called, a kind the API server does not know.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainyard.contract.errors import UserError
from trainyard.repo.model import declared, schema, upstream
from trainyard.repo.model.rendered import Resource
from trainyard.repo.validate import ClusterCheck
from trainyard.repo.validate.argo import PROVIDES_ANNOTATION

CRD = "CustomResourceDefinition"
WEBHOOK_CONFIGURATIONS = frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"})
# Roles kube-apiserver creates at start-up (kubernetes@v1.36.5:plugin/pkg/auth/authorizer/rbac/
# bootstrappolicy): policy.go ClusterRoles (the user-facing ones, and every system: role) and
# namespace_policy.go's Roles in kube-system (system: ones aside)
BOOTSTRAP_CLUSTER_ROLES = frozenset({"cluster-admin", "admin", "edit", "view"})
BOOTSTRAP_ROLES = frozenset({("kube-system", "extension-apiserver-authentication-reader")})
MONITORING_APP = "trainyard-monitoring"  # base/apps/monitoring
MONITORING_COMPONENT = "../../base/apps/monitoring"
# The ServiceAccounts of a Prometheus Operator install that Kueue's chart binds (kueue@v0.19.2:
# charts/kueue/templates/prometheus/role.yaml: prometheus-k8s and prometheus-operator in
# metrics.prometheusNamespace, default monitoring: kube-prometheus's names and namespace)
OPERATOR_ACCOUNTS = frozenset({("monitoring", "prometheus-k8s"), ("monitoring", "prometheus-operator")})


def check_installs(ctx: ClusterCheck) -> None:
    check_served(ctx)
    check_monitoring(ctx)
    check_provides(ctx)
    check_rbac(ctx)
    check_webhooks(ctx)


def served_kinds(crds: Iterable[dict]) -> dict[tuple[str, str], set[str]]:
    """(group, kind) -> the versions the CRDs serve."""
    out: dict[tuple[str, str], set[str]] = {}
    for d in crds:
        spec = d.get("spec") or {}
        for v in spec.get("versions") or []:
            if isinstance(v, dict) and v.get("served"):
                out.setdefault((str(spec.get("group")), str((spec.get("names") or {}).get("kind"))), set()).add(
                    str(v.get("name"))
                )
    return out


def check_served(ctx: ClusterCheck) -> None:
    crds = [r.doc for r in ctx.resources if r.kind == CRD and r.group == "apiextensions.k8s.io"]
    operator = ctx.declared is not None and ctx.declared.prometheus_operator
    try:
        # Argo CD's install (and the operator's) precede the bootstrap; only read here
        crds += upstream.bootstrap_crds(operator, fresh=False)
    except UserError as exc:
        sources = "Argo CD's and Prometheus Operator's" if operator else "Argo CD's"
        ctx.err("kube/releases", f"{sources} CRDs cannot be read, so the kinds they serve are not checked: {exc}")
        return
    served = served_kinds(crds)
    schemas = crd_schemas(crds)
    # the Applications an ApplicationSet makes are created from its template: checked as Applications
    generated = [ar.app.resource for ar in ctx.render.apps if ar.app.generated_by]
    for r in [*ctx.resources, *generated]:
        check_custom_schema(ctx, r, schemas)
    for r in ctx.resources:
        if not r.group or schema.has_schema(r.kind, r.api_version):  # kube-apiserver's own kinds
            continue
        version = r.api_version.rpartition("/")[2]
        versions = served.get((r.group, r.kind))
        if versions is None and r.group == declared.MONITORING_GROUP and not operator:
            ctx.err(
                r.where(),
                f"{r.kind} of {r.group} is served by Prometheus Operator, which {facts_file(ctx)} does not say runs "
                f"on this cluster: set spec.monitoring: {declared.PROMETHEUS_OPERATOR} there if it does, or take "
                f"{MONITORING_COMPONENT} out of clusters/{ctx.cluster}/kustomization.yaml",
                r.describe(),
            )
        elif versions is None:
            ctx.err(
                r.where(),
                f"no CRD this cluster installs serves kind {r.kind} of API group {r.group}; install its provider "
                f"(an Application annotated {PROVIDES_ANNOTATION}) or fix the kind",
                r.describe(),
            )
        elif version not in versions:
            ctx.err(
                r.where(),
                f"{r.kind} {r.api_version}: the CRD this cluster installs serves {r.group} at "
                f"{', '.join(sorted(versions))}, not {version}",
                r.describe(),
            )


def crd_schemas(crds: Iterable[dict]) -> dict[tuple[str, str, str], tuple[str, dict]]:
    """(group, kind, version) -> (the CRD's name, that version's openAPIV3Schema)."""
    out: dict[tuple[str, str, str], tuple[str, dict]] = {}
    for d in crds:
        spec = d.get("spec") if isinstance(d.get("spec"), dict) else {}
        kind = str((spec.get("names") or {}).get("kind", ""))
        for v in spec.get("versions") or []:
            schema = ((v.get("schema") or {}).get("openAPIV3Schema")) if isinstance(v, dict) else None
            if isinstance(schema, dict) and v.get("served"):
                name = str((d.get("metadata") or {}).get("name", ""))
                out[(str(spec.get("group", "")), kind, str(v.get("name")))] = (name, schema)
    return out


def check_custom_schema(ctx: ClusterCheck, r: Resource, schemas: dict[tuple[str, str, str], tuple[str, dict]]) -> None:
    """A custom resource against the structural schema of the CRD that serves it, unknown fields
    refused: kube-apiserver refuses them when Argo CD applies the object (its default Validate=true
    is kubectl's strict field validation), so a misspelt field fails the sync, not the review."""
    if not r.group or schema.has_schema(r.kind, r.api_version):
        return
    found = schemas.get((r.group, r.kind, r.api_version.rpartition("/")[2]))
    if found is None:
        return  # check_served names what serves no such kind
    crd, openapi = found
    for e in schema.validate_custom(r.doc, openapi):
        ctx.err(r.where(), f"schema of CRD {crd} (strict, as kube-apiserver checks it): {e}", r.describe())


def facts_file(ctx: ClusterCheck) -> str:
    return f"clusters/{ctx.cluster}/{declared.FILE}"


def check_monitoring(ctx: ClusterCheck) -> None:
    """The monitors are installed where, and only where, the facts say Prometheus Operator runs."""
    if ctx.declared is None:  # the declaration's own errors are reported
        return
    app = next((ar.app for ar in ctx.render.apps if ar.name == MONITORING_APP), None)
    entry = f"clusters/{ctx.cluster}/kustomization.yaml"
    if app is not None and not ctx.declared.prometheus_operator:
        ctx.err(
            entry,
            f"installs Application {MONITORING_APP} ({app.where()}), but {facts_file(ctx)} does not say "
            f"Prometheus Operator runs on this cluster (spec.monitoring: {ctx.declared.spec.monitoring}): set "
            f"spec.monitoring: {declared.PROMETHEUS_OPERATOR} there, or take {MONITORING_COMPONENT} out of {entry}",
            app.resource.describe(),
        )
    elif app is None and ctx.declared.prometheus_operator:
        ctx.err(
            facts_file(ctx),
            f"spec.monitoring: {declared.PROMETHEUS_OPERATOR}, but the cluster installs no Application "
            f"{MONITORING_APP}: add {MONITORING_COMPONENT} to the components of {entry} (before ../../base/repo), "
            "or say spec.monitoring: none",
        )


def check_provides(ctx: ClusterCheck) -> None:
    for ar in ctx.render.apps:
        if not ar.resources:
            continue
        said = {g.strip() for g in ar.app.resource.annotations.get(PROVIDES_ANNOTATION, "").split(",") if g.strip()}
        installed = {str((r.doc.get("spec") or {}).get("group")) for r in ar.resources if r.kind == CRD}
        if said != installed:
            missing, extra = sorted(said - installed), sorted(installed - said)
            parts = [f"names {', '.join(missing)} but installs no CRD of it"] if missing else []
            parts += [f"installs CRDs of {', '.join(extra)} without naming them"] if extra else []
            ctx.err(
                ar.app.where(),
                f"Application {ar.name}: {PROVIDES_ANNOTATION} {'; '.join(parts)} (the sync waves are ordered by it)",
                ar.app.resource.describe(),
            )


def check_rbac(ctx: ClusterCheck) -> None:
    roles = {(r.kind, r.namespace or "", r.name) for r in ctx.resources if r.kind in ("Role", "ClusterRole")}
    accounts = {(r.namespace or "", r.name) for r in ctx.resources if r.kind == "ServiceAccount" and r.group == ""}
    if ctx.declared is not None and ctx.declared.prometheus_operator:
        accounts |= OPERATOR_ACCOUNTS  # installed with the operator, outside the repository
    for r in ctx.resources:
        if r.kind not in ("RoleBinding", "ClusterRoleBinding") or r.group != "rbac.authorization.k8s.io":
            continue
        ref = r.doc.get("roleRef") or {}
        kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
        ns = r.namespace or "" if kind == "Role" else ""
        bootstrap = name.startswith("system:") or (
            name in BOOTSTRAP_CLUSTER_ROLES if kind == "ClusterRole" else (ns, name) in BOOTSTRAP_ROLES
        )
        if not bootstrap and (kind, ns, name) not in roles:
            ctx.err(
                r.where(),
                f"roleRef {kind} {name!r} is not installed by this cluster (nor one kube-apiserver creates): the "
                "binding grants nothing",
                r.describe(),
            )
        for s in r.doc.get("subjects") or []:
            if not isinstance(s, dict) or s.get("kind") != "ServiceAccount":
                continue
            sa_ns = str(s.get("namespace") or r.namespace or "")
            # every namespace has a "default" ServiceAccount (the service account controller makes it)
            if s.get("name") != "default" and (sa_ns, str(s.get("name"))) not in accounts:
                ctx.err(
                    r.where(),
                    f"subject ServiceAccount {sa_ns}/{s.get('name')} is not installed by this cluster",
                    r.describe(),
                )


def _service_refs(r: Resource) -> Iterable[tuple[str, dict]]:
    if r.kind in WEBHOOK_CONFIGURATIONS and r.group == "admissionregistration.k8s.io":
        for i, w in enumerate(r.doc.get("webhooks") or []):
            if isinstance(w, dict):
                yield f"webhooks[{i}] {w.get('name')}", ((w.get("clientConfig") or {}).get("service") or {})
    elif r.kind == CRD:
        conversion = (r.doc.get("spec") or {}).get("conversion") or {}
        service = ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("service")
        if conversion.get("strategy") == "Webhook" and service:
            yield "spec.conversion.webhook", service
    elif r.kind == "APIService" and r.group == "apiregistration.k8s.io":
        service = (r.doc.get("spec") or {}).get("service")
        if service:
            yield "spec.service", service


def check_webhooks(ctx: ClusterCheck) -> None:
    services = {
        (r.namespace or "", r.name): {p.get("port") for p in (r.doc.get("spec") or {}).get("ports") or []}
        for r in ctx.resources
        if r.kind == "Service" and r.group == ""
    }
    for r in ctx.resources:
        for path, service in _service_refs(r):
            if not service:
                continue
            key = (str(service.get("namespace", "")), str(service.get("name", "")))
            port = service.get("port", 443)  # the API's default (admissionregistration/v1 ServiceReference)
            if key not in services:
                ctx.err(
                    r.where(),
                    f"{path}: Service {key[0]}/{key[1]} is not installed by this cluster: kube-apiserver could not "
                    "call it",
                    r.describe(),
                )
            elif port not in services[key]:
                ctx.err(
                    r.where(),
                    f"{path}: Service {key[0]}/{key[1]} has no port {port} (it serves "
                    f"{', '.join(str(p) for p in sorted(services[key], key=str))})",
                    r.describe(),
                )
