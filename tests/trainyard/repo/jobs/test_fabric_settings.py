"""A job's own fabric settings (networks, NCCL interface and HCA variables): kept where they agree
with the fabric, refused where they conflict, in ``validate`` as in ``preview``, naming the field."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonpatch
import pytest

from tests.trainyard.repo.conftest import errors_of
from trainyard.repo import validate
from trainyard.repo.jobs import fabric_settings
from trainyard.repo.model.problems import Problem
from webhook.engine import admit
from webhook.policy import load_policies

REPO_ROOT = Path(__file__).resolve().parents[4]
POLICIES = load_policies(REPO_ROOT / "policies")
TRAINER = "registry.example.com/ml/trainer:0.1.0"
NS = "ml-training"


def pod(env: list[dict] | None = None, networks: str | None = None, image: str = TRAINER) -> dict:
    meta: dict = {"name": "p", "namespace": NS}
    if networks is not None:
        meta["annotations"] = {"k8s.v1.cni.cncf.io/networks": networks}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "trainer", "image": image, "env": env or []}]},
    }


def through(before: dict, profile: str = "roce") -> fabric_settings.Findings:
    """The pod through the real engine, then the check on what it became."""
    decision = admit(copy.deepcopy(before), POLICIES, profile, NS)
    assert decision.action == "mutate", decision.reason
    after = jsonpatch.apply_patch(copy.deepcopy(before), decision.mutation.ops)
    return fabric_settings.check(before, after, POLICIES.get(profile), NS, "spec.trainer.env")


def env(**values: str) -> list[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


@pytest.mark.parametrize(
    ("value", "networks"),
    [
        ("net1", None),
        ("=net1", None),
        ("net2", "sriov-a"),  # the pod's own attachment is net1, the fabric's net2: the user said net2
        ("fabric0", "roce-network@fabric0"),  # the fabric network under the interface the pod chose
    ],
)
def test_a_setting_that_names_the_fabric_interface_is_kept_silently(value, networks):
    found = through(pod(env(NCCL_SOCKET_IFNAME=value), networks))
    assert found.errors == [] and not [w for w in found.warnings if w.startswith("container")]


def test_a_prefix_that_selects_only_the_fabric_interface_is_a_warning():
    found = through(pod(env(NCCL_SOCKET_IFNAME="net")))
    assert found.errors == []
    (warning,) = found.warnings
    assert "selects only the fabric interface net1" in warning and "NCCL_SOCKET_IFNAME=net1" in warning


@pytest.mark.parametrize(
    ("value", "networks", "selects"),
    [
        ("eth0", None, "eth0 (the pod network)"),
        ("^lo,docker", None, "eth0 (the pod network), net1"),  # the vendor guides' exclusion: eth0 too
        ("net1", "sriov-a", "net1 (attachment sriov-a)"),  # the user's own network took net1
        ("=net", None, "no interface of the pod"),
        ("ib0", None, "no interface of the pod"),
    ],
)
def test_a_setting_that_selects_another_interface_is_refused(value, networks, selects):
    found = through(pod(env(NCCL_SOCKET_IFNAME=value), networks))
    (error,) = found.errors
    assert f"container trainer: env NCCL_SOCKET_IFNAME (spec.trainer.env)={value} selects {selects}" in error
    assert "not the fabric interface" in error and "remove it" in error


def test_value_from_for_an_enforced_variable_is_refused():
    before = pod([{"name": "NCCL_SOCKET_IFNAME", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}])
    (error,) = through(before).errors
    assert "set with valueFrom" in error and "NCCL_SOCKET_IFNAME=net1" in error


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("mlx5", True),
        ("mlx5_0", True),
        ("mlx5_0:1,mlx5_1:1", True),
        ("=mlx5_0", True),
        ("^mlx5_3", True),  # leaves the others
        ("bnxt_re0", False),
        ("mlx4_0", False),
        ("mlx", False),  # wider than the fabric's: mlx4 too
        ("^mlx5", False),  # excludes all of them: NCCL falls back to sockets
        ("^=mlx5", False),
    ],
)
def test_an_hca_list_must_stay_inside_the_fabrics(value, ok):
    found = through(pod(env(NCCL_IB_HCA=value)))
    assert (found.errors == []) is ok, found.errors
    if not ok:
        assert "NCCL_IB_HCA" in found.errors[0] and "mlx5" in found.errors[0]


def test_the_fabric_owned_trainyard_variables_are_refused_unless_equal():
    found = through(pod(env(TRAINYARD_FABRIC="ib", TRAINYARD_EXPECT_TRANSPORT="IB")))
    assert len(found.errors) == 1 and "TRAINYARD_FABRIC" in found.errors[0]  # the transport is roce's: IB


def test_the_fabric_network_under_a_reserved_interface_is_refused():
    found = through(pod(networks="roce-network@eth0"))
    (error,) = found.errors
    assert "attachment roce-network@eth0 (the fabric network): interface eth0 already exists" in error


def test_own_attachments_first_are_said_not_refused():
    found = through(pod(networks="sriov-a, sriov-b"))
    assert found.errors == []
    (warning,) = found.warnings
    assert "gets interface net3" in warning and "sriov-a, sriov-b" in warning


def test_other_images_and_settings_are_not_the_checks_business():
    assert through(pod(env(NCCL_DEBUG="WARN", NCCL_IB_TIMEOUT="22"))).errors == []
    other = pod(env(NCCL_SOCKET_IFNAME="eth0"), image="nvcr.io/nvidia/pytorch:25.01-py3")
    assert admit(copy.deepcopy(other), POLICIES, "roce", NS).action == "skip"


@pytest.mark.parametrize(
    "value",
    ["", ",", "^", "=", "^=", ":", "net1:", "net1:99999999999999999999", "\x00", "n" * 100_000, "net1," * 10_000, "é"],
)
def test_hostile_values_get_an_answer(value):
    found = through(pod(env(NCCL_SOCKET_IFNAME=value, NCCL_IB_HCA=value)))
    assert all(len(m) < 2_000 for m in found.errors + found.warnings)


# --- validate: the same findings, naming the file ----------------------------------------------------


@pytest.fixture
def roce_job(repo_copy):
    folder = repo_copy.root / "overlays/prod-roce/jobs/llama-finetune/job.yaml"
    return repo_copy, folder


def _add_env(folder: Path, entries: list[dict]) -> None:
    text = folder.read_text()
    lines = "".join(f"      - name: {e['name']}\n        value: {e['value']!r}\n" for e in entries)
    folder.write_text(
        text
        + "- op: add\n  path: /spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/env\n  value:\n"
        + lines.replace("      - ", "    - ").replace("        value", "      value")
    )


def test_validate_refuses_a_conflicting_interface_naming_file_and_field(roce_job):
    repo, folder = roce_job
    _add_env(folder, env(NCCL_SOCKET_IFNAME="eth0", NCCL_IB_HCA="bnxt_re0", NCCL_SOCKET_IFNMAE="net1"))
    errors = errors_of(validate.validate(repo, ["prod-roce"]))
    mine = [e for e in errors if "llama-finetune" in e]
    assert any(
        "overlays/prod-roce/jobs/llama-finetune" in e
        and "env NCCL_SOCKET_IFNAME (spec.pytorchReplicaSpecs.Worker.template.spec)=eth0 selects eth0" in e
        for e in mine
    ), mine
    assert any("NCCL_IB_HCA" in e and "bnxt_re0" in e for e in mine), mine
    assert any("did you mean NCCL_SOCKET_IFNAME?" in e for e in mine), mine


def test_validate_says_when_own_attachments_move_the_fabric_interface(roce_job):
    repo, folder = roce_job
    text = folder.read_text()
    folder.write_text(
        text + "- op: add\n  path: /spec/pytorchReplicaSpecs/Worker/template/metadata\n  value:\n"
        "    annotations:\n      k8s.v1.cni.cncf.io/networks: roce-network@eth0\n"
    )
    report = validate.validate(repo, ["prod-roce"])
    assert any("interface eth0 already exists" in e for e in errors_of(report)), errors_of(report)
    assert isinstance(report.errors()[0], Problem)
