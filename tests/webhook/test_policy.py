"""Loading FabricProfiles: typed once, and every mistake named by file and field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.webhook.conftest import POLICIES
from webhook.policy import PolicyError, PolicySet, load_policies, reload_problems

GI = 2**30


def test_repository_profiles_load(policies):
    assert policies.names == ["ib", "roce", "tcp"]
    roce = policies.get("roce").spec
    assert roce.transport == "IB" and roce.networks[0].name == "roce-network"
    assert (roce.shm.per_gpu, roce.shm.max, roce.shm.min) == (8 * GI, 64 * GI, 1 * GI)
    ib, tcp = policies.get("ib").spec, policies.get("tcp").spec
    assert ib.networks[0].name == "ib-sriov-network"
    assert "NCCL_IB_GID_INDEX" not in {e.name for e in roce.env}  # NCCL 2.21+ picks the RoCE v2 GID itself
    assert tcp.transport == "Socket" and tcp.rdma_resources == {} and tcp.capabilities == []
    assert {e.name: e.value for e in tcp.env}["NCCL_IB_DISABLE"] == "1"
    assert policies.warnings == []


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    for p in POLICIES.glob("*.yaml"):
        shutil.copy(p, tmp_path / p.name)
    return tmp_path


def edit(directory: Path, name: str, change) -> Path:
    path = directory / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))
    return path


def fails(directory: Path) -> str:
    with pytest.raises(PolicyError) as exc:
        load_policies(directory)
    return str(exc.value)


def test_unknown_field_names_file_and_field(policy_dir):
    path = edit(policy_dir, "roce", lambda d: d["spec"]["shm"].update(perGpu="8Gi"))
    msg = fails(policy_dir)
    assert str(path) in msg and "spec.shm.perGpu: unknown field" in msg


def test_bad_quantity_names_file_and_field(policy_dir):
    edit(policy_dir, "ib", lambda d: d["spec"]["shm"].update(max="64GB"))
    msg = fails(policy_dir)
    assert "ib.yaml" in msg and "spec.shm.max" in msg and "'64GB' is not a Kubernetes quantity" in msg


def test_bad_rdma_quantity(policy_dir):
    edit(policy_dir, "roce", lambda d: d["spec"]["rdmaResources"].update({"rdma/hca": "one"}))
    assert "spec.rdmaResources.rdma/hca" in fails(policy_dir)


def test_min_above_max(policy_dir):
    edit(policy_dir, "roce", lambda d: d["spec"]["shm"].update(min="128Gi"))
    assert "min (137438953472 bytes) is larger than max" in fails(policy_dir)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("NCCL_SOCKET_TIMEOUT", "does not exist in NCCL"),
        ("NCCL_TIMEOUT", "does not exist in NCCL"),
        ("NCCL_TREE_THRESHOLD", "removed in NCCL 2.5"),
        ("NCCL_LL_THRESHOLD", "removed in NCCL 2.5"),
        ("NCCL_IB_GDR_LEVEL", "use NCCL_NET_GDR_LEVEL"),
        ("NCCL_MIN_NRINGS", "use NCCL_MIN_NCHANNELS"),
        ("NCCL_MAX_NRINGS", "use NCCL_MAX_NCHANNELS"),
        ("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
        ("NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"),
    ],
)
def test_folklore_nccl_variables_are_rejected_with_the_reason(policy_dir, name, reason):
    edit(policy_dir, "tcp", lambda d: d["spec"]["env"].append({"name": name, "value": "1"}))
    msg = fails(policy_dir)
    assert f"tcp.yaml: spec.env.{name}: " in msg and reason in msg


def test_numeric_levels_load_with_a_warning_naming_the_level(policy_dir):
    edit(policy_dir, "roce", lambda d: d["spec"]["env"].append({"name": "NCCL_NET_GDR_LEVEL", "value": "2"}))
    edit(policy_dir, "ib", lambda d: d["spec"]["env"].append({"name": "NCCL_P2P_LEVEL", "value": "7"}))
    warnings = load_policies(policy_dir).warnings
    assert any(w.startswith("roce:") and "NCCL_NET_GDR_LEVEL=PXB" in w for w in warnings)
    assert any(w.startswith("ib:") and "NCCL_P2P_LEVEL=SYS" in w for w in warnings)


def test_ib_disabled_on_an_ib_fabric_is_rejected(policy_dir):
    edit(policy_dir, "ib", lambda d: d["spec"]["env"].append({"name": "NCCL_IB_DISABLE", "value": "1"}))
    assert "ib.yaml: spec.env.NCCL_IB_DISABLE" in fails(policy_dir)


def test_socket_ifname_must_follow_the_network(policy_dir):
    def fixed(d):
        d["spec"]["env"][0] = {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}

    edit(policy_dir, "roce", fixed)
    assert "fromNetwork: interface" in fails(policy_dir)


def test_reserved_and_duplicate_env(policy_dir):
    edit(policy_dir, "roce", lambda d: d["spec"]["env"].append({"name": "TRAINYARD_FABRIC", "value": "x"}))
    assert "may not set TRAINYARD_FABRIC" in fails(policy_dir)
    edit(policy_dir, "roce", lambda d: d["spec"]["env"].pop())
    edit(policy_dir, "roce", lambda d: d["spec"]["env"].append({"name": "NCCL_DEBUG", "value": "WARN"}))
    assert "NCCL_DEBUG more than once" in fails(policy_dir)


def test_trainer_images_must_be_repositories(policy_dir):
    edit(policy_dir, "roce", lambda d: d["spec"].update(trainerImages=["registry.example.com/ml/trainer:1.0"]))
    assert "must be a repository without tag or digest" in fails(policy_dir)


def test_duplicate_profile_names(policy_dir):
    shutil.copy(policy_dir / "roce.yaml", policy_dir / "roce-copy.yaml")
    msg = fails(policy_dir)
    assert "roce-copy.yaml" in msg and "already defined in" in msg


def test_yaml_error_names_file_and_line(policy_dir):
    (policy_dir / "tcp.yaml").write_text("apiVersion: trainyard.dev/v1alpha1\nkind: FabricProfile\nspec: [\n")
    msg = fails(policy_dir)
    assert "tcp.yaml:" in msg and "not valid YAML" in msg


def test_wrong_api_version_and_missing_fields(policy_dir):
    edit(policy_dir, "roce", lambda d: d.update(apiVersion="trainyard.dev/v1"))
    assert "apiVersion" in fails(policy_dir)
    edit(policy_dir, "roce", lambda d: d.update(apiVersion="trainyard.dev/v1alpha1") or d["spec"].pop("transport"))
    assert "spec.transport: required field is missing" in fails(policy_dir)


def test_other_kinds_are_skipped_and_an_empty_dir_is_an_error(policy_dir, tmp_path_factory):
    (policy_dir / "kustomization.yaml").write_text("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
    assert load_policies(policy_dir).names == ["ib", "roce", "tcp"]
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(PolicyError, match="no FabricProfile documents"):
        load_policies(empty)
    with pytest.raises(PolicyError, match="not a directory"):
        load_policies(empty / "missing")


def test_trainer_images_are_normalised_by_the_identity_rule(policy_dir):
    spelt = ["REGISTRY.example.com:443/ml/trainer", "Registry.Example.COM:0443/teams/llm-finetune"]
    edit(policy_dir, "roce", lambda d: d["spec"].update(trainerImages=spelt))
    assert load_policies(policy_dir).get("roce").trainer_images == {
        "registry.example.com/ml/trainer",
        "registry.example.com/teams/llm-finetune",
    }


def test_a_trainer_image_cel_cannot_match_is_refused(policy_dir):
    edit(policy_dir, "roce", lambda d: d["spec"].update(trainerImages=["Registry/ml/trainer"]))
    msg = fails(policy_dir)
    assert "spec.trainerImages[0]: 'Registry/ml/trainer': registry 'registry' has no '.'" in msg


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["spec"]["tolerations"][0].update(key="nvidia.com/"), "is not a valid toleration key"),
        (lambda d: d["spec"]["tolerations"][0].update(key="Nvidia.com/gpu"), "is not a valid toleration key"),
        (lambda d: d["spec"]["tolerations"][0].update(value="x"), "value must be empty when operator is Exists"),
        (lambda d: d["spec"]["tolerations"].append({"operator": "Equal", "value": "a"}), "without a key must use"),
        (lambda d: d["spec"]["tolerations"][0].update(tolerationSeconds=5), "tolerationSeconds needs effect NoExec"),
        (lambda d: d["spec"].update(gpuResource="nvidia gpu"), "'nvidia gpu' is not a valid resource name"),
        (lambda d: d["spec"]["rdmaResources"].update({"rdma/": "1"}), "'rdma/' is not a valid resource name"),
        (lambda d: d["spec"]["topology"]["spread"].update(key="kubernetes.io/"), "is not a valid label key"),
        (lambda d: d["spec"]["networks"][0].update(name="Roce"), "is not a valid DNS-1123 label"),
        (lambda d: d["spec"]["networks"][0].update(interface="lo"), "'lo' already exists in every pod"),
    ],
)
def test_kubernetes_names_in_a_profile_are_checked(policy_dir, change, message):
    edit(policy_dir, "roce", change)
    msg = fails(policy_dir)
    assert "roce.yaml" in msg and message in msg


def test_a_file_cut_short_is_refused_even_when_what_is_left_parses(policy_dir):
    # written while being read: the toleration key lost its last letters, and the rest is gone
    path = policy_dir / "roce.yaml"
    text = path.read_text()
    cut = text[: text.index("nvidia.com/gpu\n      operator") + len("nvidia.com/g")]
    path.write_text(cut)
    assert yaml.safe_load(cut)["spec"]["tolerations"] == [{"key": "nvidia.com/g"}]  # it does parse
    msg = fails(policy_dir)
    assert str(path) in msg and "does not end with a line break" in msg


def test_an_emptied_file_is_refused(policy_dir):
    (policy_dir / "ib.yaml").write_text("")
    assert "ib.yaml: the file is empty" in fails(policy_dir)


def test_a_reload_may_not_drop_a_profile_or_the_default(policy_dir):
    previous = load_policies(policy_dir)
    (policy_dir / "ib.yaml").unlink()
    edit(policy_dir, "tcp", lambda d: d["metadata"].update(name="tpc"))  # misspelt
    new = load_policies(policy_dir)
    problems = dict(reload_problems(previous, new, "tcp"))
    assert set(problems) == {"dropped_profile", "no_default"}
    assert "profiles ib, tcp would disappear (the set now holds roce, tpc)" in problems["dropped_profile"]
    assert "the default profile 'tcp' is not defined" in problems["no_default"]
    assert reload_problems(previous, previous, "tcp") == []
    only_roce = PolicySet({"roce": previous.get("roce")}, "before")
    assert reload_problems(only_roce, previous, "roce") == []  # adding profiles is fine


def test_every_profile_must_declare_the_same_trainer_repositories(policy_dir):
    """Admission recognises a trainer by the repositories of all profiles; the engine by its own."""
    derived = "registry.example.com/teams/llm-finetune"
    edit(policy_dir, "tcp", lambda d: d["spec"].update(trainerImages=["registry.example.com/ml/trainer"]))
    msg = fails(policy_dir)
    assert msg.startswith(f"{policy_dir / 'tcp.yaml'}: spec.trainerImages: it lacks {derived} that ib.yaml lists.")
    assert "add the repository to every profile, or remove it" in msg
    three = ["registry.example.com/ml/trainer", derived, "registry.example.com/teams/other"]
    edit(policy_dir, "tcp", lambda d: d["spec"].update(trainerImages=three))
    assert "it lists registry.example.com/teams/other that ib.yaml lacks" in fails(policy_dir)
    # the same repositories in another spelling and order are the same declaration
    spelt = ["registry.EXAMPLE.com/teams/llm-finetune", "registry.example.com:443/ml/trainer"]
    edit(policy_dir, "tcp", lambda d: d["spec"].update(trainerImages=spelt))
    loaded = load_policies(policy_dir)
    assert loaded.get("tcp").trainer_images == loaded.get("ib").trainer_images
