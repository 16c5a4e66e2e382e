"""clusters/<cluster>/cluster.yaml: each cluster's declared facts, checked with file and field."""

from __future__ import annotations

import re
import shutil
from decimal import Decimal

import pytest
import yaml

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.repo.model import declared, repository


def test_every_cluster_declares_its_facts():
    repo = repository.load(REPO_ROOT)
    for cluster in repo.clusters():
        facts = declared.load(repo, cluster)
        assert facts.name == cluster
        assert facts.spec.topology[-1] == declared.HOSTNAME_LABEL
    dev = declared.load(repo, "dev")
    assert dev.prometheus_operator  # the local cluster serves the operator's CRDs (trainyard cluster up)
    assert dev.total("nvidia.com/gpu") == 2 and dev.largest_node("memory") == Decimal(64 * 2**30)


@pytest.fixture
def scratch(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "base/repo", root / "base/repo")
    shutil.copytree(REPO_ROOT / "clusters/dev", root / "clusters/dev")
    return repository.load(root), root / "clusters/dev/cluster.yaml"


def edit(path, change):
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["spec"].update(kubernetesVersion="1.33.2"), "spec.kubernetesVersion: '1.33.2' is not"),
        (lambda d: d["spec"].update(admission="policy"), "admission: policy needs MutatingAdmissionPolicy"),
        (lambda d: d["spec"].update(topology=["topology.kubernetes.io/zone"]), "must end with kubernetes.io/hostname"),
        (lambda d: d["spec"].update(topology=["rack", "kubernetes.io/hostname"]), "no value for the topology"),
        (lambda d: d["spec"]["nodePools"][0]["allocatable"].pop("memory"), "allocatable must say memory"),
        (lambda d: d["spec"]["nodePools"][0]["allocatable"].update(cpu="1e999999x"), "is not a Kubernetes quantity"),
        (lambda d: d["spec"]["nodePools"][0].update(count=0), "spec.nodePools[0].count"),
        (lambda d: d["spec"].update(nodepools=[]), "nodepools: unknown field (check its spelling against the Cl"),
        (lambda d: d["metadata"].update(name="prod"), "metadata.name is 'prod', but the folder is 'dev'"),
        (lambda d: d["spec"].update(monitoring="prometheus"), "spec.monitoring: Input should be 'none' or 'prom"),
        (lambda d: d["spec"].update(monitoring=True), "spec.monitoring: Input should be 'none' or 'prometheus-"),
    ],
)
def test_a_wrong_declaration_names_the_file_and_the_field(scratch, change, message):
    repo, path = scratch
    edit(path, change)
    with pytest.raises(declared.DeclarationError, match=re.escape(message)) as info:
        declared.load(repo, "dev")
    assert str(info.value).startswith("clusters/dev/cluster.yaml")


def test_a_missing_or_broken_file_is_a_clear_error(scratch):
    repo, path = scratch
    path.write_text("spec: [unclosed\n")
    with pytest.raises(declared.DeclarationError, match=r"cluster.yaml:\d+: not valid YAML"):
        declared.load(repo, "dev")
    path.unlink()
    with pytest.raises(declared.DeclarationError, match="missing; every cluster declares"):
        declared.load(repo, "dev")
