from __future__ import annotations

import pytest

from trainyard.contract.nccl import FOLKLORE, errors, level_name, lint_env


def test_clean_env_has_no_findings():
    env = {"NCCL_SOCKET_IFNAME": "net1", "NCCL_IB_HCA": "mlx5", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_DEBUG": "INFO"}
    assert lint_env(env, expect_transport="IB") == []


@pytest.mark.parametrize("name", sorted(FOLKLORE))
def test_each_folklore_variable_is_an_error(name):
    findings = lint_env({name: "1"})
    assert [f.severity for f in findings] == ["error"] and findings[0].name == name
    # also when its value comes from elsewhere (valueFrom)
    assert errors(lint_env([(name, None)]))


@pytest.mark.parametrize(
    ("value", "named"),
    [("0", "LOC"), ("1", "PIX"), ("2", "PXB"), ("3", "PHB"), ("4", "SYS"), ("5", "SYS"), ("99", "SYS")],
)
def test_numeric_levels(value, named):
    assert level_name(value) == named
    (finding,) = lint_env({"NCCL_P2P_LEVEL": value})
    assert finding.severity == "warning" and f"NCCL_P2P_LEVEL={named}" in finding.message


def test_named_levels_and_non_numbers_are_fine():
    assert lint_env({"NCCL_NET_GDR_LEVEL": "PXB", "NCCL_P2P_LEVEL": "NVL"}) == []
    assert level_name("-1") is None and level_name("SYS") is None


def test_transport_switched_off():
    assert [f.name for f in lint_env({"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}, "IB")] == [
        "NCCL_IB_DISABLE",
        "NCCL_NET",
    ]
    assert lint_env({"NCCL_IB_DISABLE": "1"}, "Socket") == []
    with pytest.raises(ValueError):
        lint_env({}, "RDMA")
