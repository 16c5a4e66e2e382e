"""Capacity fit: a job that can never run is an error, jobs that cannot all run at once a warning.

- Every pod of a job (as admitted: with what the webhook added and the namespace's LimitRange
  defaults) must fit on one node of the cluster's declared node pools (clusters/<cluster>/cluster.yaml)
  whose labels match its node selector and required node affinity; otherwise it stays Pending for
  ever. A selection no pool matches is named by its labels.
- A whole job must fit in its namespace's ResourceQuota (overlays/<cluster>/platform/namespaces):
  otherwise the quota refuses some of its pods whatever else runs, and a distributed job never
  has all its ranks (a pod that alone exceeds the quota is named by
  :mod:`trainyard.repo.validate.startable`, not again here).
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
    limit_ranges: dict[str, list[dict]] = {}
    for r in ctx.resources:
        if r.kind == "LimitRange" and not r.group:
            limit_ranges.setdefault(r.namespace or "default", []).append(r.doc)
    totals: dict[str, dict[str, Decimal]] = {}
    jobs: dict[str, list[str]] = {}
    for jp in ctx.previews:
        ns = jp.job.namespace or "default"
        pods = [placement.with_defaults(pod.after, limit_ranges.get(ns, [])) for pod in jp.pods]
        check_nodes(ctx, jp, pods)
        usage: dict[str, Decimal] = {}
        for pod in pods:
            placement.add(usage, placement.pod_usage(pod))
        for (qns, name), (quota, hard) in quotas.items():
            if qns != ns:
                continue
            short = placement.over(usage, hard)
            alone = any(placement.over(placement.pod_usage(pod), hard) for pod in pods)
            if short and not alone:
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


def check_nodes(ctx: ClusterCheck, jp: preview.JobPreview, pods: list[dict]) -> None:
    """``pods``: ``jp``'s pods as admitted, with the namespace's LimitRange defaults."""
    if ctx.declared is None:
        return
    seen: set[str] = set()
    for defaulted, pod in zip(pods, jp.pods, strict=True):
        fit = placement.node_fit(defaulted, ctx.declared)
        if fit.pool is not None or fit.short in seen:
            continue
        seen.add(fit.short)
        if fit.unmatched:
            pools = "; ".join(
                f"{p.name}: {', '.join(f'{k}={v}' for k, v in p.labels.items()) or 'no labels'}"
                for p in ctx.declared.spec.node_pools
            )
            ctx.err(
                jp.job.where(),
                f"pod {pod.name} can never be scheduled: {fit.unmatched} (the pools of cluster {ctx.cluster}, "
                f"clusters/{ctx.cluster}/cluster.yaml: {pools}); select labels a pool has, or remove the selection",
                jp.job.describe(),
            )
            continue
        if fit.absent:
            ctx.err(
                jp.job.where(),
                f"pod {pod.name} can never be scheduled: it asks for {fit.short}, and no node pool of cluster "
                f"{ctx.cluster} (clusters/{ctx.cluster}/cluster.yaml) has {', '.join(fit.absent)} at all; remove it "
                "(the fabric adds the RDMA resources the cluster's network needs)",
                jp.job.describe(),
            )
            continue
        ctx.err(
            jp.job.where(),
            f"pod {pod.name} can never be scheduled: it asks for {fit.short}, and no node of cluster {ctx.cluster} "
            f"(clusters/{ctx.cluster}/cluster.yaml) has that much; ask for less per pod (more nodes, fewer GPUs each)",
            jp.job.describe(),
        )
