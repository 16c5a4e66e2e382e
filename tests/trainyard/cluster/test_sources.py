"""The upstream sources served under their own URLs (trainyard/cluster/sources.py), fetched by the
real clients Argo CD's repo-server runs, from a mount namespace whose /etc/hosts sends the host
names to the server as the repo-server's does: git (ls-remote and a shallow clone of a tag), curl
for the files and release assets kustomize fetches, and Helm pulling a chart from a chart
repository and from an OCI registry. What they get is what trainyard's offline render reads; what
no pinned release holds is refused, naming the URL."""

from __future__ import annotations

import filecmp
import hashlib
import os
import shutil
import ssl
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from trainyard.cluster import services, sources
from trainyard.cluster.processes import spawn, wait_for
from trainyard.repo.model import releases, upstream

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"),
]

TRAINER = releases.BY_KEY["trainer"]  # two pinned tags of one repository: Trainer v2 and the v1 operator
JOBSET = releases.BY_KEY["jobset"]
CHARTS = [r for r in releases.RELEASES if r.chart is not None]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("sources")
    end = sources.prepare(base / "tls")
    argv = [sys.executable, "-m", "trainyard.cluster.sources", "--address", end.address, "--cert", str(end.cert),
            "--key", str(end.key), "--cache", str(base / "built")]  # fmt: skip
    daemon = spawn("upstream-sources", argv, base / "sources.log")
    try:
        wait_for(
            lambda: _answers(end),
            timeout=30,
            what=f"the sources on {end.address}: {daemon.log_tail()}",
        )
        yield end, base
    finally:
        daemon.stop()


def _answers(end: sources.Endpoint) -> bool:
    try:
        return httpx.get(f"https://{end.address}/v2/", verify=_trust(end), timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _trust(end: sources.Endpoint) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(end.ca))


def _client(end: sources.Endpoint, script: str, cwd: Path) -> subprocess.CompletedProcess:
    """``script`` in a mount namespace of its own with the sources' hosts file and CA, as the
    repo-server runs (trainyard/cluster/argocd_daemons.py)."""
    env = dict(os.environ, SSL_CERT_FILE=str(end.ca), GIT_SSL_CAINFO=str(end.ca), HOME=str(cwd))
    env.pop("HTTPS_PROXY", None)
    argv = [*services.own_hosts(end.hosts_file), "sh", "-c", script]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_git_lists_every_pinned_tag_and_a_tag_clones_as_its_module(served, tmp_path):
    end, _ = served
    url = TRAINER.git
    listed = _client(end, f"git ls-remote --tags {url}", tmp_path)
    assert listed.returncode == 0, listed.stderr
    tags = {line.split("refs/tags/")[1] for line in listed.stdout.splitlines()}
    assert tags == {r.git_tag for r in releases.of_repo(url)} and TRAINER.git_tag in tags
    cloned = _client(end, f"git clone -q --depth 1 --branch {TRAINER.git_tag} {url} tree", tmp_path)
    assert cloned.returncode == 0, cloned.stderr
    module = upstream.release_tree(TRAINER)
    kustomization = "manifests/overlays/manager/kustomization.yaml"
    assert filecmp.cmp(tmp_path / "tree" / kustomization, module / kustomization, shallow=False)
    files = {p.relative_to(module).as_posix() for p in module.rglob("*") if p.is_file()}
    got = {p.relative_to(tmp_path / "tree").as_posix() for p in (tmp_path / "tree").rglob("*")
           if p.is_file() and ".git" not in p.relative_to(tmp_path / "tree").parts}  # fmt: skip
    assert got == files


def test_files_and_release_assets_are_what_the_offline_render_reads(served, tmp_path):
    end, _ = served
    module = upstream.release_tree(JOBSET)
    path = "config/default/kustomization.yaml"
    raw = f"https://raw.githubusercontent.com/kubernetes-sigs/jobset/{JOBSET.git_tag}/{path}"
    asset = JOBSET.assets[0]
    download = f"https://github.com/kubernetes-sigs/jobset/releases/download/{JOBSET.git_tag}/{asset.name}"
    curl = 'curl -fsS --cacert "$SSL_CERT_FILE"'  # curl reads its own CA bundle, not SSL_CERT_FILE
    got = _client(end, f"{curl} -o file {raw} && {curl} -o asset {download}", tmp_path)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "file").read_bytes() == (module / path).read_bytes()
    assert (tmp_path / "asset").read_text() == upstream.build_asset(JOBSET, asset)


@pytest.mark.parametrize("release", CHARTS, ids=lambda r: r.key)
def test_helm_pulls_each_pinned_chart_as_its_release_packages_it(served, tmp_path, release):
    end, _ = served
    chart = release.chart
    assert chart is not None
    if "://" in chart.repo:  # argo-cd@v3.6.2:util/helm/cmd.go Fetch and PullOCI
        pull = f"helm pull --repo {chart.repo} {chart.name} --version {chart.version} --destination out"
    else:
        pull = f"helm pull oci://{chart.repo}/{chart.name} --version {chart.version} --destination out"
    helm = str(Path(upstream.helm_command()).parent)
    got = _client(end, f"mkdir out && PATH={helm}:$PATH {pull}", tmp_path)
    assert got.returncode == 0, got.stderr
    (pulled,) = (tmp_path / "out").glob("*.tgz")
    expected = upstream.package_chart(release, chart, tmp_path)
    assert _members(pulled) == _members(expected)


def _members(tgz: Path) -> dict[str, str]:
    with tarfile.open(tgz) as tar:
        return {m.name: hashlib.sha256(tar.extractfile(m).read()).hexdigest() for m in tar if m.isfile()}


@pytest.mark.parametrize(
    ("method", "url", "status"),
    [
        ("GET", "https://github.com/kubeflow/trainer.git/info/refs?service=git-receive-pack", 403),  # no push
        ("GET", "https://raw.githubusercontent.com/kubernetes-sigs/jobset/v0.0.1/README.md", 404),  # no such pin
        ("GET", "https://raw.githubusercontent.com/kubernetes-sigs/jobset/{jobset}/%2e%2e/%2e%2e/etc/passwd", 404),
        ("GET", "https://raw.githubusercontent.com/kubernetes-sigs/jobset/{jobset}/no/such/file", 404),
        ("GET", "https://github.com/someone/else.git/info/refs?service=git-upload-pack", 404),
        ("GET", "https://charts.jetstack.io/other-1.0.0.tgz", 404),
        ("GET", "https://registry.k8s.io/v2/kueue/charts/kueue/manifests/0.0.1", 404),
        ("GET", "https://elsewhere.example/", 404),
        ("PUT", "https://registry.k8s.io/v2/kueue/charts/kueue/manifests/0.19.2", 405),  # read-only
        ("POST", "https://charts.jetstack.io/index.yaml", 405),
    ],
)
def test_what_no_pinned_release_holds_is_refused_naming_it(served, method, url, status):
    end, _ = served
    url = url.format(jobset=JOBSET.git_tag)
    host = httpx.URL(url).host
    direct = httpx.URL(url).copy_with(host=end.address)
    with httpx.Client(verify=_trust(end), timeout=30) as client:
        r = client.request(method, direct, headers={"Host": host})
    assert r.status_code == status, r.text
    if status != 403:  # git http-backend's own refusal
        assert host in r.text and ("pinned release" if status == 404 else f"{method} is not served") in r.text
