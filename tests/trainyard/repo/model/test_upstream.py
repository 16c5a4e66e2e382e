"""Upstream releases rendered offline from their Go modules with the real kustomize and Helm, as
Argo CD's repo server renders them; what cannot be rendered so is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.trainyard.repo.conftest import edit
from trainyard.contract.errors import UserError
from trainyard.repo.model import gomodules, releases, repository, upstream

REPO_ROOT = Path(__file__).resolve().parents[4]
CRD = "CustomResourceDefinition"


pytestmark = pytest.mark.usefixtures("upstream_tools")


def _app(name: str) -> dict:
    for path in (REPO_ROOT / "base").glob("*/application.yaml"):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(name)


def _render(name: str, kube_version: str = "1.33") -> list:
    doc = _app(name)
    _, resources = upstream.render_source(
        doc["spec"]["source"],
        app=name,
        namespace=doc["spec"]["destination"]["namespace"],
        kube_version=kube_version,
    )
    return resources


def _module(key: str) -> Path:
    r = releases.BY_KEY[key]
    return gomodules.module_dir(r.module, r.version, progress=lambda _: None)


def test_every_crd_of_every_cluster_is_a_whole_v1_crd(report):
    crds = {}
    for render in report.renders.values():
        for r in render.resources():
            if r.kind == CRD:
                crds[r.doc["metadata"]["name"]] = r.doc
    assert len(crds) == 31  # Trainer 3, JobSet 1, Kueue 11, v1 operator 6, cert-manager 6, Multus 1, Whereabouts 3
    for name, d in crds.items():
        spec = d["spec"]
        assert d["apiVersion"] == "apiextensions.k8s.io/v1"
        assert name == f"{spec['names']['plural']}.{spec['group']}"
        assert len([v for v in spec["versions"] if v.get("storage")]) == 1, name
        for v in spec["versions"]:
            assert v["schema"]["openAPIV3Schema"]["type"] == "object", (name, v["name"])
        assert "{{" not in yaml.safe_dump(d), name


def test_kueue_chart_crds_are_the_bases_with_the_conversion_webhook():
    """Helm's render of the packaged chart against config/components/crd/bases (controller-gen's
    output): the same CRDs, plus the conversion webhook the chart points at its service."""
    bases = {}
    for path in (_module("kueue") / "config/components/crd/bases").glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        bases[doc["metadata"]["name"]] = doc
    chart = {r.doc["metadata"]["name"]: r.doc for r in _render("trainyard-kueue") if r.kind == CRD}
    assert chart.keys() == bases.keys()
    webhooks = set()
    for name, doc in chart.items():
        conversion = doc["spec"].pop("conversion", None)
        if conversion:
            webhooks.add(doc["spec"]["names"]["kind"])
            assert conversion["webhook"]["clientConfig"]["service"] == {
                "name": "kueue-webhook-service",
                "namespace": "kueue-system",
                "path": "/convert",
            }
        assert doc["spec"] == bases[name]["spec"], name
        # the chart and app versions the release's packaging gives (hack/helm-chart-package.sh)
        assert doc["metadata"]["labels"]["helm.sh/chart"] == "kueue-0.19.2"
        assert doc["metadata"]["labels"]["app.kubernetes.io/version"] == "v0.19.2"
    # the CRDs Kueue's certificate rotator injects its CA into (kueue@v0.19.2:pkg/util/cert/cert.go)
    assert webhooks == {"Workload", "LocalQueue", "ClusterQueue", "Cohort", "MultiKueueCluster"}


def test_kueue_runs_the_image_its_packaging_pins():
    (manager,) = [r for r in _render("trainyard-kueue") if r.kind == "Deployment"]
    (c,) = [c for c in manager.doc["spec"]["template"]["spec"]["containers"] if c["name"] == "manager"]
    assert c["image"] == "registry.k8s.io/kueue/kueue:v0.19.2"
    assert manager.origin == "sigs.k8s.io/kueue@v0.19.2:charts/kueue/templates/manager/manager.yaml"
    # the tree's own values name a staging image on a branch tag: the packaging step is what pins it
    values = yaml.safe_load((_module("kueue") / "charts/kueue/values.yaml").read_text())
    assert values["controllerManager"]["manager"]["image"]["tag"] == "release-0.19"


def test_cert_manager_is_the_packaged_chart_with_the_applications_values():
    resources = _render("trainyard-cert-manager")
    crds = [r for r in resources if r.kind == CRD]
    assert len(crds) == 6
    for r in crds:
        assert r.doc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}  # crds.keep
        assert r.doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "cert-manager"  # releaseName
        assert r.doc["metadata"]["labels"]["helm.sh/chart"] == "cert-manager-v1.21.2"
    images = {
        c["image"]
        for r in resources
        if r.kind in ("Deployment", "Job")
        for c in r.doc["spec"]["template"]["spec"]["containers"]
    }
    assert images == {
        f"quay.io/jetstack/cert-manager-{n}:v1.21.2" for n in ("controller", "webhook", "cainjector", "startupapicheck")
    }


def test_trainer_installs_jobset_built_from_its_tag():
    """The trainer overlay fetches JobSet's release asset by URL; it is built from the jobset module
    as JobSet's `make artifacts` builds it, then the overlay renames the image."""
    resources = _render("trainyard-trainer")
    (jobset,) = [r for r in resources if r.kind == "Deployment" and r.name == "jobset-controller-manager"]
    assert jobset.namespace == "kubeflow-system"
    (c,) = jobset.doc["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "registry.k8s.io/jobset/jobset:v0.12.0"
    assert jobset.origin.startswith(
        "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"
    )
    (trainer,) = [r for r in resources if r.kind == "Deployment" and r.name == "kubeflow-trainer-controller-manager"]
    assert trainer.doc["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v2.3.0")
    assert trainer.origin.startswith("github.com/kubeflow/trainer/v2@v2.3.0:manifests/base/manager/")
    assert not [r for r in resources if r.kind == "Namespace" and r.name == "jobset-system"]  # the overlay drops it


def test_renders_are_copies():
    first = _render("trainyard-training-operator")
    first[0].doc["metadata"]["name"] = "changed"
    assert _render("trainyard-training-operator")[0].doc["metadata"]["name"] != "changed"


def test_charts_get_the_clusters_kubernetes_version():
    """--kube-version reaches the chart: cert-manager's kubeVersion constraint (>= 1.22.0-0) refuses an
    older cluster, as Argo CD's render would."""
    upstream.clear_cache()
    with pytest.raises(upstream.UpstreamError, match=r"helm template failed: .*kubeVersion"):
        _render("trainyard-cert-manager", kube_version="1.21")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"targetRevision": "v1.15.3"},
            r"chart cert-manager v1\.15\.3 of https://charts\.jetstack\.io is not a pinned",
        ),
        ({"chart": "cert-manager-csi"}, r"chart cert-manager-csi v1\.21\.2 .* is not a pinned release"),
        ({"helm": {"valueFiles": ["x.yaml"]}}, r"spec\.source\.helm\.valueFiles is not rendered offline"),
        ({"kustomize": {"images": ["x"]}}, r"spec\.source\.kustomize on an upstream source is not rendered"),
        ({"helm": {"parameters": [{"name": "a", "value": "1"}]}}, r"spec\.source\.helm\.parameters is not rendered"),
        ({"helm": {"values": "a: 1"}}, r"spec\.source\.helm\.values is not rendered offline"),
    ],
)
def test_what_is_not_pinned_or_not_followed_is_refused(change, message):
    source = dict(_app("trainyard-cert-manager")["spec"]["source"]) | change
    with pytest.raises(upstream.UpstreamError, match=message):
        upstream.render_source(source, app="x", namespace="cert-manager", kube_version="1.33")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"repoURL": "https://github.com/kubeflow/trainer.git", "targetRevision": "master", "path": "manifests"},
         r"trainer\.git at master is not a pinned release .*pins this repository at: v2\.3\.0, v1\.9\.4"),
        ({"repoURL": "https://github.com/kubeflow/trainer.git", "targetRevision": "v2.3.0", "path": "../../x"},
         r"path '\.\./\.\./x' is not a folder of github\.com/kubeflow/trainer/v2@v2\.3\.0"),
        ({"repoURL": "https://github.com/example/unknown.git", "targetRevision": "v1.0.0", "path": "."},
         r"unknown\.git at v1\.0\.0 is not a pinned release .*at: none"),
    ],
)  # fmt: skip
def test_git_sources_must_be_pinned_releases(source, message):
    with pytest.raises(upstream.UpstreamError, match=message):
        upstream.render_source(source, app="x", namespace="x", kube_version="1.33")


def test_a_remote_url_of_no_pinned_release_is_refused(repo_copy):
    edit(repo_copy, "base/multus/install/kustomization.yaml", "multus-cni/v4.3.0/", "multus-cni/master/")
    with pytest.raises(upstream.UpstreamError, match=r"multus-cni/master/.* is not from a pinned release .*v4\.3\.0"):
        upstream.render_local(repo_copy, repo_copy.root / "base/multus/install")
    raw = "https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/master"
    edit(repo_copy, "base/multus/install/kustomization.yaml", raw, "https://example.com/x")
    with pytest.raises(upstream.UpstreamError, match=r"https://example\.com/x.* cannot read offline"):
        upstream.render_local(repo_copy, repo_copy.root / "base/multus/install")


def test_local_upstream_objects_name_the_url_they_came_from():
    resources = upstream.render_local(repository.load(REPO_ROOT), REPO_ROOT / "base/multus/install")
    (ds,) = [r for r in resources if r.kind == "DaemonSet"]
    assert ds.origin == (
        "https://raw.githubusercontent.com/k8snetworkplumbingwg/multus-cni/v4.3.0/deployments/multus-daemonset-thick.yml"
    )
    (c,) = ds.doc["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0-thick"
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"] == "512Mi"


def test_renders_are_kept_in_the_build_cache(tmp_path, monkeypatch):
    """A second process (the in-process cache cleared) reads the render back without Helm; the
    objects and their origins are the same."""
    from trainyard.repo.model import kustomize

    monkeypatch.setattr(kustomize, "_disk", kustomize.disk_cache())  # the suite's, back after the test
    kustomize.use_disk_cache(tmp_path)
    try:
        upstream.clear_cache()
        first = _render("trainyard-kueue")
        upstream.clear_cache()

        def no_helm(*_a, **_k):
            raise AssertionError("helm ran although the render was in the build cache")

        monkeypatch.setattr(upstream, "_helm", no_helm)
        again = _render("trainyard-kueue")
        assert [(r.doc, r.origin) for r in again] == [(r.doc, r.origin) for r in first]
        assert kustomize.disk_cache().hits >= 1
        upstream.clear_cache()
        with pytest.raises(AssertionError, match="helm ran"):  # another Kubernetes version is another render
            _render("trainyard-kueue", kube_version="1.34")
    finally:
        upstream.clear_cache()


@pytest.mark.parametrize(
    "text",
    ["- a\n- b\n", "resources: https://x\n", "resources: {https://x: 1}\n", "\ufeff\x00\xff", ": : :\n", "[unclosed\n"],
)
def test_a_broken_kustomization_is_left_to_kustomize(repo_copy, text):
    """A platform kustomization that is not a mapping of lists is left to kustomize, whose refusal
    names the folder: never a traceback."""
    (repo_copy.root / "base/multus/install/kustomization.yaml").write_text(text, encoding="utf-8", errors="replace")
    with pytest.raises(UserError, match=r"base/multus/install.*kustomize build failed"):
        upstream.render_local(repo_copy, repo_copy.root / "base/multus/install")
