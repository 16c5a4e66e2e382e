"""Hypothesis strategies for pods that are odd but valid: what kube-apiserver could hand the webhook.

Shapes come from real pods (the Training Operator's, sidecar-injected ones, hand-written
fabric settings) plus the edges: nulls where the API allows them, empty lists, duplicate env
names, unicode values, annotation keys with '/' and '~', existing networks annotations in
both forms, and existing /dev/shm, capabilities, tolerations and topology settings.
"""

from __future__ import annotations

from hypothesis import strategies as st

TRAINER_IMAGES = [
    "registry.example.com/ml/trainer:0.1.0",
    "registry.example.com/ml/trainer@sha256:" + "ab" * 32,
    "registry.example.com/ml/trainer",
]
OTHER_IMAGES = [
    "registry.example.com/ml/trainer-evil:1",
    "evil.example.com/registry.example.com/ml/trainer:1",
    "fluent/fluent-bit:3.1.4",
    "busybox",
]
ENV_NAMES = [
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_DEBUG",
    "NCCL_IB_DISABLE",
    "TRAINYARD_SHM_BYTES",
    "MASTER_ADDR",
    "HF_TOKEN",
    "ÜNICODE_VAR",
]
NAD = st.sampled_from(["roce-network", "ib-sriov-network", "training-network", "storage", "mgmt"])
IFNAME = st.sampled_from(["net1", "net2", "net3", "eth1", "fabric0"])
dns_label = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


def maybe(strategy, null: bool = True):
    options = [st.just(None)] if null else []
    return st.one_of(*options, strategy)


def attachment():
    return st.fixed_dictionaries(
        {"name": NAD}, optional={"namespace": st.sampled_from(["ml", "other"]), "interface": IFNAME}
    )


@st.composite
def networks_annotation(draw) -> str:
    items = draw(st.lists(attachment(), max_size=3))
    if draw(st.booleans()):
        import orjson

        return orjson.dumps(items).decode()
    parts = []
    for a in items:
        part = f"{a['namespace']}/{a['name']}" if "namespace" in a else a["name"]
        parts.append(f"{part}@{a['interface']}" if "interface" in a else part)
    return ", ".join(parts)


def env_var():
    value = st.fixed_dictionaries({"name": st.sampled_from(ENV_NAMES), "value": text})
    from_field = st.fixed_dictionaries(
        {"name": st.sampled_from(ENV_NAMES), "valueFrom": st.just({"fieldRef": {"fieldPath": "metadata.name"}})}
    )
    return st.one_of(value, from_field)


def resources():
    limits = st.fixed_dictionaries(
        {},
        optional={
            "nvidia.com/gpu": st.integers(0, 8),
            "memory": st.sampled_from(["512Mi", "1Gi", "16Gi", "128Gi", "200G"]),
            "rdma/rdma_shared_device_a": st.just("1"),
            "cpu": st.sampled_from(["500m", "4"]),
        },
    )
    return maybe(st.fixed_dictionaries({}, optional={"limits": maybe(limits), "requests": maybe(limits)}))


def security_context():
    caps = maybe(
        st.fixed_dictionaries(
            {},
            optional={
                "add": maybe(st.lists(st.sampled_from(["IPC_LOCK", "NET_ADMIN", "SYS_NICE"]), max_size=2, unique=True)),
                "drop": st.just(["ALL"]),
            },
        )
    )
    return maybe(st.fixed_dictionaries({}, optional={"capabilities": caps, "runAsUser": st.just(1000)}))


@st.composite
def container(draw, name: str, trainer: bool, shm_volume: str | None) -> dict:
    c: dict = {"name": name, "image": draw(st.sampled_from(TRAINER_IMAGES if trainer else OTHER_IMAGES))}
    if draw(st.booleans()):
        c["env"] = draw(maybe(st.lists(env_var(), max_size=6)))
    if draw(st.booleans()):
        c["resources"] = draw(resources())
    if draw(st.booleans()):
        c["securityContext"] = draw(security_context())
    mounts = []
    if shm_volume and draw(st.booleans()):
        mounts.append({"name": shm_volume, "mountPath": draw(st.sampled_from(["/dev/shm", "/dev/shm/"]))})
    if draw(st.booleans()):
        mounts.append({"name": "data", "mountPath": "/data"})
    if mounts or draw(st.booleans()):
        c["volumeMounts"] = mounts if mounts or draw(st.booleans()) else None
    return c


@st.composite
def pods(draw) -> dict:
    n = draw(st.integers(1, 4))
    trainers = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    volumes: list[dict] = [{"name": "data", "emptyDir": {}}]
    shm_volume = None
    if draw(st.booleans()):
        shm_volume = draw(st.sampled_from(["dshm", "trainyard-shm"]))
        medium = draw(st.sampled_from([{"medium": "Memory", "sizeLimit": "64Gi"}, {"medium": "Memory"}, {}]))
        volumes.append({"name": shm_volume, "emptyDir": medium})
    elif draw(st.booleans()):
        volumes.append({"name": "trainyard-shm", "configMap": {"name": "unrelated"}})
    containers = [draw(container(f"c{i}", t, shm_volume)) for i, t in enumerate(trainers)]
    labels = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "training.kubeflow.org/job-name": dns_label,
                "trainyard.dev/fabric": st.sampled_from(["ib", "roce", "tcp"]),
                "app": text.filter(bool),
            },
        )
    )
    annotations = draw(
        st.dictionaries(
            st.sampled_from(["a/b", "x~y", "example.com/tilde~and/slash", "plain"]),
            text,
            max_size=3,
        )
    )
    if draw(st.booleans()):
        annotations["k8s.v1.cni.cncf.io/networks"] = draw(networks_annotation())
    metadata: dict = {"name": draw(dns_label), "namespace": "ml"}
    if labels or draw(st.booleans()):
        metadata["labels"] = labels or None
    if annotations or draw(st.booleans()):
        metadata["annotations"] = annotations or None
    spec: dict = {"containers": containers, "volumes": volumes}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": draw(st.sampled_from(TRAINER_IMAGES + OTHER_IMAGES))}]
    if draw(st.booleans()):
        spec["tolerations"] = draw(
            maybe(
                st.lists(
                    st.sampled_from(
                        [
                            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                            {"operator": "Exists"},
                            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
                        ]
                    ),
                    max_size=2,
                )
            )
        )
    if draw(st.booleans()):
        spec["affinity"] = draw(
            st.sampled_from(
                [
                    None,
                    {},
                    {"podAffinity": None},
                    {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
                    {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 1,
                                    "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                                }
                            ]
                        }
                    },
                ]
            )
        )
    if draw(st.booleans()):
        spec["topologySpreadConstraints"] = draw(
            st.sampled_from(
                [
                    [],
                    None,
                    [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}],
                    [{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway"}],
                ]
            )
        )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
