"""trainyard render: the emulated Argo CD on the real repository, with the real kustomize."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import pytest

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.cli import main
from trainyard.repo.cli import _use_cache
from trainyard.repo.model import kustomize, repository, upstream
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import app_render, applications, appset, go_path

CLUSTERS = ("dev", "prod-roce", "prod-ib")
EXAMPLE_JOBS = {"dev": "mnist-ddp", "prod-roce": "llama-finetune", "prod-ib": "horovod"}


def test_every_cluster_renders_without_problems(report):
    assert sorted(report.renders) == sorted(CLUSTERS)
    for cluster, render in report.renders.items():
        assert render.problems == [], cluster


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_applications_follow_the_waves(report, cluster):
    render = report.renders[cluster]
    waves = {a.name: a.app.wave for a in render.apps}
    assert [a.app.wave for a in render.apps] == sorted(a.app.wave for a in render.apps)
    # CRD providers first, then namespaces, then networks, the webhook, runtimes and queues, jobs last
    assert waves["trainyard-training-operator"] < waves["trainyard-namespaces"]
    assert waves["trainyard-trainer"] < waves["trainyard-runtimes"]
    assert waves["trainyard-kueue"] < waves["trainyard-namespaces"] < waves["trainyard-queues"]
    assert waves["trainyard-multus"] < waves["trainyard-networks"]
    assert waves["trainyard-cert-manager"] < waves["trainyard-webhook"]
    assert waves["trainyard-namespaces"] < waves["trainyard-networks"] == waves["trainyard-webhook"]
    job_apps = [k for k in waves if k.startswith(f"{cluster}-job-")]
    assert f"{cluster}-job-{EXAMPLE_JOBS[cluster]}" in job_apps
    assert min(waves[k] for k in job_apps) > max(v for k, v in waves.items() if k not in job_apps)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_this_repository_is_followed_and_upstreams_are_pinned(report, repo, cluster):
    render = report.renders[cluster]
    for ar in render.apps:
        src = ar.app.source
        if ar.upstream and not ar.upstream[0].remote_resource:
            assert not repo.is_this_repo(src.get("repoURL"))
            assert all(u.revision[:1] == "v" or u.chart for u in ar.upstream), ar.name
        else:
            assert src["repoURL"] == repo.url and src["targetRevision"] == repo.revision
            assert src["path"].split("/")[1] == cluster or src["path"] == f"clusters/{cluster}"
    upstream = {a.name: a.upstream[0] for a in render.apps if a.upstream}
    assert upstream["trainyard-training-operator"].revision == "v1.9.4"
    assert upstream["trainyard-training-operator"].repo_url == "https://github.com/kubeflow/trainer.git"
    assert upstream["trainyard-training-operator"].path == "manifests/overlays/standalone"
    assert (upstream["trainyard-trainer"].revision, upstream["trainyard-trainer"].path) == (
        "v2.3.0",
        "manifests/overlays/manager",
    )
    assert (upstream["trainyard-kueue"].chart, upstream["trainyard-kueue"].revision) == ("kueue", "0.19.2")
    # Multus: the release tag's manifest, fetched by kustomize, with the image pinned by this repository
    multus = upstream["trainyard-multus"]
    assert multus.remote_resource and multus.revision == "v4.3.0"
    assert multus.images == ("ghcr.io/k8snetworkplumbingwg/multus-cni:v4.3.0-thick",)


def test_the_repo_url_has_one_source(repo):
    env = repository.read_env(repo.root / repository.REPO_ENV)
    assert env["repoURL"] == repo.url
    for path in list((repo.root / "base").rglob("*.yaml")) + list((repo.root / "clusters").rglob("*.yaml")):
        assert repo.url not in path.read_text(), f"{path}: the repository URL is written outside base/repo/repo.env"


def test_applicationset_makes_one_application_per_job_folder(report):
    render = report.renders["dev"]
    jobs = [a for a in render.apps if a.app.generated_by == "trainyard-jobs"]
    assert [a.name for a in jobs] == ["dev-job-mnist-ddp", "dev-job-smoke-ddp"]
    app = jobs[0].app
    assert app.source["path"] == "overlays/dev/jobs/mnist-ddp"
    assert app.resource.namespace == "argocd"
    assert app.project == "trainyard-jobs"
    # deleted in the background: Trainer v2.3.0 recreates a JobSet that a foreground deletion removes
    assert app.resource.doc["metadata"]["finalizers"] == ["resources-finalizer.argocd.argoproj.io/background"]
    assert app.spec["syncPolicy"]["automated"] == {"prune": True, "selfHeal": False}
    assert [r.describe() for r in jobs[0].resources] == ["PyTorchJob ml-training/mnist-ddp"]


def test_root_application_manages_itself_without_rendering_twice(report):
    root = report.renders["dev"].app("trainyard-root")
    assert root is not None and root.self_reference and root.path == "clusters/dev"


def test_resources_are_in_sync_order(report):
    webhook = report.renders["dev"].app("trainyard-webhook")
    kinds = [r.kind for r in webhook.resources]
    assert kinds.index("Namespace") == 0
    assert kinds.index("ConfigMap") < kinds.index("Service") < kinds.index("Deployment")
    # custom resources (cert-manager) after every built-in kind of the list
    assert kinds.index("Deployment") < kinds.index("Certificate")


def test_origins_name_the_files(report):
    job = report.renders["prod-roce"].app("prod-roce-job-llama-finetune").resources[0]
    assert job.source == "overlays/prod-roce/jobs/llama-finetune"
    assert job.origin == "base/jobs/pytorchjob/pytorchjob.yaml"
    assert "overlays/prod-roce/jobs/llama-finetune" in job.where()


def test_render_cli_writes_one_file_per_application(tmp_path, capsys):
    assert main(["render", "--cluster", "prod-ib", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "prod-ib: 17 Applications" in out  # trainyard-monitoring included: prod-ib runs Prometheus Operator
    files = sorted(p.name for p in (tmp_path / "prod-ib").iterdir())
    assert files[0] == "00-bootstrap.yaml" and "INDEX.txt" in files
    index = (tmp_path / "prod-ib" / "INDEX.txt").read_text()
    assert "v1.9.4" in index and "v2.3.0" in index and "overlays/prod-ib/jobs/horovod" in index
    job = next(p for p in (tmp_path / "prod-ib").iterdir() if p.name.endswith("prod-ib-job-horovod.yaml"))
    assert "kind: MPIJob" in job.read_text() and "generated by ApplicationSet trainyard-jobs" in job.read_text()


def test_render_reads_the_build_cache_and_prints_what_it_prints_without(tmp_path, capsys, monkeypatch):
    """A render from the cache prints, byte for byte, what the render that filled it printed
    (kustomize's key order kept), and that one built every folder, as ``--no-cache`` does."""
    monkeypatch.setattr(kustomize, "_disk", None)  # the suite's cache, back after the test

    def render(*flags: str) -> str:
        kustomize.clear_cache()  # a new process: only what is on disk is left
        upstream.clear_cache()
        assert main(["render", "--cluster", "prod-ib", *flags]) == 0
        return capsys.readouterr().out

    first = render("--cache-dir", str(tmp_path / "cache"))
    disk = kustomize.disk_cache()
    assert disk is not None and disk.hits == 0 and disk.misses > 0 and any((tmp_path / "cache").rglob("*.json"))
    second = render("--cache-dir", str(tmp_path / "cache"))
    assert kustomize.disk_cache().hits > 0 and kustomize.disk_cache().misses == 0
    assert first == second
    monkeypatch.setattr(kustomize, "_disk", None)  # a new process, with --no-cache
    _use_cache(argparse.Namespace(no_cache=True, cache_dir=str(tmp_path / "other")), repository.load(REPO_ROOT))
    assert kustomize.disk_cache() is None and not (tmp_path / "other").exists()


def test_render_cli_unknown_cluster(capsys):
    assert main(["render", "--cluster", "nowhere"]) == 2
    assert "clusters/nowhere: no such cluster" in capsys.readouterr().err


def test_render_cli_out_must_be_a_directory(tmp_path, capsys):
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    assert main(["render", "--cluster", "dev", "--out", str(file)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: --out {file}: exists and is not a directory; name a directory (created if missing)\n"
    )
    assert file.read_text() == "mine\n"
    assert main(["render", "--cluster", "dev", "--out", str(file / "below")]) == 2
    assert capsys.readouterr().err.startswith(f"error: --out {file / 'below'}: cannot write the render of dev:")


# ---------------------------------------------------------------------------------------------
# The git directory generator and Go templates, on their own


def test_go_path_match_star_stays_within_a_segment():
    assert go_path.path_match("overlays/dev/jobs/*", "overlays/dev/jobs/a")
    assert not go_path.path_match("overlays/dev/jobs/*", "overlays/dev/jobs/a/b")
    assert not go_path.path_match("overlays/dev/jobs/*", "overlays/dev/jobs")
    with pytest.raises(go_path.PatternNotRead, match="'\\['"):
        go_path.path_match("/d/[f|g]", "d/g")


def _appset(template_name: str, directories: list[dict], go: bool = True) -> Resource:
    spec = {
        "generators": [
            {"git": {"repoURL": "https://example.com/r.git", "revision": "main", "directories": directories}}
        ],
        "template": {
            "metadata": {"name": template_name},
            "spec": {"source": {"path": "{{ .path.path }}" if go else "{{path}}"}},
        },
    }
    if go:
        spec |= {"goTemplate": True, "goTemplateOptions": ["missingkey=error"]}
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": "s", "namespace": "argocd"},
    }
    return Resource(doc={**doc, "spec": spec}, origin="x.yaml")


@pytest.fixture
def fake_repo(tmp_path) -> repository.Repository:
    return repository.Repository(root=tmp_path, url="https://example.com/r", revision="main")


def test_directory_generator_params(fake_repo):
    dirs = ["a", "a/j", "a/j/one", "a/j/two_x", "a/j/.hidden", "a/j/one/deeper"]
    made = _appset("{{ index .path.segments 0 }}-{{ .path.basename }}", [{"path": "a/j/*"}])
    apps = appset.generate_applications(made, fake_repo, directories=dirs)
    assert [(a.name, a.doc["spec"]["source"]["path"]) for a in apps] == [("a-one", "a/j/one"), ("a-two_x", "a/j/two_x")]
    assert apps[0].namespace == "argocd"


@pytest.mark.parametrize(
    ("name", "directories", "go", "message"),
    [
        ("{{ .path.basenameNormalized }}", [{"path": "a/*"}], True,
         r"template expression '\{\{ \.path\.basenameNormalized \}\}' is not one trainyard renders offline; "
         r"the ones it renders: \{\{ \.path\.path \}\}"),
        ("{{ .path.basename | quote }}", [{"path": "a/*"}], True, "is not one trainyard renders offline"),
        ("n", [{"path": "a/*", "exclude": True}], True, r"directories\[0\]\.exclude is not rendered offline"),
        ("{{path.basename}}", [{"path": "a/*"}], False, "only goTemplate: true is rendered offline"),
    ],
)  # fmt: skip
def test_what_the_repository_does_not_use_is_refused_by_name(fake_repo, name, directories, go, message):
    with pytest.raises(applications.ArgoError, match=r"^x\.yaml: ApplicationSet s: .*" + message):
        appset.generate_applications(_appset(name, directories, go), fake_repo, directories=["a/b"])


def test_other_repositories_cannot_be_listed_offline(fake_repo):
    made = _appset("n", [{"path": "a/*"}])
    made.doc["spec"]["generators"][0]["git"]["repoURL"] = "https://other.example.com/x.git"
    with pytest.raises(applications.ArgoError, match="is not this repository"):
        appset.generate_applications(made, fake_repo, directories=["a/b"])


def test_kustomize_missing_is_a_clear_error(monkeypatch, tmp_path: Path):
    from trainyard.contract.errors import UserError
    from trainyard.repo.model import kustomize

    kustomize.command.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))  # no pinned kustomize beside it
    try:
        with pytest.raises(UserError, match="neither 'kustomize' nor 'kubectl'"):
            kustomize.command()
    finally:
        kustomize.command.cache_clear()


def test_the_pinned_kustomize_is_the_one_argo_cd_bundles():
    """make links the kustomize built from kube/kustomize/go.mod beside the venv's python; the render
    uses it, and it is the version the Go module pins (Argo CD v3.6.2's, argo-cd@v3.6.2:
    hack/tool-versions.sh KUSTOMIZE_VERSION), as the release table says."""
    from trainyard.repo.model import build_cache, kustomize, releases

    go_mod = (REPO_ROOT / "kube/kustomize/go.mod").read_text()
    pinned = re.search(r"^require sigs.k8s.io/kustomize/kustomize/v5 (v[\d.]+)$", go_mod, re.M)[1]
    assert pinned == "v5.8.3" and "kustomize (5.8.3)" in releases.BY_KEY["argocd"].why
    direct = (REPO_ROOT / "kube/go.mod").read_text().split("require (")[1].split(")")[0]
    assert "sigs.k8s.io/kustomize/kustomize" not in direct  # kubectl's own, indirect, stays apart
    command = kustomize.command()
    assert command == (str(Path(sys.executable).parent / "kustomize"), "build")
    assert build_cache.tool_version(command).splitlines()[-1] == pinned


def test_render_out_never_deletes_foreign_files(tmp_path, capsys):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "notes.txt").write_text("mine")
    assert main(["render", "--cluster", "dev", "--out", str(tmp_path)]) == 2
    assert "was not written by trainyard render" in capsys.readouterr().err
    assert (tmp_path / "dev" / "notes.txt").read_text() == "mine"


def test_a_link_out_of_the_repository_stops_every_application_of_it_as_argo_cd_does(repo_copy):
    os.symlink("/etc/passwd", repo_copy.root / "base" / "notes.txt")
    render = app_render.render_cluster(repo_copy, "dev")
    refused = [p.message for p in render.problems if "out-of-bounds symlinks" in p.message]
    ours = [ar for ar in render.apps if ar.path is not None and not ar.self_reference]
    assert ours and len(refused) == len(ours)
    assert all("file: base/notes.txt" in m for m in refused)


def test_the_checkout_is_searched_for_links_once_per_render(repo_copy, monkeypatch):
    calls = []
    real = app_render.out_of_bounds_symlink
    monkeypatch.setattr(app_render, "out_of_bounds_symlink", lambda root: calls.append(root) or real(root))
    render = app_render.render_cluster(repo_copy, "dev")
    assert not render.problems and len(render.apps) > 10
    assert calls == [repo_copy.root]  # the repo server checks a revision once, not per Application
