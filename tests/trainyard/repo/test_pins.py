"""``trainyard pins``: the table and its JSON, from the clusters' renders."""

from __future__ import annotations

import json

import pytest

from trainyard.cli import main
from trainyard.repo import pins
from trainyard.repo.model import releases

pytestmark = pytest.mark.usefixtures("upstream_tools")


def test_json_lists_every_component_with_what_the_render_installs(capsys):
    assert main(["pins", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = {c["component"]: c for c in out["components"]}
    assert list(by) == [r.key for r in releases.RELEASES]
    assert by["rdma-shared-device-plugin"]["clusters"] == ["prod-ib", "prod-roce"]  # dev has no RDMA NICs
    assert by["whereabouts"]["images"] == ["ghcr.io/k8snetworkplumbingwg/whereabouts:v0.9.4"]
    assert by["multus"]["images"] == ["ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0-thick"]
    assert by["kueue"]["chart"] == "kueue" and by["kueue"]["chart_version"] == "0.19.2"
    assert by["cert-manager"]["go_module"] == "github.com/cert-manager/cert-manager@v1.21.2"
    assert by["trainer"]["applications"] == ["trainyard-trainer"]
    assert by["jobset"]["applications"] == ["trainyard-trainer"]  # through the trainer overlay
    assert any("#3737" in i["ref"] for i in by["trainer"]["known_issues"])
    assert all(by[k]["objects"] for k in by if k not in ("argocd", "prometheus-operator"))
    # installed outside the repository, on the clusters whose facts say so (all three)
    assert by["prometheus-operator"]["clusters"] == ["dev", "prod-ib", "prod-roce"]
    # the newest served as probed, the gap, and a fix's version where one is known
    assert {by[k]["probed"] for k in by} == {r.probe.on for r in releases.RELEASES}
    assert by["kueue"]["newest"] == releases.BY_KEY["kueue"].probe.newest and by["kueue"]["gap"] == "newest"
    assert any(i.get("fixed_in") == "v0.20.0" and "#3888" in i["ref"] for i in by["kueue"]["known_issues"])
    tools = {t["component"]: t for t in out["tools"]}
    assert list(tools) == ["kubernetes", "etcd", "kustomize", "helm", "torch", "nccl"]
    assert tools["torch"]["gap"] == releases.gap(tools["torch"]["version"], tools["torch"]["newest"])
    assert tools["torch"]["gap"] == "newest" or tools["torch"]["held"]


def test_table_has_a_row_per_component_and_the_issues_in_full(capsys):
    assert main(["pins", "--cluster", "dev"]) == 0
    out = capsys.readouterr().out
    head, *rows = out.split("\n\n", 1)[0].splitlines()
    assert head.split() == ["COMPONENT", "VERSION", "NEWEST", "GAP", "CLUSTERS", "SOURCE", "ISSUES"]
    installed = [r.key for r in releases.RELEASES if r.key != "rdma-shared-device-plugin"]
    assert [r.split()[0] for r in rows] == installed + [p.key for p in releases.TOOLS]
    etcd = releases.TOOLS[1]
    assert f"  newest:    {etcd.probe.newest} ({releases.gap(etcd.version, etcd.probe.newest)}; probed" in out
    assert "  held:      Kubernetes v1.36.5 is built and tested with 3.6.8" in out
    assert "mitigation: base/multus/install raises the daemon's memory to 512Mi" in out


def test_an_unknown_cluster_is_refused(capsys):
    assert main(["pins", "--cluster", "nope"]) != 0
    assert "nope" in capsys.readouterr().err


def test_a_cluster_that_does_not_render_has_no_pins(repo_copy):
    (repo_copy.root / "base/whereabouts/install/kustomization.yaml").write_text("resources: [missing.yaml]\n")
    with pytest.raises(pins.PinsFailed, match="dev does not render"):
        pins.collect(repo_copy, ["dev"])
