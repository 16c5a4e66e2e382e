"""The generated NetworkPolicy of the trainer's metrics port (trainyard/repo/generate/metrics_policy.py)
in a real kube-apiserver: the cluster as synced holds it as generated, with nothing defaulted
differently, and kube-apiserver's own validation refuses the forms the generator must never write
(an endPort below its port, an endPort on a named port). Every create is a dry run."""

from __future__ import annotations

import copy

import pytest

from trainyard.cluster.client import ApiError
from trainyard.repo.generate import metrics_policy
from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE

pytestmark = pytest.mark.cluster
POLICIES = f"/apis/networking.k8s.io/v1/namespaces/{TRAINING_NAMESPACE}/networkpolicies"


def test_the_synced_cluster_holds_the_policy_as_generated(clusters) -> None:
    [doc] = metrics_policy.objects(TRAINING_NAMESPACE)
    with clusters.kube("dev") as kube:
        assert kube.get(f"{POLICIES}/{metrics_policy.NAME}")["spec"] == doc["spec"]
        doc["metadata"]["name"] = "trainer-metrics-dryrun"
        kube.create(doc, dry_run=True)  # positive control for the refusals below
        below = copy.deepcopy(doc)
        below["spec"]["ingress"][0]["ports"][1]["endPort"] = 9000  # port 9405
        named = copy.deepcopy(doc)
        named["spec"]["ingress"][1]["ports"][0] = {"protocol": "TCP", "port": "metrics", "endPort": 9500}
        for bad in (below, named):
            with pytest.raises(ApiError) as refused:
                kube.create(bad, dry_run=True)
            assert refused.value.code == 422 and "endPort" in refused.value.message, refused.value.message
