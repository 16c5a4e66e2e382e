"""Argo CD itself judges the local sync: the dev cluster is synced by trainyard's emulation, then
Argo CD's own application controller, repo-server and ApplicationSet controller (v3.6.2, built
from kube/argocd/go.mod) read the same repository from a git repository on disk and compare.

For every Application whose source is this repository alone, Argo CD must find exactly the objects
the emulation applied, each Synced: the same render, the same normalisation and tracking, and
ignoreDifferences that cover what Kueue and Trainer write on a TrainJob. The Applications its
ApplicationSet controller generates must be the emulation's, field for field.

Upstream sources (GitHub tags and files, chart repositories, OCI charts) reach Argo CD's
repo-server under their own URLs from the pinned releases (trainyard/cluster/sources.py). The
emulation applies only an upstream release's CRDs and namespace (and starts some controllers,
their webhooks reached through their Services), so for those Applications Argo CD judges the
render, then syncs them itself: the objects it renders are the offline render's, and every object
Argo CD applies itself holds every field the offline render gives it.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import time

import pytest

from tests.trainyard.cluster.conftest import REPO_ROOT
from trainyard.cluster import argocd_daemons, controlplane, gitrepo
from trainyard.cluster.client import ApiError
from trainyard.cluster.up import render_for, up
from trainyard.contract.errors import UserError
from trainyard.repo.model import repository
from trainyard.repo.model.rendered import CLUSTER_SCOPED
from trainyard.repo.upstream import health

pytestmark = pytest.mark.cluster

CLUSTER = "dev"  # the tests that change the repository or read its job names
# every test but those runs on each cluster of the repository: dev (the fabric webhook, Kubernetes
# 1.33), prod-roce (the webhook on 1.34, RoCE) and prod-ib (MutatingAdmissionPolicies, the RDMA
# device plugin)
CLUSTERS = ("dev", "prod-roce", "prod-ib")
TIMEOUT = 240.0
APPS = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications"


def _tracked(resource: dict) -> tuple[str, str, str, str]:
    return (resource.get("group", ""), resource["kind"], resource.get("namespace", ""), resource["name"])


@pytest.fixture(scope="module", params=CLUSTERS)
def synced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    cluster = request.param
    base = tmp_path_factory.mktemp("argocd-itself")
    started = up(repository.load(REPO_ROOT), cluster, base / "cluster", argocd=True, progress=lambda _: None)
    try:
        assert started.served is not None
        repo = repository.load(started.served.checkout)
        yield repo, started, render_for(repo, cluster)
    finally:
        controlplane.down(started.folder)


def _applications(started) -> dict[str, dict]:
    with started.client() as kube:
        listed = kube.get("/apis/argoproj.io/v1alpha1/namespaces/argocd/applications")
    return {a["metadata"]["name"]: a for a in listed["items"]}


def _compared(app: dict, revision: str) -> bool:
    status = app.get("status") or {}
    return (status.get("sync") or {}).get("revision") == revision and bool(status.get("reconciledAt"))


def test_argo_cd_finds_every_application_of_this_repository_synced(synced):
    repo, started, render = synced
    revision = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo.root, capture_output=True, text=True, check=True
    ).stdout.strip()
    ours = {ar.name: ar for ar in render.apps if not ar.upstream}
    assert any(ar.app.generated_by for ar in ours.values()), "the cluster has job Applications"
    deadline = time.monotonic() + TIMEOUT
    while True:  # until Argo CD has compared each of them at the repository's commit
        live = _applications(started)
        pending = sorted(n for n in ours if n not in live or not _compared(live[n], revision))
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not pending, f"Argo CD did not compare {pending} within {TIMEOUT:g} s: " + "; ".join(
        str((live.get(n, {}).get("status") or {}).get("conditions")) for n in pending
    )
    problems = []
    for name, ar in sorted(ours.items()):
        status = live[name]["status"]
        argo = {_tracked(r): r for r in status.get("resources") or []}
        applied = {(r.group, r.kind, r.namespace or "", r.name) for r in ar.resources}
        if ar.self_reference:
            applied = {(r.group, r.kind, r.namespace or "", r.name) for r in render.root}
        if set(argo) != applied:
            problems.append(
                f"{name}: Argo CD manages {sorted(set(argo) - applied)} beyond the emulation's objects and lacks "
                f"{sorted(applied - set(argo))}"
            )
        for key, r in sorted(argo.items()):
            if r.get("status") != "Synced":
                problems.append(f"{name}: {'/'.join(key)} is {r.get('status')} for Argo CD")
        for c in status.get("conditions") or []:
            problems.append(f"{name}: {c.get('type')}: {c.get('message')}")
        if status.get("operationState"):  # it had to sync what the emulation left different
            op = status["operationState"]
            problems.append(f"{name}: Argo CD ran a sync ({op.get('phase')}: {op.get('message')})")
    assert not problems, "\n".join(problems)


def _holds(live: object, want: object, path: str = "") -> list[str]:
    """Where ``live`` lacks a field or value of ``want`` (what kube-apiserver and controllers add
    is not a difference)."""
    if isinstance(want, dict):
        if not isinstance(live, dict):
            return [path or "."]
        return [p for k, v in want.items() for p in _holds(live.get(k), v, f"{path}.{k}")]
    if live is None and want in (False, 0, "", [], {}):
        return []  # a zero value the API server does not store (Go's omitempty)
    if isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            return [path]
        return [p for i, (lv, wv) in enumerate(zip(live, want, strict=True)) for p in _holds(lv, wv, f"{path}[{i}]")]
    return [] if live == want or str(live) == str(want) else [f"{path}: {live!r} != {want!r}"]


def test_argo_cd_renders_every_upstream_source_as_the_offline_render(synced):
    _, started, render = synced
    upstream = {ar.name: ar for ar in render.apps if ar.upstream}
    assert {u.chart is not None for ar in upstream.values() for u in ar.upstream} == {True, False}
    deadline = time.monotonic() + TIMEOUT
    while True:  # until Argo CD has rendered each at its pinned source
        live = _applications(started)
        pending = sorted(n for n, ar in upstream.items() if not _rendered(live.get(n), ar))
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not pending, f"Argo CD did not render {pending} within {TIMEOUT:g} s: " + "; ".join(
        str((live.get(n, {}).get("status") or {}).get("conditions")) for n in pending
    )
    problems, checked = [], 0
    with started.client() as kube:
        for name, ar in sorted(upstream.items()):
            status = live[name]["status"]
            argo = {_tracked(r) for r in status.get("resources") or []}
            rendered = {(r.group, r.kind, r.namespace or "", r.name) for r in ar.resources if not r.extra.get("hook")}
            if argo != rendered:
                problems.append(f"{name}: Argo CD renders {sorted(argo - rendered)} beyond the offline render's "
                                f"objects and lacks {sorted(rendered - argo)}")  # fmt: skip
            for c in status.get("conditions") or []:
                problems.append(f"{name}: {c.get('type')}: {c.get('message')}")
            for r in ar.resources:
                if r.extra.get("hook"):
                    continue
                try:
                    got = kube.get(kube.path(r.doc))
                except ApiError:
                    continue
                annotations = got["metadata"].get("annotations") or {}
                if not annotations.get("argocd.argoproj.io/tracking-id", "").startswith(f"{name}:"):
                    continue  # not applied by Argo CD (the emulation's CRDs, a stopped comparison)
                checked += 1
                problems += [f"{name}: {r.kind}/{r.name}{p}" for p in _holds(got, r.doc)]
    assert not problems, "\n".join(problems)
    assert checked > 20, "Argo CD applied few upstream objects itself: nothing was compared field by field"


def test_the_renders_cluster_scoped_kinds_are_the_api_servers(synced):
    """trainyard/repo/model/rendered.py CLUSTER_SCOPED decides which objects get a namespace; the
    API server's discovery is the judge for every kind the dev cluster renders."""
    _, started, render = synced
    kinds = {(r.group, r.kind, r.api_version) for r in render.resources()}
    wrong = []
    with started.client() as kube:
        found: dict[str, dict[str, bool]] = {}
        for group, kind, api_version in sorted(kinds):
            if api_version not in found:
                path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
                listed = kube.get(path)["resources"]
                found[api_version] = {x["kind"]: x["namespaced"] for x in listed if "/" not in x["name"]}
            namespaced = found[api_version].get(kind)
            assert namespaced is not None, f"{api_version} {kind} is not served"
            if namespaced == ((group, kind) in CLUSTER_SCOPED):
                wrong.append(f"{group}/{kind}: {'namespaced' if namespaced else 'cluster-scoped'}")
    assert not wrong, f"CLUSTER_SCOPED disagrees with kube-apiserver: {wrong}"


def _rendered(app: dict | None, ar) -> bool:
    """Argo CD has rendered and compared ``app`` at its own source."""
    status = (app or {}).get("status") or {}
    compared = ((status.get("sync") or {}).get("comparedTo") or {}).get("source") == ar.app.resource.doc["spec"].get(
        "source"
    )
    return bool(status.get("resources")) and compared and bool(status.get("reconciledAt"))


def test_the_applicationset_controller_generates_the_emulations_applications(synced):
    _, started, render = synced
    generated = [ar.app.resource for ar in render.apps if ar.app.generated_by]
    assert generated
    deadline = time.monotonic() + TIMEOUT
    while True:  # the controller's first generation may still be on its way (this test may run alone)
        live = _applications(started)
        if all(r.name in live for r in generated) or time.monotonic() > deadline:
            break
        time.sleep(2)
    for r in generated:
        got = live.get(r.name)
        assert got is not None, f"Argo CD's ApplicationSet controller did not create {r.name}"
        meta = got["metadata"]
        for key in ("labels", "annotations", "finalizers"):
            want = r.doc["metadata"].get(key) or ({} if key != "finalizers" else [])
            have = meta.get(key) or ({} if key != "finalizers" else [])
            if key == "annotations":  # Argo CD's own bookkeeping
                have = {k: v for k, v in have.items() if not k.startswith("kubectl.kubernetes.io/")}
            assert have == want, f"{r.name} metadata.{key}: Argo CD {have}, emulation {want}"
        assert got["spec"] == r.doc["spec"], f"{r.name}: spec differs"
        owners = [(o["kind"], o["name"]) for o in meta.get("ownerReferences") or []]
        assert owners == [("ApplicationSet", r.extra["generated_by"])]


# gitops-engine pkg/health/health.go healthOrder: an Application is as healthy as its worst object
HEALTH_ORDER = ["Healthy", "Suspended", "Progressing", "Missing", "Degraded", "Unknown"]


@pytest.mark.parametrize("synced", [CLUSTER], indirect=True)
def test_argo_cd_runs_the_repositorys_health_checks_as_the_emulation_does(synced):
    """Argo CD runs base/argocd's Lua (argocd-cm, synced by the emulation) on the live jobs in its
    gopher-lua; trainyard runs the same scripts in Lua 5.1 (trainyard/repo/upstream/health.py). On
    the same live objects, each job Application's health (its worst object's, as Argo CD v3 keeps
    only the Application's in its status) is the same."""
    _, started, render = synced
    jobs = {ar.name: ar for ar in render.apps if ar.app.generated_by}
    with started.client() as kube:
        cm = kube.get("/api/v1/namespaces/argocd/configmaps/argocd-cm")["data"]
        deadline = time.monotonic() + TIMEOUT
        while True:
            live = _applications(started)
            pending, compared = [], []
            for name, ar in sorted(jobs.items()):
                ours = [health.health(cm, kube.get(kube.path(r.doc))) for r in ar.resources]
                statuses = [h["status"] for h in ours if h is not None]
                assert statuses, f"{name}: no object with a health check of base/argocd"
                worst = max(statuses, key=HEALTH_ORDER.index)
                theirs = ((live.get(name, {}).get("status") or {}).get("health") or {}).get("status")
                (compared if theirs == worst else pending).append(f"{name}: Argo CD {theirs}, trainyard {worst}")
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(3)  # a job's status moves on while it is compared; Argo CD assesses it again
    assert not pending, "\n".join(pending)
    assert len(compared) == len(jobs) >= 2


# --- one badly named job folder (last: it changes the repository Argo CD reads) ---------------------

APPSETS = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applicationsets"


def _push(started, message: str) -> None:
    """Commit the working copy and push it to the repository Argo CD reads; its hook asks the
    ApplicationSet controller to list the folders again (the refresh annotation also skips the
    repo-server's cache of the branch, applicationset git.go noRevisionCache)."""
    gitrepo.commit_and_push(started.served, message)


def _error(kube) -> str | None:
    status = kube.get(f"{APPSETS}/trainyard-jobs").get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("type") == "ErrorOccurred" and c.get("status") == "True":
            return c.get("message")
    return None


@pytest.mark.parametrize("synced", [CLUSTER], indirect=True)
def test_one_badly_named_job_folder_stops_the_applicationset_deleting_removed_jobs(synced):
    """What trainyard validate's job folder name rule prevents (trainyard/repo/validate/job_names.py):
    a folder renamed to `Smoke_DDP` removes folder smoke-ddp and adds one whose Application
    kube-apiserver refuses. Argo CD's ApplicationSet controller reports the refusal and, returning
    before deleteInCluster, keeps the removed folder's Application: its job keeps running. Positive
    control: once the bad folder is gone too, the removed job's Application is deleted."""
    repo, started, _ = synced
    jobs = repo.root / "overlays" / CLUSTER / "jobs"
    with started.client() as kube:
        deadline = time.monotonic() + TIMEOUT
        while "dev-job-smoke-ddp" not in _applications(started) and time.monotonic() < deadline:
            time.sleep(2)  # the ApplicationSet controller makes it after its start
        assert kube.get(f"{APPS}/dev-job-smoke-ddp")
        shutil.move(jobs / "smoke-ddp", jobs / "Smoke_DDP")
        _push(started, "a job folder Argo CD cannot name")
        deadline = time.monotonic() + TIMEOUT
        while (message := _error(kube)) is None and time.monotonic() < deadline:
            time.sleep(2)
        assert message is not None, "the ApplicationSet reported no error"
        assert "dev-job-Smoke_DDP" in message and "RFC 1123" in message, message
        assert kube.get(f"{APPS}/dev-job-smoke-ddp"), "the removed folder's Application is still there"

        shutil.rmtree(jobs / "Smoke_DDP")
        _push(started, "the badly named folder removed")
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                kube.get(f"{APPS}/dev-job-smoke-ddp")
            except ApiError as exc:
                assert exc.code == 404
                break
            time.sleep(2)
        else:
            pytest.fail(f"Argo CD did not delete dev-job-smoke-ddp within {TIMEOUT:g} s: {_error(kube)}")


@pytest.mark.parametrize("synced", [CLUSTER], indirect=True)
def test_a_pushed_job_folder_becomes_an_application_argo_cd_syncs(synced):
    """The user's path: `trainyard new-job` in a clone, commit, `git push`. The push hook asks Argo
    CD to read the repository again; the ApplicationSet controller creates the job's Application
    and the application controller syncs it (automated), so the TrainJob is stored, tracked as the
    Application's, at the pushed revision."""
    _, started, _ = synced
    new_job = ["new-job", "pushed", "--cluster", CLUSTER, "--nodes", "1", "--gpus", "1"]
    made = subprocess.run([sys.executable, "-m", "trainyard.cli", *new_job], cwd=started.served.checkout,
                          capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    revision = gitrepo.commit_and_push(started.served, "a job, pushed")
    name = f"{CLUSTER}-job-pushed"
    with started.client() as kube:
        app = argocd_daemons.wait_synced(kube, name, revision, TIMEOUT)
        job = kube.get("/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml-training/trainjobs/pushed")
    assert app["metadata"]["ownerReferences"][0]["name"] == "trainyard-jobs"
    tracking = job["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"]
    assert tracking == f"{name}:trainer.kubeflow.org/TrainJob:ml-training/pushed", tracking


@pytest.mark.parametrize("synced", [CLUSTER], indirect=True)
def test_a_pushed_broken_job_folder_is_refused_with_the_file_and_the_rest_runs_on(synced):
    """A push `validate` would have refused: Argo CD cannot render the folder, and waiting for its
    sync ends with Argo CD's own error naming the file; the jobs synced before are untouched."""
    _, started, _ = synced
    folder = started.served.checkout / "overlays" / CLUSTER / "jobs" / "broken"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text("resources:\n  - trainjob.yaml\n")
    pushed_at = dt.datetime.now(dt.UTC)
    revision = gitrepo.commit_and_push(started.served, "a job folder that does not render")
    with started.client() as kube:
        with pytest.raises(UserError) as refused:
            argocd_daemons.wait_synced(kube, f"{CLUSTER}-job-broken", revision, 60, since=pushed_at)
        assert kube.get("/apis/kubeflow.org/v1/namespaces/ml-training/pytorchjobs/mnist-ddp")
    said = str(refused.value)
    # refused as soon as Argo CD says so (its comparison ran before the push returned), not at 60 s
    assert said.startswith("Argo CD cannot render"), said
    assert "ComparisonError" in said and "trainjob.yaml" in said, said
