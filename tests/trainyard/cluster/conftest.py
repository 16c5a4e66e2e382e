"""Local clusters for the tests: each one the repository's cluster, up once for this package's
tests and stopped after its last one (an idle control plane and its controllers keep a tenth of
a core or more each busy: the tests after these would pay for it).

The modules that use the shared clusters run first, and the clusters stop after the last test
that uses them, before the modules that start clusters of their own (Argo CD's, the faults', a
bare control plane): those would otherwise run beside three idle clusters. A module moves as a
whole, so its own fixtures are set up once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainyard.cluster import controlplane
from trainyard.cluster.client import Kube
from trainyard.cluster.controlplane import Started
from trainyard.cluster.up import up
from trainyard.repo.model import repository

REPO_ROOT = Path(__file__).resolve().parents[3]


class Clusters:
    """``clusters["dev"]``: the dev cluster, started on first use and stopped at the end."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.started: dict[str, Started] = {}
        self.repo = repository.load(REPO_ROOT)

    def __getitem__(self, name: str) -> Started:
        if name not in self.started:
            self.started[name] = up(self.repo, name, self.base / name, progress=lambda _: None)
        return self.started[name]

    def kube(self, name: str) -> Kube:
        return self[name].client()

    def stop(self) -> None:
        """Stop every cluster, then raise what the first that failed to stop said. A cluster asked
        for after this starts again."""
        failed: list[Exception] = []
        stopping, self.started = self.started, {}
        for started in stopping.values():
            try:
                controlplane.down(started.folder)
            except Exception as exc:  # the others still stop
                failed.append(exc)
        if failed:
            raise failed[0]


SHARED = "clusters"  # the fixture below
LAST_USER = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [i for i in items if here in i.path.parents]
    if not mine:
        return
    users = {i.path for i in mine if SHARED in getattr(i, "fixturenames", ())}
    first = next(n for n, i in enumerate(items) if here in i.path.parents)
    # a stable sort: the modules that use the shared clusters first, each module's tests in order
    mine.sort(key=lambda i: i.path not in users)
    rest = [i for i in items if here not in i.path.parents]
    items[:] = rest[:first] + mine + rest[first:]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if SHARED not in getattr(item, "fixturenames", ()):
        return
    last = item.config.stash.get(LAST_USER, None)
    if last is None:  # the run's items as selected (-m, -k), in the order above
        users = [i.nodeid for i in item.session.items if SHARED in getattr(i, "fixturenames", ())]
        last = item.config.stash[LAST_USER] = users[-1]
    shared = getattr(item, "funcargs", {}).get(SHARED)
    if item.nodeid == last and isinstance(shared, Clusters):
        shared.stop()


@pytest.fixture(scope="package")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    c = Clusters(tmp_path_factory.mktemp("clusters"))
    try:
        yield c
    finally:
        c.stop()


# the service-account token volume kube-apiserver adds, named with five random characters
TOKEN_VOLUME = re.compile(r"^kube-api-access-[a-z0-9]{5}$")


def same_token_volume(spec: dict) -> None:
    """Give the token volume, and its mounts, one name in ``spec``, so two creates compare equal."""
    for volume in spec.get("volumes") or []:
        if TOKEN_VOLUME.match(volume["name"]):
            volume["name"] = "kube-api-access"
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for mount in c.get("volumeMounts") or []:
            if TOKEN_VOLUME.match(mount["name"]):
                mount["name"] = "kube-api-access"
