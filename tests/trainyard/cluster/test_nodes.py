"""The sandbox's nodes as kube-controller-manager sees them: Ready while their kubelet renews their
Lease, NotReady and tainted when it stops (the node lifecycle controller, unchanged)."""

from __future__ import annotations

import pytest

from trainyard.cluster.processes import wait_for
from trainyard.repo.model.declared import ClusterFacts
from trainyard.sandbox.kubelet import Kubelet
from trainyard.sandbox.localpods import LocalCluster

pytestmark = pytest.mark.cluster

# k8s.io/kubernetes@v1.36.5: --node-monitor-grace-period defaults to 50 s
# (pkg/controller/nodelifecycle/config/v1alpha1/defaults.go), checked every 5 s
GRACE = 50 + 5


def _facts(pool: str) -> ClusterFacts:
    return ClusterFacts.model_validate(
        {
            "apiVersion": "trainyard.dev/v1alpha1",
            "kind": "ClusterFacts",
            "metadata": {"name": "t"},
            "spec": {
                "kubernetesVersion": "1.33",
                "nodePools": [{"name": pool, "count": 1, "allocatable": {"cpu": "4", "memory": "8Gi"}}],
            },
        }
    )


def test_a_node_whose_kubelet_stops_goes_not_ready_and_is_tainted(clusters, tmp_path):
    local = LocalCluster(tmp_path, [], {}, isolate=False)
    with clusters.kube("dev") as kube:
        kubelet = Kubelet(kube, _facts("lost"), local, progress=lambda _: None)
        try:
            (name,) = kubelet.register()
            node = kube.get(f"/api/v1/nodes/{name}")
            ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
            assert ready == "True"
            # a new node carries node.kubernetes.io/not-ready until the lifecycle controller sees
            # it Ready and lifts it, as for a kubelet's node (TaintNodesByCondition)
            wait_for(
                lambda: not kube.get(f"/api/v1/nodes/{name}")["spec"].get("taints"),
                timeout=30,
                what="the node untainted",
                interval=0.5,
            )
            lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
            assert lease["spec"]["holderIdentity"] == name and lease["spec"]["leaseDurationSeconds"] == 40

            def unreachable() -> dict | None:
                got = kube.get(f"/api/v1/nodes/{name}")
                conditions = {c["type"]: c["status"] for c in got["status"]["conditions"]}
                taints = {t["key"] for t in got["spec"].get("taints") or []}
                return got if conditions["Ready"] == "Unknown" and "node.kubernetes.io/unreachable" in taints else None

            # no renewal from here on: the node lifecycle controller takes it for lost
            lost = wait_for(unreachable, timeout=GRACE + 30, what="the node NotReady", interval=1)
            reason = next(c for c in lost["status"]["conditions"] if c["type"] == "Ready")["reason"]
            assert reason == "NodeStatusUnknown"
        finally:
            kube.request("DELETE", f"/api/v1/nodes/{name}")
            local.close()
