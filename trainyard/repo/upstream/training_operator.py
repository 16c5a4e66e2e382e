"""The Kubeflow Training Operator (release v1.9.4 of the release-1.9 line, kubeflow.org/v1), offline.

The rules follow kubeflow/trainer@v1.9.4 (the v1 code lives on the release-1.9 branch of the
renamed repository): pkg/webhooks/{pytorch,tensorflow} for admission, pkg/controller.v1/
{pytorch,tensorflow,mpi} for the pods, pkg/config/config.go for the init container images.

Two things the operator does that a pull request needs to see before merge:

- :func:`admission_problems`: the checks of its validating webhook (PyTorchJob, TFJob) and of
  its MPIJob controller (``ValidateV1MpiJobSpec``): job name a DNS-1035 label, known replica
  types, at least one container with an image in every replica, the container name the
  operator looks for (``pytorch``, ``tensorflow``), exactly one PyTorchJob Master, at most one
  TFJob Chief or Master, one MPIJob Launcher, no ``elasticPolicy.nProcPerNode`` together with
  ``nprocPerNode``, PyTorchJob replicas other than the Master at least 1 and a ``runPolicy.managedBy``
  the operator knows (both new in v1.9: pkg/webhooks/pytorch/pytorchjob_webhook.go,
  pkg/common/util/webhooks.go ValidateRunPolicy). Added here because the operator would fail
  later: the per-replica Service names ``<job>-<type>-<index>`` must stay within 63 characters.
- :func:`expand_job`: the pods it creates. Defaults first (replicas 1, restart policy, the
  default port on the framework container, PyTorch ``nprocPerNode: auto`` and elastic
  min/max), then per replica type and index: name ``<job>-<type>-<index>`` (MPIJob launcher:
  ``<job>-launcher``), labels ``training.kubeflow.org/job-name``, ``operator-name``,
  ``replica-type``, ``replica-index`` and ``job-role: master`` on the master role, restart
  policy from the replica spec (``ExitCode`` -> ``Never``), and the framework's cluster spec:

  * PyTorchJob, every container: ``PYTHONUNBUFFERED=1``; with a Master: ``MASTER_PORT``,
    ``PET_MASTER_PORT``, ``MASTER_ADDR``, ``PET_MASTER_ADDR`` (``<job>-master-0``),
    ``WORLD_SIZE`` (pods x nprocPerNode, ``auto`` counting 1), ``RANK`` and ``PET_NODE_RANK``
    (workers: index + 1); ``PET_NPROC_PER_NODE`` when nprocPerNode is set; with an
    elasticPolicy ``PET_RDZV_ENDPOINT`` (``<job>-worker-0:<port>`` unless rdzvHost/rdzvPort),
    ``PET_RDZV_BACKEND`` (c10d by default), ``PET_NNODES`` (``min:max``), ``PET_MAX_RESTARTS``,
    ``PET_NPROC_PER_NODE`` (deprecated elasticPolicy.nProcPerNode), ``PET_RDZV_ID``,
    ``PET_RDZV_CONF``, ``PET_STANDALONE``; otherwise ``PET_NNODES`` (all pods). Workers of a
    job with a Master get the ``init-pytorch`` init container that waits for the master's DNS
    name (default image alpine:3.10, 100 tries).
  * TFJob, the ``tensorflow`` container of a distributed job: ``TF_CONFIG`` (cluster spec of
    ``<job>-<type>-<i>.<ns>.svc:<port>`` per replica type, this pod's task, environment cloud).
  * MPIJob: workers without a command run ``sleep 365d`` and mount the job's ``kubexec.sh``;
    the launcher gets the ``kubectl-delivery`` init container, the ``OMPI_MCA_*`` variables,
    the hostfile and kubexec mounts, and its own ServiceAccount.

Each pod names the job as its controller (an owner reference with a stand-in uid). The operator
also creates a headless Service per pod and, with gang scheduling, PodGroups; those do not change
what the webhook and the admission policy see and are left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trainyard.contract.errors import CheckFailed
from trainyard.contract.k8s import name_problem, unknown_fields
from trainyard.contract.names import TRAINING_OPERATOR_JOB_LABEL
from trainyard.repo.model.rendered import tree_copy
from trainyard.repo.upstream.jobset import owner

API_GROUP = "kubeflow.org"
OPERATOR_VERSION = "v1.9.4"
JOB_NAME_LABEL = TRAINING_OPERATOR_JOB_LABEL
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"

# kubeflow/trainer@v1.9.4:pkg/config/config.go (the standalone overlay passes no flags to change them)
PYTORCH_INIT_IMAGE = "alpine:3.10"
PYTORCH_INIT_MAX_TRIES = 100
MPI_KUBECTL_DELIVERY_IMAGE = "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"
# pkg/apis/kubeflow.org/v1/common_types.go: KubeflowJobsController, MultiKueueController
MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")

RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")


@dataclass(frozen=True)
class JobKind:
    kind: str
    replicas_field: str
    replica_types: tuple[str, ...]  # in the order the operator reconciles them
    container: str | None  # the container the operator looks for (None: any name)
    port_name: str | None
    default_port: int | None
    default_restart: str
    operator_name: str
    spec_fields: frozenset[str]


RUN_POLICY_FIELDS = frozenset(
    {
        "cleanPodPolicy",
        "ttlSecondsAfterFinished",
        "activeDeadlineSeconds",
        "backoffLimit",
        "schedulingPolicy",
        "suspend",
        "managedBy",
    }
)
REPLICA_SPEC_FIELDS = frozenset({"replicas", "template", "restartPolicy"})

KINDS: dict[str, JobKind] = {
    "PyTorchJob": JobKind(
        kind="PyTorchJob",
        replicas_field="pytorchReplicaSpecs",
        replica_types=("Master", "Worker"),
        container="pytorch",
        port_name="pytorchjob-port",
        default_port=23456,
        default_restart="OnFailure",
        operator_name="pytorchjob-controller",
        spec_fields=frozenset({"runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode"}),
    ),
    "TFJob": JobKind(
        kind="TFJob",
        replicas_field="tfReplicaSpecs",
        replica_types=("Chief", "Master", "PS", "Worker", "Evaluator"),
        container="tensorflow",
        port_name="tfjob-port",
        default_port=2222,
        default_restart="Never",
        operator_name="tfjob-controller",
        spec_fields=frozenset({"runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker"}),
    ),
    "MPIJob": JobKind(
        kind="MPIJob",
        replicas_field="mpiReplicaSpecs",
        replica_types=("Launcher", "Worker"),
        container=None,
        port_name=None,
        default_port=None,
        default_restart="Never",
        operator_name="mpijob-controller",
        spec_fields=frozenset({"slotsPerWorker", "cleanPodPolicy", "mpiReplicaSpecs", "mainContainer", "runPolicy"}),
    ),
}
ELASTIC_FIELDS = frozenset(
    {"minReplicas", "maxReplicas", "rdzvBackend", "rdzvPort", "rdzvHost", "rdzvId", "rdzvConf", "standalone",
     "nProcPerNode", "maxRestarts", "metrics"}
)  # fmt: skip


class JobError(CheckFailed):
    """The job cannot be expanded into pods (the operator would not create them either)."""


def is_job(doc: object) -> bool:
    return (
        isinstance(doc, dict) and doc.get("kind") in KINDS and str(doc.get("apiVersion", "")).split("/")[0] == API_GROUP
    )


def job_kind(doc: dict) -> JobKind:
    if not is_job(doc):
        raise JobError(f"not a Training Operator job: apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}")
    return KINDS[doc["kind"]]


def _name(doc: dict) -> str:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return str(meta.get("name", ""))


def _replica_specs(doc: dict, jk: JobKind) -> dict[str, Any]:
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    specs = spec.get(jk.replicas_field)
    return specs if isinstance(specs, dict) else {}


def _camel(specs: dict[str, Any], jk: JobKind) -> dict[str, Any]:
    """setTypeNamesToCamelCase: 'worker' or 'WORKER' becomes 'Worker'."""
    out: dict[str, Any] = {}
    for key, value in specs.items():
        canonical = next((t for t in jk.replica_types if t.lower() == str(key).lower()), key)
        out[canonical] = value
    return out


# ---------------------------------------------------------------------------------------------
# Admission


def admission_problems(doc: dict) -> list[str]:
    """What the operator's webhook (or MPIJob validation) would refuse, as 'field: message'. Where
    the webhook has a message of its own, it is the webhook's (pkg/webhooks/*/..._webhook.go, in
    k8s.io/apimachinery's field.Error form: 'Forbidden: must be 1'), its field path written with
    dots (``spec.pytorchReplicaSpecs.Master``, the webhook's ``[Master]``) and a hint after it."""
    jk = job_kind(doc)
    problems = [p for p in (name_problem(_name(doc)),) if p]
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return [*problems, "spec: required"]
    problems += unknown_fields(spec, jk.spec_fields, "spec", jk.kind)
    run_policy = spec.get("runPolicy")
    if isinstance(run_policy, dict):
        for key in run_policy:
            if key not in RUN_POLICY_FIELDS:
                problems.append(f"spec.runPolicy.{key}: not a field of RunPolicy")
        managed_by = run_policy.get("managedBy")
        if managed_by is not None and managed_by not in MANAGED_BY:
            problems.append(
                f"spec.runPolicy.managedBy: {managed_by!r} is not supported (supported: {', '.join(MANAGED_BY)})"
            )
    raw = spec.get(jk.replicas_field)
    path = f"spec.{jk.replicas_field}"
    if not isinstance(raw, dict) or not raw:
        return [*problems, f"{path}: required"]
    for rtype, rspec in raw.items():
        problems.extend(_replica_problems(jk, f"{path}.{rtype}", rtype, rspec))
    problems.extend(_kind_rules(doc, jk, raw, path))
    problems.extend(_service_name_lengths(doc, jk, raw))
    return problems


def _replica_problems(jk: JobKind, rpath: str, rtype: str, rspec: object) -> list[str]:
    """What the operator refuses in one replica spec: its type, fields, count, restart policy and
    the containers of its template."""
    problems: list[str] = []
    if rtype not in jk.replica_types:
        problems.append(f"{rpath}: unsupported replica type; supported: {', '.join(jk.replica_types)}")
    if not isinstance(rspec, dict):
        return [*problems, f"{rpath}: must be a replica spec"]
    for key in rspec:
        if key not in REPLICA_SPEC_FIELDS:
            problems.append(f"{rpath}.{key}: not a field of ReplicaSpec (replicas, restartPolicy, template)")
    replicas = rspec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0):
        problems.append(f"{rpath}.replicas: must be a non-negative integer")
    restart = rspec.get("restartPolicy")
    if restart is not None and restart not in RESTART_POLICIES:
        problems.append(f"{rpath}.restartPolicy: {restart!r} must be one of {', '.join(RESTART_POLICIES)}")
    tspec = (rspec.get("template") or {}).get("spec") if isinstance(rspec.get("template"), dict) else None
    containers = (tspec or {}).get("containers") if isinstance(tspec, dict) else None
    cpath = f"{rpath}.template.spec.containers"
    if not isinstance(containers, list) or not containers:
        return [*problems, f"{cpath}: must be specified"]
    names = []
    for i, c in enumerate(containers):
        if not isinstance(c, dict):
            continue
        if not c.get("image"):
            problems.append(f"{cpath}[{i}].image: Required value: must be required")
        if not c.get("name"):
            problems.append(f"{cpath}[{i}].name: required")
        names.append(c.get("name"))
    if jk.container and jk.container not in names:
        problems.append(
            f"{cpath}: Required value: must have at least one container with name {jk.container} "
            f"(found {', '.join(map(str, names))}; the Training Operator runs and configures that one)"
        )
    return problems


def _kind_rules(doc: dict, jk: JobKind, raw: dict, path: str) -> list[str]:
    out: list[str] = []
    spec = doc["spec"]
    if jk.kind == "PyTorchJob":
        master = raw.get("Master")
        if isinstance(master, dict) and master.get("replicas") != 1:
            out.append(
                f"{path}.Master.replicas: Forbidden: must be 1 (a PyTorchJob has exactly one Master; "
                f"not {master.get('replicas')!r})"
            )
        for rtype, rspec in raw.items():
            replicas = rspec.get("replicas") if isinstance(rspec, dict) else None
            if rtype != "Master" and isinstance(replicas, int) and replicas < 1:
                out.append(f"{path}.{rtype}.replicas: Forbidden: must be at least 1")
        elastic = spec.get("elasticPolicy")
        if elastic is not None:
            if not isinstance(elastic, dict):
                out.append("spec.elasticPolicy: must be a mapping")
            else:
                for key in elastic:
                    if key not in ELASTIC_FIELDS:
                        out.append(f"spec.elasticPolicy.{key}: not a field of ElasticPolicy")
                if elastic.get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
                    out.append(
                        "spec.elasticPolicy.nProcPerNode: must not be used with spec.nprocPerNode "
                        "(it is deprecated; keep nprocPerNode)"
                    )
                lo, hi = elastic.get("minReplicas"), elastic.get("maxReplicas")
                if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
                    out.append(f"spec.elasticPolicy: minReplicas {lo} is larger than maxReplicas {hi}")
            if "Worker" not in raw:
                out.append(f"{path}.Worker: must be configured if elastic policy is used")
        nproc = spec.get("nprocPerNode")
        if nproc is not None and not (isinstance(nproc, str) and (nproc in ("auto", "cpu", "gpu") or nproc.isdigit())):
            out.append(f"spec.nprocPerNode: {nproc!r} must be a string: a number, 'auto', 'cpu' or 'gpu'")
    elif jk.kind == "TFJob":
        chiefs = [t for t in raw if t in ("Chief", "Master")]
        if len(chiefs) > 1:
            out.append(f"{path}: must not have more than 1 Chief or Master role (found {', '.join(chiefs)})")
    elif jk.kind == "MPIJob":
        launcher = raw.get("Launcher")
        if launcher is None:
            out.append(f"{path}.Launcher: required (an MPIJob has exactly one Launcher)")
        elif isinstance(launcher, dict) and launcher.get("replicas") not in (None, 1):
            out.append(
                f"{path}.Launcher.replicas: there must be only 1 launcher replica, not {launcher.get('replicas')!r}"
            )
    return out


def _service_name_lengths(doc: dict, jk: JobKind, raw: dict) -> list[str]:
    name = _name(doc)
    out = []
    for rtype, rspec in raw.items():
        if not isinstance(rspec, dict):
            continue
        n = rspec.get("replicas", 1)
        if not isinstance(n, int) or n < 1:
            continue
        longest = f"{name}-{str(rtype).lower()}-{n - 1}"
        if len(longest) > 63:
            out.append(
                f"metadata.name: the operator names pods and Services {longest!r} ({len(longest)} characters); "
                "a Service name is at most 63 characters: shorten the job name"
            )
            break
    return out


# ---------------------------------------------------------------------------------------------
# Expansion


def _int_replicas(rspec: dict) -> int:
    value = rspec.get("replicas")
    return 1 if value is None else int(value)


def _defaults(doc: dict, jk: JobKind) -> dict:
    job = tree_copy(doc)
    spec = job.setdefault("spec", {})
    specs = _camel(_replica_specs(job, jk), jk)
    spec[jk.replicas_field] = specs
    for rspec in specs.values():
        if rspec.get("replicas") is None:
            rspec["replicas"] = 1
        if not rspec.get("restartPolicy"):
            rspec["restartPolicy"] = jk.default_restart
        if jk.port_name:
            _default_port(rspec, jk)
    if jk.kind == "PyTorchJob":
        elastic = spec.get("elasticPolicy")
        if isinstance(elastic, dict):
            lo, hi = elastic.get("minReplicas"), elastic.get("maxReplicas")
            if lo is None and hi is not None:
                elastic["minReplicas"] = hi
            elif hi is None and lo is not None:
                elastic["maxReplicas"] = lo
            elif lo is None and hi is None and "Worker" in specs:
                elastic["minReplicas"] = elastic["maxReplicas"] = specs["Worker"]["replicas"]
        if (elastic is None or elastic.get("nProcPerNode") is None) and spec.get("nprocPerNode") is None:
            spec["nprocPerNode"] = "auto"
    return job


def _default_port(rspec: dict, jk: JobKind) -> None:
    containers = (((rspec.get("template") or {}).get("spec") or {}).get("containers")) or []
    for c in containers:
        if isinstance(c, dict) and c.get("name") == jk.container:
            ports = c.setdefault("ports", [])
            if not any(isinstance(p, dict) and p.get("name") == jk.port_name for p in ports):
                ports.append({"name": jk.port_name, "containerPort": jk.default_port})
            return


def _port(job: dict, jk: JobKind, rtype: str) -> int | None:
    rspec = _replica_specs(job, jk).get(rtype) or {}
    for c in (((rspec.get("template") or {}).get("spec") or {}).get("containers")) or []:
        if isinstance(c, dict) and c.get("name") == jk.container:
            for p in c.get("ports") or []:
                if isinstance(p, dict) and p.get("name") == jk.port_name:
                    return int(p["containerPort"])
    return None


def _is_master_role(jk: JobKind, specs: dict, rtype: str, index: int) -> bool:
    if jk.kind == "PyTorchJob":  # without a Master, worker 0 is (pytorchjob_controller.go IsMasterRole)
        return rtype == "Master" if "Master" in specs else (rtype == "Worker" and index == 0)
    if jk.kind == "MPIJob":
        return rtype == "Launcher"
    if "Chief" in specs or "Master" in specs:  # TFJob
        return rtype in ("Chief", "Master")
    return rtype == "Worker" and index == 0


def _env(container: dict, items: list[tuple[str, str]]) -> None:
    env = container.get("env")
    if not isinstance(env, list):
        env = container["env"] = []
    env.extend({"name": k, "value": v} for k, v in items)


def _pytorch_env(job: dict, jk: JobKind, rtype: str, index: int) -> list[tuple[str, str]]:
    spec = job["spec"]
    specs = spec[jk.replicas_field]
    name = _name(job)
    total = sum(_int_replicas(r) for r in specs.values())
    nproc = spec.get("nprocPerNode")
    nproc_int = int(nproc) if isinstance(nproc, str) and nproc.isdigit() else 1
    env: list[tuple[str, str]] = [("PYTHONUNBUFFERED", "1")]
    if "Master" in specs:
        port = _port(job, jk, "Master")
        if port is None:
            raise JobError(f"{jk.kind} {name}: the Master's {jk.container!r} container has no port {jk.port_name!r}")
        addr = f"{name}-master-0"
        rank = index + 1 if rtype == "Worker" else index
        env += [
            ("MASTER_PORT", str(port)),
            ("PET_MASTER_PORT", str(port)),
            ("MASTER_ADDR", addr),
            ("PET_MASTER_ADDR", addr),
            ("WORLD_SIZE", str(total * nproc_int)),
            ("RANK", str(rank)),
            ("PET_NODE_RANK", str(rank)),
        ]
    if nproc is not None:
        env.append(("PET_NPROC_PER_NODE", str(nproc)))
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, dict):
        host = elastic.get("rdzvHost") or f"{name}-worker-0"
        port = elastic.get("rdzvPort") or _port(job, jk, "Worker")
        if port is None:
            raise JobError(f"{jk.kind} {name}: the Worker's {jk.container!r} container has no port {jk.port_name!r}")
        env.append(("PET_RDZV_ENDPOINT", f"{host}:{port}"))
        env.append(("PET_RDZV_BACKEND", str(elastic.get("rdzvBackend") or "c10d")))
        env.append(("PET_NNODES", f"{elastic['minReplicas']}:{elastic['maxReplicas']}"))
        if elastic.get("maxRestarts") is not None:
            env.append(("PET_MAX_RESTARTS", str(elastic["maxRestarts"])))
        if elastic.get("nProcPerNode") is not None:
            env.append(("PET_NPROC_PER_NODE", str(elastic["nProcPerNode"])))
        if elastic.get("rdzvId") is not None:
            env.append(("PET_RDZV_ID", str(elastic["rdzvId"])))
        conf = elastic.get("rdzvConf")
        if conf:
            env.append(("PET_RDZV_CONF", ",".join(f"{c.get('key')}={c.get('value')}" for c in conf)))
        if elastic.get("standalone") is True:
            env.append(("PET_STANDALONE", ""))
    else:
        env.append(("PET_NNODES", str(total)))
    return env


def _pytorch_init_container(job: dict) -> dict:
    master = f"{_name(job)}-master-0"
    return {
        "name": "init-pytorch",
        "image": PYTORCH_INIT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
        "command": [
            "sh",
            "-c",
            f"err=1;for i in $(seq {PYTORCH_INIT_MAX_TRIES}); do if nslookup {master}; then err=0 && break; fi;"
            "echo waiting for master; sleep 2; done; exit $err",
        ],
    }


def _tf_config(job: dict, jk: JobKind, rtype: str, index: int) -> str:
    spec = job["spec"]
    specs = spec[jk.replicas_field]
    name, ns = _name(job), _namespace(job)
    cluster: dict[str, list[str]] = {}
    for rt, rspec in specs.items():
        port = _port(job, jk, rt)
        if port is None:
            raise JobError(f"{jk.kind} {name}: the {rt} 'tensorflow' container has no port {jk.port_name!r}")
        cluster[rt.lower()] = [f"{name}-{rt.lower()}-{i}.{ns}.svc:{port}" for i in range(_int_replicas(rspec))]
    config = {
        "cluster": dict(sorted(cluster.items())),
        "task": {"type": rtype.lower(), "index": index},
        "environment": "cloud",
    }
    return json.dumps(config, separators=(",", ":"))


def _namespace(job: dict) -> str:
    meta = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    return str(meta.get("namespace") or "default")


def _pod(job: dict, jk: JobKind, rtype: str, index: int | None, template: dict, name: str) -> dict:
    tmeta = tree_copy(template.get("metadata") or {})
    labels = dict(tmeta.get("labels") or {})
    labels.update(
        {
            OPERATOR_NAME_LABEL: jk.operator_name,
            JOB_NAME_LABEL: _name(job).replace("/", "-"),
            REPLICA_TYPE_LABEL: rtype.lower(),
        }
    )
    if index is not None:
        labels[REPLICA_INDEX_LABEL] = str(index)
    if _is_master_role(jk, job["spec"][jk.replicas_field], rtype, index or 0):
        labels[JOB_ROLE_LABEL] = "master"
    metadata: dict[str, Any] = {"name": name, "namespace": _namespace(job), "labels": labels}
    # the job as the pod's controller (pkg/controller.v1/common/pod.go createNewPod, GenOwnerReference)
    metadata["ownerReferences"] = [owner("kubeflow.org/v1", jk.kind, _name(job), _namespace(job))]
    if tmeta.get("annotations"):
        metadata["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": tree_copy(template.get("spec") or {})}


def _restart(rspec: dict) -> str:
    policy = rspec.get("restartPolicy")
    return "Never" if policy == "ExitCode" else str(policy)


def expand_job(job_doc: dict) -> list[dict]:
    """The pods the Training Operator creates for ``job_doc``, in the order it creates them.

    Raises JobError when the operator would refuse the job (see :func:`admission_problems`).
    """
    jk = job_kind(job_doc)
    problems = admission_problems(job_doc)
    if problems:
        raise JobError(f"{jk.kind} {_name(job_doc)}: " + "; ".join(problems))
    job = _defaults(job_doc, jk)
    specs = job["spec"][jk.replicas_field]
    pods: list[dict] = []
    if jk.kind == "MPIJob":
        return _expand_mpi(job, jk)
    distributed_tf = sum(_int_replicas(r) for r in specs.values()) != 1
    for rtype in jk.replica_types:
        rspec = specs.get(rtype)
        if not isinstance(rspec, dict):
            continue
        for index in range(_int_replicas(rspec)):
            name = f"{_name(job)}-{rtype.lower()}-{index}".replace("/", "-")
            pod = _pod(job, jk, rtype, index, rspec.get("template") or {}, name)
            pspec = pod["spec"]
            containers = pspec.get("containers") or []
            if jk.kind == "PyTorchJob":
                env = _pytorch_env(job, jk, rtype, index)
                for c in containers:
                    _env(c, env)
                if rtype == "Worker" and "Master" in specs:
                    pspec.setdefault("initContainers", []).append(_pytorch_init_container(job))
            elif jk.kind == "TFJob" and distributed_tf:
                tf_config = _tf_config(job, jk, rtype, index)
                for c in containers:
                    if c.get("name") == jk.container:
                        _env(c, [("TF_CONFIG", tf_config)])
                        break
            pspec["restartPolicy"] = _restart(rspec)
            pods.append(pod)
    return pods


MPI_CONFIG_VOLUME = "mpi-job-config"


def _expand_mpi(job: dict, jk: JobKind) -> list[dict]:
    specs = job["spec"][jk.replicas_field]
    pods = [_mpi_launcher(job, jk, specs["Launcher"])]
    worker = specs.get("Worker")
    if isinstance(worker, dict):
        pods += [_mpi_worker(job, jk, worker, index) for index in range(_int_replicas(worker))]
    return pods


def _mpi_launcher(job: dict, jk: JobKind, launcher: dict) -> dict:
    name = _name(job)
    pod = _pod(job, jk, "Launcher", None, launcher.get("template") or {}, f"{name}-launcher")
    spec = pod["spec"]
    spec["serviceAccountName"] = f"{name}-launcher"
    spec.setdefault("initContainers", []).append(
        {
            "name": "kubectl-delivery",
            "image": MPI_KUBECTL_DELIVERY_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "TARGET_DIR", "value": "/opt/kube"}, {"name": "NAMESPACE", "value": _namespace(job)}],
            "volumeMounts": [
                {"name": "mpi-job-kubectl", "mountPath": "/opt/kube"},
                {"name": MPI_CONFIG_VOLUME, "mountPath": "/etc/mpi"},
            ],
            "resources": {
                "limits": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
                "requests": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
            },
        }
    )
    first = spec["containers"][0]
    env = [("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh"), ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile")]
    if not _asks_for_gpu(launcher):
        env += [("NVIDIA_VISIBLE_DEVICES", ""), ("NVIDIA_DRIVER_CAPABILITIES", "")]
    # Intel MPI's bootstrap, unless the job sets it (mpijob_controller.go, hasIntelMPIBootstrapValues)
    given = {e.get("name") for e in first.get("env") or [] if isinstance(e, dict)}
    if "I_MPI_HYDRA_BOOTSTRAP" not in given:
        env.append(("I_MPI_HYDRA_BOOTSTRAP", "rsh"))
    if "I_MPI_HYDRA_BOOTSTRAP_EXEC" not in given:
        env.append(("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh"))
    _env(first, env)
    first.setdefault("volumeMounts", []).extend(
        [{"name": "mpi-job-kubectl", "mountPath": "/opt/kube"}, {"name": MPI_CONFIG_VOLUME, "mountPath": "/etc/mpi"}]
    )
    spec["restartPolicy"] = _restart(launcher)
    spec.setdefault("volumes", []).extend(
        [
            {"name": "mpi-job-kubectl", "emptyDir": {}},
            {
                "name": MPI_CONFIG_VOLUME,
                "configMap": {
                    "name": f"{name}-config",
                    "items": [
                        {"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555},
                        {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                        {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                    ],
                },
            },
        ]
    )
    return pod


def _mpi_worker(job: dict, jk: JobKind, worker: dict, index: int) -> dict:
    name = _name(job)
    pod = _pod(job, jk, "Worker", index, worker.get("template") or {}, f"{name}-worker-{index}")
    spec = pod["spec"]
    first = spec["containers"][0]
    if not first.get("command"):
        first["command"] = ["sleep"]
        first["args"] = ["365d"]
    first.setdefault("volumeMounts", []).append({"name": MPI_CONFIG_VOLUME, "mountPath": "/etc/mpi"})
    spec.setdefault("volumes", []).append(
        {
            "name": MPI_CONFIG_VOLUME,
            "configMap": {
                "name": f"{name}-config",
                "items": [{"key": "kubexec.sh", "path": "kubexec.sh", "mode": 0o555}],
            },
        }
    )
    spec["restartPolicy"] = _restart(worker)
    return pod


def _asks_for_gpu(rspec: dict) -> bool:
    for c in (((rspec.get("template") or {}).get("spec") or {}).get("containers")) or []:
        limits = ((c.get("resources") or {}).get("limits") or {}) if isinstance(c, dict) else {}
        if any(str(k).endswith(".com/gpu") or "gpu" in str(k) for k in limits):
            return True
    return False
