"""trainyard preview: each example job, expanded and sent through the webhook engine."""

from __future__ import annotations

import pytest

from trainyard.cli import main
from trainyard.contract.errors import UserError
from trainyard.repo.jobs import preview


@pytest.mark.parametrize(
    ("path", "pods", "expected"),
    [
        (
            "overlays/dev/jobs/mnist-ddp",
            ["mnist-ddp-master-0", "mnist-ddp-worker-0"],
            [
                "annotation k8s.v1.cni.cncf.io/networks: training-network",
                "container pytorch: env NCCL_SOCKET_IFNAME=net1",
                "container pytorch: env NCCL_IB_DISABLE=1",
                "container pytorch: env TRAINYARD_EXPECT_TRANSPORT=Socket",
                "container pytorch: mount trainyard-shm at /dev/shm",
                # no GPU (the lab exercise runs on CPUs): the profile's shm minimum, 1Gi
                "volume trainyard-shm: emptyDir {medium: Memory, sizeLimit: 1Gi}",
            ],
        ),
        (
            "overlays/prod-roce/jobs/llama-finetune",
            [f"llama-finetune-worker-{i}" for i in range(4)],
            [
                "annotation k8s.v1.cni.cncf.io/networks: roce-network",
                "container pytorch: env NCCL_IB_HCA=mlx5",
                "container pytorch: capability IPC_LOCK",
                "container pytorch: limit rdma/rdma_shared_device_a: 1",
                "volume trainyard-shm: emptyDir {medium: Memory, sizeLimit: 64Gi}",
            ],
        ),
        (
            "overlays/prod-ib/jobs/horovod",
            ["horovod-launcher", "horovod-worker-0", "horovod-worker-1"],
            [
                "annotation k8s.v1.cni.cncf.io/networks: ib-sriov-network",
                "container mpi: env TRAINYARD_EXPECT_TRANSPORT=IB",
                "container mpi: capability IPC_LOCK",
            ],
        ),
    ],
)
def test_preview_of_each_example_job(repo, path, pods, expected):
    (jp,) = preview.preview_path(repo, path)
    assert [p.name for p in jp.pods] == pods
    assert jp.problems() == []
    for pod in jp.pods:
        assert pod.action == "mutate"
        assert pod.vap_before.failures and not pod.vap_after.failures
        assert pod.schema_errors == []
    lines = preview.injected(jp.pods[-1].before, jp.pods[-1].after)
    for item in expected:
        assert item in lines, lines
    text = preview.format_job(jp)
    by = "the MutatingAdmissionPolicies" if "prod-ib" in path else "the webhook"  # prod-ib: admission: policy
    assert f"without {by} rejected; after {by} admitted" in text


def test_preview_cli_with_diff(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo.root)
    assert main(["preview", "overlays/dev/jobs/mnist-ddp", "--diff"]) == 0
    out = capsys.readouterr().out
    assert "pod mnist-ddp-worker-0: profile tcp" in out
    assert "MASTER_ADDR=mnist-ddp-master-0" in out
    assert "--- mnist-ddp-worker-0 (created)" in out and "+++ mnist-ddp-worker-0 (admitted)" in out
    assert "+      value: net1" in out


def test_preview_cli_pods_yaml(repo, capsys, monkeypatch):
    import yaml

    monkeypatch.chdir(repo.root)
    assert main(["preview", "overlays/prod-roce/jobs/llama-finetune", "--pods"]) == 0
    pods = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [p["metadata"]["name"] for p in pods] == [f"llama-finetune-worker-{i}" for i in range(4)]
    assert all(p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "roce-network" for p in pods)


def test_preview_needs_a_job_folder(repo):
    with pytest.raises(UserError, match="not a job folder"):
        preview.preview_path(repo, repo.root / "overlays/dev/platform/webhook")


def test_preview_of_the_dev_trainjob(repo):
    (jp,) = preview.preview_path(repo, "overlays/dev/jobs/smoke-ddp")
    assert [p.name for p in jp.pods] == ["smoke-ddp-node-0-0-<generated>", "smoke-ddp-node-0-1-<generated>"]
    assert jp.problems() == []
    assert any("Kueue: LocalQueue training -> ClusterQueue trainyard, flavor lab-gpu" in n for n in jp.notes)
    assert any("PET_MASTER_ADDR smoke-ddp-node-0-0.smoke-ddp" in n for n in jp.notes)
    for pod in jp.pods:
        assert pod.action == "mutate" and pod.vap_before.failures and not pod.vap_after.failures
        assert pod.schema_errors == []
        assert "affinity" not in pod.after["spec"], "Kueue places the pods: the webhook adds no affinity"
    lines = preview.injected(jp.pods[1].before, jp.pods[1].after)
    assert "container node: env NCCL_SOCKET_IFNAME=net1" in lines
    assert "init container preflight: the same env and /dev/shm mount as container node" in lines
    text = preview.format_job(jp)
    assert "placement: Kueue (scheduling gate kueue.x-k8s.io/topology)" in text
    assert "reached at smoke-ddp-node-0-1.smoke-ddp" in text


def test_preview_cli_refuses_a_trainjob_with_an_unknown_runtime(repo_copy, capsys, monkeypatch):
    from tests.trainyard.repo.conftest import edit

    edit(repo_copy, "overlays/dev/jobs/smoke-ddp/job.yaml", "value: trainyard-tcp", "value: trainyard-roce")
    monkeypatch.chdir(repo_copy.root)
    assert main(["preview", "overlays/dev/jobs/smoke-ddp"]) == 2
    err = capsys.readouterr().err
    assert "TrainJob ml-training/smoke-ddp" in err
    assert 'ClusterTrainingRuntime.trainer.kubeflow.org "trainyard-roce" not found' in err
    assert "must be created before the TrainJob is created (runtimes on cluster dev: trainyard-tcp)" in err
