"""``trainyard cluster up``: a cluster of the repository, on this machine, with its admission.

1. render the cluster as Argo CD would (trainyard.repo) and read its declared facts;
2. start etcd, kube-apiserver emulating the declared Kubernetes minor, and
   kube-controller-manager (controlplane.py);
3. where the cluster runs the webhook, start it on loopback and register it (webhook.py); where
   it runs by policy, its MutatingAdmissionPolicies are part of the render;
4. sync the render into the API server (sync.py): every object applied, or dry-run where nothing
   here would answer it; a refusal stops ``up`` with kube-apiserver's message at the file and
   line that caused it, and nothing is left running.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainyard.cluster import controlplane, crds, sync
from trainyard.cluster.controlplane import ClusterError, Started
from trainyard.cluster.processes import free_port
from trainyard.cluster.webhook import LocalFabricWebhook, admission_config, runs_webhook
from trainyard.contract.errors import UserError
from trainyard.repo.model import declared
from trainyard.repo.model.repository import Repository
from trainyard.repo.upstream import argocd

Progress = Callable[[str], None]


def render_for(repo: Repository, cluster: str) -> argocd.ClusterRender:
    render = argocd.render_cluster(repo, cluster)
    if render.errors():
        listed = "\n".join(f"  {p}" for p in render.errors())
        raise UserError(f"cluster {cluster} does not render (trainyard validate says more):\n{listed}")
    return render


def up(
    repo: Repository,
    cluster: str,
    folder: Path,
    *,
    port: int = 0,
    progress: Progress = print,
) -> Started:
    t0 = time.monotonic()
    facts = declared.load(repo, cluster)
    render = render_for(repo, cluster)
    folder = folder.resolve()
    hook: LocalFabricWebhook | None = None
    prepare = None
    if runs_webhook(render):
        hook = LocalFabricWebhook(render, folder, free_port(), client_ca=controlplane.Paths(folder).pki.ca)

        def prepare(paths: controlplane.Paths) -> list[str]:
            return [f"--admission-control-config-file={admission_config(folder, hook.port, paths.pki)}"]

    started = controlplane.start(
        folder, cluster, facts.spec.kubernetes_version, port=port, prepare=prepare, progress=progress
    )
    state = started.state
    state.admission = facts.spec.admission
    try:
        if hook is not None:
            state.daemons.append(hook.start())
            state.save(folder)
            progress(f"trainyard webhook (profile {hook.profile}) serving {hook.url}, client certificates required")
        with started.client() as kube:
            report = sync.sync(
                kube,
                repo.root,
                render,
                crds_for=crds.for_application,
                bootstrap_crds=crds.argocd(),
                rewrite=hook.rewrite if hook else None,
                progress=progress,
            )
        if report.refusals:
            listed = "\n".join(f"  {r}" for r in report.refusals)
            raise ClusterError(
                f"kube-apiserver refused {len(report.refusals)} object(s) of cluster {cluster}:\n{listed}"
            )
    except BaseException:
        controlplane.stop(state)
        state.daemons.clear()
        state.save(folder)
        raise
    state.notes = [
        f"{report.crds} CRDs, {report.applied} objects applied, {report.dry_run} dry-run only",
        f"ready in {time.monotonic() - t0:.1f} s",
    ]
    state.save(folder)
    return started
