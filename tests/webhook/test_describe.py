from __future__ import annotations

from tests.webhook.conftest import example
from webhook.describe import describe
from webhook.engine import mutate


def test_describe_names_containers_and_fields(roce):
    pod = example("pytorchjob-worker.yaml")
    lines = describe(pod, mutate(pod, roce, "default").ops)
    assert "pod: annotations.k8s.v1.cni.cncf.io/networks + roce-network" in lines
    assert "container pytorch: env NCCL_SOCKET_IFNAME = net1" in lines
    assert "container pytorch: securityContext.capabilities.add + IPC_LOCK" in lines
    env_line = next(line for line in lines if line.startswith("container pytorch: env + "))
    assert "NCCL_IB_HCA=mlx5" in env_line and "TRAINYARD_SHM_BYTES=8589934592" in env_line


def test_demo_sends_every_example_through_the_webhook(capsys):
    from trainyard.demo import main

    assert main([]) == 0
    out = capsys.readouterr().out
    for name in (
        "mpijob-worker.yaml",
        "pytorchjob-master.yaml",
        "pytorchjob-worker.yaml",
        "sidecar.yaml",
        "tfjob-chief.yaml",
    ):
        assert f"({name}, " in out
    assert "NCCL_SOCKET_IFNAME eth0 -> net1" in out
    assert "drained and stopped cleanly" in out
