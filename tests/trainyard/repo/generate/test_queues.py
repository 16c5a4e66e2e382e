"""Kueue's queues, generated from a cluster's declared facts."""

from __future__ import annotations

import pytest

from trainyard.repo.generate import queues
from trainyard.repo.model import declared


@pytest.fixture(scope="module")
def dev(repo) -> declared.ClusterFacts:
    return declared.load(repo, "dev")


def by_kind(objs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for o in objs:
        out.setdefault(o["kind"], []).append(o)
    return out


def test_the_queues_of_a_cluster_come_from_its_facts(repo):
    facts = declared.load(repo, "prod-roce")
    objs = by_kind(queues.objects(facts, "ml-training"))
    (topology,) = objs["Topology"]
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == list(facts.spec.topology)
    assert topology["spec"]["levels"][-1] == {"nodeLabel": "kubernetes.io/hostname"}
    (flavor,) = objs["ResourceFlavor"]
    assert flavor["metadata"]["name"] == "gpu-a" and flavor["spec"]["topologyName"] == "trainyard"
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.present": "true"}  # topology levels select no pool
    (cq,) = objs["ClusterQueue"]
    quota = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert quota == {"cpu": "1024", "memory": "8Ti", "nvidia.com/gpu": "64", "rdma/rdma_shared_device_a": "504"}
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ml-training"}}
    (lq,) = objs["LocalQueue"]
    assert (lq["metadata"], lq["spec"]) == (
        {"name": "training", "namespace": "ml-training"},
        {"clusterQueue": "trainyard"},
    )


def test_every_pool_gets_a_flavor_with_every_covered_resource(dev):
    facts = dev.model_copy(deep=True)
    doc = facts.model_dump(by_alias=True)
    doc["spec"]["nodePools"].append(
        {"name": "cpu-only", "count": 3, "labels": {"topology.kubernetes.io/zone": "lab", "role": "cpu"},
         "allocatable": {"cpu": "32", "memory": "128Gi"}}
    )  # fmt: skip
    objs = by_kind(queues.objects(declared.ClusterFacts.model_validate(doc), "ml-training"))
    group = objs["ClusterQueue"][0]["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert [f["name"] for f in group["flavors"]] == ["lab-gpu", "cpu-only"]
    cpu_only = {r["name"]: r["nominalQuota"] for r in group["flavors"][1]["resources"]}
    assert cpu_only == {"cpu": "96", "memory": "384Gi", "nvidia.com/gpu": "0"}


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"topology.kubernetes.io/zone": "lab"}, "has 0 labels beyond the topology levels"),
        ({"topology.kubernetes.io/zone": "lab", "nvidia.com/gpu.present": "true"}, "have the same labels"),
    ],
)
def test_pools_a_flavor_cannot_tell_apart_are_refused(dev, labels, message):
    doc = dev.model_dump(by_alias=True)
    doc["spec"]["nodePools"].append({"name": "more", "count": 1, "labels": labels,
                                     "allocatable": {"cpu": "1", "memory": "1Gi"}})  # fmt: skip
    with pytest.raises(queues.GenerationError, match=message):
        queues.objects(declared.ClusterFacts.model_validate(doc), "ml-training")
