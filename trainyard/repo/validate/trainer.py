"""Checks of the trainer in a job's pods: its arguments, parsed by the trainer's own parser with the
world-size arithmetic (:mod:`trainyard.repo.jobs.trainerargs`), and one image for every replica.

A job whose pods run the trainer image in some replicas and another image (a lookalike such as
``registry.example.com/ml/my-trainer``) in the same container of others is an error naming the
pods: the webhook recognises trainer pods by their image (the repository, compared as
:mod:`trainyard.contract.images` normalises it) and gives only those the fabric, so the job's
ranks would not share one. A job none of whose pods runs a trainer image gets a warning: it may be
meant (an image of its own), but it gets no fabric at all.

The metrics port of every container that runs the trainer (:func:`check_metrics_port`): the
trainer serves Prometheus on the port ``ENV_METRICS_PORT`` names (``DEFAULT_METRICS_PORT`` when
unset) and the PodMonitor scrapes the pod port named ``METRICS_PORT_NAME``
(:mod:`trainyard.contract.metrics`). A port of another name on that number, a metrics port of
another number, a value of the env that is no port, or a port Kubernetes would refuse is an
error; no metrics port, or metrics turned off, is a warning (the job trains, unscraped). The pods
are judged as their controllers and admission make them, with or without a fabric: a trainer the
webhook never saw still serves metrics (its ``fabric`` label is ``NO_FABRIC``).
"""

from __future__ import annotations

import re

from trainyard.contract.images import parse_image
from trainyard.contract.metrics import DEFAULT_METRICS_PORT, ENV_METRICS_PORT, METRICS_PORT_NAME, metrics_port
from trainyard.repo.generate import metrics_policy
from trainyard.repo.jobs import preview, trainerargs
from trainyard.repo.model.rendered import as_dict, as_list
from trainyard.repo.upstream.training_operator import REPLICA_TYPE_LABEL
from trainyard.repo.validate import ClusterCheck


def is_trainer_image(ctx: ClusterCheck, image: object) -> bool:
    return any((p := ctx.policies.get(n)) is not None and p.is_trainer_image(image) for n in ctx.policies.names)


def check_trainer(ctx: ClusterCheck, jp: preview.JobPreview) -> None:
    check_arguments(ctx, jp)
    check_images(ctx, jp)
    check_metrics_port(ctx, jp)


def check_arguments(ctx: ClusterCheck, jp: preview.JobPreview) -> None:
    """Each distinct finding once per job, naming the first pod and how many more share it."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for pod in jp.pods:
        spec = as_dict(pod.after.get("spec"))
        for group in ("initContainers", "containers"):
            for c in as_list(spec.get(group)):
                c = as_dict(c)
                result = trainerargs.check(c, trainer_image=is_trainer_image(ctx, c.get("image")),
                                           replicas=len(jp.pods))  # fmt: skip
                for severity, messages in (("error", result.errors), ("warning", result.warnings)):
                    for m in messages:
                        found.setdefault((severity, str(c.get("name")), m), []).append(pod.name)
    _report(ctx, jp, found)


def _report(ctx: ClusterCheck, jp: preview.JobPreview, found: dict[tuple[str, str, str], list[str]]) -> None:
    for (severity, container, message), pods in found.items():
        more = f" (and {len(pods) - 1} more pod(s))" if len(pods) > 1 else ""
        text = f"pod {pods[0]}{more}, container {container}: {message}"
        (ctx.err if severity == "error" else ctx.warn)(jp.job.where(), text, jp.job.describe())


def check_images(ctx: ClusterCheck, jp: preview.JobPreview) -> None:
    trainer: dict[str, dict[str, list[str]]] = {}  # container name -> image -> pods
    other: dict[str, dict[str, list[str]]] = {}
    for pod in jp.pods:
        for c in as_list(as_dict(pod.after.get("spec")).get("containers")):
            c = as_dict(c)
            image = str(c.get("image", ""))
            side = trainer if is_trainer_image(ctx, image) else other
            side.setdefault(str(c.get("name")), {}).setdefault(image, []).append(pod.name)
    if not trainer and jp.pods:
        images = sorted({i for by_image in other.values() for i in by_image})
        ctx.warn(jp.job.where(), foreign_image_message(images, _repos(ctx)), jp.job.describe())
        return
    for name, images in other.items():
        if name not in trainer:
            continue
        with_trainer = sorted({p for pods in trainer[name].values() for p in pods})
        for image, pods in sorted(images.items()):
            ref = parse_image(image)
            ctx.err(
                jp.job.where(),
                f"container {name} runs the trainer image in pod(s) {', '.join(with_trainer)} but {image} "
                f"({ref.repository if ref else 'not a valid image reference'}) in pod(s) {', '.join(pods)}: admission "
                "(the webhook, or the MutatingAdmissionPolicies) gives the fabric (NCCL settings, fabric "
                "attachment, /dev/shm, IPC_LOCK) only to pods that run a "
                f"trainer image ({', '.join(_repos(ctx))}), so the job's ranks would not share one fabric; run the "
                "trainer image in every replica",
                jp.job.describe(),
            )


def foreign_image_message(images: list[str], repositories: list[str]) -> str:
    """What a job none of whose pods runs a trainer image loses, and the two ways to opt in
    (docs/bring-your-job.md). A warning, not an error: such a job runs, over the pod network."""
    return (
        f"no pod of this job runs a trainer image (it runs {', '.join(images)}; the trainer images are the "
        f"repositories {', '.join(repositories)}), so admission gives it no fabric. It loses: the fabric's NCCL "
        "env (NCCL_SOCKET_IFNAME and the rest), the fabric attachment net1 (it talks over the pod network), "
        "IPC_LOCK, a memory-backed /dev/shm sized to its GPUs, the RDMA resources, the fabric's tolerations and "
        "topology, and trainyard launch's preflight, NCCL transport check and metrics. To have them, run your "
        "command on the trainer image (trainyard new-job --command '...' writes `trainyard launch --run -- ...`), "
        "or build your image FROM the trainer image and ask the platform to list its repository in the "
        "trainerImages of every policies/*.yaml (docs/bring-your-job.md)"
    )


def _repos(ctx: ClusterCheck) -> list[str]:
    return sorted({i for n in ctx.policies.names if (p := ctx.policies.get(n)) for i in p.spec.trainer_images})


# ---------------------------------------------------------------------------------------------
# The metrics port

# A container port's name is an IANA_SVC_NAME: at most 15 characters of a-z, 0-9 and '-', with a
# letter, no '-' at either end nor two in a row; its number 1-65535
# (kubernetes/apimachinery: pkg/util/validation/validation.go IsValidPortName, IsValidPortNum).
_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?")
_SHOWN = 40  # characters of a hostile value quoted in a message
PORT_SHAPE = "{name, containerPort, protocol}"


def port_name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"the name {_show(name)} is not a string"
    if not _PORT_NAME.fullmatch(name) or "--" in name or not re.search(r"[a-z]", name):
        return (f"the name {_show(name)} is not a port name Kubernetes accepts (at most 15 characters of a-z, 0-9 "
                "and '-', with a letter, no '-' at either end or twice in a row)")  # fmt: skip
    return None


def port_shape_problems(c: dict) -> list[str]:
    """What makes ``c.ports`` unreadable (not a list, an entry not a mapping, a containerPort not an
    integer): the API server refuses the object by its schema, so its controllers never run."""
    ports = c.get("ports")
    if ports is None:
        return []
    if not isinstance(ports, list):
        return [f"ports is {type(ports).__name__} {_show(ports)}, not a list of ports {PORT_SHAPE}"]
    out = []
    for i, p in enumerate(ports):
        if not isinstance(p, dict):
            out.append(f"ports[{i}] is {type(p).__name__} {_show(p)}, not a port {PORT_SHAPE}")
        elif "containerPort" in p and (not isinstance(p["containerPort"], int) or isinstance(p["containerPort"], bool)):
            out.append(f"ports[{i}].containerPort {_show(p['containerPort'])} is not an integer")
    return out


def port_number(value: object) -> int | None:
    """``value`` as a container port number, or None when Kubernetes would refuse it."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
        return value
    return None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def serves_metrics(ctx: ClusterCheck, jp: preview.JobPreview, pod: dict, c: dict) -> bool:
    """Whether container ``c`` of ``pod`` runs a trainer process that serves metrics: it runs
    ``trainyard launch``/``train`` itself (its own command, or the trainer image's entrypoint), or
    it is an MPI worker's trainer-image container, where mpirun starts the ranks through
    ``kubectl exec`` (the operator makes the worker ``sleep``). The MPI launcher's ``mpirun`` runs no
    rank itself (kubeflow/trainer@v1.9.4: pkg/controller.v1/mpi/mpijob_controller.go)."""
    trainer_image = is_trainer_image(ctx, c.get("image"))
    argv = trainerargs.command_line(c, trainer_image)
    found = trainerargs.find(argv) if argv else None
    if found is not None:
        return found.ranks is None
    labels = as_dict(as_dict(pod.get("metadata")).get("labels"))
    return trainer_image and jp.job.kind == "MPIJob" and labels.get(REPLICA_TYPE_LABEL) == "worker"


def check_metrics_port(ctx: ClusterCheck, jp: preview.JobPreview) -> None:
    """Each finding once per job, naming the first pod and how many more share it."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for pod in jp.pods:
        spec = as_dict(pod.after.get("spec"))
        running = [as_dict(c) for c in as_list(spec.get("containers"))]
        # init containers with restartPolicy Always are sidecars: they run beside the trainer
        running += [as_dict(c) for c in as_list(spec.get("initContainers"))
                    if as_dict(c).get("restartPolicy") == "Always"]  # fmt: skip
        for c in running:
            if not serves_metrics(ctx, jp, pod.after, c):
                continue
            others = [o for o in running if o is not c]
            for severity, message in metrics_findings(c, others):
                found.setdefault((severity, _name(c), message), []).append(pod.name)
    _report(ctx, jp, found)


class _Said:
    """What one container's check found: (severity, message) in order."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def err(self, message: str) -> None:
        self.items.append(("error", message))

    def warn(self, message: str) -> None:
        self.items.append(("warning", message))


REFUSED = "Kubernetes refuses the pod"


def metrics_findings(c: dict, others: list[dict] | None = None) -> list[tuple[str, str]]:
    """(severity, message) about the metrics port of trainer container ``c``; ``others``: the
    pod's other running containers, which share its network namespace (and so its ports)."""
    said = _Said()
    port, off = _env_port(c, said)
    raw = c.get("ports")
    if raw is not None and not isinstance(raw, list):
        said.err(f"ports is {type(raw).__name__} {_show(raw)}, not a list of ports {PORT_SHAPE}; {REFUSED}")
        raw = []
    named: list[tuple[int, int | None, dict]] = []  # the ports named METRICS_PORT_NAME: (index, number, port)
    taken: list[tuple[str, int, str]] = []  # (where, number, name) of every other port of the pod
    for i, p in enumerate(raw or []):
        if not isinstance(p, dict):
            said.err(f"ports[{i}] is {type(p).__name__} {_show(p)}, not a port {PORT_SHAPE}; {REFUSED}")
            continue
        name = p.get("name")
        if name is not None and (problem := port_name_problem(name)):
            said.err(f"ports[{i}]: {problem}; {REFUSED}")
            name = None
        number = port_number(p.get("containerPort"))
        if number is None:
            shown = _show(p.get("containerPort"))
            said.err(f"ports[{i}].containerPort {shown} is not a port number (an integer 1-65535); {REFUSED}")
        if name == METRICS_PORT_NAME:
            named.append((i, number, p))
        elif number is not None:
            taken.append((f"ports[{i}]", number, name or "unnamed"))
    for o in others or []:
        for i, p in enumerate(as_list(o.get("ports"))):
            if (number := port_number(as_dict(p).get("containerPort"))) is not None:
                name = as_dict(p).get("name")
                taken.append((f"container {_name(o)} ports[{i}]", number, name if isinstance(name, str) else "unnamed"))
    if len(named) > 1:
        which = ", ".join(f"ports[{i}]" for i, _, _ in named)
        said.err(f"{which} are all named {METRICS_PORT_NAME}: a container's port names must differ; {REFUSED}")
    if off is not None:
        said.warn(
            f"not scraped: {ENV_METRICS_PORT}={_show(off)} turns the trainer's metrics off; remove it (the trainer "
            f"then serves on {DEFAULT_METRICS_PORT}) and add the port {_wanted(DEFAULT_METRICS_PORT)} to scrape the job"
        )
    if port is None:
        return said.items
    if port != DEFAULT_METRICS_PORT:
        said.warn(
            f"the trainer serves metrics on {port} ({_source(c, port)}), outside the NetworkPolicy "
            f"{metrics_policy.NAME}, which keeps only {DEFAULT_METRICS_PORT} to the "
            f"{metrics_policy.MONITORING_NAMESPACE} namespace: any pod of the cluster "
            f"can reach port {port}; keep the metrics on {DEFAULT_METRICS_PORT}"
        )
    for where, number, name in taken:
        if number == port:
            said.err(
                f"{where} ({_show(name)[1:-1]}) is containerPort {port}, the port the trainer serves its metrics on "
                f"({_source(c, port)}): the two would clash; give that port another number, or move the metrics "
                f"({ENV_METRICS_PORT} and the port named {METRICS_PORT_NAME}) to a free one"
            )
    if not named:
        said.warn(
            f"not scraped: the trainer serves metrics on {port} ({_source(c, port)}) but the container declares no "
            f"port named {METRICS_PORT_NAME}, the one the PodMonitor scrapes; add the port {_wanted(port)} (the "
            "runtimes and the v1 job bases declare it)"
        )
    for i, number, p in named:
        if number is not None and number != port:
            said.err(
                f"ports[{i}] ({METRICS_PORT_NAME}) is containerPort {number} but the trainer serves on {port} "
                f"({_source(c, port)}): Prometheus would scrape a closed port; make them equal"
            )
        protocol = p.get("protocol", "TCP")
        if protocol != "TCP":
            said.err(f"ports[{i}] ({METRICS_PORT_NAME}) has protocol {_show(protocol)}: Prometheus scrapes over TCP")
    return said.items


def _wanted(port: int) -> str:
    return f"{{name: {METRICS_PORT_NAME}, containerPort: {port}, protocol: TCP}}"


def _name(c: dict) -> str:
    name = c.get("name")
    return name if isinstance(name, str) and len(name) <= 63 else _show(name)


def _source(c: dict, port: int) -> str:
    return f"{ENV_METRICS_PORT}={port}" if _env_value(c) not in (None, "") else f"{ENV_METRICS_PORT} unset: the default"


def _env_value(c: dict) -> object:
    """The value of ``ENV_METRICS_PORT`` in ``c``'s env (the last entry of that name wins, as the
    kubelet builds the environment): None when unset, ``...`` when it comes from ``valueFrom``."""
    value: object = None
    for e in as_list(c.get("env")):
        if isinstance(e, dict) and e.get("name") == ENV_METRICS_PORT:
            value = ... if "valueFrom" in e else e.get("value")
    return value


def _env_port(c: dict, said: _Said) -> tuple[int | None, object]:
    """(the port the trainer serves on, None when off or unknown; the value that turned it off)."""
    value = _env_value(c)
    if value is ...:  # from a ConfigMap, a Secret or a field: known only in the running pod
        return None, None
    if value is not None and not isinstance(value, str):
        said.err(f"env {ENV_METRICS_PORT}: the value {_show(value)} is not a string; quote it; {REFUSED}")
        return None, None
    try:
        port = metrics_port(value)
    except ValueError as exc:
        said.err(f"env {exc}: the trainer would serve no metrics")
        return None, None
    return port, (value if port is None else None)
