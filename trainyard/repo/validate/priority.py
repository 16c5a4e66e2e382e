"""The priority a job asks for: every ``priorityClassName`` in a job folder's objects (the pod
templates of every kind, a TrainJob's runtime patches included) and every
``kueue.x-k8s.io/priority-class`` label must name a class the cluster's facts list
(``jobPriorityClasses``, ``jobWorkloadPriorityClasses`` in clusters/<cluster>/cluster.yaml). The
generated admission policy (:mod:`trainyard.repo.generate.priority`) refuses the same in the cluster,
and validate evaluates it on the previewed pods; this check names the file and the field."""

from __future__ import annotations

from collections.abc import Iterator

from trainyard.repo.generate.priority import KUEUE_LABEL
from trainyard.repo.validate import ClusterCheck

MAX_DEPTH = 64  # deeper than any pod template; a job folder's object is bounded when it is read


def _fields(node: object, path: str, depth: int = 0) -> Iterator[tuple[str, str, object]]:
    """(path, key, value) of every ``priorityClassName`` and every priority-class label below ``node``."""
    if depth > MAX_DEPTH:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            if key == "priorityClassName":
                yield here, "priorityClassName", value
            elif key == "labels" and isinstance(value, dict) and KUEUE_LABEL in value:
                yield f"{here}[{KUEUE_LABEL}]", KUEUE_LABEL, value[KUEUE_LABEL]
            yield from _fields(value, here, depth + 1)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _fields(value, f"{path}[{i}]", depth + 1)


def check_priority(ctx: ClusterCheck) -> None:
    from trainyard.repo.validate.security import job_apps

    if ctx.declared is None:
        return  # the facts' own problem is reported
    allowed = {"priorityClassName": ctx.declared.spec.job_priority_classes,
               KUEUE_LABEL: ctx.declared.spec.job_workload_priority_classes}  # fmt: skip
    fact = {"priorityClassName": "jobPriorityClasses", KUEUE_LABEL: "jobWorkloadPriorityClasses"}
    for ar in job_apps(ctx):
        for r in ar.resources:
            for path, key, value in _fields(r.doc, ""):
                if value in ("", None) or value in allowed[key]:
                    continue
                listed = ", ".join(allowed[key]) or "none"
                ctx.err(
                    r.where(),
                    f"{path}: {value!r} is not a priority class jobs may use on cluster {ctx.cluster} "
                    f"(spec.{fact[key]} in clusters/{ctx.cluster}/cluster.yaml: {listed}); a job at a higher "
                    "priority preempts other tenants' jobs, and at system-node-critical or system-cluster-critical "
                    "the platform's own pods. Remove it, or ask the platform team to list the class",
                    r.describe(),
                )
