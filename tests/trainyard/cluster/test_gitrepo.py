"""The repository a local cluster's Argo CD reads (trainyard/cluster/gitrepo.py), with real git;
Argo CD itself reading it, and a push syncing a job, are in test_argocd_itself.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.trainyard.cluster.conftest import REPO_ROOT
from trainyard.cluster import gitrepo
from trainyard.cluster.up import up
from trainyard.contract.errors import UserError
from trainyard.repo.model.repository import REPO_ENV, load

JOB = "overlays/dev/jobs/smoke-ddp"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def served(tmp_path: Path) -> gitrepo.Served:
    return gitrepo.serve(REPO_ROOT, tmp_path / "cluster", leave_out=(JOB,))


def test_the_repository_names_itself_and_leaves_out_what_it_is_told(served):
    repo = load(served.checkout)
    assert repo.root == served.checkout
    assert f"repoURL={served.url}\n" in (served.checkout / REPO_ENV).read_text()
    tree = _git(served.bare, "ls-tree", "-r", "--name-only", gitrepo.BRANCH).splitlines()
    assert str(REPO_ENV) in tree and "clusters/dev/cluster.yaml" in tree
    assert not [p for p in tree if p.startswith(JOB + "/")]
    assert (REPO_ROOT / JOB).is_dir()  # the source is left as it was


def test_a_push_reaches_the_bare_repository_and_runs_the_hook(served, tmp_path):
    calls = tmp_path / "calls"
    kubectl = tmp_path / "kubectl"  # records how the hook calls kubectl (the real one: test_argocd_itself)
    kubectl.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    kubectl.chmod(0o755)
    gitrepo.install_push_hook(served, kubectl, tmp_path / "kubeconfig")
    (served.checkout / JOB).mkdir(parents=True)
    (served.checkout / JOB / "kustomization.yaml").write_text("resources: []\n")
    revision = gitrepo.commit_and_push(served, "a job")
    assert _git(served.bare, "rev-parse", gitrepo.BRANCH) == revision
    said = calls.read_text().splitlines()
    assert said == [
        f"--kubeconfig={tmp_path / 'kubeconfig'} annotate -n argocd {resource} --all {annotation} --overwrite"
        for resource, annotation in gitrepo.REFRESH
    ]


def test_an_earlier_clusters_repository_is_never_overwritten(served):
    marker = served.bare / "pushed-by-someone"
    marker.write_text("")
    with pytest.raises(UserError, match=r"repo\.git holds the repository of an earlier cluster"):
        gitrepo.serve(REPO_ROOT, served.bare.parent)
    assert marker.exists()


@pytest.mark.cluster  # no control plane starts, but the render takes 5 to 10 s: not for test-fast
@pytest.mark.skipif(os.geteuid() != 0, reason="cluster up with Argo CD needs root")
def test_a_cluster_up_that_fails_leaves_no_repository_behind(tmp_path):
    """Nobody can have pushed to a repository whose `up` failed (the push hook comes last), so it
    goes with the failure and the same DIR can be used again."""
    source = tmp_path / "source"
    for name in gitrepo.MANIFESTS:
        shutil.copytree(REPO_ROOT / name, source / name)
    (source / JOB / "job.yaml").write_text("kind: [unclosed\n")
    folder = tmp_path / "cluster"
    with pytest.raises(UserError, match="cluster dev does not render"):
        up(load(source), "dev", folder, argocd=True, progress=lambda _: None)
    assert not (folder / "repo.git").exists() and not (folder / "repo").exists()
