"""``trainyard new-job``: scaffold overlays/<cluster>/jobs/<name>/ from a job base.

The folder holds a kustomization that takes base/jobs/<kind> and a JSON patch (job.yaml) with
what is the job's own: its name, its size, the trainer's arguments and the resources of a pod.
Nothing about the fabric: the webhook adds that at admission. The default kind is a TrainJob
(Kubeflow Trainer v2) on the cluster's runtime ``trainyard-<fabric>`` (the fabric the cluster's
webhook applies by default); ``--kind pytorch|mpi|tf`` writes a v1 job for the legacy operator.
The trainer's metrics port comes with the runtime or the base, so no patch here touches ports or
env (``trainyard validate`` checks them in the pods).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from trainer import options
from trainyard.contract.errors import UserError
from trainyard.contract.k8s import is_dns1035_label
from trainyard.contract.names import TRAINER_REPOSITORY, TRAINING_OPERATOR_JOB_LABEL
from trainyard.repo.generate import runtimes
from trainyard.repo.jobs import placement
from trainyard.repo.model import declared
from trainyard.repo.model.declared import ClusterFacts
from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE
from trainyard.repo.model.repository import OVERLAYS, Repository
from trainyard.repo.upstream import trainjob
from trainyard.repo.upstream.training_operator import REPLICA_TYPE_LABEL

KINDS = {"trainjob": "TrainJob", "pytorch": "PyTorchJob", "mpi": "MPIJob", "tf": "TFJob"}
BASES = {"trainjob": "trainjob", "pytorch": "pytorchjob", "mpi": "mpijob", "tf": "tfjob"}
GROUPS = {"trainjob": trainjob.API_GROUP}  # the v1 kinds: kubeflow.org
TRAINER_IMAGE = TRAINER_REPOSITORY
DEFAULT_TRAINER_ARGS = ("--model", "tiny", "--data", "synthetic")


@dataclass
class JobRequest:
    name: str
    cluster: str
    kind: str = "trainjob"
    nodes: int = 1
    gpus: int = 1
    elastic: tuple[int, int] | None = None
    image_tag: str | None = None
    trainer_args: list[str] = field(default_factory=list)
    fabric: str | None = None  # TrainJob: the cluster's default fabric (its runtime is trainyard-<fabric>)
    cpu: int | None = None  # per pod; None: sized to the cluster (:func:`size_pods`)
    memory_gi: int | None = None


def parse_elastic(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text or "")
    if not m:
        raise UserError(f"--elastic {text!r}: expected MIN:MAX, for example 2:8")
    lo, hi = int(m.group(1)), int(m.group(2))
    if lo < 1 or lo > hi:
        raise UserError(f"--elastic {text!r}: need 1 <= MIN <= MAX")
    return lo, hi


def check_request(repo: Repository, req: JobRequest) -> Path:
    """Refuse what the operator or Argo CD would refuse; return the folder to create."""
    repo.require_cluster(req.cluster)
    if req.kind not in KINDS:
        raise UserError(f"--kind {req.kind!r}: choose one of {', '.join(KINDS)}")
    if not is_dns1035_label(req.name):
        raise UserError(
            f"job name {req.name!r}: use lower case letters, digits and '-', starting with a letter and ending with a "
            "letter or digit (a DNS-1035 label, as the Training Operator requires)"
        )
    if req.nodes < 1:
        raise UserError(f"--nodes {req.nodes}: a job needs at least one node")
    if req.gpus < 0:
        raise UserError(f"--gpus {req.gpus}: must be 0 or more")
    if req.kind == "trainjob":  # JobSet's pod names (jobset_webhook.go), 5 characters for the API server
        longest = f"{req.name}-{trainjob.NODE}-0-{max(req.nodes - 1, 0)}-abcde"
        what = "JobSet would name a pod"
    else:
        longest = f"{req.name}-{'launcher' if req.kind == 'mpi' else 'worker'}-{max(req.nodes - 1, 0)}"
        what = "the operator would name a pod and its Service"
    if len(longest) > 63:
        raise UserError(
            f"job name {req.name!r} is too long: {what} {longest!r} ({len(longest)} characters, at most 63)"
        )
    if req.elastic is not None:
        if req.kind == "trainjob":
            raise UserError(
                "--elastic: a TrainJob has no elastic policy (Kubeflow Trainer removed it in v2.2); "
                "use --kind pytorch for an elastic PyTorchJob on the v1 operator"
            )
        if req.kind != "pytorch":
            raise UserError("--elastic applies to PyTorch jobs only (torchrun's elastic rendezvous)")
        lo, hi = req.elastic
        if not lo <= req.nodes <= hi:
            raise UserError(f"--nodes {req.nodes} must lie within --elastic {lo}:{hi}")
    if req.image_tag is not None and (
        req.image_tag == "latest" or not re.fullmatch(r"[\w][\w.-]{0,127}", req.image_tag)
    ):
        raise UserError(f"--image-tag {req.image_tag!r}: give a version tag (not 'latest')")
    folder = repo.root / OVERLAYS / req.cluster / "jobs" / req.name
    if folder.exists():
        raise UserError(f"{repo.rel(folder)} already exists; pick another name or edit that folder")
    return folder


def _q(value: str) -> str:
    return json.dumps(value)


def _list(items: list[str], indent: str) -> str:
    return "".join(f"\n{indent}- {_q(i)}" for i in items)


GPU = "nvidia.com/gpu"
GI = 1 << 30


def size_pods(req: JobRequest, facts: ClusterFacts | None, quotas: list[dict]) -> None:
    """Give each pod of ``req`` 8 CPUs and 64Gi per GPU (at least 4 and 16Gi), no more than the
    largest node with enough GPUs holds, and the job no more than its namespace's quotas allow;
    a UserError when even the GPUs do not fit (validate would refuse the job)."""
    cpu, memory = Decimal(max(4, 8 * req.gpus)), Decimal(max(16, 64 * req.gpus) * GI)
    gpus, pods = Decimal(req.gpus), Decimal(req.nodes)
    where = f"clusters/{req.cluster}/cluster.yaml"
    if facts is not None:
        pools = [p for p in facts.spec.node_pools if p.amount(GPU) >= gpus]
        if not pools:
            most = max((p.amount(GPU) for p in facts.spec.node_pools), default=Decimal(0))
            raise UserError(f"--gpus {req.gpus}: no node of cluster {req.cluster} has that many ({where}: at most "
                            f"{most} per node); use more --nodes with fewer --gpus each")  # fmt: skip
        cpu = min(cpu, max(p.amount("cpu") for p in pools))
        memory = min(memory, max(p.amount("memory") for p in pools))
    for hard in quotas:
        quota_gpus = next((hard[k] for k in (f"requests.{GPU}", f"limits.{GPU}") if k in hard), None)
        if quota_gpus is not None and gpus * pods > quota_gpus:
            raise UserError(
                f"--nodes {req.nodes} x --gpus {req.gpus}: the namespace's quota allows "
                f"{placement.show(GPU, quota_gpus)} GPU(s) in all (overlays/{req.cluster}/platform/namespaces); "
                "make the job smaller"
            )
        for resource in ("cpu", "memory"):
            for k in (resource, f"requests.{resource}", f"limits.{resource}"):
                if k in hard:
                    share = hard[k] / pods
                    cpu, memory = (min(cpu, share), memory) if resource == "cpu" else (cpu, min(memory, share))
    req.cpu = req.cpu or max(1, int(cpu))
    req.memory_gi = req.memory_gi or max(1, int(memory // GI))


def _resources(req: JobRequest, indent: str) -> str:
    gpus = req.gpus
    cpu = req.cpu or max(4, 8 * gpus)
    memory = req.memory_gi or max(16, 64 * gpus)
    lines = [f"{indent}limits:"]
    if gpus:
        lines.append(f'{indent}  nvidia.com/gpu: "{gpus}"')  # a quantity is a string (validate/jobs.py says why)
    lines += [f'{indent}  cpu: "{cpu}"', f"{indent}  memory: {memory}Gi"]
    return "\n" + "\n".join(lines)


def trainer_args(req: JobRequest) -> list[str]:
    args = list(req.trainer_args) or list(DEFAULT_TRAINER_ARGS)
    if "--checkpoint-dir" not in args and not any(a.startswith("--checkpoint-dir=") for a in args):
        args += ["--checkpoint-dir", f"/checkpoints/{req.name}"]
    if not req.trainer_args:  # the global batch the trainer defaults to, rounded up to divide by the ranks
        ranks = req.nodes * max(req.gpus, 1)
        batch = options.parse(args).batch_size
        if batch % ranks:
            args += ["--batch-size", str((batch + ranks - 1) // ranks * ranks)]
    return args


def _op(op: str, path: str, value: str | None = None) -> str:
    text = f"- op: {op}\n  path: {path}\n"
    if value is not None:
        text += f"  value:{value if value.startswith(chr(10)) else ' ' + value}\n"
    return text


def job_patch(req: JobRequest) -> str:
    args = trainer_args(req)
    procs = max(req.gpus, 1)
    head = (
        f"# What {req.name} adds to base/jobs/{BASES[req.kind]} (a JSON patch): its name, its size, the trainer's\n"
        "# arguments and what one pod needs. The fabric (NCCL, net1, /dev/shm, RDMA) comes from the webhook.\n"
    )
    ops = [_op("replace", "/metadata/name", req.name)]
    if req.kind == "trainjob":
        if not req.fabric:
            raise UserError(f"cluster {req.cluster}: no default fabric profile found for the TrainJob's runtime")
        ops.append(_op("replace", "/spec/runtimeRef/name", runtimes.runtime_name(req.fabric)))
        trainer = (
            f"\n    numNodes: {req.nodes}\n    numProcPerNode: {procs}"
            f"\n    args:{_list(['--', *args], '      ')}\n    resourcesPerNode:{_resources(req, '      ')}"
        )
        if req.image_tag:
            trainer += f"\n    image: {_q(f'{TRAINER_IMAGE}:{req.image_tag}')}"
        ops.append(_op("add", "/spec/trainer", trainer))
    elif req.kind == "pytorch":
        ops.append(_op("replace", "/spec/nprocPerNode", _q(str(procs))))
        specs = "/spec/pytorchReplicaSpecs"
        if req.elastic:
            lo, hi = req.elastic
            ops.append(_op("remove", f"{specs}/Master"))
            ops.append(
                _op(
                    "add",
                    "/spec/elasticPolicy",
                    f"\n    rdzvBackend: c10d\n    minReplicas: {lo}\n    maxReplicas: {hi}\n    maxRestarts: 3",
                )
            )
            ops.append(_op("replace", f"{specs}/Worker/replicas", str(req.nodes)))
            types = ["Worker"]
        elif req.nodes == 1:
            ops.append(_op("remove", f"{specs}/Worker"))
            types = ["Master"]
        else:
            ops.append(_op("replace", f"{specs}/Worker/replicas", str(req.nodes - 1)))
            types = ["Master", "Worker"]
        ops += _container_ops(specs, types, ["--", *args], req)
    elif req.kind == "tf":
        specs = "/spec/tfReplicaSpecs"
        if req.nodes == 1:
            ops.append(_op("remove", f"{specs}/Worker"))
            types = ["Chief"]
        else:
            ops.append(_op("replace", f"{specs}/Worker/replicas", str(req.nodes - 1)))
            types = ["Chief", "Worker"]
        ops += _container_ops(specs, types, ["--", *args], req)
    else:
        specs = "/spec/mpiReplicaSpecs"
        ranks = req.nodes * procs
        script = (
            "RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE "
            f"MASTER_ADDR={req.name}-worker-0.{req.name} MASTER_PORT=29500 exec python -m trainer train "
            + shlex.join(args)
        )
        ops.append(_op("replace", "/spec/slotsPerWorker", str(procs)))
        ops.append(_op("replace", f"{specs}/Worker/replicas", str(req.nodes)))
        launcher = ["-np", str(ranks), "--bind-to", "none", "--map-by", "slot", "sh", "-c", script]
        ops.append(_op("add", f"{specs}/Launcher/template/spec/containers/0/args", _list(launcher, "    ")))
        ops.append(_op("add", f"{specs}/Worker/template/spec/subdomain", req.name))
        ops.append(_op("add", f"{specs}/Worker/template/spec/containers/0/resources", _resources(req, "    ")))
    return head + "".join(ops)


def _container_ops(specs: str, types: list[str], args: list[str], req: JobRequest) -> list[str]:
    ops = []
    for i, rtype in enumerate(types):
        base = f"{specs}/{rtype}/template/spec/containers/0"
        if i == 0:
            anchor_args = "&args" if len(types) > 1 else ""
            anchor_res = "&resources" if len(types) > 1 else ""
            ops.append(_op("add", f"{base}/args", anchor_args + _list(args, "    ")))
            ops.append(_op("add", f"{base}/resources", anchor_res + _resources(req, "    ")))
        else:
            ops.append(_op("add", f"{base}/args", "*args"))
            ops.append(_op("add", f"{base}/resources", "*resources"))
    return ops


def kustomization(req: JobRequest) -> str:
    kind = KINDS[req.kind]
    resources = [f"../../../../base/jobs/{BASES[req.kind]}"] + (["service.yaml"] if req.kind == "mpi" else [])
    text = (
        f"# {req.name}: {req.nodes} node(s) x {req.gpus} GPU(s)"
        + (f", elastic {req.elastic[0]}..{req.elastic[1]}" if req.elastic else "")
        + f" ({kind}), made by `trainyard new-job`.\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "namespace: ml-training\n"
        "resources:\n" + "".join(f"  - {r}\n" for r in resources)
    )
    if req.image_tag and req.kind != "trainjob":  # a TrainJob names its image in spec.trainer.image
        text += f"images:\n  - name: {TRAINER_IMAGE}\n    newTag: {_q(req.image_tag)}\n"
    text += (
        "patches:\n"
        "  - path: job.yaml\n"
        "    target:\n"
        f"      group: {GROUPS.get(req.kind, 'kubeflow.org')}\n"
        f"      kind: {kind}\n"
        "      name: trainer\n"
    )
    return text


def service(req: JobRequest) -> str:
    return (
        f"# Headless Service giving each worker pod a DNS name (<pod>.{req.name}); the ranks find rank 0 through it.\n"
        "apiVersion: v1\n"
        "kind: Service\n"
        "metadata:\n"
        f"  name: {req.name}\n"
        "spec:\n"
        "  clusterIP: None\n"
        "  publishNotReadyAddresses: true\n"
        "  selector:\n"
        f"    {TRAINING_OPERATOR_JOB_LABEL}: {req.name}\n"
        f"    {REPLICA_TYPE_LABEL}: worker\n"
        "  ports:\n"
        "    - name: rendezvous\n"
        "      port: 29500\n"
        "      targetPort: 29500\n"
        "      protocol: TCP\n"
    )


def create(repo: Repository, req: JobRequest) -> list[Path]:
    """Write the job folder; return the files written (the caller validates the cluster)."""
    folder = check_request(repo, req)
    from trainyard.repo.jobs import preview

    resources = preview.platform_resources(repo, req.cluster)
    if req.kind == "trainjob" and req.fabric is None:  # the runtime of the fabric the cluster applies by default
        req.fabric = preview.load_context(repo, req.cluster, resources).profile
    quotas = [placement.quota_hard(r.doc) for r in resources
              if r.kind == "ResourceQuota" and not r.group and r.namespace == TRAINING_NAMESPACE]  # fmt: skip
    size_pods(req, declared.load(repo, req.cluster), quotas)
    folder.mkdir(parents=True)
    files = {"kustomization.yaml": kustomization(req), "job.yaml": job_patch(req)}
    if req.kind == "mpi":
        files["service.yaml"] = service(req)
    written = []
    for name, text in files.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
