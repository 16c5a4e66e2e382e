"""The job namespace's NetworkPolicy for the trainer's metrics port, read with NetworkPolicy's own
semantics (k8s.io/api@v0.36.5 networking/v1/types.go): every port of every protocol from every
namespace as before, except the metrics port, which only the monitoring namespace reaches; and it
is in every cluster's render, in the job namespace."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.contract.metrics import DEFAULT_METRICS_PORT
from trainyard.repo.generate import metrics_policy
from trainyard.repo.model import repository
from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE
from trainyard.repo.upstream.app_render import render_cluster


def _port_matches(item: dict, protocol: str, port: int) -> bool:
    """NetworkPolicyPort: protocol defaults to TCP; no port: every port; endPort: an inclusive range."""
    if item.get("protocol", "TCP") != protocol:
        return False
    if "port" not in item:
        return True
    first = item["port"]
    return first <= port <= item.get("endPort", first)


def _peer_matches(peer: dict, namespace_labels: dict[str, str]) -> bool:
    """A namespaceSelector peer with matchLabels only (what the policy uses)."""
    assert set(peer) == {"namespaceSelector"} and set(peer["namespaceSelector"]) == {"matchLabels"}
    return all(namespace_labels.get(k) == v for k, v in peer["namespaceSelector"]["matchLabels"].items())


def allowed(policy: dict, namespace: str, protocol: str, port: int) -> bool:
    """Is ingress from a pod of ``namespace`` to ``protocol``/``port`` of a selected pod allowed?
    NetworkPolicySpec.ingress: it matches at least one rule; a rule matches when its ports and its
    from both match; an absent list matches everything."""
    labels = {"kubernetes.io/metadata.name": namespace}  # kube-apiserver labels every namespace so
    for rule in policy["spec"].get("ingress") or []:
        ports, peers = rule.get("ports"), rule.get("from")
        if ports and not any(_port_matches(p, protocol, port) for p in ports):
            continue
        if peers and not any(_peer_matches(p, labels) for p in peers):
            continue
        return True
    return False


@pytest.fixture(scope="module")
def policy() -> dict:
    [doc] = metrics_policy.objects(TRAINING_NAMESPACE)
    return doc


def test_only_the_monitoring_namespace_reaches_the_metrics_port(policy: dict) -> None:
    assert policy["spec"]["podSelector"] == {} and policy["spec"]["policyTypes"] == ["Ingress"]
    for namespace in ("monitoring", TRAINING_NAMESPACE, "kube-system", "other-tenant"):
        assert allowed(policy, namespace, "TCP", DEFAULT_METRICS_PORT) == (namespace == "monitoring"), namespace


def test_every_other_port_stays_open_to_every_namespace(policy: dict) -> None:
    # every TCP port but the metrics one (torchrun's rendezvous 29500, NCCL's sockets, ...), and
    # every UDP and SCTP port, from the job's own namespace and any other
    for namespace in (TRAINING_NAMESPACE, "elsewhere"):
        closed = [p for p in range(1, 65536) if not allowed(policy, namespace, "TCP", p)]
        assert closed == [DEFAULT_METRICS_PORT], closed[:5]
        for protocol in ("UDP", "SCTP"):
            assert all(allowed(policy, namespace, protocol, p) for p in (1, DEFAULT_METRICS_PORT, 29500, 65535))


@pytest.mark.parametrize("port", [1, 2, 65534, 65535])
def test_a_metrics_port_at_either_end_leaves_no_empty_range(port: int) -> None:
    [doc] = metrics_policy.objects(TRAINING_NAMESPACE, port)
    for item in doc["spec"]["ingress"][0]["ports"]:
        assert item.get("endPort", item.get("port", 1)) >= item.get("port", 1)  # endPort >= port, as validated
    closed = [p for p in range(1, 65536) if not allowed(doc, "elsewhere", "TCP", p)]
    assert closed == [port]
    assert allowed(doc, "monitoring", "TCP", port)


def test_every_cluster_renders_the_policy_in_the_job_namespace() -> None:
    repo = repository.load(REPO_ROOT)
    for cluster in repo.clusters():
        found = [
            r.doc for r in render_cluster(repo, cluster).resources()
            if r.kind == "NetworkPolicy" and r.doc["metadata"]["name"] == metrics_policy.NAME
        ]  # fmt: skip
        assert len(found) == 1, cluster
        assert found[0]["metadata"]["namespace"] == TRAINING_NAMESPACE
        assert found[0]["spec"] == metrics_policy.objects(TRAINING_NAMESPACE)[0]["spec"]
