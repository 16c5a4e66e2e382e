"""One ClusterTrainingRuntime per FabricProfile, generated from the profile.

A TrainJob names its runtime (``runtimeRef.name: trainyard-<profile>``) and the runtime decides
everything about its pods that is not the job's own: the shared trainer image, how it starts and
where the fabric comes from. Nothing in a runtime restates a fabric setting: the pod template
carries the label ``trainyard.dev/fabric: <profile>``, so the webhook (or the admission policy)
gives every pod exactly that profile's settings at admission, and the image is one of the
profile's ``trainerImages``, so the webhook recognises the containers as trainers. What the
runtime derives from the profile is therefore only what cannot come from admission:

- the Kueue topology request on the pod template, from the profile's ``topology.colocate``
  (``required`` -> ``kueue.x-k8s.io/podset-required-topology``, ``preferred`` ->
  ``podset-preferred-topology``, the level being the colocation key): Kueue reads it from the
  TrainJob's pod sets when it creates the Workload, long before any pod is admitted;
- the trainer image, ``<profile's first trainerImages repository>:<trainyard version>``.

The pods run the trainer image through ``trainyard launch`` (container ``node``, the one the
torch plugin configures; the TrainJob's ``trainer.args`` are ``-- TRAIN ARGS``), after an init
container ``preflight`` running ``trainyard preflight``. ``mlPolicy.torch.envInjection`` gives the
init container the same ``PET_*`` variables as the trainer (kubeflow/trainer@v2.3.0:
pkg/apis/trainer/v1alpha1/trainingruntime_types.go, EnvInjection; new in v2.3.0), and the webhook
gives it the fabric env, /dev/shm and capabilities (webhook/engine.py): preflight checks the pod
the trainer will run in, and a pod whose fabric is broken stops at ``Init:Error`` before torchrun.
The ``node`` container declares the trainer's metrics port (``METRICS_PORT_NAME``, with
``ENV_METRICS_PORT`` set to its number: :mod:`trainyard.contract.metrics`).

The runtimes are written to ``base/runtimes/<profile>/`` by ``trainyard generate``;
``trainyard validate`` fails when a file there differs from what its profile generates.
"""

from __future__ import annotations

from trainyard import __version__
from trainyard.contract.metrics import DEFAULT_METRICS_PORT, ENV_METRICS_PORT, METRICS_PORT_NAME
from trainyard.contract.names import (
    FABRIC_LABEL,
    KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
)
from trainyard.repo.model import rawyaml
from trainyard.repo.upstream.trainjob import ANCESTOR_LABEL, ANCESTOR_TRAINER, API_VERSION, NODE
from webhook.policy import CompiledProfile

PREFIX = "trainyard-"
PREFLIGHT = "preflight"
# The upstream torch runtime's label (kubeflow/trainer@v2.3.0:manifests/base/runtimes/torch_distributed.yaml).
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
# The shared volumes of the training namespace (base/storage/claims.yaml), where the job bases of
# the v1 kinds (base/jobs/*) mount them too: checkpoints under /checkpoints/<job>, datasets read-only.
VOLUMES = (
    ("checkpoints", "training-checkpoints", "/checkpoints", False),
    ("datasets", "training-datasets", "/data", True),
)
# Every container of a pod must state what a namespace ResourceQuota tracks (requests.cpu,
# requests.memory, limits.memory in base/namespaces), init containers included; preflight is
# the standard library only.
PREFLIGHT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}
# The trainer's Prometheus endpoint, named so the PodMonitor finds it, and the env that tells the
# trainer where to serve. The torch plugin adds only an unnamed containerPort 29500 and PET_* env to
# this container, upserting ports that match by number or by name (kubeflow/trainer@v2.3.0:
# pkg/runtime/framework/plugins/torch/torch.go, pkg/apply/apply.go byContainerPortOrName), so
# a named port of another number is kept beside it.
METRICS_PORT = {"name": METRICS_PORT_NAME, "containerPort": DEFAULT_METRICS_PORT, "protocol": "TCP"}
METRICS_ENV = {"name": ENV_METRICS_PORT, "value": str(DEFAULT_METRICS_PORT)}


def runtime_name(profile: str) -> str:
    return f"{PREFIX}{profile}"


def trainer_image(profile: CompiledProfile) -> str:
    return f"{profile.spec.trainer_images[0]}:{__version__}"


def topology_annotations(profile: CompiledProfile) -> dict[str, str]:
    """The Kueue topology request derived from the profile's colocation rule."""
    colocate = profile.spec.topology.colocate
    if colocate is None:
        return {}
    key = KUEUE_REQUIRED_TOPOLOGY_ANNOTATION if colocate.mode == "required" else KUEUE_PREFERRED_TOPOLOGY_ANNOTATION
    return {key: colocate.key}


def cluster_training_runtime(profile: CompiledProfile) -> dict:
    image = trainer_image(profile)
    mounts = [
        {"name": name, "mountPath": path, **({"readOnly": True} if read_only else {})}
        for name, _, path, read_only in VOLUMES
    ]
    volumes = [
        {"name": name, "persistentVolumeClaim": {"claimName": claim, **({"readOnly": True} if read_only else {})}}
        for name, claim, _, read_only in VOLUMES
    ]
    pod_meta: dict = {"labels": {FABRIC_LABEL: profile.name}}
    if topology_annotations(profile):
        pod_meta["annotations"] = topology_annotations(profile)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": runtime_name(profile.name),
            "labels": {FRAMEWORK_LABEL: "torch", FABRIC_LABEL: profile.name, "app.kubernetes.io/part-of": "trainyard"},
        },
        "spec": {
            "mlPolicy": {
                "numNodes": 1,
                "torch": {"envInjection": {"targets": [{"jobName": NODE, "containerNames": [PREFLIGHT]}]}},
            },
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                                "spec": {
                                    "template": {
                                        "metadata": pod_meta,
                                        "spec": {
                                            "initContainers": [
                                                {
                                                    "name": PREFLIGHT,
                                                    "image": image,
                                                    "command": ["trainyard", "preflight"],
                                                    "resources": PREFLIGHT_RESOURCES,
                                                }
                                            ],
                                            "containers": [
                                                {
                                                    "name": NODE,
                                                    "image": image,
                                                    "command": ["trainyard", "launch"],
                                                    "ports": [dict(METRICS_PORT)],
                                                    "env": [dict(METRICS_ENV)],
                                                    "volumeMounts": mounts,
                                                }
                                            ],
                                            "volumes": volumes,
                                        },
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def render(profile: CompiledProfile, source: str) -> str:
    """The runtime as the YAML file ``trainyard generate`` writes (``source``: the profile's file)."""
    head = (
        f"# Generated by `trainyard generate` from {source}; do not edit (trainyard validate fails when this\n"
        "# file differs from what the profile generates). The fabric itself comes from the webhook at\n"
        f"# admission: the pods carry {FABRIC_LABEL}: {profile.name} and run a trainer image of the profile.\n"
    )
    return head + rawyaml.safe_dump(cluster_training_runtime(profile), sort_keys=False, width=120)
