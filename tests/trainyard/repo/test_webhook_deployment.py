"""The webhook's Deployment and what stands around it, as every cluster renders them: spread over
nodes as a requirement, a priority class admission can rely on (with the quota that allows it),
probes on their own listener, the ports the NetworkPolicy opens and nothing else, resources that
cover the measured worst case."""

from __future__ import annotations

import pytest

from trainyard.contract.quantity import parse_quantity

# the clusters whose admission is the webhook (prod-ib declares admission: policy and runs none:
# tests/trainyard/repo/generate/test_mutating_policy.py)
CLUSTERS = ["dev", "prod-roce"]


def test_these_are_the_webhook_clusters(repo):
    from trainyard.repo.model import declared

    webhook = [c for c in repo.clusters() if declared.load(repo, c).spec.admission == "webhook"]
    assert sorted(webhook) == sorted(CLUSTERS)


def objects(report, cluster: str) -> dict[tuple[str, str], dict]:
    return {(r.kind, r.name): r.doc for r in report.renders[cluster].resources()}


def container(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_replicas_are_spread_over_nodes_as_a_requirement(report, cluster):
    deployment = objects(report, cluster)[("Deployment", "trainyard-webhook")]
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] >= 2
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert (
        spread["maxSkew"] == 1
        and spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_priority_class_is_allowed_by_a_quota_in_its_namespace(report, cluster):
    found = objects(report, cluster)
    spec = found[("Deployment", "trainyard-webhook")]["spec"]["template"]["spec"]
    quota = found[("ResourceQuota", "trainyard-critical-pods")]
    assert quota["metadata"]["namespace"] == "trainyard-system"
    (scope,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert scope["scopeName"] == "PriorityClass" and spec["priorityClassName"] in scope["values"]
    assert int(quota["spec"]["hard"]["pods"]) >= found[("Deployment", "trainyard-webhook")]["spec"]["replicas"] + 1


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_probes_use_their_own_listener_and_the_network_policy_opens_only_the_two_ports(report, cluster):
    found = objects(report, cluster)
    c = container(found[("Deployment", "trainyard-webhook")])
    args = [*c["command"], *c["args"]]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(flag(args, "--port")) == ports["https"] and int(flag(args, "--probe-port")) == ports["probes"]
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        assert probe["httpGet"]["port"] == "probes" and probe["httpGet"].get("scheme", "HTTP") == "HTTP"
    assert "--tls-server-name" not in args  # the default is the Service's name, which the certificate carries
    certificate = found[("Certificate", "trainyard-webhook")]
    assert "trainyard-webhook.trainyard-system.svc" in certificate["spec"]["dnsNames"]
    policy = found[("NetworkPolicy", "trainyard-webhook")]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["egress"] == []
    webhook_port, metrics_port = policy["ingress"]
    assert webhook_port == {"ports": [{"port": ports["https"], "protocol": "TCP"}]}  # from anywhere
    assert metrics_port["ports"] == [{"port": ports["probes"], "protocol": "TCP"}]
    assert metrics_port["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_memory_covers_the_measured_worst_case(report, cluster):
    resources = container(objects(report, cluster)[("Deployment", "trainyard-webhook")])["resources"]
    request, limit = (parse_quantity(resources[k]["memory"]) for k in ("requests", "limits"))
    # bench/results/webhook_limits.md: the highest peak of every attack stays under 140 MiB
    assert 140 * 2**20 <= request <= limit
    assert "cpu" not in resources["limits"]  # throttling would show as review latency
