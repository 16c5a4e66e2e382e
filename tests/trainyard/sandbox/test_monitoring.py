"""The demo's Prometheus: targets as Kubernetes service discovery gives them and the operator's
scrape job of a PodMonitor (the proxy into the pod network: test_podproxy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.contract.errors import UserError
from trainyard.sandbox import monitoring

POD = {
    "metadata": {
        "name": "smoke-ddp-node-0-0-abcde",
        "namespace": "ml-jobs",
        "uid": "3f1c9a2e-0000-4000-8000-000000000001",
        "labels": {"jobset.sigs.k8s.io/jobset-name": "smoke-ddp", "app.kubernetes.io/part-of": "trainyard"},
        "annotations": {"k8s.v1.cni.cncf.io/networks": "ml-jobs/fabric"},
        "ownerReferences": [{"kind": "Job", "name": "smoke-ddp-node-0", "controller": True, "uid": "x"}],
    },
    "spec": {
        "nodeName": "lab-gpu-0",
        "initContainers": [{"name": "preflight", "image": "registry.example.com/ml/trainer:v1"}],
        "containers": [
            {
                "name": "node",
                "image": "registry.example.com/ml/trainer:v1",
                "ports": [{"name": "metrics", "containerPort": 9404, "protocol": "TCP"}, {"containerPort": 29500}],
            }
        ],
    },
    "status": {"phase": "Running", "podIP": "10.244.99.5", "hostIP": "10.0.0.1",
               "conditions": [{"type": "Ready", "status": "True"}]},
}  # fmt: skip


def test_pod_targets_are_what_role_pod_discovers() -> None:
    """discovery/kubernetes/pod.go buildPod: a target per container port, one at the bare address
    for a container without ports (the init container), with the pod's meta labels on each."""
    groups = monitoring.pod_targets([POD], {"ml-jobs"})
    assert [g["targets"] for g in groups] == [["10.244.99.5:9404"], ["10.244.99.5:29500"], ["10.244.99.5"]]
    metrics = groups[0]["labels"]
    assert metrics["__meta_kubernetes_pod_container_port_name"] == "metrics"
    assert metrics["__meta_kubernetes_pod_container_port_number"] == "9404"
    assert metrics["__meta_kubernetes_pod_container_init"] == "false"
    assert metrics["__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name"] == "smoke-ddp"
    assert metrics["__meta_kubernetes_pod_labelpresent_jobset_sigs_k8s_io_jobset_name"] == "true"
    assert metrics["__meta_kubernetes_pod_annotation_k8s_v1_cni_cncf_io_networks"] == "ml-jobs/fabric"
    assert metrics["__meta_kubernetes_pod_ready"] == "true"
    assert metrics["__meta_kubernetes_pod_controller_kind"] == "Job"
    assert groups[1]["labels"]["__meta_kubernetes_pod_container_port_name"] == ""
    assert groups[2]["labels"]["__meta_kubernetes_pod_container_init"] == "true"


def test_pods_without_an_address_or_outside_the_namespaces_give_no_target() -> None:
    pending = {**POD, "status": {"phase": "Pending"}}
    assert monitoring.pod_targets([pending], None) == []
    assert monitoring.pod_targets([POD], {"other"}) == []
    assert len(monitoring.pod_targets([POD], None)) == 3


def test_hostile_label_names_become_label_names_prometheus_accepts() -> None:
    pod = {**POD, "metadata": {**POD["metadata"], "labels": {"é/ü.x-y": "v", "a" * 300: "w"}}}
    labels = monitoring.pod_targets([pod], None)[0]["labels"]
    names = [k for k in labels if k.startswith("__meta_kubernetes_pod_label_")]
    assert all(n.isascii() and n.replace("_", "a").isalnum() for n in names)
    assert labels["__meta_kubernetes_pod_label_____x_y"] == "v"  # one _ per character (rune), as Go's regexp


MONITOR = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PodMonitor",
    "metadata": {"name": "trainers", "namespace": "trainyard-system"},
    "spec": {
        "namespaceSelector": {"matchNames": ["ml-jobs"]},
        "selector": {"matchLabels": {"app.kubernetes.io/part-of": "trainyard"}},
        "podMetricsEndpoints": [
            {"port": "metrics", "path": "/metrics",
             "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name"],
                              "targetLabel": "job_name", "action": "replace"}]}
        ],
    },
}  # fmt: skip


def test_pod_monitor_job_has_the_operators_relabelings_in_order(tmp_path: Path) -> None:
    """prometheus-operator@v0.94.1 pkg/prometheus/promcfg.go generatePodMonitorConfig."""
    job, namespaces = monitoring.pod_monitor_job(MONITOR, tmp_path / "t.json", "http://127.0.0.1:1", "1s")
    assert job["job_name"] == "podMonitor/trainyard-system/trainers/0"
    assert namespaces == {"ml-jobs"}
    relabel = job["relabel_configs"]
    assert relabel[0] == {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}
    assert relabel[1]["action"] == "drop" and relabel[1]["regex"] == "(Failed|Succeeded)"
    assert relabel[2] == {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_part_of",
                          "__meta_kubernetes_pod_labelpresent_app_kubernetes_io_part_of"],
        "regex": "(trainyard);true",
    }  # fmt: skip
    assert relabel[3]["regex"] == "metrics"
    targets = [r.get("target_label") for r in relabel]
    assert targets[4:] == ["namespace", "container", "pod", "job", "endpoint", "job_name"]
    assert relabel[-1] == {"source_labels": ["__meta_kubernetes_pod_label_jobset_sigs_k8s_io_jobset_name"],
                           "target_label": "job_name", "action": "replace"}  # fmt: skip
    assert job["file_sd_configs"] == [{"files": [str(tmp_path / "t.json")]}]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"sampleLimit": 10}, "sampleLimit"),
        ({"selector": {"matchExpressions": []}}, "selector.matchExpressions"),
        ({"podMetricsEndpoints": []}, "0 podMetricsEndpoints"),
        ({"podMetricsEndpoints": [{"port": "metrics", "tlsConfig": {}}]}, "podMetricsEndpoints[0].tlsConfig"),
    ],
)
def test_a_pod_monitor_field_not_followed_is_refused_by_name(change: dict, named: str, tmp_path: Path) -> None:
    monitor = {**MONITOR, "spec": {**MONITOR["spec"], **change}}
    with pytest.raises(UserError, match=r"PodMonitor trainyard-system/trainers: .*" + named.replace("[", r"\[")):
        monitoring.pod_monitor_job(monitor, tmp_path / "t.json", "http://127.0.0.1:1", "1s")


def test_the_plot_is_a_png_of_both_series_with_the_fault_marked(tmp_path: Path) -> None:
    from matplotlib import image

    figures = monitoring.JobMetrics(
        loss=[(1.0, 5.0), (2.0, 3.0), (3.0, float("nan")), (10.0, 1.0)], throughput=[(1.0, 100.0), (2.0, 200.0)]
    )
    path = monitoring.plot(figures, "smoke-ddp", tmp_path / "out" / "smoke-ddp.png", (2.5, "worker killed"))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.imread(path).shape[:2] == (480, 640)
    empty = monitoring.plot(monitoring.JobMetrics(), "none", tmp_path / "empty.png")
    assert empty.stat().st_size > 0
