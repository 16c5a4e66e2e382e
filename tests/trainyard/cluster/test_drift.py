"""Argo CD's diff (trainyard/repo/upstream/diffing.py) on the dev cluster the test run already has up:
synced as Argo CD syncs it, with Kueue, Kubeflow Trainer, JobSet and the Training Operator running
and writing (their webhook CAs and certificates, Kueue's suspension and runtime patch of the
TrainJob, Trainer's stamps), every object read back from kube-apiserver shows no drift under its
Application's ignoreDifferences and sync options; a field changed outside them does.

The desired object is the target Argo CD compares: the render with the Application's tracking id
(controller/state.go NormalizeTargetObjects), which the local sync writes as Argo CD does on what it
applies (trainyard/cluster/sync.py tracked); the upstream releases' objects, which controllers.py
installs, and the CRDs, synced before the bootstrap, are compared without it on both sides. What
the local cluster applies differently from Argo CD, by design, is put into the desired object
before the comparison, and nothing else: the release webhooks and the trainyard webhook answer at
a loopback URL instead of their Service (controllers.py, webhook.py rewrite; the cert-manager
annotation goes with the trainyard webhook's Service), and so do Kueue's and JobSet's conversion
webhooks. Their caBundle is given the placeholder upstream manifests carry (``Cg==``), so the
rotators' own CA is what the ignore rules must hide. Objects the local cluster does not create
(the Deployments and APIServices of the releases it runs as processes, the releases it does not
run at all but for their CRDs) are not compared.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.trainyard.cluster.conftest import REPO_ROOT
from trainyard.cluster import controllers, sync
from trainyard.cluster.client import ApiError
from trainyard.cluster.up import render_for
from trainyard.repo.model import repository
from trainyard.repo.upstream import diffing, syncorder

pytestmark = pytest.mark.cluster

PLACEHOLDER_CA = "Cg=="  # what Trainer's manifests write, a newline in base64
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _as_applied_locally(desired: dict, live: dict, app, upstream: bool) -> dict:
    out = copy.deepcopy(desired)
    if not upstream and out["kind"] != "CustomResourceDefinition":
        out = sync.tracked(out, app)
    if out["kind"] in WEBHOOK_KINDS:
        by_name = {h["name"]: h for h in live.get("webhooks") or []}
        for hook in out.get("webhooks") or []:
            hook["clientConfig"] = {"url": by_name[hook["name"]]["clientConfig"]["url"], "caBundle": PLACEHOLDER_CA}
        (out["metadata"].get("annotations") or {}).pop("cert-manager.io/inject-ca-from", None)
    if out["kind"] == "CustomResourceDefinition":
        webhook = (out["spec"].get("conversion") or {}).get("webhook") or {}
        if (webhook.get("clientConfig") or {}).get("service"):
            webhook["clientConfig"] = copy.deepcopy(live["spec"]["conversion"]["webhook"]["clientConfig"])
    return out


def _not_created_here(app: str, kind: str, upstream: bool) -> bool:
    if app in controllers.BY_APP:
        return kind in controllers.SKIPPED  # run as processes
    return upstream and kind != "CustomResourceDefinition"  # a release not run here: its CRDs only


@pytest.fixture(scope="module")
def dev(clusters):
    started = clusters["dev"]
    render = render_for(repository.load(REPO_ROOT), "dev")
    argocd_cm = next(r.doc for r in render.resources() if r.kind == "ConfigMap" and r.name == "argocd-cm")
    return started, render, argocd_cm


def _compared(kube, render, argocd_cm, settings_for=None):
    """(drift by object, objects compared, objects not created here) for every Application."""
    drift, compared, absent = {}, 0, []
    root = next((ar for ar in render.apps if ar.self_reference), None)
    groups = [(ar.app, ar.resources, bool(ar.upstream), ar.name) for ar in render.apps if not ar.self_reference]
    if root is not None:  # the root Application's objects are the bootstrap's
        groups.append((root.app, render.root, False, root.name))
    for app, resources, upstream, name in groups:
        settings = (settings_for or diffing.Settings.of)(app.resource.doc, argocd_cm)
        for r in resources:
            if syncorder.resource_is_hook(r):
                continue
            try:
                live = kube.get(kube.path(r.doc))
            except ApiError as exc:
                if exc.code == 404 and _not_created_here(name, r.kind, upstream):
                    absent.append(r.describe())
                    continue
                raise
            got = diffing.diff(settings, _as_applied_locally(r.doc, live, app, upstream), live)
            compared += 1
            if got.paths:
                drift[f"{name}: {r.describe()}"] = got.paths
    return drift, compared, absent


def test_no_object_of_any_application_drifts_after_the_controllers_wrote(dev):
    started, render, argocd_cm = dev
    with started.client() as kube:
        job = kube.get("/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml-training/trainjobs/smoke-ddp")
        managers = {p.get("manager") for p in job["spec"].get("runtimePatches") or []}
        # what the ignore rules of the job Applications are for is there to be hidden
        assert "kueue.x-k8s.io/manager" in managers, job["spec"]
        drift, compared, absent = _compared(kube, render, argocd_cm)
    assert drift == {}
    assert compared > 150
    assert not any("TrainJob" in a or "PyTorchJob" in a for a in absent), absent


def test_without_the_ignore_rules_the_controllers_writes_are_drift(dev):
    """The same comparison with every ignoreDifferences entry removed: the CA the rotators write
    over the manifests' placeholder shows, and their certificates, and nothing else. What Kueue and
    Trainer write into the TrainJob are fields its folder does not set, no drift in a three-way diff
    with or without the rules; the rules keep a RespectIgnoreDifferences sync from writing them back."""
    started, render, argocd_cm = dev

    def without_rules(app_doc, cm):
        bare = copy.deepcopy(app_doc)
        bare["spec"].pop("ignoreDifferences", None)
        return diffing.Settings.of(bare, cm)

    with started.client() as kube:
        drift, _, _ = _compared(kube, render, argocd_cm, without_rules)
    hooks = [k for k, paths in drift.items() if all(p.endswith("/clientConfig/caBundle") for p in paths)]
    assert any("kueue-mutating-webhook-configuration" in k for k in hooks), drift
    assert any("defaulter.trainer.kubeflow.org" in k for k in hooks), drift
    # and the certificates of the Secrets the rotators keep (installed here with the pair they keep,
    # by the apply that installs the release: controllers.py), and nothing else
    secrets = {f"{i.app}: Secret {i.namespace}/{c.secret}" for i in controllers.INSTALLS for c in i.controllers}
    assert set(drift) - set(hooks) == secrets, {k: v for k, v in drift.items() if k not in hooks}
    assert all(p.startswith("/data/") for k in secrets for p in drift[k])


@pytest.mark.parametrize("kind", ["ConfigMap", "ServiceAccount"])
def test_a_field_changed_outside_the_ignore_rules_is_drift(dev, kind):
    """argocd-cm (server-side applied: a structured merge diff) and a ServiceAccount of a platform
    Application (client-side applied: a three-way diff): a value git sets, changed in the cluster,
    is drift at its path; put back, it is not."""
    started, render, argocd_cm = dev
    if kind == "ConfigMap":
        ar = render.app("trainyard-argocd-config")
        r = next(x for x in ar.resources if x.name == "argocd-cm")
        key = sorted(r.doc["data"])[0]
        field, value, pointer = {"data": {key: "changed"}}, {"data": {key: r.doc["data"][key]}}, f"/data/{key}"
    else:
        ar, r = next(
            (a, x)
            for a in render.apps
            if not a.upstream and "ServerSideApply=true" not in diffing.sync_options(a.app.spec, a.name)
            for x in a.resources
            if x.kind == "ServiceAccount" and x.labels
        )
        label = sorted(r.labels)[0]
        field, value = {"metadata": {"labels": {label: "changed"}}}, {"metadata": {"labels": {label: r.labels[label]}}}
        pointer = f"/metadata/labels/{diffing.escape(label)}"
    settings = diffing.Settings.of(ar.app.resource.doc, argocd_cm)
    with started.client() as kube:
        path = kube.path(r.doc)
        merge = {"Content-Type": "application/merge-patch+json"}
        kube.request("PATCH", path, content=json.dumps(field), headers=merge)
        desired = sync.tracked(r.doc, ar.app)
        try:
            changed = diffing.diff(settings, desired, kube.get(path))
        finally:
            kube.request("PATCH", path, content=json.dumps(value), headers=merge)
        restored = diffing.diff(settings, desired, kube.get(path))
    assert changed.paths == (pointer,), changed
    assert restored.paths == ()
