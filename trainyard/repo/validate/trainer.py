"""Checks of the trainer in a job's pods: its arguments, parsed by the trainer's own parser with the
world-size arithmetic (:mod:`trainyard.repo.jobs.trainerargs`), and one image for every replica.

A job whose pods run the trainer image in some replicas and another image (a lookalike such as
``registry.example.com/ml/my-trainer``) in the same container of others is an error naming the
pods: the webhook recognises trainer pods by their image (the repository, compared as
:mod:`trainyard.contract.images` normalises it) and gives only those the fabric, so the job's
ranks would not share one. A job none of whose pods runs a trainer image gets a warning: it may be
meant (an image of its own), but it gets no fabric at all.
"""

from __future__ import annotations

from trainyard.contract.images import parse_image
from trainyard.repo.jobs import preview, trainerargs
from trainyard.repo.model.rendered import as_dict, as_list
from trainyard.repo.validate import ClusterCheck


def is_trainer_image(ctx: ClusterCheck, image: object) -> bool:
    return any((p := ctx.policies.get(n)) is not None and p.is_trainer_image(image) for n in ctx.policies.names)


def check_trainer(ctx: ClusterCheck, jp: preview.JobPreview) -> None:
    check_arguments(ctx, jp)
    check_images(ctx, jp)


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
        ctx.warn(
            jp.job.where(),
            f"no pod of this job runs a trainer image ({', '.join(_repos(ctx))}; it runs {', '.join(images)}): the "
            "webhook gives it no fabric (no NCCL settings, fabric attachment, /dev/shm or RDMA), so it talks over "
            "the pod network; use the trainer image unless that is what you want",
            jp.job.describe(),
        )
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
                f"({ref.repository if ref else 'not a valid image reference'}) in pod(s) {', '.join(pods)}: the "
                "webhook "
                "gives the fabric (NCCL settings, fabric attachment, /dev/shm, IPC_LOCK) only to pods that run a "
                f"trainer image ({', '.join(_repos(ctx))}), so the job's ranks would not share one fabric; run the "
                "trainer image in every replica",
                jp.job.describe(),
            )


def _repos(ctx: ClusterCheck) -> list[str]:
    return sorted({i for n in ctx.policies.names if (p := ctx.policies.get(n)) for i in p.spec.trainer_images})
