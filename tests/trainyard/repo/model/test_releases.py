"""The release table agrees with everything that pins a version: the Applications, the URLs the
repository's kustomizations list, kube/releases/go.mod and go.sum, kube/controllers/go.mod; and
the Go modules are fetched only at go.sum's hashes.

The tests that read modules need Go (skipped with the reason without it) and the modules, from the
module cache or the Go module proxy.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from trainyard.cluster import components
from trainyard.contract import nccl
from trainyard.contract.errors import UserError
from trainyard.repo.model import declared, gomodules, releases, repository, upstream
from trainyard.repo.upstream import app_render, applications

REPO_ROOT = Path(__file__).resolve().parents[4]
RELEASES_MODULE = REPO_ROOT / "kube" / "releases"


@pytest.fixture(scope="module")
def go() -> str:
    try:
        return gomodules.go_binary()
    except UserError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def renders(go) -> dict[str, applications.ClusterRender]:
    repo = repository.load(REPO_ROOT)
    return {c: app_render.render_cluster(repo, c) for c in repo.clusters()}


def _applications() -> dict[str, dict]:
    out = {}
    for path in sorted((REPO_ROOT / "base").glob("*/application.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        out[doc["metadata"]["name"]] = doc
    return out


def _urls() -> list[str]:
    out = []
    for path in sorted((REPO_ROOT / "base").rglob("kustomization.yaml")):
        for entry in yaml.safe_load(path.read_text(encoding="utf-8")).get("resources") or []:
            if str(entry).startswith("https://"):
                out.append(entry)
    return out


# -- the pins, without Go ---------------------------------------------------------------------


def test_each_upstream_application_names_a_release_at_its_pin():
    sources = {name: doc["spec"]["source"] for name, doc in _applications().items()}
    assert (
        releases.by_git(sources["trainyard-trainer"]["repoURL"], sources["trainyard-trainer"]["targetRevision"])
        is (releases.BY_KEY["trainer"])
    )
    # the v1 operator's tags live in the kubeflow/trainer repository; its module keeps the old path
    op = sources["trainyard-training-operator"]
    assert releases.by_git(op["repoURL"], op["targetRevision"]) is releases.BY_KEY["training-operator"]
    for name, key in (("trainyard-kueue", "kueue"), ("trainyard-cert-manager", "cert-manager")):
        s = sources[name]
        assert releases.by_chart(s["repoURL"], s["chart"], s["targetRevision"]) is releases.BY_KEY[key], name
    # Kueue's chart versions drop the tag's v (hack/helm-chart-package.sh), cert-manager's keep it
    assert releases.BY_KEY["kueue"].chart.version == releases.BY_KEY["kueue"].version.removeprefix("v")
    assert releases.BY_KEY["cert-manager"].chart.version == releases.BY_KEY["cert-manager"].version


def test_each_upstream_url_names_a_release_at_its_pin():
    urls = _urls()
    assert len(urls) == 8  # multus's one file, whereabouts' five, the RDMA plugin's two
    for url in urls:
        release = releases.of_origin(url)
        assert release is not None, url
        assert f"/{release.git_tag}/" in url


def test_git_spellings_of_one_repository_are_one_release():
    for url in ("https://github.com/kubeflow/trainer", "https://github.com/Kubeflow/Trainer.git/",
                "git@github.com:kubeflow/trainer.git"):  # fmt: skip
        assert releases.by_git(url, "v2.3.0") is releases.BY_KEY["trainer"], url
    assert releases.by_git("https://github.com/kubeflow/trainer.git", "master") is None
    assert releases.by_git("https://gitlab.com/kubeflow/trainer.git", "v2.3.0") is None
    assert releases.by_chart("oci://registry.k8s.io/kueue/charts", "kueue", "0.19.2") is releases.BY_KEY["kueue"]
    assert releases.by_chart("registry.k8s.io/kueue/charts", "kueue", "v0.19.2") is None


def test_every_row_says_why_and_is_reviewed():
    for r in releases.RELEASES:
        assert r.why and r.supported and r.github, r.key
    for key, version, issues, probe in _pins():
        for issue in issues:
            assert issue.ref and issue.what and issue.mitigation, (key, issue)
            # a fix an installed release's pin has reached is no longer its issue (Kubernetes' is kept:
            # the clusters declare a minor version, whose earlier patches still carry it)
            if issue.fixed_in and key in releases.BY_KEY:
                assert releases.version_key(version) < releases.version_key(issue.fixed_in), (key, issue.ref)
        assert releases.version_key(probe.newest) >= releases.version_key(version), key
        # below the newest served only with a reason
        assert bool(probe.held) == (releases.gap(version, probe.newest) != "newest"), key


def _pins() -> list[tuple[str, str, tuple[releases.Issue, ...], releases.Probe]]:
    return [(r.key, r.version, r.issues, r.probe) for r in (*releases.RELEASES, *releases.TOOLS)]


def test_no_probe_is_older_than_the_review_period():
    """The newest versions are recorded, so `trainyard pins` runs offline; they age. Probe again as
    docs/development.md says, and record what the registries serve now."""
    today = datetime.date.today()
    for key, _, _, probe in _pins():
        age = (today - datetime.date.fromisoformat(probe.on)).days
        assert 0 <= age <= releases.REVIEW_DAYS, (
            f"{key}: the newest version was last probed on {probe.on}, {age} days ago (at most "
            f"{releases.REVIEW_DAYS}): probe again and update trainyard/repo/model/releases.py"
        )


@pytest.mark.parametrize(
    ("pinned", "newest", "gap"),
    [("v1.36.5", "v1.37.2", "1 minor"), ("2.13.0", "2.15.0", "2 minor"), ("v3.6.8", "v3.6.17", "9 patch"),
     ("v4.3.2", "v4.3.2", "newest"), ("v0.19.2", "v1.0.0", "1 major")],
)  # fmt: skip
def test_the_gap_is_the_first_part_that_differs(pinned, newest, gap):
    assert releases.gap(pinned, newest) == gap


def test_a_rule_for_a_known_issue_stops_once_the_pin_reaches_its_fix(monkeypatch):
    issue = releases.KUEUE_MANAGER_ENTRY
    assert releases.still_open("kueue", issue)
    kueue = releases.BY_KEY["kueue"]
    monkeypatch.setitem(releases.BY_KEY, "kueue", dataclasses.replace(kueue, version=issue.fixed_in))
    assert not releases.still_open("kueue", issue)


def test_the_tool_pins_are_the_files_pins():
    """Each tool row's version is what its file pins (the row says where)."""
    kube = (REPO_ROOT / "kube" / "go.mod").read_text(encoding="utf-8")
    by = {p.key: p.version for p in releases.TOOLS}
    assert re.search(rf"^\s+k8s\.io/kubernetes {re.escape(by['kubernetes'])}$", kube, re.M)
    assert by["kubernetes"] == components.KUBERNETES_VERSION
    assert re.search(rf"^\s+go\.etcd\.io/etcd/server/v3 {re.escape(by['etcd'])}$", kube, re.M)
    kustomize = (REPO_ROOT / "kube" / "kustomize" / "go.mod").read_text(encoding="utf-8")
    assert f"sigs.k8s.io/kustomize/kustomize/v5 {by['kustomize']}" in kustomize
    assert f"helm.sh/helm/v4 {by['helm']}" in (REPO_ROOT / "kube" / "helm" / "go.mod").read_text(encoding="utf-8")
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert f"torch=={by['torch']}" in extras["optional-dependencies"]["trainer"]
    assert f"ARG NCCL_VERSION={by['nccl']}\n" in (REPO_ROOT / "trainer" / "Dockerfile").read_text(encoding="utf-8")
    assert str(nccl.TRAINER_NCCL) == by["nccl"]


def test_go_mod_requires_each_release_at_its_pin_and_go_sum_holds_its_hashes():
    text = (RELEASES_MODULE / "go.mod").read_text(encoding="utf-8")
    required = dict(re.findall(r"^\s+(\S+) (v\S+)$", text, re.M))
    assert "replace" not in text
    assert required == {r.module: r.version for r in releases.RELEASES}
    assert gomodules.go_sum().keys() == {(r.module, r.version) for r in releases.RELEASES}


def test_the_controllers_module_builds_the_pinned_releases():
    text = (REPO_ROOT / "kube" / "controllers" / "go.mod").read_text(encoding="utf-8")
    head = text.split("require (", 1)[1].split("\n)", 1)[0]
    for module, version in re.findall(r"^\s+(\S+) (v\S+)\s*$", head, re.M):
        assert releases.BY_MODULE[module].version == version, module


# -- every row is used, and renders ------------------------------------------------------------


def test_every_release_is_installed_by_some_cluster(renders):
    used = set()
    for render in renders.values():
        for r in render.resources():
            release = releases.of_upstream(r)
            if release:
                used.add(release.key)
    # Argo CD is installed before the bootstrap; Prometheus Operator outside the repository, where a
    # cluster's facts say it runs (its CRDs serve the monitors of those clusters)
    assert used == {r.key for r in releases.RELEASES} - {"argocd", "prometheus-operator"}
    operator = {d["spec"]["group"] for d in upstream.bootstrap_crds(True)} - {"argoproj.io"}
    assert operator == {declared.MONITORING_GROUP}
    assert any(r.group in operator for render in renders.values() for r in render.resources())


# -- fetching ----------------------------------------------------------------------------------


def _releases_copy(tmp_path: Path, go_sum: str | None = None) -> Path:
    folder = tmp_path / "releases"
    folder.mkdir()
    shutil.copy(RELEASES_MODULE / "go.mod", folder / "go.mod")
    (folder / "go.sum").write_text(go_sum if go_sum is not None else (RELEASES_MODULE / "go.sum").read_text())
    return folder


JOBSET = releases.BY_KEY["jobset"]


def test_first_fetch_says_so_and_is_checked(go, tmp_path, monkeypatch):
    """A fresh module cache, filled from the real one as a file:// proxy: one progress line on the
    first fetch, none on the second."""
    real_cache = gomodules.cache_dir(go)
    gomodules.module_dir(JOBSET.module, JOBSET.version, progress=lambda _: None)  # in the real cache first
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    monkeypatch.setenv("GOPROXY", (real_cache / "cache" / "download").as_uri())
    monkeypatch.setenv("GOFLAGS", "-modcacherw")  # so that tmp_path can be removed
    said: list[str] = []
    folder = gomodules.module_dir(JOBSET.module, JOBSET.version, progress=said.append)
    assert folder.is_relative_to(tmp_path) and (folder / "config/default/kustomization.yaml").is_file()
    assert said == ["fetching sigs.k8s.io/jobset@v0.12.0 (Go module, checked against kube/releases/go.sum)"]
    gomodules.module_dir(JOBSET.module, JOBSET.version, progress=said.append)
    assert len(said) == 1


def test_a_hash_that_is_not_go_sums_is_refused(go, tmp_path, monkeypatch):
    gomodules.module_dir(JOBSET.module, JOBSET.version, progress=lambda _: None)
    wrong = re.sub(
        r"^(sigs\.k8s\.io/jobset v0\.12\.0 h1:)\S+$",
        r"\g<1>AAAAV0px8Ongq/RXmJg6V0w2UC67aiR+rCMD06vhQQQ=",
        (RELEASES_MODULE / "go.sum").read_text(),
        flags=re.M,
    )
    monkeypatch.setattr(gomodules, "RELEASES_MODULE", _releases_copy(tmp_path, wrong))
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(UserError, match=re.escape("cannot fetch sigs.k8s.io/jobset@v0.12.0") + ".*checksum mismatch"):
        gomodules.module_dir(JOBSET.module, JOBSET.version, progress=lambda _: None)


def test_a_release_go_sum_does_not_pin_is_refused_before_fetching(tmp_path, monkeypatch):
    monkeypatch.setattr(gomodules, "RELEASES_MODULE", _releases_copy(tmp_path, ""))
    with pytest.raises(UserError, match=re.escape("kube/releases/go.sum has no hash for sigs.k8s.io/jobset v0.12.0")):
        gomodules.module_dir(JOBSET.module, JOBSET.version, progress=lambda _: None)


def test_a_failed_download_is_a_user_error(go, tmp_path, monkeypatch):
    version = "v0.0.1-trainyard-none"
    line = f"{JOBSET.module} {version} h1:AAAAV0px8Ongq/RXmJg6V0w2UC67aiR+rCMD06vhQQQ=\n"
    monkeypatch.setattr(gomodules, "RELEASES_MODULE", _releases_copy(tmp_path, line))
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(UserError, match=r"cannot fetch sigs.k8s.io/jobset@v0.0.1-trainyard-none .*GOPROXY"):
        gomodules.module_dir(JOBSET.module, version, progress=lambda _: None)


def test_without_go_the_error_says_to_install_it(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(gomodules, "GO_FALLBACKS", ())
    with pytest.raises(UserError, match=r"install Go >= 1\.26"):
        gomodules.module_dir(JOBSET.module, JOBSET.version, progress=lambda _: None)
