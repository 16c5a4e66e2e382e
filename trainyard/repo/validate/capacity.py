"""Capacity fit: a job that can never run is an error, jobs that cannot all run at once a warning.

- Every pod of a job (as admitted: with what the webhook added) must fit on one node of the
  cluster's declared node pools (clusters/<cluster>/cluster.yaml) whose labels match its node
  selector; otherwise it stays Pending for ever.
- A whole job must fit in its namespace's ResourceQuota (overlays/<cluster>/platform/namespaces):
  otherwise the quota refuses some of its pods whatever else runs, and a distributed job never
  has all its ranks.
- All the jobs of a namespace together should fit in its quota; when they do not, some wait (Kueue
  queues TrainJobs; a v1 job's pods are refused until others finish): a warning.
"""

from __future__ import annotations

from decimal import Decimal

from trainyard.repo.jobs import placement, preview
from trainyard.repo.validate import ClusterCheck


def check_capacity(ctx: ClusterCheck) -> None:
    quotas = {
        (r.namespace or "default", r.name): (r, placement.quota_hard(r.doc))
        for r in ctx.resources
        if r.kind == "ResourceQuota" and not r.group
    }
    totals: dict[str, dict[str, Decimal]] = {}
    jobs: dict[str, list[str]] = {}
    for jp in ctx.previews:
        check_nodes(ctx, jp)
        ns = jp.job.namespace or "default"
        usage: dict[str, Decimal] = {}
        for pod in jp.pods:
            placement.add(usage, placement.pod_usage(pod.after))
        for (qns, name), (quota, hard) in quotas.items():
            if qns != ns:
                continue
            short = placement.over(usage, hard)
            if short:
                ctx.err(
                    jp.job.where(),
                    f"the job needs more than ResourceQuota {name} of namespace {ns} allows ({'; '.join(short)}; "
                    f"{quota.where()}): the quota would refuse some of its pods even with nothing else running, so "
                    "it can never run whole; make it smaller",
                    jp.job.describe(),
                )
        placement.add(totals.setdefault(ns, {}), usage)
        jobs.setdefault(ns, []).append(jp.job.name)
    for (ns, name), (quota, hard) in quotas.items():
        short = placement.over(totals.get(ns, {}), hard)
        if short and len(jobs.get(ns, [])) > 1:
            ctx.warn(
                quota.where(),
                f"the {len(jobs[ns])} jobs of namespace {ns} ({', '.join(sorted(jobs[ns]))}) together need more than "
                f"ResourceQuota {name} allows ({'; '.join(short)}): they cannot all run at once; Kueue queues the "
                "TrainJobs, and the pods of v1 jobs are refused until others finish",
                quota.describe(),
            )


def check_nodes(ctx: ClusterCheck, jp: preview.JobPreview) -> None:
    if ctx.declared is None:
        return
    seen: set[str] = set()
    for pod in jp.pods:
        fit = placement.node_fit(pod.after, ctx.declared)
        if fit.pool is not None or fit.short in seen:
            continue
        seen.add(fit.short)
        ctx.err(
            jp.job.where(),
            f"pod {pod.name} can never be scheduled: it asks for {fit.short}, and no node of cluster {ctx.cluster} "
            f"(clusters/{ctx.cluster}/cluster.yaml) has that much; ask for less per pod (more nodes, fewer GPUs each)",
            jp.job.describe(),
        )
