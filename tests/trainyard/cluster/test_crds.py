"""The CRDs of the pinned releases: the pins agree with the Applications, and the CRDs, read from
the real Go modules (fetched and checked against kube/releases/go.sum), serve every kind the
repository applies.

The tests that read modules need Go (skipped with the reason without it) and the modules, from
the module cache or the Go module proxy.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
from pathlib import Path, PurePosixPath

import pytest
import yaml

from trainyard.cluster import components, crds
from trainyard.contract.errors import UserError
from trainyard.repo.model import repository
from trainyard.repo.upstream import argocd

REPO_ROOT = Path(__file__).resolve().parents[3]
RELEASES_MODULE = REPO_ROOT / "kube" / "releases"

# Kinds the controllers create at run time, beyond what the repository's files hold: Kueue's
# Workload for every job it queues, Trainer's JobSet for every TrainJob, whereabouts' IPPool for
# the ib-sriov attachments' address ranges (base/networks/ib-sriov), Argo CD's objects.
CREATED_AT_RUN_TIME = {
    ("kueue.x-k8s.io", "v1beta2", "Workload"),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
    ("whereabouts.cni.cncf.io", "v1alpha1", "IPPool"),
    ("argoproj.io", "v1alpha1", "Application"),
}


def _builtin(group: str) -> bool:
    # the core group, unqualified groups (apps, batch, policy) and *.k8s.io are kube-apiserver's
    # own; *.x-k8s.io are Kubernetes SIG projects served by CRDs
    return "." not in group or (group.endswith(".k8s.io") and not group.endswith(".x-k8s.io"))


def _gvk(doc: dict) -> tuple[str, str, str]:
    group, _, version = str(doc["apiVersion"]).rpartition("/")
    return group, version, str(doc["kind"])


def _applications() -> dict[str, tuple[Path, dict]]:
    out = {}
    for path in sorted((REPO_ROOT / "base").glob("*/application.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        out[doc["metadata"]["name"]] = (path, doc)
    return out


def _row(module: str) -> crds.Release:
    (row,) = [r for r in crds.RELEASES if r.module == module]
    return row


@pytest.fixture(scope="module")
def renders() -> dict[str, argocd.ClusterRender]:
    repo = repository.load(REPO_ROOT)
    try:
        return argocd.render_all(repo)
    except UserError as exc:
        pytest.fail(f"rendering the clusters needs the real kustomize: {exc}")


@pytest.fixture(scope="module")
def go() -> str:
    try:
        return components.go_binary()
    except UserError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def all_crds(go: str) -> list[dict]:
    return crds.release_crds(progress=lambda _: None)


# -- the pins, without Go ---------------------------------------------------------------------


def test_table_versions_are_the_applications_target_revisions():
    apps = _applications()
    source = {name: doc["spec"]["source"] for name, (_, doc) in apps.items()}
    assert source["trainyard-trainer"]["repoURL"] == "https://github.com/kubeflow/trainer.git"
    assert source["trainyard-trainer"]["targetRevision"] == _row("github.com/kubeflow/trainer/v2").version
    # the v1 operator's tags live in the kubeflow/trainer repository; its module keeps the old path
    assert source["trainyard-training-operator"]["repoURL"] == "https://github.com/kubeflow/trainer.git"
    assert (
        source["trainyard-training-operator"]["targetRevision"] == _row("github.com/kubeflow/training-operator").version
    )
    assert source["trainyard-whereabouts"]["repoURL"] == "https://github.com/k8snetworkplumbingwg/whereabouts.git"
    assert (
        source["trainyard-whereabouts"]["targetRevision"] == _row("github.com/k8snetworkplumbingwg/whereabouts").version
    )
    # the charts: Kueue's chart versions drop the tag's v (hack/helm-chart-package.sh), cert-manager's keep it
    kueue = _row("sigs.k8s.io/kueue")
    assert (source["trainyard-kueue"]["chart"], source["trainyard-kueue"]["targetRevision"]) == (
        kueue.chart,
        kueue.version.removeprefix("v"),
    )
    cert_manager = _row("github.com/cert-manager/cert-manager")
    assert (source["trainyard-cert-manager"]["chart"], source["trainyard-cert-manager"]["targetRevision"]) == (
        cert_manager.chart,
        cert_manager.version,
    )


def test_multus_pin_is_the_url_base_multus_install_applies():
    kustomization = yaml.safe_load((REPO_ROOT / "base/multus/install/kustomization.yaml").read_text())
    (url,) = kustomization["resources"]
    match = re.fullmatch(r"https://raw\.githubusercontent\.com/k8snetworkplumbingwg/multus-cni/([^/]+)/(.+)", url)
    assert match, url
    row = _row("gopkg.in/k8snetworkplumbingwg/multus-cni.v4")
    assert (match[1], match[2]) == (row.version, row.glob)


def test_helm_values_are_the_applications():
    apps = _applications()
    _, kueue = apps["trainyard-kueue"]
    assert kueue["spec"]["source"]["helm"]["releaseName"] == crds.KUEUE_HELM["releaseName"]
    assert kueue["spec"]["destination"]["namespace"] == crds.KUEUE_HELM["namespace"]
    helm = kueue["spec"]["source"]["helm"]
    assert not (set(helm) & {"values", "valuesObject", "parameters", "valueFiles"}), "values reach the CRDs?"
    _, cert_manager = apps["trainyard-cert-manager"]
    helm = cert_manager["spec"]["source"]["helm"]
    assert helm["releaseName"] == crds.CERT_MANAGER_HELM["releaseName"]
    assert helm["valuesObject"]["crds"] == {
        "enabled": crds.CERT_MANAGER_HELM["crds.enabled"],
        "keep": crds.CERT_MANAGER_HELM["crds.keep"],
    }
    assert not (set(helm) & {"values", "parameters", "valueFiles"})


def test_every_upstream_application_of_every_cluster_has_rows_at_its_pin(renders):
    """What sync applies: the upstream Applications as each cluster renders them (overlays included)."""
    seen = set()
    for cluster, render in renders.items():
        for ar in render.apps:
            if not ar.upstream:
                continue
            seen.add(ar.name)
            assert ar.name in crds.APPLICATIONS, f"{cluster}: {ar.name} installs CRDs crds.RELEASES does not list"
            versions = {r.version for r in crds.APPLICATIONS[ar.name]} | {
                r.version.removeprefix("v") for r in crds.APPLICATIONS[ar.name]
            }
            for up in ar.upstream:
                assert up.revision in versions, f"{cluster}: {ar.name} pins {up.revision}, crds.py {versions}"
    assert seen == set(crds.APPLICATIONS) - {crds.ARGOCD_INSTALL}


def test_go_mod_requires_each_release_at_its_pin_and_go_sum_holds_its_hashes():
    text = (RELEASES_MODULE / "go.mod").read_text(encoding="utf-8")
    required = dict(re.findall(r"^\s+(\S+) (v\S+)$", text, re.M))
    replaced = dict(re.findall(r"^replace (\S+) => \1 (v\S+)$", text, re.M))
    effective = required | replaced
    assert effective == {r.module: r.version for r in crds.RELEASES}
    lines = set((RELEASES_MODULE / "go.sum").read_text(encoding="utf-8").splitlines())
    for r in crds.RELEASES:
        assert any(line.startswith(f"{r.module} {r.version} h1:") for line in lines), r.module
        assert any(line.startswith(f"{r.module} {r.version}/go.mod h1:") for line in lines), r.module
    assert crds.go_sum().keys() == {(r.module, r.version) for r in crds.RELEASES}


def test_an_unknown_application_is_a_user_error():
    with pytest.raises(UserError, match="trainyard-kueue"):
        crds.release_crds("trainyard-nope")
    assert crds.for_application("trainyard-nope") == []


# -- the CRDs, read from the modules ----------------------------------------------------------


def test_every_crd_is_a_whole_v1_crd(all_crds):
    names = [d["metadata"]["name"] for d in all_crds]
    assert len(names) == len(set(names)) == 33
    for d in all_crds:
        spec = d["spec"]
        assert d["apiVersion"] == "apiextensions.k8s.io/v1" and d["kind"] == "CustomResourceDefinition"
        assert d["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
        assert spec["scope"] in ("Namespaced", "Cluster")
        assert [v["name"] for v in spec["versions"] if v.get("storage")], d["metadata"]["name"]
        assert len([v for v in spec["versions"] if v.get("storage")]) == 1
        for v in spec["versions"]:
            assert v["schema"]["openAPIV3Schema"]["type"] == "object", (d["metadata"]["name"], v["name"])
        assert "{{" not in yaml.safe_dump(d)


def test_every_kind_the_repository_applies_is_served(all_crds, renders):
    served = crds.kinds(all_crds)
    used = set()
    for render in renders.values():
        for r in [*render.root, *(x for ar in render.apps for x in ar.resources)]:
            used.add(_gvk(r.doc))
    # job bases that new-job scaffolds from are not in a cluster's render until a job uses them
    for path in (REPO_ROOT / "base" / "jobs").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                used.add(_gvk(doc))
    custom = {gvk for gvk in used if not _builtin(gvk[0])}
    assert {k for _, _, k in custom} >= {
        "TrainJob", "ClusterTrainingRuntime", "PyTorchJob", "MPIJob", "TFJob", "ClusterQueue", "LocalQueue",
        "ResourceFlavor", "Topology", "NetworkAttachmentDefinition", "Certificate", "Issuer", "Application",
        "ApplicationSet", "AppProject",
    }  # fmt: skip
    assert custom | CREATED_AT_RUN_TIME <= served, sorted((custom | CREATED_AT_RUN_TIME) - served)


def test_each_application_provides_the_groups_it_says(go):
    for name, (path, doc) in _applications().items():
        provides = doc["metadata"].get("annotations", {}).get("trainyard.dev/provides")
        if not provides:
            continue
        groups = {d["spec"]["group"] for d in crds.release_crds(name, progress=lambda _: None)}
        assert groups == set(provides.split(",")), path.relative_to(REPO_ROOT)


def test_the_files_read_are_the_ones_the_upstream_install_lists(go):
    """Where the CRD folder has a kustomization (the git sources, Argo CD's and JobSet's), the glob
    picks exactly its files; whereabouts' Application includes exactly its CRD files."""
    for row in crds.RELEASES:
        folder = crds.module_dir(row, progress=lambda _: None)
        picked = {p.relative_to(folder).as_posix() for p in folder.glob(row.glob)}
        glob_dir = PurePosixPath(row.glob).parent
        for k_dir in (glob_dir, glob_dir.parent):
            kustomization = folder / k_dir / "kustomization.yaml"
            if kustomization.is_file():
                listed = {
                    (k_dir / res).as_posix()
                    for res in yaml.safe_load(kustomization.read_text())["resources"]
                    if res.endswith(".yaml")
                }
                assert picked == listed, (row.where, listed)
                break
    apps = _applications()
    include = apps["trainyard-whereabouts"][1]["spec"]["source"]["directory"]["include"]
    row = _row("github.com/k8snetworkplumbingwg/whereabouts")
    crd_files = {n for n in include.strip("{}").split(",") if fnmatch.fnmatch(f"doc/crds/{n}", row.glob)}
    folder = crds.module_dir(row, progress=lambda _: None)
    assert crd_files == {p.name for p in folder.glob(row.glob)} and len(crd_files) == 2


def test_git_applications_sync_a_path_of_the_module(go):
    """The module zip is the repository tree at the tag the Application syncs."""
    for name, (_, doc) in _applications().items():
        source = doc["spec"]["source"]
        if "path" not in source or not source["repoURL"].startswith("https://github.com/"):
            continue
        (row,) = [r for r in crds.APPLICATIONS[name] if r.version == source["targetRevision"]]
        assert (crds.module_dir(row, progress=lambda _: None) / source["path"]).is_dir(), name


def test_jobset_is_the_version_the_trainer_release_installs(go):
    trainer = crds.module_dir(_row("github.com/kubeflow/trainer/v2"), progress=lambda _: None)
    kustomization = yaml.safe_load((trainer / "manifests/third-party/jobset/kustomization.yaml").read_text())
    jobset = _row("sigs.k8s.io/jobset").version
    assert kustomization["resources"] == [
        f"https://github.com/kubernetes-sigs/jobset/releases/download/{jobset}/manifests.yaml"
    ]
    assert [i["newTag"] for i in kustomization["images"]] == [jobset]


def test_kueue_chart_crds_are_the_bases_with_the_conversion_webhook(go):
    """The rendered chart templates against config/components/crd/bases (plain controller-gen
    output): the same CRDs, plus the conversion webhook the chart points at its service."""
    kueue = _row("sigs.k8s.io/kueue")
    folder = crds.module_dir(kueue, progress=lambda _: None)
    bases = {}
    for path in (folder / "config/components/crd/bases").glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        bases[doc["metadata"]["name"]] = doc
    chart = {d["metadata"]["name"]: d for d in crds.release_crds("trainyard-kueue", progress=lambda _: None)}
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
        assert doc["metadata"]["annotations"] == bases[name]["metadata"]["annotations"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/version"] == kueue.version
    # the CRDs Kueue's certificate rotator injects its CA into (kueue@v0.19.2:pkg/util/cert/cert.go)
    assert webhooks == {"Workload", "LocalQueue", "ClusterQueue", "Cohort", "MultiKueueCluster"}


def test_cert_manager_labels_are_rendered(go):
    docs = crds.release_crds("trainyard-cert-manager", progress=lambda _: None)
    for d in docs:
        assert d["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        labels = d["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "cert-manager"
        assert labels["helm.sh/chart"] == "cert-manager-v1.15.3"


def test_copies_are_returned_and_the_releases_module_is_left_as_it_was(go):
    before = {n: (RELEASES_MODULE / n).read_bytes() for n in ("go.mod", "go.sum")}
    first = crds.release_crds("trainyard-multus", progress=lambda _: None)
    first[0]["spec"]["group"] = "changed.example"
    assert crds.release_crds("trainyard-multus", progress=lambda _: None)[0]["spec"]["group"] == "k8s.cni.cncf.io"
    assert {n: (RELEASES_MODULE / n).read_bytes() for n in ("go.mod", "go.sum")} == before


# -- fetching ----------------------------------------------------------------------------------


def _releases_copy(tmp_path: Path, go_sum: str | None = None) -> Path:
    folder = tmp_path / "releases"
    folder.mkdir()
    shutil.copy(RELEASES_MODULE / "go.mod", folder / "go.mod")
    (folder / "go.sum").write_text(go_sum if go_sum is not None else (RELEASES_MODULE / "go.sum").read_text())
    return folder


def test_first_fetch_says_so_and_is_checked(go, tmp_path, monkeypatch):
    """A fresh module cache, filled from the real one as a file:// proxy: one progress line on the
    first fetch, none on the second."""
    real_cache = crds._cache_dir(go)
    row = _row("sigs.k8s.io/jobset")
    crds.module_dir(row, progress=lambda _: None)  # in the real cache first
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    monkeypatch.setenv("GOPROXY", (real_cache / "cache" / "download").as_uri())
    monkeypatch.setenv("GOFLAGS", "-modcacherw")  # so that tmp_path can be removed
    said: list[str] = []
    folder = crds.module_dir(row, progress=said.append)
    assert folder.is_relative_to(tmp_path) and (folder / row.glob.rsplit("/", 1)[0]).is_dir()
    assert said == ["fetching sigs.k8s.io/jobset@v0.12.0 (Go module, checked against kube/releases/go.sum)"]
    crds.module_dir(row, progress=said.append)
    assert len(said) == 1


def test_a_hash_that_is_not_go_sums_is_refused(go, tmp_path, monkeypatch):
    row = _row("sigs.k8s.io/jobset")
    crds.module_dir(row, progress=lambda _: None)
    wrong = re.sub(
        r"^(sigs\.k8s\.io/jobset v0\.12\.0 h1:)\S+$",
        r"\g<1>AAAAV0px8Ongq/RXmJg6V0w2UC67aiR+rCMD06vhQQQ=",
        (RELEASES_MODULE / "go.sum").read_text(),
        flags=re.M,
    )
    monkeypatch.setattr(crds, "RELEASES_MODULE", _releases_copy(tmp_path, wrong))
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(UserError, match=re.escape("cannot fetch sigs.k8s.io/jobset@v0.12.0") + ".*checksum mismatch"):
        crds.module_dir(row, progress=lambda _: None)


def test_a_release_go_sum_does_not_pin_is_refused_before_fetching(tmp_path, monkeypatch):
    monkeypatch.setattr(crds, "RELEASES_MODULE", _releases_copy(tmp_path, ""))
    with pytest.raises(UserError, match=re.escape("kube/releases/go.sum has no hash for sigs.k8s.io/jobset v0.12.0")):
        crds.module_dir(_row("sigs.k8s.io/jobset"), progress=lambda _: None)


def test_a_failed_download_is_a_user_error(go, tmp_path, monkeypatch):
    row = crds.Release("x", "sigs.k8s.io/jobset", "v0.0.1-trainyard-none", "*.yaml")
    line = f"{row.module} {row.version} h1:AAAAV0px8Ongq/RXmJg6V0w2UC67aiR+rCMD06vhQQQ=\n"
    monkeypatch.setattr(crds, "RELEASES_MODULE", _releases_copy(tmp_path, line))
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(UserError, match=r"cannot fetch sigs.k8s.io/jobset@v0.0.1-trainyard-none .*GOPROXY"):
        crds.module_dir(row, progress=lambda _: None)


def test_without_go_the_error_says_to_install_it(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(gomodules, "GO_FALLBACKS", ())
    with pytest.raises(UserError, match=r"install Go >= 1\.26"):
        crds.module_dir(_row("sigs.k8s.io/jobset"), progress=lambda _: None)
