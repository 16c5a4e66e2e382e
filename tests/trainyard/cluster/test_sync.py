"""Every cluster through the real API server, and a broken change refused in its own words.

``trainyard cluster up`` applies a cluster's whole render (and fails on any refusal); a broken
job folder or policy is sent with ``dryRun=All`` to a running cluster and refused by
kube-apiserver with its own message, placed at the file and line the change is in.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.trainyard.cluster.conftest import REPO_ROOT
from tests.trainyard.repo.conftest import COPIED, edit
from trainyard.cluster import sync
from trainyard.cluster.up import render_for
from trainyard.repo.model import declared, repository

pytestmark = pytest.mark.cluster


def kubectl(started, *args: str) -> str:
    folder = started.folder
    return subprocess.run(
        [str(folder / "bin" / "kubectl"), "--kubeconfig", str(folder / "kubeconfig"), *args],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip


def contains(stored: object, applied: object) -> bool:
    """Whether ``stored`` holds every field of ``applied``, the same (the API server adds defaults,
    the controllers' webhooks more: Kueue suspends a queued job, Trainer's defaulter re-encodes a
    quantity written as a number, ``1``, as the string ``"1"``)."""
    if isinstance(applied, int | float) and not isinstance(applied, bool) and isinstance(stored, str):
        return stored == str(applied)
    if isinstance(applied, dict):
        return isinstance(stored, dict) and all(k in stored and contains(stored[k], v) for k, v in applied.items())
    if isinstance(applied, list):
        return isinstance(stored, list) and len(stored) == len(applied) and all(map(contains, stored, applied))
    return stored == applied


@pytest.mark.parametrize("cluster", ["dev", "prod-roce", "prod-ib"])
def test_every_cluster_is_applied_and_kubectl_shows_it(clusters, cluster):
    started = clusters[cluster]  # up refuses to return on any refusal
    render = render_for(repository.load(REPO_ROOT), cluster)
    apps = sorted(r.name for r in render.resources() if r.kind == "Application")
    listed = kubectl(started, "get", "applications", "-n", "argocd", "-o", "name").split()
    assert sorted(n.split("/", 1)[1] for n in listed) == apps
    jobs = [r for r in render.resources() if r.kind in ("TrainJob", "PyTorchJob", "MPIJob", "TFJob")]
    assert jobs
    for job in jobs:
        got = json.loads(kubectl(started, "get", f"{job.kind.lower()}s", job.name, "-n", job.namespace, "-o", "json"))
        assert contains(got["spec"], job.doc["spec"]), f"{job.describe()}: stored differs beyond defaults"
    # the monitors and rules (and Kueue's ServiceMonitor), served by Prometheus Operator's CRDs where
    # the cluster's facts say it runs: stored as rendered, beyond the CRDs' defaults
    monitors = [r for r in render.resources() if r.group == declared.MONITORING_GROUP]
    assert {"PodMonitor", "PrometheusRule"} <= {r.kind for r in monitors}
    for r in monitors:
        plural = f"{r.kind.lower()}s.{r.group}"
        got = json.loads(kubectl(started, "get", plural, r.name, "-n", r.namespace, "-o", "json"))
        assert contains(got["spec"], r.doc["spec"]), f"{r.describe()}: stored differs beyond defaults"
    version = json.loads(kubectl(started, "version", "-o", "json"))
    assert version["clientVersion"]["gitVersion"] == version["serverVersion"]["gitVersion"] == "v1.36.5"


@pytest.fixture
def broken(tmp_path: Path):
    """A copy of the repository to break (what a render reads), and the edit helper of the
    repository tests."""
    for name in COPIED:
        shutil.copytree(REPO_ROOT / name, tmp_path / name)
    copy = repository.load(tmp_path)
    return tmp_path, lambda rel, old, new: edit(copy, rel, old, new)


def refusal(clusters, root: Path, kind: str, name: str) -> sync.Refusal:
    render = render_for(repository.load(root), "dev")
    app, resource = next((a, r) for a in render.apps for r in a.resources if r.kind == kind and r.name == name)
    server_side = "ServerSideApply=true" in sync._sync_options(app.app)  # as its Application asks
    with clusters.kube("dev") as kube:
        syncer = sync.Syncer(kube, root, progress=lambda _: None)
        assert not syncer.one(resource, server_side=server_side, dry_run=True), "kube-apiserver accepted it"
    (found,) = syncer.report.refusals
    return found


def line_of(root: Path, rel: str, needle: str) -> int:
    lines = (root / rel).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


JOB = "overlays/dev/jobs/smoke-ddp/job.yaml"


def test_an_unknown_field_in_a_job_folder_is_refused_at_its_line(clusters, broken):
    root, change = broken
    change(JOB, "    numProcPerNode: 1\n", "    numProcPerNode: 1\n    numProcsPerNode: 2\n")
    found = refusal(clusters, root, "TrainJob", "smoke-ddp")
    # client-side apply (the job Applications' default) is a create with strict field validation
    assert re.search(r'unknown field "spec\.trainer\.numProcsPerNode"', found.message), found.message
    assert found.where == f"{JOB}:{line_of(root, JOB, 'numProcsPerNode')}"


def test_a_wrong_type_in_a_job_folder_is_refused_at_its_line(clusters, broken):
    root, change = broken
    change(JOB, "    numNodes: 2\n", "    numNodes: two\n")
    found = refusal(clusters, root, "TrainJob", "smoke-ddp")
    # Kubeflow Trainer's defaulting webhook decodes the TrainJob before the schema is checked
    assert 'admission webhook "defaulter.trainjob.trainer.kubeflow.org" denied' in found.message, found.message
    assert "Go struct field Trainer.spec.trainer.numNodes of type int32" in found.message
    assert found.where == f"{JOB}:{line_of(root, JOB, 'numNodes: two')}"


def test_a_crd_validation_rule_is_enforced_by_the_api_server(clusters, broken):
    """Kubeflow Trainer v2.3.0's TrainJob CRD allows two managers only (an x-kubernetes-validations
    CEL rule: kubeflow/trainer@v2.3.0:manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml)."""
    root, change = broken
    change(JOB, "- op: add\n  path: /spec/trainer\n", "- op: add\n  path: /spec/managedBy\n  value: example.com/mine\n"
         "- op: add\n  path: /spec/trainer\n")  # fmt: skip
    found = refusal(clusters, root, "TrainJob", "smoke-ddp")
    assert "ManagedBy must be trainer.kubeflow.org/trainjob-controller" in found.message, found.message
    assert found.where == f"{JOB}:{line_of(root, JOB, 'value: example.com/mine')}"


def test_an_invalid_admission_policy_expression_is_refused(clusters, broken):
    root, change = broken
    rel = "base/webhook/validating-admission-policy.yaml"
    change(rel, "expression: request.operation == 'CREATE'", "expression: request.operation == ('CREATE'")
    found = refusal(clusters, root, "ValidatingAdmissionPolicy", "trainyard-fabric-required")
    assert "compilation failed" in found.message and "Syntax error" in found.message, found.message
    assert found.where.startswith(f"{rel}:") or found.where.startswith(f"overlays/dev/platform/webhook ({rel})")
