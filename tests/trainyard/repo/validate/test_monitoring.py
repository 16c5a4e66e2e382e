"""The monitors (base/monitoring): installed by Argo CD exactly where the cluster's facts say Prometheus
Operator runs, labelled as the metric contract says, and valid against the operator's own CRDs."""

from __future__ import annotations

import re

import jsonschema
import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.contract import metrics, names
from trainyard.repo import validate
from trainyard.repo.model import declared, upstream
from trainyard.repo.validate import installs

pytestmark = pytest.mark.usefixtures("upstream_tools")

FACT = "monitoring: prometheus-operator"


def monitors(report, cluster: str) -> list:
    return [r for r in report.renders[cluster].resources() if r.group == declared.MONITORING_GROUP]


def test_the_monitoring_application_renders_on_every_cluster_that_declares_the_operator(repo, report):
    assert not errors_of(report)
    for cluster in repo.clusters():
        assert declared.load(repo, cluster).prometheus_operator  # all three declare it
        app = report.renders[cluster].app(installs.MONITORING_APP)
        assert app is not None and app.app.wave > report.renders[cluster].app("trainyard-webhook").app.wave
        kinds = {(r.kind, r.name) for r in app.resources}
        assert ("PodMonitor", "trainyard-trainer") in kinds
        # prod-ib admits by policy: no webhook runs there, so none is scraped
        assert (("ServiceMonitor", "trainyard-webhook") in kinds) is (cluster != "prod-ib")
        assert (("PrometheusRule", "trainyard-webhook") in kinds) is (cluster != "prod-ib")
        # Kueue's own ServiceMonitor comes with its chart (enablePrometheus)
        kueue = report.renders[cluster].app("trainyard-kueue")
        assert any(r.kind == "ServiceMonitor" for r in kueue.resources)


def test_the_podmonitor_scrapes_the_contracts_port_with_its_labels(report):
    for cluster in report.renders:
        (pm,) = [r for r in monitors(report, cluster) if r.kind == "PodMonitor"]
        assert pm.namespace == "ml-training"  # the jobs' namespace: the operator's default selector
        (endpoint,) = pm.doc["spec"]["podMetricsEndpoints"]
        assert endpoint["port"] == metrics.METRICS_PORT_NAME and endpoint["path"] == metrics.METRICS_PATH
        relabel = endpoint["relabelings"]
        # the operator sets namespace and pod itself (prometheus-operator@v0.94.1:pkg/prometheus/
        # promcfg.go generatePodMonitorConfig); the relabelings set the rest of the contract's labels
        set_here = [r["targetLabel"] for r in relabel if "targetLabel" in r]
        assert set(set_here) | {"namespace", "pod"} == set(metrics.SCRAPE_LABELS)
        assert {r["replacement"] for r in relabel if r.get("targetLabel") == metrics.LABEL_CLUSTER} == {cluster}
        # job_name from the job labels, the first of JOB_LABELS last so that it wins
        sources = [r["sourceLabels"] for r in relabel if r.get("targetLabel") == metrics.LABEL_JOB]
        meta = [f"__meta_kubernetes_pod_label_{re.sub('[^a-zA-Z0-9_]', '_', k)}" for k in names.JOB_LABELS]
        assert sources == [[m] for m in reversed(meta)]
        (keep,) = [r for r in relabel if r.get("action") == "keep"]
        assert keep["sourceLabels"] == [m.replace("_label_", "_labelpresent_") for m in meta]
        for present, kept in (("true;", True), (";true", True), ("true;true", True), (";", False)):
            assert bool(re.fullmatch(keep["regex"], present)) is kept  # Prometheus anchors the regex


def test_the_webhook_servicemonitor_scrapes_the_probe_listener_the_network_policy_opens(report):
    """The https port may ask for client certificates (base/webhook-client-auth); /metrics is also on
    the plain-HTTP probe listener, which the NetworkPolicy opens to the monitoring namespace only."""
    resources = list(report.renders["dev"].resources())
    sm = next(r for r in monitors(report, "dev") if r.kind == "ServiceMonitor" and r.name == "trainyard-webhook")
    service = next(r for r in resources if r.kind == "Service" and r.name == sm.name)
    deployment = next(r for r in resources if r.kind == "Deployment" and r.name == sm.name)
    policy = next(r for r in resources if r.kind == "NetworkPolicy" and r.name == sm.name)
    (endpoint,) = sm.doc["spec"]["endpoints"]
    assert endpoint["scheme"] == "http" and endpoint["path"] == "/metrics"
    assert sm.doc["spec"]["selector"]["matchLabels"].items() <= service.labels.items()
    (port,) = [p for p in service.doc["spec"]["ports"] if p["name"] == endpoint["port"]]
    (container,) = deployment.doc["spec"]["template"]["spec"]["containers"]
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    args = container["args"]
    assert args[args.index("--probe-port") + 1] == str(target["containerPort"])
    opened = [
        rule for rule in policy.doc["spec"]["ingress"]
        if any(p["port"] == target["containerPort"] for p in rule.get("ports") or [])
    ]  # fmt: skip
    assert [r["from"] for r in opened] == [
        [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    ]


def _strict(schema: dict) -> dict:
    """A CRD's structural schema as JSON Schema, unknown fields refused (as kube-apiserver's strict
    field validation refuses them) unless the schema keeps them."""
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if "properties" in out:
        out["properties"] = {k: _strict(v) for k, v in out["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in out:
            out["additionalProperties"] = False
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(out["additionalProperties"])
    if schema.get("x-kubernetes-int-or-string"):
        out = {"type": ["integer", "string"]}
    return out


def test_every_rendered_monitor_and_rule_passes_the_operators_crd_schemas(report):
    crds = {
        (d["spec"]["names"]["kind"], v["name"]): v["schema"]["openAPIV3Schema"]
        for d in upstream.bootstrap_crds(True)
        for v in d["spec"]["versions"]
        if v["served"]
    }
    seen = set()
    for cluster in report.renders:
        for r in monitors(report, cluster):
            schema = _strict(crds[(r.kind, r.api_version.rpartition("/")[2])])
            schema["properties"]["metadata"] = {"type": "object"}
            jsonschema.Draft7Validator(schema).validate(r.doc)
            seen.add(r.kind)
    assert {"PodMonitor", "ServiceMonitor"} <= seen


def test_the_schema_check_refuses_a_misspelt_field(report):
    pm = next(r for r in monitors(report, "dev") if r.kind == "PodMonitor")
    (crd,) = [d for d in upstream.bootstrap_crds(True) if d["spec"]["names"]["kind"] == "PodMonitor"]
    schema = _strict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    doc = {**pm.doc, "spec": {**pm.doc["spec"], "podMetricEndpoints": []}}
    with pytest.raises(jsonschema.ValidationError, match="podMetricEndpoints"):
        jsonschema.Draft7Validator(schema).validate(doc)


def test_monitors_on_a_cluster_without_the_fact_are_refused_naming_it(repo_copy):
    edit(repo_copy, "clusters/dev/cluster.yaml", FACT, "monitoring: none")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any(
        "[dev] clusters/dev/kustomization.yaml: " in e and f"installs Application {installs.MONITORING_APP}" in e
        and "clusters/dev/cluster.yaml does not say Prometheus Operator runs" in e
        and "set spec.monitoring: prometheus-operator there" in e
        for e in errors
    ), errors  # fmt: skip
    # each object of the group too (Kueue's ServiceMonitor included), naming the fact
    refused = [e for e in errors if "is served by Prometheus Operator, which clusters/dev/cluster.yaml does not" in e]
    assert any("base/monitoring/podmonitor.yaml" in e for e in refused), errors
    assert any("ServiceMonitor" in e and "kueue" in e for e in refused), errors
    assert not any("no Application of this cluster installs the CRDs of API group 'monitoring" in e for e in errors)


def test_the_fact_without_the_monitoring_application_is_refused(repo_copy):
    edit(repo_copy, "clusters/dev/kustomization.yaml", "  - ../../base/apps/monitoring\n", "")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any(
        "[dev] clusters/dev/cluster.yaml: " in e and "spec.monitoring: prometheus-operator, but the cluster "
        f"installs no Application {installs.MONITORING_APP}: add ../../base/apps/monitoring" in e
        for e in errors
    ), errors  # fmt: skip


def test_a_cluster_with_neither_is_valid(repo_copy):
    edit(repo_copy, "clusters/dev/cluster.yaml", FACT, "monitoring: none")
    edit(repo_copy, "clusters/dev/kustomization.yaml", "  - ../../base/apps/monitoring\n", "")
    report = validate.validate(repo_copy, ["dev"])
    assert not errors_of(report)
    assert not any(r.group == declared.MONITORING_GROUP for r in report.renders["dev"].resources())
