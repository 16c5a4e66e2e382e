"""trainyard's sync (trainyard/cluster/sync.py) follows the sync order of the render: the root
Application's steps, each Application's objects in gitops-engine's order, Replace=true;
hooks are refused, not applied. A recording client stands in for kube-apiserver."""

from __future__ import annotations

from pathlib import Path

from trainyard.cluster import sync
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import applications, syncorder


class Recorder:
    """What a Kube would be asked, in order: (how, kind, name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def _record(self, how: str, doc: dict) -> dict:
        self.calls.append((how, doc["kind"], doc["metadata"]["name"]))
        return doc

    def create_if_absent(self, doc: dict) -> None:
        self._record("namespace", doc)

    def apply(self, doc: dict, *, manager: str, dry_run: bool = False) -> dict:
        return self._record("server-side", doc)

    def client_side_apply(self, doc: dict, *, dry_run: bool = False) -> dict:
        return self._record("client-side", doc)

    def create(self, doc: dict, *, dry_run: bool = False) -> dict:
        return self._record("create", doc)

    def wait_served(self, docs: list[dict]) -> None:
        pass


def res(kind: str, name: str, api: str = "v1", **annotations: str) -> Resource:
    """An object in namespace ns; ``sync_options="..."`` is argocd.argoproj.io/sync-options."""
    metadata: dict = {"name": name, "namespace": "ns"}
    if annotations:
        metadata["annotations"] = {f"argocd.argoproj.io/{k.replace('_', '-')}": v for k, v in annotations.items()}
    return Resource(doc={"apiVersion": api, "kind": kind, "metadata": metadata}, origin=f"apps/{name}.yaml")


def application(name: str, wave: str, **spec) -> Resource:
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd", "annotations": {"argocd.argoproj.io/sync-wave": wave}},
        "spec": {"source": {"path": f"apps/{name}"}, "destination": {"namespace": "ns"}, **spec},
    }
    return Resource(doc=doc, origin="clusters/t/apps.yaml", app="(bootstrap)")


ARGOCD_CM = Resource(
    doc={
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": "argocd"},
        "data": {syncorder.APP_HEALTH_KEY: "return {status = 'Healthy'}"},
    }
)


def render_of(apps: list[tuple[Resource, list[Resource]]]) -> applications.ClusterRender:
    renders = [applications.AppRender(app=applications.Application(a), resources=list(rs), path="x") for a, rs in apps]
    render = applications.ClusterRender(cluster="t", root=[*(a for a, _ in apps), ARGOCD_CM], apps=renders)
    syncorder.order_cluster(render)
    return render


def test_the_sync_follows_the_root_steps_and_each_applications_order(tmp_path: Path):
    late = application("late", "2", syncPolicy={"syncOptions": ["ServerSideApply=true"]})
    early = application("early", "1")
    render = render_of(
        [
            (late, [res("ConfigMap", "ssa"), res("Service", "svc")]),
            (
                early,
                [
                    res("Deployment", "d", api="apps/v1"),
                    res("ConfigMap", "made", sync_options="Replace=true"),
                    res("ConfigMap", "first", sync_wave="-1"),
                ],
            ),
        ]
    )
    assert render.errors() == []
    kube, lines = Recorder(), []
    report = sync.sync(kube, tmp_path, render, bootstrap_crds=[], progress=lines.append)  # type: ignore[arg-type]
    assert report.refusals == []
    synced = [c for c in kube.calls if c[2] not in ("late", "early", "argocd-cm", "argocd")]
    assert synced == [
        ("client-side", "ConfigMap", "first"),  # wave -1 of early
        ("create", "ConfigMap", "made"),  # Replace=true: created
        ("client-side", "Deployment", "d"),
        ("server-side", "ConfigMap", "ssa"),  # late's ServerSideApply=true
        ("server-side", "Service", "svc"),
    ]
    assert any("step Sync wave 1: applied" in line for line in lines)


def test_a_hook_is_refused_not_applied(tmp_path: Path):
    app = application("mine", "1")
    hook = res("Job", "migrate", api="batch/v1", hook="PreSync")
    render = render_of([(app, [hook, res("ConfigMap", "c")])])
    assert any("Argo CD resource hook" in p.message for p in render.errors())  # what validate reports
    kube = Recorder()
    report = sync.sync(kube, tmp_path, render, bootstrap_crds=[], progress=lambda _: None)  # type: ignore[arg-type]
    (refused,) = report.refusals
    assert refused.resource is hook and "does not run hooks" in refused.message
    assert ("client-side", "ConfigMap", "c") in kube.calls
    assert not any(c[2] == "migrate" for c in kube.calls)


def test_an_objects_own_server_side_option_is_refused():
    app = application("mine", "1", syncPolicy={"syncOptions": ["ServerSideApply=true"]})
    render = render_of([(app, [res("ConfigMap", "c", sync_options="ServerSideApply=false")])])
    (refused,) = render.errors()
    assert "sync-options ServerSideApply=false is not emulated by trainyard's sync" in refused.message
