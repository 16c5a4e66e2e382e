"""``trainyard cluster up``: a cluster of the repository, on this machine, with its admission.

1. render the cluster as Argo CD would (trainyard.repo) and read its declared facts;
2. start etcd, kube-apiserver emulating the declared Kubernetes minor, and
   kube-controller-manager (controlplane.py);
3. where the cluster runs the webhook, start it on loopback and register it (webhook.py); where
   it runs by policy, its MutatingAdmissionPolicies are part of the render;
4. sync the render into the API server (sync.py): every object applied, or dry-run where nothing
   here would answer it; a refusal stops ``up`` with kube-apiserver's message at the file and
   line that caused it, and nothing is left running;
5. with ``argocd``: the repository is first committed to ``DIR/repo.git`` (gitrepo.py) and
   rendered from there, and once synced, Argo CD itself (argocd_daemons.py) takes the cluster over
   from that repository: a push to it is what changes the cluster from then on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from trainyard.cluster import argocd_daemons, controllers, controlplane, crds, gitrepo, sync
from trainyard.cluster.client import ApiError, Kube
from trainyard.cluster.controlplane import ClusterError, Started
from trainyard.cluster.folder import secure_folder
from trainyard.cluster.processes import free_port
from trainyard.cluster.webhook import LocalFabricWebhook, admission_config, runs_webhook
from trainyard.contract.errors import UserError
from trainyard.contract.names import INJECTION_NAMESPACE_LABEL
from trainyard.contract.names import NETWORKS_ANNOTATION as NETWORKS
from trainyard.repo.model import declared, repository
from trainyard.repo.model.rendered import tree_copy
from trainyard.repo.model.repository import Repository
from trainyard.repo.upstream import app_render, applications

Progress = Callable[[str], None]
ARGOCD_SETTLE_S = 240.0  # Argo CD's first pass over every Application takes about a minute on 2 cores


def render_for(repo: Repository, cluster: str) -> applications.ClusterRender:
    render = app_render.render_cluster(repo, cluster)
    if render.errors():
        listed = "\n".join(f"  {p}" for p in render.errors())
        raise UserError(f"cluster {cluster} does not render (trainyard validate says more):\n{listed}")
    return render


CANARY_NAMESPACE = "trainyard-admission-canary"
INJECTION_LABEL = (INJECTION_NAMESPACE_LABEL, "enabled")  # base/webhook, the namespaces' label


def wait_admission_live(kube: Kube, image: str, progress: Progress, timeout: float = 30) -> None:
    """Wait until the fabric admission acts on pods. A webhook configuration or an admission policy
    takes effect once kube-apiserver's informers see it, a moment after it is created; a dry-run
    trainer pod in a namespace the fabric selects shows when it does."""
    key, value = INJECTION_LABEL
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": CANARY_NAMESPACE, "labels": {key: value}},
    }
    kube.create(namespace)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "canary", "namespace": CANARY_NAMESPACE},
        "spec": {"containers": [{"name": "trainer", "image": image}]},
    }
    t0 = time.monotonic()
    try:
        while True:
            try:
                got = kube.create(pod, dry_run=True)
                if NETWORKS in (got["metadata"].get("annotations") or {}):
                    break
            except ApiError as exc:
                if exc.code not in (403, 404, 422):  # no ServiceAccount yet; refused until the fabric is on
                    raise
            if time.monotonic() - t0 > timeout:
                raise ClusterError(f"the fabric admission did not act on a trainer pod within {timeout:g} s")
            time.sleep(0.1)
    finally:
        kube.delete(namespace)
    progress(f"admission live: a trainer pod gets its fabric ({time.monotonic() - t0:.1f} s after it was applied)")


def _trainer_image(repo: Repository) -> str:
    """A trainer image of the repository's fabric profiles (policies/), tagged ``canary``."""
    from webhook.policy import load_policies

    for profile in load_policies(repo.root / "policies").profiles.values():
        for image in sorted(profile.trainer_images):
            return f"{image}:canary"
    raise UserError(f"{repo.rel(repo.root / 'policies')}: no fabric profile names a trainer image")


def up(
    repo: Repository,
    cluster: str,
    folder: Path,
    *,
    port: int = 0,
    run_controllers: bool = True,
    argocd: bool = False,
    leave_out: tuple[str, ...] = (),
    progress: Progress = print,
) -> Started:
    """``leave_out``: paths of the repository (job folders) not committed to ``DIR/repo.git``."""
    t0 = time.monotonic()
    served = None
    if argocd:
        if os.geteuid() != 0:  # found now, not after the sync
            raise UserError(
                "Argo CD's upstream sources listen on port 443 and its repo-server reaches them from a mount "
                "namespace of its own: run as root, or `trainyard cluster up --no-argocd`"
            )
        folder = secure_folder(folder)
        controlplane.check_free(folder, progress)
        served = gitrepo.serve(repo.root, folder, leave_out)
        repo = repository.load(served.checkout)
        progress(f"the repository Argo CD reads: {served.url} (branch {gitrepo.BRANCH}; clone it, commit, push)")
    try:
        facts = declared.load(repo, cluster)
        render = render_for(repo, cluster)
        folder = folder.resolve()
        hook: LocalFabricWebhook | None = None
        prepare = None
        if runs_webhook(render):
            hook = LocalFabricWebhook(render, folder, free_port(), client_ca=controlplane.Paths(folder).pki.ca)

            def prepare(paths: controlplane.Paths, state: controlplane.State) -> list[str]:
                # started first: its Python loads while etcd and kube-apiserver start
                state.daemons.append(hook.spawn())
                return [f"--admission-control-config-file={admission_config(folder, paths.pki)}"]

        # kube-controller-manager is not waited for: the canary pod below needs what it makes
        started = controlplane.start(
            folder,
            cluster,
            facts.spec.kubernetes_version,
            port=port,
            prepare=prepare,
            wait_controllers=False,
            checked=argocd,
            progress=progress,
        )
    except BaseException:
        if served is not None:  # made by this call, before anyone could push to it
            gitrepo.remove(served)
        raise
    state = started.state
    state.admission = facts.spec.admission
    try:
        if hook is not None:
            hook.wait(next(d for d in state.daemons if d.name == "trainyard-webhook"))
            progress(f"trainyard webhook (profile {hook.profile}) serving {hook.url}, client certificates required")
        with started.client() as kube:

            def upstream_app(name: str) -> str | None:
                install = controllers.BY_APP.get(name)
                if install is None or not run_controllers:
                    return None
                t1 = time.monotonic()
                rendered = [tree_copy(r.doc) for r in render.app(name).resources]  # type: ignore[union-attr]
                ran = controllers.start_install(
                    kube, install, rendered, folder, state.server, started.paths.pki.ca, progress=progress
                )
                state.daemons.extend(r.daemon for r in ran)
                state.save(folder)
                for r in ran:
                    controllers.wait_ready(r, kube)
                names = ", ".join(f"{r.controller.binary} (webhooks at {r.webhook_url})" for r in ran)
                return f"started {names} in {time.monotonic() - t1:.1f} s"

            live: list[bool] = []

            def admission_live() -> None:
                wait_admission_live(kube, _trainer_image(repo), progress)
                live.append(True)

            report = sync.sync(
                kube,
                repo.root,
                render,
                bootstrap_crds=crds.before_bootstrap(facts, progress=progress),
                local=hook,
                upstream_app=upstream_app,
                before_jobs=admission_live,
                progress=progress,
            )
            if not live and not report.refusals:  # no job was synced: up returns with admission live
                admission_live()
        if report.refusals:
            listed = "\n".join(f"  {r}" for r in report.refusals)
            raise ClusterError(
                f"kube-apiserver refused {len(report.refusals)} object(s) of cluster {cluster}:\n{listed}"
            )
        if served is not None:
            argocd_daemons.start(started, progress=progress)
            with started.client() as kube:
                argocd_daemons.wait_settled(kube, [ar.name for ar in render.apps], ARGOCD_SETTLE_S, progress)
            gitrepo.install_push_hook(served, started.paths.bin / "kubectl", started.paths.kubeconfig)
            started.served = served
    except BaseException:
        controlplane.stop(state)
        state.daemons.clear()
        state.save(folder)
        if served is not None:  # the push hook is installed last: nobody has pushed to it
            gitrepo.remove(served)
        raise
    state.notes = [
        f"{report.crds} CRDs, {report.applied} objects applied, {report.dry_run} dry-run only",
        f"ready in {time.monotonic() - t0:.1f} s",
    ]
    state.save(folder)
    return started
