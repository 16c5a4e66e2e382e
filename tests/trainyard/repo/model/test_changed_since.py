"""``trainyard validate --changed-since REF`` in a real git repository: which job folders a pull
request changed (committed since REF, and uncommitted), everything when a shared file changed,
deleted folders, and a ref git does not know."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainyard.repo.conftest import edit
from trainyard.contract.errors import EXIT_USAGE, UserError
from trainyard.repo.model import build_cache, changes, repository

JOB = "overlays/dev/jobs/smoke-ddp"
OTHER = "overlays/dev/jobs/mnist-ddp"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, env={**os.environ, **GIT_ENV}, check=True
    )
    return proc.stdout


@pytest.fixture
def pr(repo_copy: repository.Repository) -> repository.Repository:
    """The repository copy as a git repository: main committed, a branch ``pr`` checked out."""
    git(repo_copy.root, "init", "-q", "-b", "main")
    git(repo_copy.root, "add", "-A")
    git(repo_copy.root, "commit", "-q", "-m", "main")
    git(repo_copy.root, "checkout", "-q", "-b", "pr")
    return repo_copy


def commit(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def scope_of(repo: repository.Repository, ref: str = "main") -> changes.Scope:
    return changes.scope(repo, changes.changed_files(repo.root, ref))


def test_a_committed_change_to_a_job_folder_checks_that_folder_only(pr):
    edit(pr, f"{JOB}/job.yaml", '"300"', '"200"')
    commit(pr.root, "shorter")
    s = scope_of(pr)
    assert not s.everything
    assert s.jobs == {"dev": {JOB}}
    assert s.describe("main") == [f"checking {JOB} (changed since main), in cluster dev"]


def test_uncommitted_and_untracked_changes_count(pr):
    shutil.copytree(pr.root / JOB, pr.root / "overlays/dev/jobs/new-job")  # untracked
    edit(pr, f"{JOB}/job.yaml", '"300"', '"200"')  # unstaged
    s = scope_of(pr)
    assert s.jobs == {"dev": {JOB, "overlays/dev/jobs/new-job"}} and not s.everything


def test_changes_on_main_after_the_branch_left_it_are_not_the_pull_requests(pr):
    git(pr.root, "checkout", "-q", "main")
    edit(pr, "base/jobs/trainjob/trainjob.yaml", "queue-name: training", "queue-name: other")
    commit(pr.root, "main moves on")
    git(pr.root, "checkout", "-q", "pr")
    edit(pr, f"{JOB}/job.yaml", '"300"', '"200"')
    commit(pr.root, "the pull request")
    s = scope_of(pr)  # REF...HEAD: from the merge base
    assert s.jobs == {"dev": {JOB}} and not s.everything


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("base/jobs/trainjob/trainjob.yaml", "base/ is shared by every cluster"),
        ("policies/tcp.yaml", "policies/ is shared by every cluster"),
        ("clusters/dev/cluster.yaml", "clusters/ is shared by every cluster"),
        ("overlays/dev/platform/kustomization.yaml", "a cluster's platform"),
        ("trainyard/repo/upstream/vap.py", "the tooling"),
    ],
)
def test_a_shared_file_checks_everything(pr, path, why):
    file = pr.root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("a", encoding="utf-8") as f:
        f.write("\n# touched\n")
    commit(pr.root, f"touch {path}")
    s = scope_of(pr)
    assert s.everything
    assert s.reasons == [f"{path} ({why})"]
    assert s.describe("main")[0] == "checking every cluster and job: changed since main:"


def test_a_deleted_job_folder_is_fine(pr):
    shutil.rmtree(pr.root / OTHER)
    commit(pr.root, "remove a job")
    s = scope_of(pr)
    assert s.deleted == [OTHER] and s.jobs == {"dev": set()} and not s.everything
    assert f"not checking {OTHER}: deleted since main" in s.describe("main")


def test_documentation_alone_checks_nothing(pr):
    (pr.root / "NOTES.md").write_text("notes\n", encoding="utf-8")
    (pr.root / "tests").mkdir()
    (pr.root / "tests" / "test_x.py").write_text("\n", encoding="utf-8")
    s = scope_of(pr)
    assert s.jobs == {} and not s.everything and sorted(s.ignored) == ["NOTES.md", "tests/test_x.py"]
    assert s.describe("main") == ["nothing to check: no job folder or shared file changed since main"]


@pytest.mark.parametrize("ref", ["no-such-branch", "-x", "main~99"])
def test_a_bad_ref_is_a_clear_error(pr, ref):
    with pytest.raises(UserError, match="--changed-since") as exc:
        changes.changed_files(pr.root, ref)
    assert ref in str(exc.value) and exc.value.exit_code == EXIT_USAGE


def trainyard(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != build_cache.ENV_DIR}  # the cache where a user's would be
    return subprocess.run(
        [sys.executable, "-m", "trainyard.cli", *args], cwd=root, capture_output=True, text=True, timeout=600, env=env
    )


def test_the_command_checks_and_previews_only_the_changed_folder(pr):
    edit(pr, f"{JOB}/job.yaml", '"300"', '"200"')
    commit(pr.root, "shorter")
    r = trainyard(pr.root, "validate", "--changed-since", "main", "--no-cache")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"checking {JOB} (changed since main), in cluster dev" in r.stdout
    assert "dev: " in r.stdout and "1 job(s) previewed" in r.stdout
    assert "prod-ib:" not in r.stdout  # no job of that cluster changed
    assert not (pr.root / ".trainyard-cache").exists()  # --no-cache


def test_the_command_refuses_a_bad_ref_with_exit_2(pr):
    r = trainyard(pr.root, "validate", "--changed-since", "nope")
    assert r.returncode == EXIT_USAGE
    assert "error: --changed-since 'nope'" in r.stderr and "Traceback" not in r.stderr
