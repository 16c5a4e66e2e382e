"""The build cache of every trainyard test: kustomize builds and upstream renders kept by content for
the run, as `trainyard validate` keeps them for a user (trainyard/repo/model/build_cache.py), in this
process and the processes it starts (`trainyard validate`, `cluster up`). A test that renders the
repository, or a copy with one file changed, reads back the folders already built. One cache per
test run, shared by its pytest-xdist workers (entries are written whole and renamed into place):
empty when the run starts, so no test reads what an earlier run left."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from trainyard.repo.model import build_cache, kustomize


@pytest.fixture(scope="session", autouse=True)
def _build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    base = tmp_path_factory.getbasetemp()
    # a worker's base is popen-gwN inside the run's own folder, which its workers share
    directory = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "build-cache"
    before = os.environ.get(build_cache.ENV_DIR)
    os.environ[build_cache.ENV_DIR] = str(directory)  # `trainyard validate` in this process and those it starts
    kustomize.use_disk_cache(directory)
    yield
    kustomize.use_disk_cache(None)
    if before is None:
        del os.environ[build_cache.ENV_DIR]
    else:
        os.environ[build_cache.ENV_DIR] = before
