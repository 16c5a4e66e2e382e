"""``trainyard new-job``: scaffold overlays/<cluster>/jobs/<name>/ from a job base.

The folder holds a kustomization that takes base/jobs/<kind> and a JSON patch (job.yaml) with
what is the job's own: its name, its size, the trainer's arguments and the resources of a pod.
Nothing about the fabric: the webhook adds that at admission. The default kind is a TrainJob
(Kubeflow Trainer v2) on the cluster's runtime ``trainyard-<fabric>`` (the fabric the cluster's
webhook applies by default); ``--kind pytorch|mpi|tf`` writes a v1 job for the legacy operator.
The trainer's metrics port comes with the runtime or the base, so no patch here touches ports
(``trainyard validate`` checks them in the pods).

Bringing one's own code (docs/bring-your-job.md): ``--command 'python train.py ...'`` (split as a
POSIX shell splits words; words after ``--`` are appended) runs that command instead of
trainyard's loop, and ``--image REF`` (a full reference, a digest or a fixed release tag) runs
another image. On an image that carries the trainer contract (the shared trainer image, or one
built FROM it whose repository the platform lists in the profiles' trainerImages) the command goes
to ``trainyard launch --run -- COMMAND``, with the fabric, preflight, the NCCL transport check and
launch's metrics; on any other image it is the container's command and the job gets no fabric
(validate says what it loses). Either way the job's checkpoint folder is in the container's env as
``TRAINYARD_CHECKPOINT_DIR``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from trainer import command, options
from trainyard.contract.errors import UserError
from trainyard.contract.images import FLOATING_FIX, floating, parse_image
from trainyard.contract.k8s import is_dns1035_label
from trainyard.contract.names import TRAINER_REPOSITORY, TRAINING_OPERATOR_JOB_LABEL
from trainyard.repo.generate import runtimes
from trainyard.repo.generate.limits import GPU
from trainyard.repo.jobs import placement
from trainyard.repo.model import declared
from trainyard.repo.model.declared import ClusterFacts
from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE
from trainyard.repo.model.repository import OVERLAYS, POLICIES, Repository
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
    image: str | None = None  # a full reference (--image); None: the base's trainer image
    command: list[str] | None = None  # the user's own command (--command); None: trainyard's loop
    trainer_image: bool = True  # image carries the trainer contract (:func:`create` decides it from policies/)


MAX_COMMAND = 65536  # characters of --command: a command line, not a script; longer settings go in a file
SHELL_OPERATORS = frozenset({";", "&&", "||", "|", "&", ">", ">>", "<", "<<", "2>", "2>&1", "&>", "(", ")", "`"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _shown(text: str, most: int = 60) -> str:
    shown = repr(text)
    return shown if len(shown) <= most else shown[: most - 4] + "...'"


def parse_command(text: str, extra: list[str] | None = None) -> list[str]:
    """``--command TEXT`` split into words as a POSIX shell splits them (quotes, backslashes), with
    ``extra`` (the words after ``--``) appended. The words are run as they are, without a shell."""
    where = f"--command {_shown(text)}"
    if len(text) > MAX_COMMAND:
        raise UserError(
            f"--command is {len(text)} characters long (at most {MAX_COMMAND}): put long settings in a file your "
            "command reads"
        )
    if "\x00" in text:
        raise UserError(f"{where}: contains a NUL byte, which no program can receive")
    try:
        words = shlex.split(text, posix=True)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise UserError(
            f"{where}: {str(exc).lower()}; it is split into words as a POSIX shell would: close the quote, or "
            "give the arguments after -- (each one word, no quoting)"
        ) from None
    words += list(extra or [])
    if not words:
        raise UserError("--command is empty: give the command that trains, e.g. --command 'python train.py --epochs 3'")
    operator = next((w for w in words if w in SHELL_OPERATORS), None)
    if operator is not None:
        raise UserError(
            f"{where}: {operator!r} is shell syntax, but the command runs without a shell (each word is one "
            "argument); for a shell write --command \"bash -c '...'\", or put the steps in a script"
        )
    if _ASSIGNMENT.match(words[0]):
        raise UserError(
            f"{where}: {_shown(words[0])} sets a variable, which only a shell does; set it in the job's env "
            '(job.yaml), or write --command "env NAME=VALUE python ..."'
        )
    try:
        command.check_words(words)
    except UserError as exc:
        raise UserError(f"{where}: {str(exc).removeprefix('trainyard launch --run: ')}") from None
    return words


def check_image(image: str) -> None:
    """A full reference that names one build: the one tag rule of validate (images.floating)."""
    if len(image) > 512 or parse_image(image) is None:
        raise UserError(
            f"--image {_shown(image)} is not an image reference (registry/repository:tag or @sha256:...); give "
            "the full reference, e.g. registry.example.com/teams/llm-finetune:v1.2.0"
        )
    why = floating(image)
    if why is not None:
        raise UserError(f"--image {image} {why}: {FLOATING_FIX}")


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
    if req.image_tag is not None:  # the one image-tag rule, on the reference the tag makes
        why = floating(f"{TRAINER_IMAGE}:{req.image_tag}") if isinstance(req.image_tag, str) else "is no tag"
        if why is not None:
            shown = repr(req.image_tag[:60]) if isinstance(req.image_tag, str) else "?"
            raise UserError(f"--image-tag {shown}: {TRAINER_IMAGE}:<tag> {why}; {FLOATING_FIX}")
    if req.image is not None:
        if req.image_tag is not None:
            raise UserError("--image and --image-tag: give one (--image is the full reference, tag included)")
        check_image(req.image)
    if not req.trainer_image:
        if req.command is None:
            raise UserError(
                f"--image {req.image}: not a trainer image (its repository is in no policies/*.yaml trainerImages), "
                "so trainyard's loop is not in it; give the command that trains with --command"
            )
        if req.kind == "mpi":
            raise UserError(
                f"--kind mpi --image {req.image}: the MPI launcher runs mpirun in the trainer image's contract; run "
                "an MPI job on the trainer image (or one built FROM it that the platform declares)"
            )
    elif req.command is not None:
        try:
            command.program(req.command)  # what launch --run will refuse in the pod, refused now
        except UserError as exc:
            raise UserError(f"--command: {str(exc).removeprefix('trainyard launch --run: ')}") from None
    folder = repo.root / OVERLAYS / req.cluster / "jobs" / req.name
    if folder.exists():
        raise UserError(f"{repo.rel(folder)} already exists; pick another name or edit that folder")
    return folder


def _q(value: str) -> str:
    return json.dumps(value)


def _list(items: list[str], indent: str) -> str:
    return "".join(f"\n{indent}- {_q(i)}" for i in items)


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
        run_args, run_command = _program(req)
        trainer = f"\n    numNodes: {req.nodes}\n    numProcPerNode: {procs}"
        if run_command is not None:
            trainer += f"\n    command:{_list(run_command, '      ')}"
        if run_args is not None:
            trainer += f"\n    args:{_list(run_args, '      ')}"
        if req.command is not None:
            trainer += f"\n    env:\n      - name: {command.ENV_CHECKPOINT_DIR}"
            trainer += f"\n        value: {_q(checkpoint_dir(req))}"
        trainer += f"\n    resourcesPerNode:{_resources(req, '      ')}"
        if req.image:
            trainer += f"\n    image: {_q(req.image)}"
        elif req.image_tag:
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
        ops += _container_ops(specs, types, req)
    elif req.kind == "tf":
        specs = "/spec/tfReplicaSpecs"
        if req.nodes == 1:
            ops.append(_op("remove", f"{specs}/Worker"))
            types = ["Chief"]
        else:
            ops.append(_op("replace", f"{specs}/Worker/replicas", str(req.nodes - 1)))
            types = ["Chief", "Worker"]
        ops += _container_ops(specs, types, req)
    else:
        specs = "/spec/mpiReplicaSpecs"
        ranks = req.nodes * procs
        ranks_env = (
            "RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE "
            f"MASTER_ADDR={req.name}-worker-0.{req.name} MASTER_PORT=29500 "
        )
        if req.command is None:
            script = ranks_env + "exec python -m trainer train " + shlex.join(args)
        else:  # each rank runs the user's command itself: mpirun starts the ranks, not torchrun
            folder = f"{command.ENV_CHECKPOINT_DIR}={shlex.quote(checkpoint_dir(req))} "
            script = ranks_env + folder + "exec " + shlex.join(req.command)
        ops.append(_op("replace", "/spec/slotsPerWorker", str(procs)))
        ops.append(_op("replace", f"{specs}/Worker/replicas", str(req.nodes)))
        launcher = ["-np", str(ranks), "--bind-to", "none", "--map-by", "slot", "sh", "-c", script]
        ops.append(_op("add", f"{specs}/Launcher/template/spec/containers/0/args", _list(launcher, "    ")))
        ops.append(_op("add", f"{specs}/Worker/template/spec/subdomain", req.name))
        ops.append(_op("add", f"{specs}/Worker/template/spec/containers/0/resources", _resources(req, "    ")))
        if req.image:
            for rtype in ("Launcher", "Worker"):
                ops.append(_op("replace", f"{specs}/{rtype}/template/spec/containers/0/image", _q(req.image)))
    return head + "".join(ops)


def checkpoint_dir(req: JobRequest) -> str:
    return f"/checkpoints/{req.name}"  # on the checkpoints volume of the runtimes and the job bases


def _env_entry(req: JobRequest, indent: str) -> str:
    return f"\n{indent}name: {command.ENV_CHECKPOINT_DIR}\n{indent}value: {_q(checkpoint_dir(req))}"


def _program(req: JobRequest) -> tuple[list[str] | None, list[str] | None]:
    """(the container's args, its command; None: the base's) for what the job runs."""
    if req.command is None:
        return ["--", *trainer_args(req)], None
    if req.trainer_image:  # the image's entrypoint (the base's command) is trainyard launch
        return ["--run", "--", *req.command], None
    return None, list(req.command)  # no trainyard in the image: the command is the container's


def _container_ops(specs: str, types: list[str], req: JobRequest) -> list[str]:
    """The v1 replicas' container: each replica type gets the same fields (YAML anchors on the first)."""
    run_args, run_command = _program(req)
    fields: list[tuple[str, str, str]] = []  # (op, path under the container, value)
    if run_command is not None:
        fields.append(("replace", "command", _list(run_command, "    ")))
    if run_args is not None:
        fields.append(("add", "args", _list(run_args, "    ")))
    fields.append(("add", "resources", _resources(req, "    ")))
    if req.command is not None:
        fields.append(("add", "env/-", _env_entry(req, "    ")))
    if req.image:
        fields.append(("replace", "image", _q(req.image)))
    ops = []
    for i, rtype in enumerate(types):
        base = f"{specs}/{rtype}/template/spec/containers/0"
        for op, path, value in fields:
            anchor = path.split("/")[0]
            if i == 0:
                mark = (f"&{anchor}" + ("" if value.startswith("\n") else " ")) if len(types) > 1 else ""
                ops.append(_op(op, f"{base}/{path}", mark + value))
            else:
                ops.append(_op(op, f"{base}/{path}", f"*{anchor}"))
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


def is_trainer_image(repo: Repository, image: str) -> bool:
    """Whether ``image`` carries the trainer contract: its repository is in the profiles' trainerImages
    (the one identity rule, as admission decides it)."""
    from webhook.policy import load_policies

    policies = load_policies(repo.root / POLICIES)
    return any((p := policies.get(n)) is not None and p.is_trainer_image(image) for n in policies.names)


def create(repo: Repository, req: JobRequest) -> list[Path]:
    """Write the job folder; return the files written (the caller validates the cluster)."""
    if req.image is not None and parse_image(req.image) is not None:
        req.trainer_image = is_trainer_image(repo, req.image)
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
