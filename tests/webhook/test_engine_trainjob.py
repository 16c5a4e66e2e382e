"""The engine on the pods of a TrainJob: JobSet labels, Kueue's topology gate, a preflight init container."""

from __future__ import annotations

from tests.webhook.conftest import TRAINER, apply, env_of, pod, trainer
from webhook.engine import admit, mutate
from webhook.policy import PolicySet

# What JobSet puts on a TrainJob's pods (kubernetes-sigs/jobset@v0.12.0:pkg/controllers/jobset_controller.go)
JOBSET = {
    "jobset.sigs.k8s.io/jobset-name": "llama",
    "jobset.sigs.k8s.io/replicatedjob-name": "node",
    "jobset.sigs.k8s.io/job-index": "0",
    "batch.kubernetes.io/job-completion-index": "1",
}
KUEUE_GATE = {"name": "kueue.x-k8s.io/topology"}
PREFLIGHT = {"name": "preflight", "image": TRAINER, "command": ["trainyard", "preflight"]}


def test_trainjob_pods_are_colocated_and_spread_by_their_jobset(roce):
    out = apply(p := pod(trainer("node", gpus=8), labels=JOBSET), mutate(p, roce, "ml").ops)
    selector = {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llama"}}
    term = {"labelSelector": selector, "topologyKey": "topology.kubernetes.io/zone"}
    assert out["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "podAffinityTerm": term}
    ]
    assert out["spec"]["topologySpreadConstraints"][0]["labelSelector"] == selector


def test_a_pod_kueue_places_gets_no_affinity_or_spread_but_its_fabric(roce):
    p = pod(trainer("node", gpus=8), labels=JOBSET, schedulingGates=[KUEUE_GATE])
    out = apply(p, mutate(p, roce, "ml").ops)
    assert "affinity" not in out["spec"] and "topologySpreadConstraints" not in out["spec"]
    assert out["spec"]["schedulingGates"] == [KUEUE_GATE]
    assert env_of(out["spec"]["containers"][0])["NCCL_SOCKET_IFNAME"] == "net1"
    assert out["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "roce-network"


def test_other_scheduling_gates_do_not_stop_the_webhook_placing_the_pod(roce):
    p = pod(trainer("node"), labels=JOBSET, schedulingGates=[{"name": "example.com/quota"}])
    out = apply(p, mutate(p, roce, "ml").ops)
    assert "podAffinity" in out["spec"]["affinity"]


def test_a_trainer_image_init_container_gets_env_shm_and_capabilities(roce):
    p = pod(trainer("node", gpus=8, memory="512Gi"), labels=JOBSET, initContainers=[dict(PREFLIGHT)])
    out = apply(p, mutate(p, roce, "ml").ops)
    node, preflight = out["spec"]["containers"][0], out["spec"]["initContainers"][0]
    assert env_of(preflight) == env_of(node)  # the same fabric, the same /dev/shm size to check
    assert env_of(preflight)["TRAINYARD_SHM_BYTES"] == str(64 * 2**30)
    assert preflight["volumeMounts"] == node["volumeMounts"] == [{"name": "trainyard-shm", "mountPath": "/dev/shm"}]
    assert preflight["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert "resources" not in preflight, "RDMA devices are for the containers that ask for GPUs"
    assert [v["name"] for v in out["spec"]["volumes"]] == ["trainyard-shm"]
    assert mutate(out, roce, "ml").ops == []


def test_an_init_container_alone_does_not_make_the_pod_a_trainer_pod(roce):
    p = pod({"name": "app", "image": "busybox:1.36"}, initContainers=[dict(PREFLIGHT)])
    assert admit(p, PolicySet({"roce": roce}), "roce", "ml").action == "skip"


def test_enforced_env_in_an_init_container_is_corrected_with_a_warning_naming_it(roce):
    init = {**PREFLIGHT, "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}]}
    p = pod(trainer("node"), initContainers=[init])
    m = mutate(p, roce, "ml")
    out = apply(p, m.ops)
    assert env_of(out["spec"]["initContainers"][0])["NCCL_SOCKET_IFNAME"] == "net1"
    assert any(w.startswith("init container preflight: NCCL_SOCKET_IFNAME eth0 -> net1") for w in m.warnings)


def test_an_init_container_that_mounts_shm_already_shares_its_volume(roce):
    init = {**PREFLIGHT, "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}]
    p = pod(trainer("node", memory="8Gi"), initContainers=[init], volumes=volumes)
    out = apply(p, mutate(p, roce, "ml").ops)
    assert out["spec"]["volumes"] == volumes
    assert out["spec"]["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert env_of(out["spec"]["containers"][0])["TRAINYARD_SHM_BYTES"] == str(2 * 2**30)
