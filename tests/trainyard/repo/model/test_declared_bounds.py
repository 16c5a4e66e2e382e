"""clusters/<cluster>/cluster.yaml has the size bound of every configuration file."""

from __future__ import annotations

import shutil

import pytest

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.contract.files import MAX_CONFIG_BYTES
from trainyard.repo.model import declared, repository


def test_an_oversized_cluster_yaml_is_refused_before_it_is_read_and_a_normal_one_loads(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "base/repo", root / "base/repo")
    shutil.copytree(REPO_ROOT / "clusters/dev", root / "clusters/dev")
    repo = repository.load(root)
    assert declared.load(repo, "dev").name == "dev"
    with open(root / "clusters/dev/cluster.yaml", "r+b") as f:
        f.truncate(50 * 1024 * 1024)  # sparse
    with pytest.raises(declared.DeclarationError) as refused:
        declared.load(repo, "dev")
    assert str(refused.value) == (
        f"clusters/dev/cluster.yaml: the file is {50 * 1024 * 1024} bytes, over the bound of {MAX_CONFIG_BYTES} "
        "bytes, so it was refused unread; check that this is the file meant (configuration this large is a mistake)"
    )
