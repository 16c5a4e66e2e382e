"""Fixtures of the repository tooling tests: the real repository, rendered once per test run,
and throw-away copies of it for the tests that break something on purpose.

kustomize builds and upstream renders are kept by content for the run (tests/trainyard/conftest.py):
most of these tests validate a copy of the repository with one file changed, and the folders they
did not change are read back instead of built again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trainyard.contract.errors import UserError
from trainyard.repo import validate
from trainyard.repo.model import kustomize, repository

REPO_ROOT = Path(__file__).resolve().parents[3]
# what a render reads: manifests and policies
COPIED = ("base", "clusters", "overlays", "policies")


@pytest.fixture(scope="session")
def repo() -> repository.Repository:
    try:
        kustomize.command()
    except UserError as exc:
        pytest.fail(f"the repository tests need the real kustomize: {exc}")
    return repository.load(REPO_ROOT)


@pytest.fixture(scope="session")
def report(repo: repository.Repository) -> validate.Report:
    """Every cluster rendered and validated once for the whole test run."""
    return validate.validate(repo)


@pytest.fixture(scope="session")
def upstream_tools() -> None:
    """Go (the upstream releases' modules) and Helm (their charts); skipped with the reason without."""
    from trainyard.repo.model import gomodules, upstream

    try:
        gomodules.go_binary()
        upstream.helm_command()
    except UserError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def repo_copy(tmp_path: Path) -> repository.Repository:
    for name in COPIED:
        shutil.copytree(REPO_ROOT / name, tmp_path / name)
    return repository.load(tmp_path)


def edit(repo: repository.Repository, rel: str, old: str, new: str) -> None:
    """Replace ``old`` (which must be there) by ``new`` in a file of a repository copy."""
    path = repo.root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{rel} does not contain {old!r}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def errors_of(report: validate.Report, cluster: str | None = None) -> list[str]:
    return [str(p) for p in report.errors() if cluster is None or p.cluster == cluster]
