"""The mutation engine, rule by rule, on the edges that matter."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.contract.image_cases import CASES, HUB_CASES
from tests.webhook.conftest import POLICIES, TRAINER, apply, env_of, example, example_names, pod, trainer
from trainyard.contract.images import parse_image
from webhook.engine import MutationError, admit, mutate
from webhook.policy import PolicyError, PolicySet, parse_profile

trainer_container = trainer

GI = 2**30


def profile_with(**spec_changes):
    doc = yaml.safe_load((POLICIES / "roce.yaml").read_text())
    doc["spec"].update(spec_changes)
    return parse_profile(doc, "test")


def run(p: dict, profile, namespace: str = "ml") -> tuple[dict, list[str]]:
    decision = admit(p, PolicySet({profile.name: profile}), profile.name, namespace)
    assert decision.action == "mutate", decision.reason
    m = decision.mutation
    return apply(p, m.ops), m.warnings


def decide(p: dict, profile):
    return admit(p, PolicySet({profile.name: profile}), profile.name, "ml")


# --- which pods ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/ml/trainer",
        "registry.example.com/ml/trainer:0.1.0",
        "registry.example.com/ml/trainer@sha256:" + "a" * 64,
        "registry.example.com/ml/trainer:0.1.0@sha256:" + "b" * 64,
    ],
)
def test_trainer_image_any_tag_or_digest(roce, image):
    assert mutate(pod(trainer(image=image)), roce, "ml").ops


@pytest.mark.parametrize(
    "image",
    [
        "registry.example.com/ml/trainer-evil:1",
        "evil.example.com/registry.example.com/ml/trainer:1",
        "registry.example.com/ml/trainer/sub:1",
        "registry.example.com/ml/trainers",
        "registry.example.com:5000/ml/trainer",
        "ml/trainer",
        "",
    ],
)
def test_lookalike_images_are_not_the_trainer(roce, image):
    decision = decide(pod(trainer(image=image)), roce)
    assert decision.action == "skip" and decision.reason == "no container runs a trainer image"
    assert mutate(pod(trainer(image=image)), roce, "ml").ops == []


@pytest.mark.parametrize(
    "image",
    [
        "trainer:2",
        "library/trainer",
        "docker.io/trainer",
        "index.docker.io/library/trainer:1",
        "docker.io/library/trainer@sha256:" + "c" * 64,
    ],
)
def test_docker_hub_references_are_normalised(image):
    hub = profile_with(trainerImages=["trainer"])
    assert mutate(pod(trainer(image=image)), hub, "ml").ops


@pytest.mark.parametrize(("image", "trainer"), CASES)
def test_the_image_identity_table(roce, image, trainer):
    assert roce.is_trainer_image(image) is trainer
    decision = decide(pod(trainer_container(image=image)), roce)
    assert decision.action == ("mutate" if trainer else "deny" if parse_image(image) is None else "skip")


@pytest.mark.parametrize(("image", "trainer"), HUB_CASES)
def test_the_image_identity_table_on_docker_hub(image, trainer):
    assert profile_with(trainerImages=["trainer"]).is_trainer_image(image) is trainer


def test_init_container_alone_does_not_make_a_trainer_pod(roce):
    p = pod({"name": "app", "image": "busybox"}, initContainers=[{"name": "init", "image": TRAINER}])
    assert decide(p, roce).action == "skip"


def test_mirror_pods_are_skipped(policies):
    mirror = pod(trainer(), annotations={"kubernetes.io/config.mirror": "abc"})
    assert admit(mirror, policies, "roce", "ml").action == "skip"


@pytest.mark.parametrize("value", ["false", "False", "fAlse", " false", "true", "", "no"])
def test_the_engine_never_skips_a_pod_for_the_opt_out_annotation(policies, value):
    # kube-apiserver skips the webhook for a user allowed to opt out; whoever reaches the engine was not
    d = admit(pod(trainer(), annotations={"trainyard.dev/inject": value}), policies, "roce", "ml")
    assert d.action == "mutate"
    ignored = [w for w in d.mutation.warnings if "ignored" in w]
    if value == "false":  # the one spelling that asks: the warning says it was not honoured, and why
        assert ignored == [
            'trainyard.dev/inject: "false" ignored: the requester may not skip fabrics.trainyard.dev (RBAC); '
            "fabric given"
        ]
    else:
        assert ignored == []


def test_fabric_label_picks_the_profile(policies):
    d = admit(pod(trainer(), labels={"trainyard.dev/fabric": "tcp"}), policies, "roce", "ml")
    assert d.action == "mutate" and d.profile.name == "tcp"
    assert admit(pod(trainer()), policies, "roce", "ml").profile.name == "roce"


def test_an_empty_fabric_label_means_the_default_profile(policies):
    # the admission policy reads it the same way (trainyard/contract/cel.py fabric())
    d = admit(pod(trainer(), labels={"trainyard.dev/fabric": ""}), policies, "roce", "ml")
    assert d.action == "mutate" and d.profile.name == "roce"


def test_a_fabric_label_that_is_not_a_string_is_denied(policies):
    d = admit(pod(trainer(), labels={"trainyard.dev/fabric": 5}), policies, "roce", "ml")
    assert d.action == "deny" and "metadata.labels[trainyard.dev/fabric] must be a string" in d.reason


def test_unknown_profile_is_denied_listing_the_known_ones(policies):
    d = admit(pod(trainer(), labels={"trainyard.dev/fabric": "omnipath"}), policies, "roce", "ml")
    assert d.action == "deny"
    assert "'omnipath'" in d.reason and "ib, roce, tcp" in d.reason


def test_unknown_profile_on_a_non_trainer_pod_is_left_alone(policies):
    p = pod({"name": "web", "image": "nginx:1.27"}, labels={"trainyard.dev/fabric": "omnipath"})
    assert admit(p, policies, "roce", "ml").action == "skip"


# --- pods the engine cannot read: denied, naming the field --------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p["spec"]["containers"].append({"name": "x", "image": "A" + "a" * 26 + "!/x:1"}),
         "spec.containers[1].image: 'Aaaaaaaaaaaaaaaaaaaaaaaaaaa!/x:1' is not an image reference"),
        (lambda p: p["spec"]["containers"].append({"name": "x", "image": 7}),
         "spec.containers[1].image: 7 is not an image reference"),
        (lambda p: p["spec"]["containers"].append("x"), "spec.containers[1] must be a container"),
        (lambda p: p["spec"].update(initContainers=[{"name": "x", "image": "A" + "a" * 26 + "!/x:1"}]),
         "spec.initContainers[0].image: 'Aaaaaaaaaaaaaaaaaaaaaaaaaaa!/x:1' is not an image reference"),
        (lambda p: p["spec"].update(initContainers={"a": 1}), "spec.initContainers must be a list"),
        (lambda p: p["spec"].update(initContainers=[{"name": f"i{i}", "image": TRAINER} for i in range(257)]),
         "spec.initContainers: 257 containers; the fabric webhook takes at most 256"),
        (lambda p: p["spec"].update(containers={"a": 1}), "spec.containers must be a list"),
        (lambda p: p["spec"].update(containers=[{"name": f"c{i}", "image": TRAINER} for i in range(257)]),
         "spec.containers: 257 containers; the fabric webhook takes at most 256"),
        (lambda p: p["spec"]["containers"][0].update(resources={"limits": {"memory": "1e999999"}}),
         "spec.containers[0].resources.limits[memory]: '1e999999' is larger than Kubernetes allows"),
        (lambda p: p["spec"]["containers"][0].update(resources={"requests": {"nvidia.com/gpu": "lots"}}),
         "spec.containers[0].resources.requests[nvidia.com/gpu]: 'lots' is not a Kubernetes quantity"),
        (lambda p: p["spec"]["containers"][0].update(resources={"limits": {"nvidia.com/gpu": "1e2147483648"}}),
         "spec.containers[0].resources.limits[nvidia.com/gpu]: '1e2147483648': the exponent is outside"),
        (lambda p: (p["spec"]["containers"][0].update(resources={"limits": {"nvidia.com/gpu": 1}}),
                    p["spec"]["containers"][0].update(resources={"limits": {"nvidia.com/gpu": 1,
                                                                             "rdma/rdma_shared_device_a": "x"}})),
         "spec.containers[0].resources.limits[rdma/rdma_shared_device_a]: 'x' is not a Kubernetes quantity"),
        (lambda p: (p["spec"]["containers"][0].update(volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}]),
                    p["spec"].update(volumes=[{"name": "shm", "emptyDir": {"medium": "Memory",
                                                                            "sizeLimit": "1e4400"}}])),
         "spec.volumes[0].emptyDir.sizeLimit: '1e4400' is larger than Kubernetes allows"),
    ],
)  # fmt: skip
def test_a_pod_the_engine_cannot_read_is_denied_naming_the_field(policies, change, message):
    p = pod(trainer())
    change(p)
    try:
        d = admit(p, policies, "roce", "ml")
    except MutationError as exc:
        reason = str(exc)
    else:
        assert d.action == "deny", d
        reason = d.reason
    assert message in reason


def test_an_empty_image_is_kube_apiservers_to_refuse(roce):
    assert decide(pod(trainer(), {"name": "x", "image": ""}), roce).action == "mutate"


# --- networks ---------------------------------------------------------------------------------


def annotation(p: dict) -> str:
    return p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]


def test_adds_the_fabric_attachment_and_points_nccl_at_it(roce):
    out, _ = run(pod(trainer()), roce)
    assert annotation(out) == "roce-network"
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net1"


def test_keeps_existing_attachments_in_order_and_counts_positions(roce):
    out, _ = run(pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "storage, ml/mgmt@mgmt0"}), roce)
    assert annotation(out) == "storage, ml/mgmt@mgmt0, roce-network"
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net3"


def test_existing_fabric_attachment_is_not_added_twice(roce):
    p = pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "storage, ml/roce-network"})
    m = mutate(p, roce, "ml")
    assert not any(op["path"].startswith("/metadata/annotations") for op in m.ops)
    assert m.interface == "net2"


def test_attachment_in_another_namespace_is_another_network(roce):
    out, _ = run(pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "other/roce-network"}), roce)
    assert annotation(out) == "other/roce-network, roce-network"
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net2"


def test_json_form_is_kept_with_its_extra_keys(roce):
    value = '[{"name": "storage", "namespace": "st", "ips": ["10.1.1.5/24"], "mac": "c2:b0:57:49:47:f1"}]'
    out, _ = run(pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": value}), roce)
    parsed = yaml.safe_load(annotation(out))
    assert parsed == [
        {"name": "storage", "namespace": "st", "ips": ["10.1.1.5/24"], "mac": "c2:b0:57:49:47:f1"},
        {"name": "roce-network"},
    ]


def test_fabric_interface_avoids_a_name_another_attachment_requested(roce):
    # storage asks for net2 by name; the fabric, second by position, would get net2 too
    out, warnings = run(pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "storage@net2"}), roce)
    assert annotation(out) == "storage@net2, roce-network@net1"
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net1"
    assert "attachment roce-network: interface net2 is also the interface of storage@net2" in warnings[0]


def test_user_fabric_attachment_colliding_is_renamed(roce):
    p = pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "roce-network@net2, storage@net2"})
    out, warnings = run(p, roce)
    assert annotation(out) == "roce-network@net1, storage@net2"
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net1"
    assert warnings[0] == (
        "attachment roce-network: interface net2 is also the interface of storage@net2; its interface is net1 instead"
    )


@pytest.mark.parametrize(
    ("networks_value", "renamed", "interface"),
    [
        ("roce-network@eth0", "roce-network@net1", "net1"),
        ("roce-network@lo", "roce-network@net1", "net1"),
        ("a, roce-network@eth0", "a, roce-network@net2", "net2"),
        ("a@net2, roce-network@eth0", "a@net2, roce-network@net1", "net1"),
        ('[{"name": "roce-network", "interface": "eth0"}]', '[{"name":"roce-network","interface":"net1"}]', "net1"),
        ('[{"name": "roce-network", "interfaceRequest": "lo"}]',
         '[{"interfaceRequest":"lo","name":"roce-network","interface":"net1"}]', "net1"),
    ],
)  # fmt: skip
def test_the_fabric_is_never_eth0_or_lo(roce, networks_value, renamed, interface):
    out, warnings = run(pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": networks_value}), roce)
    assert annotation(out) == renamed
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == interface
    assert f"already exists in every pod; its interface is {interface} instead" in warnings[0]


@pytest.mark.parametrize(
    ("networks_value", "message"),
    [
        ("b@net2, c", "attachment b@net2: interface net2 is also the interface of c"),
        ("storage@eth0", "attachment storage@eth0: interface eth0 already exists in every pod"),
        ("a@lo", "attachment a@lo: interface lo already exists in every pod"),
        ('[{"name": "a", "interface": "x"}, {"name": "b", "interface": "x"}]', "attachment a@x: interface x is"),
    ],
)
def test_other_attachments_that_clash_are_denied_naming_them(policies, networks_value, message):
    p = pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": networks_value})
    with pytest.raises(MutationError, match=r"k8s\.v1\.cni\.cncf\.io/networks") as exc:
        admit(p, policies, "roce", "ml")
    assert message in str(exc.value) and "Multus would fail the pod's network setup" in str(exc.value)


def test_a_profile_attachment_may_not_name_eth0(roce):
    doc = yaml.safe_load((POLICIES / "roce.yaml").read_text())
    doc["spec"]["networks"][0]["interface"] = "eth0"
    with pytest.raises(PolicyError, match="'eth0' already exists in every pod"):
        parse_profile(doc, "test")


def test_malformed_networks_annotation_is_an_error_naming_it(policies):
    p = pod(trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "a/b/c"})
    with pytest.raises(MutationError, match=r"k8s\.v1\.cni\.cncf\.io/networks"):
        admit(p, policies, "roce", "ml")


def test_annotation_path_is_json_pointer_escaped(roce):
    m = mutate(pod(trainer(), annotations={"other": "x"}), roce, "ml")
    paths = [op["path"] for op in m.ops]
    assert "/metadata/annotations/k8s.v1.cni.cncf.io~1networks" in paths


# --- env ----------------------------------------------------------------------------------------


def test_injects_profile_env_and_trainyard_variables(roce):
    out, _ = run(pod(trainer(gpus=2)), roce)
    env = env_of(out["spec"]["containers"][0])
    assert env["NCCL_IB_HCA"] == "mlx5" and "NCCL_IB_GID_INDEX" not in env  # NCCL 2.21+ chooses the GID
    assert env["TRAINYARD_FABRIC"] == "roce"
    assert env["TRAINYARD_EXPECT_TRANSPORT"] == "IB"
    assert env["TRAINYARD_SHM_BYTES"] == str(16 * GI)


def test_user_values_win_except_enforced_keys(roce):
    c = trainer(env=[{"name": "NCCL_IB_HCA", "value": "mlx5_2"}, {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}])
    out, warnings = run(pod(c), roce)
    env = env_of(out["spec"]["containers"][0])
    assert env["NCCL_IB_HCA"] == "mlx5_2"
    assert env["NCCL_SOCKET_IFNAME"] == "net1"
    assert "container pytorch: NCCL_SOCKET_IFNAME eth0 -> net1 (enforced by fabric roce)" in warnings


def test_exact_match_form_of_the_interface_is_accepted(roce):
    m = mutate(pod(trainer(env=[{"name": "NCCL_SOCKET_IFNAME", "value": "=net1"}])), roce, "ml")
    assert not any("/env/0" in op["path"] for op in m.ops)
    assert not any("NCCL_SOCKET_IFNAME" in w for w in m.warnings)


def test_value_from_is_kept_unless_the_key_is_enforced(roce):
    secret = {"secretKeyRef": {"name": "nccl", "key": "hca"}}
    c = trainer(
        env=[
            {"name": "NCCL_IB_HCA", "valueFrom": secret},
            {"name": "NCCL_SOCKET_IFNAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]
    )
    out, warnings = run(pod(c), roce)
    env = out["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "NCCL_IB_HCA", "valueFrom": secret}
    assert env[1] == {"name": "NCCL_SOCKET_IFNAME", "value": "net1"}
    assert any("valueFrom -> net1" in w for w in warnings)


def test_duplicate_user_entries_are_all_corrected_and_none_added(roce):
    c = trainer(env=[{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}, {"name": "NCCL_SOCKET_IFNAME", "value": "eth1"}])
    out, _ = run(pod(c), roce)
    entries = [e for e in out["spec"]["containers"][0]["env"] if e["name"] == "NCCL_SOCKET_IFNAME"]
    assert entries == [{"name": "NCCL_SOCKET_IFNAME", "value": "net1"}] * 2
    names = [e["name"] for e in out["spec"]["containers"][0]["env"]]
    assert len(names) == len(set(names)) + 1  # only the user's own duplicate


def test_every_trainer_container_is_mutated_and_nothing_else(roce):
    sidecar = {
        "name": "logs",
        "image": "fluent/fluent-bit:3.1.4",
        "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}],
    }
    init = {"name": "fetch", "image": "busybox:1.36"}  # trainer-image init containers: test_engine_trainjob.py
    p = pod(trainer("a", gpus=1), sidecar, trainer("b", gpus=1), initContainers=[init])
    out, _ = run(p, roce)
    a, logs, b = out["spec"]["containers"]
    assert env_of(a)["NCCL_SOCKET_IFNAME"] == env_of(b)["NCCL_SOCKET_IFNAME"] == "net1"
    assert logs == sidecar and out["spec"]["initContainers"] == [init]
    assert {m["mountPath"] for m in a["volumeMounts"]} == {m["mountPath"] for m in b["volumeMounts"]} == {"/dev/shm"}


def test_folklore_nccl_variables_in_the_pod_are_warned_about(roce):
    c = trainer(env=[{"name": "NCCL_TIMEOUT", "value": "3600"}, {"name": "NCCL_NET_GDR_LEVEL", "value": "5"}])
    _, warnings = run(pod(c), roce)
    assert any("NCCL_TIMEOUT does not exist" in w for w in warnings)
    assert any("NCCL_NET_GDR_LEVEL=5" in w and "SYS" in w for w in warnings)


def test_null_env_is_treated_as_empty(roce):
    out, _ = run(pod(trainer(env=None)), roce)
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net1"


# --- capabilities -------------------------------------------------------------------------------


def test_ipc_lock_is_appended_keeping_existing_capabilities(roce):
    c = trainer(securityContext={"runAsUser": 1000, "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}})
    out, _ = run(pod(c), roce)
    sc = out["spec"]["containers"][0]["securityContext"]
    assert sc == {"runAsUser": 1000, "capabilities": {"add": ["NET_ADMIN", "IPC_LOCK"], "drop": ["ALL"]}}


@pytest.mark.parametrize("sc", [None, {}, {"capabilities": None}, {"capabilities": {"drop": ["ALL"]}}])
def test_ipc_lock_creates_what_is_missing(roce, sc):
    out, _ = run(pod(trainer(securityContext=sc)), roce)
    assert out["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


def test_ipc_lock_not_duplicated_and_not_added_on_tcp(roce, tcp):
    c = trainer(securityContext={"capabilities": {"add": ["IPC_LOCK"]}})
    assert not any("securityContext" in op["path"] for op in mutate(pod(c), roce, "ml").ops)
    assert not any("securityContext" in op["path"] for op in mutate(pod(trainer()), tcp, "ml").ops)


# --- /dev/shm ----------------------------------------------------------------------------------


def shm_volume(p: dict) -> dict:
    mounts = {m["mountPath"]: m["name"] for m in p["spec"]["containers"][0]["volumeMounts"]}
    return next(v for v in p["spec"]["volumes"] if v["name"] == mounts["/dev/shm"])


@pytest.mark.parametrize(
    ("gpus", "memory", "size"),
    [
        (4, None, "32Gi"),  # 8Gi per GPU
        (16, None, "64Gi"),  # at most 64Gi
        (None, None, "1Gi"),  # at least 1Gi
        (4, "16Gi", "8Gi"),  # at most half the memory limit
        (8, "200G", "64Gi"),  # half of 200G is more than the cap
        (1, "3Gi", "1536Mi"),  # half of 3Gi
    ],
)
def test_shm_size_rule(roce, gpus, memory, size):
    out, _ = run(pod(trainer(gpus=gpus, memory=memory)), roce)
    assert shm_volume(out) == {"name": "trainyard-shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def test_shm_floor_above_half_the_memory_limit_is_warned(roce):
    out, warnings = run(pod(trainer(gpus=1, memory="1Gi")), roce)
    assert shm_volume(out)["emptyDir"]["sizeLimit"] == "1Gi"
    assert any("raise the limit" in w for w in warnings)


def test_shm_counts_gpus_and_memory_of_all_trainer_containers(roce):
    out, _ = run(pod(trainer("a", gpus=2, memory="8Gi"), trainer("b", gpus=2, memory="8Gi")), roce)
    assert shm_volume(out)["emptyDir"]["sizeLimit"] == "8Gi"  # half of 16Gi, below 4 x 8Gi


def test_existing_shm_is_kept_and_mounted_where_missing(roce):
    a = trainer("a", gpus=1, volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm"}])
    b = trainer("b", gpus=1)
    p = pod(a, b, volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}}])
    out, _ = run(p, roce)
    assert out["spec"]["volumes"] == p["spec"]["volumes"]
    assert out["spec"]["containers"][1]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert env_of(out["spec"]["containers"][1])["TRAINYARD_SHM_BYTES"] == str(4 * GI)


def test_oversized_existing_shm_is_kept_with_a_warning(roce):
    c = trainer(gpus=1, memory="16Gi", volumeMounts=[{"name": "dshm", "mountPath": "/dev/shm/"}])
    p = pod(c, volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}])
    out, warnings = run(p, roce)
    assert out["spec"]["volumes"] == p["spec"]["volumes"]
    assert any("OOM" in w for w in warnings)


def test_disk_backed_shm_is_warned_about(roce):
    c = trainer(volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}])
    _, warnings = run(pod(c, volumes=[{"name": "shm", "emptyDir": {}}]), roce)
    assert any("not a memory-backed emptyDir" in w for w in warnings)


def test_shm_volume_name_does_not_collide(roce):
    p = pod(trainer(), volumes=[{"name": "trainyard-shm", "configMap": {"name": "x"}}])
    out, _ = run(p, roce)
    assert [v["name"] for v in out["spec"]["volumes"]] == ["trainyard-shm", "trainyard-shm-2"]


# --- RDMA, tolerations ---------------------------------------------------------------------------


def test_rdma_resource_for_gpu_containers_only(roce):
    out, _ = run(pod(trainer("gpu", gpus=8), trainer("cpu")), roce)
    gpu, cpu = out["spec"]["containers"]
    assert gpu["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": "1"}
    assert "resources" not in cpu


def test_rdma_resource_already_requested_is_left(roce):
    c = trainer(resources={"limits": {"nvidia.com/gpu": 1}, "requests": {"rdma/rdma_shared_device_a": "2"}})
    assert not any("rdma" in op["path"] for op in mutate(pod(c), roce, "ml").ops)


def test_rdma_resource_path_is_escaped_and_creates_limits(roce):
    c = trainer(resources={"requests": {"nvidia.com/gpu": 1}})
    m = mutate(pod(c), roce, "ml")
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits",
        "value": {"rdma/rdma_shared_device_a": "1"},
    } in m.ops
    c2 = trainer(gpus=1)
    m2 = mutate(pod(c2), roce, "ml")
    assert any(op["path"] == "/spec/containers/0/resources/limits/rdma~1rdma_shared_device_a" for op in m2.ops)


def test_gpu_toleration_added_once(roce):
    out, _ = run(pod(trainer(gpus=1)), roce)
    assert out["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    tolerated = pod(trainer(gpus=1), tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    wildcard = pod(trainer(gpus=1), tolerations=[{"operator": "Exists"}])
    cpu_only = pod(trainer())
    for p in (tolerated, wildcard, cpu_only):
        assert not any(op["path"].startswith("/spec/tolerations") for op in mutate(p, roce, "ml").ops)


# --- topology ------------------------------------------------------------------------------------

JOB = {"training.kubeflow.org/job-name": "llama"}


def test_job_pods_are_colocated_by_zone_and_spread_over_hosts(roce):
    out, _ = run(pod(trainer(), labels=JOB), roce)
    term = {"labelSelector": {"matchLabels": JOB}, "topologyKey": "topology.kubernetes.io/zone"}
    assert out["spec"]["affinity"] == {
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}
    }
    assert out["spec"]["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": JOB},
        }
    ]


def test_required_colocation_when_the_profile_says_so():
    strict = profile_with(topology={"colocate": {"key": "topology.kubernetes.io/zone", "mode": "required"}})
    out, _ = run(pod(trainer(), labels=JOB), strict)
    assert out["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": JOB}, "topologyKey": "topology.kubernetes.io/zone"}
    ]


def test_user_constraints_stay(roce):
    node_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
        }
    }
    mine = {
        "maxSkew": 2,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": JOB},
    }
    rack = {"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}
    p = pod(trainer(), labels=JOB, affinity={"nodeAffinity": node_affinity}, topologySpreadConstraints=[rack, mine])
    out, _ = run(p, roce)
    assert out["spec"]["affinity"]["nodeAffinity"] == node_affinity
    assert out["spec"]["topologySpreadConstraints"] == [rack, mine]


def test_no_topology_without_a_job_label(roce):
    out, _ = run(pod(trainer()), roce)
    assert "affinity" not in out["spec"] and "topologySpreadConstraints" not in out["spec"]


# --- whole pods ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", example_names())
@pytest.mark.parametrize("profile", ["ib", "roce", "tcp"])
def test_examples_mutate_once_and_then_are_left_alone(policies: PolicySet, name, profile):
    original = example(name)
    first = mutate(original, policies.get(profile), "ml")
    assert first.ops
    mutated = apply(original, first.ops)
    second = mutate(mutated, policies.get(profile), "ml")
    assert second.ops == []
    assert original == example(name), "the engine must not modify its input"


def test_ops_are_adds_except_for_a_value_from_override(roce):
    for name in example_names():
        assert {op["op"] for op in mutate(example(name), roce, "ml").ops} == {"add"}


def test_input_is_never_modified(roce):
    p = example("sidecar.yaml")
    before = copy.deepcopy(p)
    mutate(p, roce, "ml")
    assert p == before
