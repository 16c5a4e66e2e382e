"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1, release v2.3.0), offline: TrainJob -> JobSet -> Jobs -> pods.

What a pull request needs to see before merge, field by field as the controllers do it:

- :func:`admission_problems`: what the TrainJob CRD's schema and CEL rules and Trainer's
  validating webhook refuse (kubeflow/trainer@v2.3.0:pkg/apis/trainer/v1alpha1/trainjob_types.go;
  pkg/runtime/framework/plugins/torch/torch.go and jobset/jobset.go, Validate), and what JobSet's
  webhook would then refuse in the JobSet built from it (kubernetes-sigs/jobset@v0.12.0:
  pkg/webhooks/jobset_webhook.go, ValidateCreate: Job and pod names must stay DNS-1035 labels).
- :func:`expand`: the JobSet Trainer builds from the runtime and the TrainJob (runtime patches,
  node count, resources, the torch plugin's ``PET_*`` variables and envInjection, image, command,
  args, env), the JobSet webhook's defaults, the Jobs and the headless Service the JobSet
  controller creates, and the pods each Indexed Job creates, as the pod admission webhook sees
  them (``generateName``, no name yet: kube-apiserver names the pod after mutating admission,
  k8s.io/apiserver pkg/endpoints/handlers/create.go).

Objects get their UIDs from the API server; the expansion uses stand-ins (a UUID derived from
kind, namespace and name) where a label or an owner reference carries one. The JobSet
controller's optional behaviour (exclusive placement, coordinator, volume claim policies,
in-place restart) is refused or left out: the runtimes trainyard generates use none of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from trainyard.contract.errors import CheckFailed
from trainyard.contract.k8s import ENV_NAME, is_dns1035_label, name_problem, unknown_fields
from trainyard.contract.quantity import QuantityError, parse_quantity
from trainyard.repo.model.rendered import as_dict as _d
from trainyard.repo.model.rendered import as_list as _l
from trainyard.repo.model.rendered import group_of, tree_copy
from trainyard.repo.model.rendered import name_of as _name
from trainyard.repo.model.rendered import namespace_of as _namespace
from trainyard.repo.upstream import jobset as js_
from trainyard.repo.upstream import strategic_merge

API_GROUP = "trainer.kubeflow.org"
API_VERSION = f"{API_GROUP}/v1alpha1"
TRAINER_VERSION = "v2.3.0"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")

# kubeflow/trainer@v2.3.0:pkg/constants/constants.go
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
NODE = "node"  # the trainer's replicated job and its container
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
TRAINER_PORT = 29500  # ContainerTrainerPort
PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK = "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK"
PET_MASTER_ADDR, PET_MASTER_PORT = "PET_MASTER_ADDR", "PET_MASTER_PORT"
PET_ENV = (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT)
TORCHTUNE_ENTRYPOINT = ["tune", "run"]
NODE_RANK_FIELD = f"metadata.annotations['{js_.COMPLETION_INDEX}']"  # JobCompletionIndexFieldPath
# containers whose env only the TrainJob's trainer and initializer fields set (jobset.go Validate)
ENV_FROM_API = (NODE, DATASET_INITIALIZER, MODEL_INITIALIZER)
STORAGE_URI_ENV = "STORAGE_URI"  # plugins/jobset/constants/constants.go InitializerEnvStorageUri
CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY = (CONTROLLER, "kueue.x-k8s.io/multikueue")  # trainjob_types.go, ManagedBy CEL
SPEC_FIELDS = frozenset(
    {"runtimeRef", "initializer", "trainer", "runtimePatches", "suspend", "activeDeadlineSeconds", "managedBy"}
)
TRAINER_FIELDS = frozenset({"image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode"})


class TrainJobError(CheckFailed):
    """The TrainJob cannot be expanded into pods (Trainer or JobSet would refuse it)."""


def is_trainjob(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == "TrainJob" and group_of(str(doc.get("apiVersion"))) == API_GROUP


def is_runtime(doc: object) -> bool:
    return (
        isinstance(doc, dict) and doc.get("kind") in RUNTIME_KINDS and group_of(str(doc.get("apiVersion"))) == API_GROUP
    )


def runtime_ref(job: dict) -> tuple[str, str, str]:
    """(apiGroup, kind, name) with the CRD's defaults (trainjob_types.go, RuntimeRef)."""
    ref = _d(_d(job.get("spec")).get("runtimeRef"))
    return str(ref.get("apiGroup") or API_GROUP), str(ref.get("kind") or RUNTIME_KINDS[0]), str(ref.get("name", ""))


def find_runtime(job: dict, runtimes: list[dict]) -> dict | None:
    """The runtime ``job`` refers to among ``runtimes`` (a TrainingRuntime in the job's namespace)."""
    group, kind, name = runtime_ref(job)
    if group != API_GROUP or kind not in RUNTIME_KINDS:
        return None
    for rt in runtimes:
        same_namespace = kind == "ClusterTrainingRuntime" or _namespace(rt) == _namespace(job)
        if rt.get("kind") == kind and _name(rt) == name and same_namespace:
            return rt
    return None


def missing_runtime(job: dict) -> str:
    """Trainer's refusal of a TrainJob whose runtime does not exist: the API's NotFound for it,
    then its sentence (kubeflow/trainer@v2.3.0: pkg/runtime/core/clustertrainingruntime.go and
    trainingruntime.go, ValidateObjects). Kueue's webhook, which kube-apiserver may hear first,
    says ``runtime 'NAME' not found`` (kueue@v0.19.2: pkg/controller/jobs/trainjob/
    trainjob_controller.go, podSets via its webhook)."""
    _, kind, name = runtime_ref(job)
    camel = kind[0].lower() + kind[1:]
    # the NotFound of controller-runtime's cache names the kind, not the resource
    return (
        f'spec.runtimeRef: {kind}.{API_GROUP} "{name}" not found: specified {camel} must be created before the '
        "TrainJob is created"
    )


# ---------------------------------------------------------------------------------------------
# Admission


def _env_problems(env: object, path: str) -> list[str]:
    out = []
    if env is None:
        return out
    if not isinstance(env, list):
        return [f"{path}: must be a list of {{name, value}}"]
    if len(env) > 128:
        out.append(f"{path}: {len(env)} entries, at most 128")
    seen = set()
    for i, e in enumerate(env):
        name = e.get("name") if isinstance(e, dict) else None
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            out.append(f"{path}[{i}].name: {name!r} is not a valid environment variable name")
        elif name in seen:
            out.append(f"{path}[{i}].name: {name} twice (the list is a map keyed by name)")
        seen.add(name)
    return out


def _strings(value: object, path: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        return [f"{path}: must be a list of strings"]
    if len(value) > 128:
        return [f"{path}: {len(value)} items, at most 128"]
    return [f"{path}[{i}]: longer than 1 MiB" for i, s in enumerate(value) if len(s) > 1048576]


def _positive_int(value: object, path: str, minimum: int = 1) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= 2**31 - 1:
        return [f"{path}: {value!r} must be a whole number from {minimum} to {2**31 - 1}"]
    return []


def _trainer_problems(trainer: object) -> list[str]:
    if trainer is None:
        return []
    if not isinstance(trainer, dict):
        return ["spec.trainer: must be a mapping"]
    out = unknown_fields(trainer, TRAINER_FIELDS, "spec.trainer", "Trainer")
    image = trainer.get("image")
    if image is not None and (not isinstance(image, str) or not image or len(image) > 500):
        out.append("spec.trainer.image: must be an image reference of at most 500 characters")
    out += _strings(trainer.get("command"), "spec.trainer.command")
    out += _strings(trainer.get("args"), "spec.trainer.args")
    out += _env_problems(trainer.get("env"), "spec.trainer.env")
    # torch.go Validate: the PET_* variables are the torch plugin's
    reserved = sorted({e.get("name") for e in _l(trainer.get("env")) if isinstance(e, dict)} & set(PET_ENV))
    if reserved:
        out.append(
            f"spec.trainer.env: must not have reserved envs, invalid envs configured: {reserved} "
            "(the torch runtime sets them; use numNodes and numProcPerNode)"
        )
    out += _positive_int(trainer.get("numNodes"), "spec.trainer.numNodes")
    out += _positive_int(trainer.get("numProcPerNode"), "spec.trainer.numProcPerNode")
    res = trainer.get("resourcesPerNode")
    if res is not None:
        out += _resources_problems(res, "spec.trainer.resourcesPerNode")
    return out


def _resources_problems(res: object, path: str) -> list[str]:
    if not isinstance(res, dict):
        return [f"{path}: must be a mapping with limits and requests"]
    out = [f"{path}.{k}: not a field of ResourceRequirements" for k in res if k not in ("limits", "requests", "claims")]
    for section in ("limits", "requests"):
        values = res.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            out.append(f"{path}.{section}: must be a mapping of resource name to quantity")
            continue
        for name, q in values.items():
            try:
                parse_quantity(q)
            except QuantityError as exc:
                out.append(f"{path}.{section}.{name}: {exc}")
    return out


def _patch_problems(patches: object, runtime: dict | None) -> list[str]:
    if patches is None:
        return []
    if not isinstance(patches, list):
        return ["spec.runtimePatches: must be a list"]
    out = []
    if len(patches) > 16:
        out.append(f"spec.runtimePatches: {len(patches)} entries, at most 16")
    containers = _container_names(runtime) if runtime is not None else None
    managers: set[str] = set()
    for i, p in enumerate(patches):
        path = f"spec.runtimePatches[{i}]"
        if not isinstance(p, dict):
            out.append(f"{path}: must be a mapping with manager and trainingRuntimeSpec")
            continue
        manager = p.get("manager")
        # jobset.go Validate: IsDomainPrefixedPath
        if not isinstance(manager, str) or not 1 <= len(manager) <= 253 or "/" not in manager.strip("/"):
            out.append(f"{path}.manager: {manager!r} must be a domain-prefixed path such as example.com/my-tool")
        elif manager in managers:
            out.append(f"{path}.manager: {manager} twice (the list is a map keyed by manager)")
        managers.add(str(manager))
        for j, rj, pod in patch_replicated_jobs(p):
            rpath = f"{path}.{PATCH_REPLICATED_JOBS}[{j}]"
            name = rj.get("name")
            if containers is not None and name not in containers:
                out.append(f"{rpath}.name: {name!r} must not have replicated job that doesn't exist in the runtime")
                continue
            for group in ("initContainers", "containers"):
                for k, c in enumerate(_l(pod.get(group))):
                    cname = _d(c).get("name")
                    if containers is not None and cname not in containers.get(name, set()):
                        out.append(f"{rpath}...{group}[{k}]: {cname!r} is not a container of the runtime job {name}")
                    elif group == "containers" and _d(c).get("env") and cname in ENV_FROM_API:
                        out.append(
                            f"{rpath}...containers[{k}].env: must not have envs for the {cname} container; "
                            "set them in spec.trainer.env (or spec.initializer)"
                        )  # fmt: skip
    return out


PATCH_REPLICATED_JOBS = "trainingRuntimeSpec.template.spec.replicatedJobs"  # in a runtime patch
PATCH_POD_SPEC = "template.spec.template.spec"  # in one of its replicated jobs


def patch_replicated_jobs(patch: object) -> list[tuple[int, dict, dict]]:
    """(index, replicated job, its pod spec) of each replicated job a runtime patch changes."""
    rjobs = _l(_d(_d(_d(_d(patch).get("trainingRuntimeSpec")).get("template")).get("spec")).get("replicatedJobs"))
    return [(j, _d(rj), _pod_spec(_d(rj))) for j, rj in enumerate(rjobs)]


def _container_names(runtime: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rj in js_.replicated_jobs(_d(_d(runtime.get("spec")).get("template")).get("spec")):
        pod = _pod_spec(rj)
        groups = ("initContainers", "containers")
        out[str(rj.get("name"))] = {str(_d(c).get("name")) for g in groups for c in _l(pod.get(g))}
    return out


def admission_problems(job: dict, runtime: dict | None = None) -> list[str]:
    """What the API server and Trainer's webhook refuse, as 'field: message'. Without ``runtime``
    (not found) the rules that need it are skipped; the caller reports the missing runtime."""
    out = [p for p in (name_problem(_name(job)),) if p]  # trainjob_types.go: RFC 1035, at most 63
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return [*out, "spec: required"]
    out += unknown_fields(spec, SPEC_FIELDS, "spec", "TrainJob")
    ref = spec.get("runtimeRef")
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not 1 <= len(ref["name"]) <= 253:
        out.append("spec.runtimeRef.name: required (the ClusterTrainingRuntime to run, e.g. trainyard-tcp)")
    else:
        group, kind, _ = runtime_ref(job)
        if group != API_GROUP or kind not in RUNTIME_KINDS:
            out.append(f"spec.runtimeRef: unsupported runtime: {kind}.{group} (use a ClusterTrainingRuntime)")
    out += _trainer_problems(spec.get("trainer"))
    out += _patch_problems(spec.get("runtimePatches"), runtime)
    if spec.get("suspend") is not None and not isinstance(spec.get("suspend"), bool):
        out.append("spec.suspend: must be true or false")
    out += _positive_int(spec.get("activeDeadlineSeconds"), "spec.activeDeadlineSeconds")
    if spec.get("managedBy") is not None and spec.get("managedBy") not in MANAGED_BY:
        out.append(f"spec.managedBy: ManagedBy must be {MANAGED_BY[0]} or {MANAGED_BY[1]} if set")
    if runtime is not None and not out:
        out += _runtime_dependent_problems(job, runtime)
    return out


def _runtime_dependent_problems(job: dict, runtime: dict) -> list[str]:
    out = []
    policy = _d(_d(runtime.get("spec")).get("mlPolicy"))
    containers = _container_names(runtime)
    for target in _l(_d(_d(policy.get("torch")).get("envInjection")).get("targets")):
        for cname in _l(_d(target).get("containerNames")):
            if cname not in containers.get(str(_d(target).get("jobName")), set()):
                out.append(
                    f"spec.runtimeRef: envInjection target podSet {_d(target).get('jobName')!r} container "
                    f"{cname!r} not found in runtime template"
                )
    init = _d(_d(job.get("spec")).get("initializer"))
    for what, rjob in (("dataset", DATASET_INITIALIZER), ("model", MODEL_INITIALIZER)):
        if init.get(what) is not None and rjob not in containers:
            out.append(f"spec.runtimeRef: must have {rjob} job when trainJob is configured with input {what}Config")
    if not out:
        try:
            expanded = expand(job, runtime)
        except (TrainJobError, js_.JobSetError, strategic_merge.PatchError) as exc:
            return [str(exc)]
        out += _jobset_name_problems(expanded.jobset)
    return out


def _jobset_name_problems(jobset: dict) -> list[str]:
    """jobset_webhook.go ValidateCreate: the longest Job name and the longest pod name (plus the
    five characters the API server appends) must be DNS-1035 labels."""
    out = []
    name = _name(jobset)
    for rj in _l(_d(jobset.get("spec")).get("replicatedJobs")):
        replicas = int(rj.get("replicas", 1))
        job_name = f"{name}-{rj['name']}-{replicas - 1}"
        completions = int(_d(_d(rj.get("template")).get("spec")).get("completions") or 1)
        pod_name = f"{job_name}-{completions - 1}-abcde"
        for what, value in (("Job", job_name), ("pod", pod_name)):
            if not is_dns1035_label(value):
                out.append(
                    f"metadata.name: JobSet would name a {what} {value!r} ({len(value)} characters), "
                    "more than a DNS-1035 label's 63: shorten the TrainJob's name"
                )
                break
    return out


def runtime_problems(runtime: dict) -> list[str]:
    """What Trainer's runtime webhook refuses (pkg/webhooks/trainingruntime_webhook.go,
    validateReplicatedJobs; trainingruntime_types.go MLPolicy CEL)."""
    out = []
    spec = _d(runtime.get("spec"))
    policies = [k for k in ("torch", "mpi", "jax", "xgboost", "flux") if k in _d(spec.get("mlPolicy"))]
    if len(policies) > 1:
        out.append(f"spec.mlPolicy: Only one of the policy can be configured (found {', '.join(policies)})")
    expected = {ANCESTOR_TRAINER: NODE, DATASET_INITIALIZER: DATASET_INITIALIZER, MODEL_INITIALIZER: MODEL_INITIALIZER}
    for i, rj in enumerate(js_.replicated_jobs(_d(spec.get("template")).get("spec"))):
        ancestor = _d(_d(_d(rj.get("template")).get("metadata")).get("labels")).get(ANCESTOR_LABEL)
        if ancestor in expected:
            if int(rj.get("replicas", 1)) != 1:
                out.append(f"spec.template.spec.replicatedJobs[{i}].replicas: must be 1 for a {ancestor} job")
            if expected[ancestor] not in {_d(c).get("name") for c in _l(_pod_spec(rj).get("containers"))}:
                out.append(
                    f"spec.template.spec.replicatedJobs[{i}]...containers: must have a container named "
                    f"{expected[ancestor]!r} for the {ancestor} job"
                )
    return out


# ---------------------------------------------------------------------------------------------
# Expansion


@dataclass
class Expansion:
    """The objects a TrainJob becomes, in the order the controllers create them."""

    jobset: dict
    service: dict
    jobs: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)  # as the pod admission webhook sees them

    @property
    def master_addr(self) -> str | None:
        for pod in self.pods:
            for c in _l(pod["spec"].get("containers")):
                for e in _l(c.get("env")):
                    if e.get("name") == PET_MASTER_ADDR:
                        return str(e.get("value"))
        return None


def _pod_spec(rjob: dict) -> dict:
    tpl = _d(_d(_d(rjob.get("template")).get("spec")).get("template"))
    return _d(tpl.get("spec"))


def _upsert(items: list, new: dict, key: str) -> None:
    """pkg/apply/apply.go upsert: replace the item with the same key in place, else append."""
    for i, have in enumerate(items):
        if isinstance(have, dict) and have.get(key) == new.get(key):
            items[i] = new
            return
    items.append(new)


def _quantity(value: object) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError:
        return Decimal(0)


def _gpus(resources: dict) -> int:
    """runtime.go GetNumGPUPerNode: resources whose name contains "gpu", requests first."""

    def count(section: object) -> int:
        return int(sum((_quantity(v) for k, v in _d(section).items() if "gpu" in str(k).lower()), Decimal(0)))

    return count(resources.get("requests")) or count(resources.get("limits"))


def _cpus(resources: dict) -> int:
    """torch.go getNumCPUPerNode: the CPU request, else the limit, whole CPUs."""
    request = _d(resources.get("requests")).get("cpu")
    if request is not None and _quantity(request) > 0:
        return int(_quantity(request))
    limit = _d(resources.get("limits")).get("cpu")
    return int(_quantity(limit)) if limit is not None else 0


def _merge_runtime_patches(job: dict, template_spec: dict) -> tuple[dict, dict[str, str], dict[str, str]]:
    """trainingruntime.go newRuntimeInfo and mergeRuntimePatches: the propagated JobSet labels and
    annotations, and each patch's spec merged in list order (replicated jobs keep their order)."""
    labels = dict(_d(_d(template_spec.get("metadata")).get("labels")))
    annotations = dict(_d(_d(template_spec.get("metadata")).get("annotations")))
    spec = tree_copy(_d(template_spec.get("spec")))
    order = {rj.get("name"): i for i, rj in enumerate(js_.replicated_jobs(spec))}
    for i, patch in enumerate(_l(_d(job.get("spec")).get("runtimePatches"))):
        template = _d(_d(_d(patch).get("trainingRuntimeSpec")).get("template"))
        labels.update(_d(_d(template.get("metadata")).get("labels")))
        annotations.update(_d(_d(template.get("metadata")).get("annotations")))
        if isinstance(template.get("spec"), dict):
            where = f"spec.runtimePatches[{i}].trainingRuntimeSpec.template.spec"
            spec = strategic_merge.merge(spec, template["spec"], "JobSetSpec", where)
    spec["replicatedJobs"] = sorted(js_.replicated_jobs(spec), key=lambda rj: order.get(rj.get("name"), len(order)))
    return spec, labels, annotations


def _container(pod_spec: dict, group: str, name: str) -> dict | None:
    return next((c for c in _l(pod_spec.get(group)) if isinstance(c, dict) and c.get("name") == name), None)


def build_jobset(job: dict, runtime: dict) -> dict:
    """The JobSet Trainer's controller applies for ``job`` (before JobSet's webhook defaults it)."""
    name, namespace = _name(job), _namespace(job)
    jspec = _d(job.get("spec"))
    trainer = _d(jspec.get("trainer")) if jspec.get("trainer") is not None else None
    rspec = _d(runtime.get("spec"))
    policy = _d(rspec.get("mlPolicy"))
    spec, labels, annotations = _merge_runtime_patches(job, _d(rspec.get("template")))
    counts: dict[str, int] = {}
    trainers: set[str] = set()  # the replicated jobs labelled as the trainer
    for rj in js_.replicated_jobs(spec):
        pod = _pod_spec(rj)
        ancestor = _d(_d(_d(rj.get("template")).get("metadata")).get("labels")).get(ANCESTOR_LABEL)
        count = int(_d(_d(rj.get("template")).get("spec")).get("parallelism") or 1)
        if ancestor == ANCESTOR_TRAINER and rspec.get("mlPolicy") is not None:
            count = int(policy.get("numNodes") or 1)  # MLPolicy numNodes, default 1
            if trainer is not None and trainer.get("resourcesPerNode") is not None:
                node = _container(pod, "containers", NODE)
                if node is not None:  # MergeResourceRequirements: a strategic merge
                    node["resources"] = strategic_merge.merge(
                        _d(node.get("resources")), trainer["resourcesPerNode"], "Any", "spec.trainer.resourcesPerNode"
                    )
        counts[str(rj.get("name"))] = max(count, 1)
        if ancestor == ANCESTOR_TRAINER:
            trainers.add(str(rj.get("name")))
    if "torch" in policy:
        _torch(job, spec, policy, counts, trainers)
    for rj in js_.replicated_jobs(spec):  # jobset.go SyncParallelCount
        jspec_ = rj.setdefault("template", {}).setdefault("spec", {})
        jspec_["parallelism"] = jspec_["completions"] = counts[str(rj.get("name"))]
    _initializer(job, spec)
    for rj in js_.replicated_jobs(spec):  # builder.go Trainer
        if str(rj.get("name")) not in trainers:
            continue
        rj["replicas"] = 1
        node = _container(_pod_spec(rj), "containers", NODE)
        if node is not None and trainer is not None:
            for key in ("image", "command", "args"):
                if trainer.get(key) is not None:
                    node[key] = tree_copy(trainer[key])
            env = node.setdefault("env", [])
            for e in _l(trainer.get("env")):
                _upsert(env, tree_copy(e), "name")
    if jspec.get("suspend") is not None:  # builder.go Suspend
        spec["suspend"] = jspec["suspend"]
    return {
        "apiVersion": js_.API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            **({"labels": labels} if labels else {}),
            **({"annotations": annotations} if annotations else {}),
            "ownerReferences": [js_.owner(API_VERSION, "TrainJob", name, namespace)],
        },
        "spec": spec,
    }


def _torch(job: dict, spec: dict, policy: dict, counts: dict[str, int], trainers: set[str]) -> None:
    """torch.go EnforceMLPolicy."""
    name = _name(job)
    trainer = _d(_d(job.get("spec")).get("trainer")) if _d(job.get("spec")).get("trainer") is not None else None
    node_rjob = next((rj for rj in js_.replicated_jobs(spec) if str(rj.get("name")) in trainers), None)
    if node_rjob is not None and trainer is not None and trainer.get("numNodes") is not None:
        counts[str(node_rjob.get("name"))] = int(trainer["numNodes"])
    nproc: str = "auto"
    if trainer is not None and trainer.get("numProcPerNode") is not None:
        nproc = str(int(trainer["numProcPerNode"]))
    node = _container(_pod_spec(node_rjob), "containers", NODE) if node_rjob is not None else None
    resources = _d(node.get("resources")) if node is not None else {}  # ExtractResourcePerNodeFromRuntime
    if trainer is not None and trainer.get("resourcesPerNode") is not None:
        resources = _d(trainer["resourcesPerNode"])
    if nproc == "auto" and _gpus(resources) == 0:
        nproc = str(max(1, _cpus(resources)))
    nodes = counts.get(str(node_rjob.get("name")), 1) if node_rjob is not None else 1
    pet = [
        {"name": PET_NNODES, "value": str(nodes)},
        {"name": PET_NPROC_PER_NODE, "value": nproc},
        {"name": PET_NODE_RANK, "valueFrom": {"fieldRef": {"fieldPath": NODE_RANK_FIELD}}},
    ]
    master = [
        {"name": PET_MASTER_ADDR, "value": f"{name}-{NODE}-0-0.{name}"},
        {"name": PET_MASTER_PORT, "value": str(TRAINER_PORT)},
    ]
    if node is not None and trainer is not None:
        env = node.setdefault("env", [])
        for e in _l(trainer.get("env")):
            _upsert(env, tree_copy(e), "name")
        for e in pet:
            _upsert(env, tree_copy(e), "name")
        if _l(trainer.get("command")) != TORCHTUNE_ENTRYPOINT:
            for e in master:
                _upsert(env, tree_copy(e), "name")
        _upsert(node.setdefault("ports", []), {"containerPort": TRAINER_PORT}, "containerPort")
    for target in _l(_d(_d(policy.get("torch")).get("envInjection")).get("targets")):
        rj = next((r for r in js_.replicated_jobs(spec) if r.get("name") == _d(target).get("jobName")), None)
        for cname in _l(_d(target).get("containerNames")):
            pod = _pod_spec(rj) if rj is not None else {}
            c = _container(pod, "containers", cname) or _container(pod, "initContainers", cname)
            if c is None:
                raise TrainJobError(
                    f"envInjection target podSet {_d(target).get('jobName')!r} container {cname!r} not found in "
                    "runtime template"
                )
            env = c.setdefault("env", [])
            for e in [*pet, *master]:
                _upsert(env, tree_copy(e), "name")


def _initializer(job: dict, spec: dict) -> None:
    """builder.go Initializer: the storage URI and env of the dataset and model initializers."""
    init = _d(_d(job.get("spec")).get("initializer"))
    for what, rjob_name in (("dataset", DATASET_INITIALIZER), ("model", MODEL_INITIALIZER)):
        source = init.get(what)
        for rj in js_.replicated_jobs(spec):
            ancestor = _d(_d(_d(rj.get("template")).get("metadata")).get("labels")).get(ANCESTOR_LABEL)
            if ancestor != rjob_name:
                continue
            rj["replicas"] = 1
            c = _container(_pod_spec(rj), "containers", rjob_name)
            if c is None or not isinstance(source, dict):
                continue
            env = c.setdefault("env", [])
            if source.get("storageUri") is not None:
                _upsert(env, {"name": STORAGE_URI_ENV, "value": str(source["storageUri"])}, "name")
            for e in _l(source.get("env")):
                _upsert(env, tree_copy(e), "name")
            if isinstance(source.get("secretRef"), dict):
                c.setdefault("envFrom", []).append({"secretRef": {"name": source["secretRef"].get("name")}})


def expand(job: dict, runtime: dict) -> Expansion:
    """The JobSet, headless Service, Jobs and pods of ``job`` run by ``runtime``."""
    jobset = js_.default_jobset(build_jobset(job, runtime))
    jobs = js_.construct_jobs(jobset)
    pods = [pod for j in jobs for pod in js_.job_pods(j)]
    return Expansion(jobset=jobset, service=js_.headless_service(jobset), jobs=jobs, pods=pods)
