"""Every name trainyard reads or writes on a pod, defined once.

The webhook writes these names, the trainer reads them in the pod, and the repository tooling and
the sandbox check or emulate them; all of them import them from here.
"""

from __future__ import annotations

# --- env the webhook sets on every trainer container, for the trainer's start-up checks -------
ENV_FABRIC = "TRAINYARD_FABRIC"  # the fabric profile's name
ENV_EXPECT_TRANSPORT = "TRAINYARD_EXPECT_TRANSPORT"  # what NCCL must end up using: one of TRANSPORTS
ENV_SHM_BYTES = "TRAINYARD_SHM_BYTES"  # the size of the memory-backed /dev/shm the pod was given
# Set by the engine from the profile; a profile may not set them itself.
ENGINE_ENV = (ENV_FABRIC, ENV_EXPECT_TRANSPORT, ENV_SHM_BYTES)
# Read by preflight only: where the shm check looks (/dev/shm unless set).
ENV_SHM_PATH = "TRAINYARD_SHM_PATH"

# What NCCL can end up using: RDMA verbs (InfiniBand or RoCE) or TCP sockets.
TRANSPORTS = ("IB", "Socket")

# --- pod labels and annotations trainyard reads -----------------------------------------------
# The opt-out. A pod asks to be left without the fabric with exactly this annotation and value
# (no other spelling asks anything). It is a privilege: kube-apiserver honours it only when the
# user creating (or updating) the pod may OPT_OUT_VERB the resource OPT_OUT_RESOURCE of the API
# group OPT_OUT_GROUP in the pod's namespace (the CEL authorizer check in base/webhook's
# matchConditions; RBAC grants it, no API serves the resource). The engine itself never skips a pod
# for it: it cannot ask the authorizer, so a pod that reaches it was not allowed to opt out.
OPT_OUT_ANNOTATION = "trainyard.dev/inject"
OPT_OUT_VALUE = "false"
OPT_OUT_GROUP = "trainyard.dev"
OPT_OUT_RESOURCE = "fabrics"
OPT_OUT_VERB = "skip"
# The fabric profile a pod asks for; absent or empty: the cluster's default profile.
FABRIC_LABEL = "trainyard.dev/fabric"
INJECTION_NAMESPACE_LABEL = "trainyard.dev/injection"  # "enabled" on namespaces the webhook serves
# Static (mirror) pods: never mutated. The kubelet never runs a pod it reads from the API server
# with this annotation (pkg/kubelet/kubelet.go HandlePodAdditions hands mirror pods to
# handleMirrorPod, which only updates the static pod of that name), so setting it skips nothing.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def asks_opt_out(annotations: object) -> bool:
    """Whether a pod's annotations ask for the opt-out (the exact spelling, nothing else)."""
    return isinstance(annotations, dict) and annotations.get(OPT_OUT_ANNOTATION) == OPT_OUT_VALUE


def requested_fabric(labels: object) -> object:
    """The profile a pod's labels ask for: None when the label is absent or empty (the default
    profile), else the value as written (a non-string is the caller's to refuse)."""
    value = labels.get(FABRIC_LABEL) if isinstance(labels, dict) else None
    return None if value is None or value == "" else value


# Multus: the attachments a pod asks for (k8snetworkplumbingwg/multus-cni, pkg/k8sclient).
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# the device-plugin resource a NetworkAttachmentDefinition asks its pods for
NAD_RESOURCE_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"

# Kubeflow Training Operator v1: the label it puts on every pod of a job, on which the engine keys
# the job's co-location and spread (kubeflow/training-operator, pkg/controller.v1/common).
TRAINING_OPERATOR_JOB_LABEL = "training.kubeflow.org/job-name"
# JobSet: the label it puts on every Job and pod of a JobSet (kubernetes-sigs/jobset@v0.12.0:
# api/jobset/v1alpha2/jobset_types.go, JobSetNameKey, set in pkg/controllers/jobset_controller.go
# labelAndAnnotateObject). Kubeflow Trainer v2 names a TrainJob's JobSet after the TrainJob
# (kubeflow/trainer@v2.3.0:pkg/runtime/framework/plugins/jobset/jobset.go, Build), so the value is
# the TrainJob's name.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
# The labels that name a pod's job, in the order the engine looks for them: a TrainJob's pods
# carry the first, a v1 job's pods the second.
JOB_LABELS = (JOBSET_NAME_LABEL, TRAINING_OPERATOR_JOB_LABEL)

# Kueue topology-aware scheduling (kubernetes-sigs/kueue@v0.19.2:apis/kueue/v1beta2/topology_types.go):
# the pod-template annotations asking Kueue to place a pod set within one domain of a topology
# level, and the scheduling gate Kueue puts on the pods it places itself (pkg/podset/podset.go,
# FromAssignment: added when the admission carries a topology assignment, removed by Kueue's
# ungater once it has pinned each pod to its domain).
KUEUE_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_TOPOLOGY_GATE = "kueue.x-k8s.io/topology"

# --- what the webhook adds to a pod ------------------------------------------------------------
SHM_PATH = "/dev/shm"
SHM_VOLUME = "trainyard-shm"  # the memory-backed emptyDir mounted at SHM_PATH

# The shared trainer image's repository (policies/*.yaml list it in trainerImages).
TRAINER_REPOSITORY = "registry.example.com/ml/trainer"
# The trainer image's ENTRYPOINT (trainer/Dockerfile): a container that sets no command runs it with its args.
TRAINER_ENTRYPOINT = ("trainyard", "launch")
