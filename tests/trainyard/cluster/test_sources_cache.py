"""The upstream sources' cache (trainyard/cluster/sources.py): one folder per machine, keyed by what
decides its content, shared by every local cluster's server; each item built once, by one server,
and a git repository packed so that each fetch sends it without compressing it again."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from trainyard.cluster import sources
from trainyard.repo.model import upstream

SLUG = "kubeflow/trainer"  # two pinned tags: Trainer v2 and the v1 operator


def _objects(bare: Path) -> dict[str, int]:
    out = subprocess.run(["git", "--git-dir", str(bare), "count-objects", "-v"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return {k: int(v) for k, v in (line.split(": ") for line in out.splitlines()) if v.isdigit()}


def test_two_servers_build_a_repository_once_packed_and_share_it(tmp_path: Path) -> None:
    said: list[str] = []
    servers = [sources.Sources(tmp_path, log=said.append) for _ in range(2)]  # two clusters' servers
    got: list[Path | None] = []
    threads = [threading.Thread(target=lambda s=s: got.append(s.git_repository(SLUG))) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert said == [f"building git {SLUG}"]  # the second waited on the lock, then found it built
    assert len(got) == 2 and got[0] == got[1] and got[0] is not None
    objects = _objects(got[0])
    assert objects["count"] == 0 and objects["in-pack"] > 1000, objects  # packed, nothing loose
    tags = subprocess.run(["git", "--git-dir", str(got[0]), "tag"], capture_output=True, text=True, check=True)
    assert set(tags.stdout.split()) == {"v1.9.4", "v2.3.0"}
    later: list[str] = []
    assert sources.Sources(tmp_path, log=later.append).git_repository(SLUG) == got[0] and later == []


def test_the_cache_folder_follows_what_decides_its_content(monkeypatch: pytest.MonkeyPatch) -> None:
    first = sources.cache_dir()
    assert first == sources.cache_dir() and first.parent.name == "sources"
    monkeypatch.setattr(upstream, "fingerprint", lambda: "another pin or tool")
    assert sources.cache_dir() != first and sources.cache_dir().parent == first.parent
