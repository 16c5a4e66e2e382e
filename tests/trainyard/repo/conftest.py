"""Fixtures of the repository tooling tests: the real repository, rendered once per test run,
and throw-away copies of it for the tests that break something on purpose.

kustomize builds and upstream renders are kept by content for the run, as `trainyard validate` keeps
them for a user (trainyard/repo/model/build_cache.py): most of these tests validate a copy of the
repository with one file changed, and the folders they did not change are read back instead of
built again. Each pytest process has a cache of its own, empty when it starts: no test reads what an
earlier run left."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainyard.contract.errors import UserError
from trainyard.repo import validate
from trainyard.repo.model import build_cache, kustomize, repository

REPO_ROOT = Path(__file__).resolve().parents[3]
# what a render reads: manifests and policies
COPIED = ("base", "clusters", "overlays", "policies")


@pytest.fixture(scope="session", autouse=True)
def _build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    directory = tmp_path_factory.getbasetemp() / "build-cache"
    before = os.environ.get(build_cache.ENV_DIR)
    os.environ[build_cache.ENV_DIR] = str(directory)  # `trainyard validate` in this process and those it starts
    kustomize.use_disk_cache(directory)
    yield
    kustomize.use_disk_cache(None)
    if before is None:
        del os.environ[build_cache.ENV_DIR]
    else:
        os.environ[build_cache.ENV_DIR] = before


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
