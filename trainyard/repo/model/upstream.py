"""Upstream sources rendered offline, as Argo CD's repo server would render them.

An upstream Application points at a git tag or a published Helm chart; a kustomization of this
repository may list a file of an upstream tag by URL. Each is read from the Go module of its
release (:mod:`trainyard.repo.model.releases`: the tag's tree, checked against kube/releases/go.sum)
and rendered with the tools Argo CD bundles:

- a git ``path`` holding a kustomization: ``kustomize build``, remote resources in it replaced by
  the files of their pinned releases (:func:`_localize`);
- a published ``chart``: packaged from the tag as its release packages it (the row's ``recipe``),
  then ``helm template`` with the flags Argo CD passes (argo-cd@v3.6.2:util/helm/cmd.go template:
  ``--name-template`` the release name, default the Application's; ``--namespace`` the
  destination; ``--kube-version`` the cluster's; the ``valuesObject``; ``--include-crds``).

Every resource keeps where it came from (``module@version:file``, or the URL listed). Refused by
name: any other git ``path`` (no release here needs one), a source no release row pins, and an
Application setting Argo CD does not get from the chart or the tree (value files, parameters,
kustomize overrides).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from trainyard.contract.errors import UserError
from trainyard.repo.model import build_cache, gomodules, kustomize, rawyaml, releases
from trainyard.repo.model.rendered import Resource, tree_copy
from trainyard.repo.model.repository import Repository, kustomization_file

HELM_HINT = "run `make tools` (it builds the pinned Helm from kube/helm/go.mod into .venv/bin), or put helm v4 on PATH"
TIMEOUT_S = 300
# what an Application's spec.source.helm may set and this render follows (argo-cd@v3.6.2:
# reposerver/repository/repository.go helmTemplate): what this repository writes; anything else is
# refused by name
HELM_KEYS = frozenset({"releaseName", "valuesObject"})
GITHUB_RAW = re.compile(r"https://raw\.githubusercontent\.com/([^/]+)/([^/]+)/([^/]+)/(.+)$")
GITHUB_ASSET = re.compile(r"https://github\.com/([^/]+)/([^/]+)/releases/download/([^/]+)/([^/?#]+)$")

Progress = Callable[[str], None]


class UpstreamError(UserError):
    """An upstream source that cannot be rendered offline; the message names the source."""

    exit_code = 1


def helm_command() -> str:
    pinned = Path(sys.executable).parent / "helm"
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    found = shutil.which("helm")
    if found:
        return found
    raise UpstreamError(f"helm is not on PATH; the upstream charts are rendered with it: {HELM_HINT}")


_CACHE: dict[str, tuple[dict, ...]] = {}
_ORIGINS: dict[str, tuple[str, ...]] = {}
_ROOTS: dict[str, Path] = {}  # release key -> its module's folder
_LOCK = threading.Lock()


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()
        _ORIGINS.clear()
        _ROOTS.clear()


def _root(release: releases.Release, progress: Progress) -> Path:
    """The release's tree, fetched (``go mod download``, checked against go.sum) once per process."""
    with _LOCK:
        found = _ROOTS.get(release.key)
    if found is None:
        found = gomodules.module_dir(release.module, release.version, progress=progress)
        with _LOCK:
            _ROOTS[release.key] = found
    return found


def render_source(
    source: dict[str, Any],
    *,
    app: str,
    namespace: str | None,
    kube_version: str | None,
    progress: Progress = lambda _: None,
) -> tuple[releases.Release, list[Resource]]:
    """Render the upstream ``source`` (an Application's ``spec.source``) of Application ``app``."""
    repo_url = str(source.get("repoURL") or "")
    revision = str(source.get("targetRevision") or "")
    where = f"Application {app}: spec.source"
    if source.get("chart"):
        release = releases.by_chart(repo_url, str(source["chart"]), revision)
        if release is None or release.chart is None:
            raise UpstreamError(
                f"{where}: chart {source['chart']} {revision or '(no targetRevision)'} of {repo_url} is not a "
                f"pinned release (trainyard/repo/model/releases.py lists {_charts()})"
            )
        _refuse_keys(source, where, {"repoURL", "targetRevision", "chart", "helm"})
        key = _key("chart", release.key, source.get("helm"), namespace, kube_version)
        chart = release.chart
        docs = _cached(key, lambda: _helm(release, chart, source, app, namespace, kube_version, progress))
        return release, _resources(key, docs, app)
    release = releases.by_git(repo_url, revision)
    if release is None:
        known = ", ".join(f"{r.git_tag}" for r in releases.of_repo(repo_url)) or "none"
        raise UpstreamError(
            f"{where}: {repo_url} at {revision or '(no targetRevision)'} is not a pinned release "
            f"(trainyard/repo/model/releases.py pins this repository at: {known})"
        )
    path = str(source.get("path") or ".").strip("/") or "."
    root = _root(release, progress)
    folder = (root / path).resolve()
    if not folder.is_dir() or root.resolve() not in (folder, *folder.parents):
        raise UpstreamError(f"{where}: path {path!r} is not a folder of {release.module}@{release.version}")
    if kustomization_file(folder) is None:
        raise UpstreamError(f"{where}: {path} of {release.module}@{release.version} has no kustomization (a Helm "
                            "chart folder or a directory source), which trainyard does not render offline")  # fmt: skip
    _refuse_keys(source, where, {"repoURL", "targetRevision", "path"})
    key = _key("git", release.key, path, namespace)  # a kustomize build is the same for every cluster
    docs = _cached(key, lambda: _kustomize(root, folder, release, progress))
    return release, _resources(key, docs, app)


def render_local(repo: Repository, folder: Path, *, progress: Progress = lambda _: None) -> list[Resource]:
    """Build this repository's ``folder``, whose kustomizations list upstream files by URL, with
    each URL replaced by the file of its pinned release."""
    listing = []
    for f in sorted(kustomize.kustomizations(folder, repo.root)):
        for p in sorted(f.rglob("*")):
            if p.is_file():
                listing.append(f"{repo.rel(p)}\0{hashlib.sha256(p.read_bytes()).hexdigest()}")
    key = _key("local", repo.rel(folder), listing)
    docs = _cached(key, lambda: _kustomize(repo.root, folder.resolve(), None, progress, repo=repo))
    return _resources(key, docs, None)


ARGOCD_CRDS = ("manifests/crds/*-crd.yaml",)  # the three argo-cd@v3.6.2:manifests/crds/kustomization.yaml lists
# The CRDs of the kinds base/monitoring uses, as prometheus-operator@v0.94.1 publishes them
# (example/prometheus-operator-crd: the schemas without descriptions, which its bundle.yaml and
# Helm chart install too); the operator's install brings these with its others.
PROMETHEUS_OPERATOR_CRDS = tuple(
    f"example/prometheus-operator-crd/monitoring.coreos.com_{plural}.yaml"
    for plural in ("podmonitors", "servicemonitors", "prometheusrules")
)


def bootstrap_crds(prometheus_operator: bool, *, progress: Progress = lambda _: None, fresh: bool = True) -> list[dict]:
    """The CRDs a cluster serves before the repository's bootstrap, installed outside it and read
    from their modules at the pinned releases: Argo CD's (Application, ApplicationSet,
    AppProject), and Prometheus Operator's where the cluster's facts say it runs. Fresh copies
    unless ``fresh`` is False: then the kept objects themselves, for a caller that only reads them
    (copying Argo CD's large CRDs took a tenth of a validate)."""
    docs = _release_crds("argocd", ARGOCD_CRDS, progress, fresh)
    if prometheus_operator:
        docs += _release_crds("prometheus-operator", PROMETHEUS_OPERATOR_CRDS, progress, fresh)
    return docs


def _release_crds(key: str, patterns: tuple[str, ...], progress: Progress, fresh: bool) -> list[dict]:
    r = releases.BY_KEY[key]

    def read() -> list[tuple[dict, str]]:
        folder = _root(r, progress)
        out = []
        for pattern in patterns:
            files = sorted(folder.glob(pattern))
            if not files:
                raise UpstreamError(f"{r.module}@{r.version}:{pattern}: no file matches")
            for path in files:
                where = f"{r.module}@{r.version}:{path.relative_to(folder).as_posix()}"
                for d in kustomize.load_documents(path.read_text(encoding="utf-8"), where):
                    if d.get("kind") == "CustomResourceDefinition":
                        out.append((d, where))
        return out

    kept = _cached(_key(f"{key}-crds", r.module, r.version, *patterns), read)
    return [tree_copy(d) for d in kept] if fresh else list(kept)


# --- helpers ------------------------------------------------------------------------------------


def _charts() -> str:
    return ", ".join(f"{r.chart.name} {r.chart.version} of {r.chart.repo}" for r in releases.RELEASES if r.chart)


def _refuse_keys(source: dict, where: str, allowed: set[str]) -> None:
    extra = sorted(k for k in source if k not in allowed)
    if extra:
        raise UpstreamError(
            f"{where}.{extra[0]} on an upstream source is not rendered offline by trainyard; set it in a kustomization "
            "of this repository that lists the upstream files instead"
        )


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cached(key: str, make: Callable[[], list[tuple[dict, str]]]) -> tuple[dict, ...]:
    with _LOCK:
        found = _CACHE.get(key)
    if found is None:
        made = _disk_cached(key, make)
        with _LOCK:
            _CACHE[key] = tuple(d for d, _ in made)
            _ORIGINS[key] = tuple(o for _, o in made)
            found = _CACHE[key]
    return found


# What decides a render besides its source: the render's own code, the modules' hashes and the
# tools. A release's tree is fixed by its go.sum hash, so no file of it needs reading for the key.
_CODE = (Path(__file__), Path(releases.__file__))


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """What decides every upstream render and build besides its release (hex): the releases table,
    the modules' go.sum, the render's code, kustomize's and Helm's versions."""
    h = hashlib.sha256(b"trainyard-upstream-render/1\0")
    for path in (*_CODE, gomodules.RELEASES_MODULE / "go.sum"):
        h.update(path.read_bytes() + b"\0")
    h.update(build_cache.tool_version(kustomize.command()).encode() + b"\0")
    try:
        helm = subprocess.run([helm_command(), "version", "--short"], capture_output=True, text=True, timeout=60)
        h.update(helm.stdout.encode())
    except (UpstreamError, OSError, subprocess.TimeoutExpired):
        h.update(b"no helm")
    return h.hexdigest()


def _disk_cached(key: str, make: Callable[[], list[tuple[dict, str]]]) -> list[tuple[dict, str]]:
    """``make()``, kept in the build cache of ``trainyard validate`` (kustomize.use_disk_cache) when
    there is one: rendering a chart or an overlay takes a second or more, reading it back a few ms."""
    disk = kustomize.disk_cache()
    if disk is None:
        return make()
    entry = hashlib.sha256(f"{fingerprint()}\0{key}".encode()).hexdigest()
    stored = disk.get(entry)
    if stored is not None:
        return [(r.doc, r.origin or "") for r in stored]
    made = make()
    disk.put(entry, [Resource(doc=d, origin=o) for d, o in made])
    return made


def is_hook(doc: dict) -> bool:
    """Whether Argo CD runs ``doc`` as a sync hook rather than keeping it as one of the
    Application's resources (gitops-engine/v3@v3.6.2:pkg/sync/hook/hook.go IsHook): an
    ``argocd.argoproj.io/hook`` other than ``Skip`` alone, or else a Helm hook
    (hook/helm/hook.go: any ``helm.sh/hook`` but ``crd-install``). A chart's hooks (cert-manager's
    startupapicheck Job) run at sync time and are not listed among the Application's resources."""
    annotations = (doc.get("metadata") or {}).get("annotations") or {}
    argo = annotations.get("argocd.argoproj.io/hook")
    if argo is not None:
        return [t.strip() for t in str(argo).split(",") if t.strip()] != ["Skip"]
    helm = annotations.get("helm.sh/hook")
    return helm is not None and helm != "crd-install"


def _resources(key: str, docs: tuple[dict, ...], app: str | None) -> list[Resource]:
    origins = _ORIGINS[key]
    return [
        Resource(doc=tree_copy(d), origin=o, app=app, extra={"upstream": True} | ({"hook": True} if is_hook(d) else {}))
        for d, o in zip(docs, origins, strict=True)
    ]


def _kube_version(version: str | None) -> list[str]:
    # Argo CD passes the destination's server version (repository.go parseKubeVersion); the
    # cluster's facts declare it as major.minor
    if not version:
        return []
    return ["--kube-version", f"v{version}.0" if version.count(".") == 1 else version]


def _helm(
    release: releases.Release, chart: releases.Chart, source: dict, app: str, namespace: str | None,
    kube_version: str | None, progress: Progress,
) -> list[tuple[dict, str]]:  # fmt: skip
    """``helm template`` of the release's published chart, packaged from the tag as the release packages it."""
    helm = source.get("helm") if isinstance(source.get("helm"), dict) else {}
    unknown = sorted(k for k in helm if k not in HELM_KEYS)
    if unknown:
        raise UpstreamError(f"Application {app}: spec.source.helm.{unknown[0]} is not rendered offline by trainyard "
                            f"(it follows {', '.join(sorted(HELM_KEYS))})")  # fmt: skip
    root = _root(release, progress)
    chart_path = root / chart.path
    shown = f"{release.module}@{release.version}:{chart_path.relative_to(root).as_posix()}"
    command = helm_command()
    with tempfile.TemporaryDirectory(prefix="trainyard-helm-") as tmp:
        target = str(package_chart(release, chart, Path(tmp), progress=progress))
        args = [command, "template", target, "--name-template", str(helm.get("releaseName") or app)]
        args += ["--namespace", namespace] if namespace else []
        args += _kube_version(kube_version)
        if helm.get("valuesObject"):
            extra = Path(tmp) / "values.yaml"
            extra.write_text(rawyaml.safe_dump(helm["valuesObject"]), encoding="utf-8")
            args += ["--values", str(extra)]
        out = _run([*args, "--include-crds"], shown)
    return _helm_documents(out, shown, release, root, chart_path)


def package_chart(
    release: releases.Release, chart: releases.Chart, into: Path, *, progress: Progress = lambda _: None
) -> Path:
    """The release's published chart, packaged from the tag as the release packages it (``helm
    package`` with the row's version, app version and values): ``into/<name>-<version>.tgz``."""
    root = _root(release, progress)
    chart_path = root / chart.path
    shown = f"{release.module}@{release.version}:{chart_path.relative_to(root).as_posix()}"
    with tempfile.TemporaryDirectory(prefix="trainyard-chart-") as tmp:
        staged = Path(tmp) / chart_path.name
        _copy_writable(chart_path, staged)
        if chart.values:
            _set_values(staged / "values.yaml", chart.values)
        _run([helm_command(), "package", str(staged), "--version", chart.version, "--app-version", chart.app_version,
              "--destination", str(into)], shown)  # fmt: skip
    return into / f"{chart.name}-{chart.version}.tgz"


def build_asset(release: releases.Release, asset: releases.Asset, *, progress: Progress = lambda _: None) -> str:
    """A release asset built from the tag as the release builds it (a kustomize build), as YAML."""
    root = _root(release, progress)
    built = _kustomize(root, (root / asset.kustomization).resolve(), release, progress)
    return rawyaml.safe_dump_all([d for d, _ in built], sort_keys=False)


def release_tree(release: releases.Release, *, progress: Progress = lambda _: None) -> Path:
    """The release's tag as a tree (its Go module, fetched and checked against go.sum)."""
    return _root(release, progress)


def _copy_writable(source: Path, dest: Path) -> None:
    """Copy a folder of the module cache (read-only files and folders) so that it can be edited
    and removed by any user."""
    shutil.copytree(source, dest, dirs_exist_ok=True, symlinks=False, copy_function=shutil.copyfile)
    dest.chmod(0o755)
    for p in dest.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)


def _set_values(path: Path, values: tuple[tuple[str, str], ...]) -> None:
    """Write ``values`` (dotted keys) into a chart's values.yaml, as a release's yq edits do."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for dotted, value in values:
        node = doc
        *parents, last = dotted.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = value
    path.write_text(rawyaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def _helm_documents(
    text: str, shown: str, release: releases.Release, root: Path, chart: Path
) -> list[tuple[dict, str]]:
    """helm template's output, each object with its template file (helm writes ``# Source: CHART/FILE``)."""
    docs: list[tuple[dict, str]] = []
    base = chart.relative_to(root).as_posix()
    for part in re.split(r"^---\s*$", text, flags=re.M):
        m = re.search(r"^# Source: [^/\n]+/(.+)$", part, re.M)
        origin = f"{release.module}@{release.version}:{base}/{m[1].strip()}" if m else shown
        for doc in kustomize.load_documents(part, origin):
            docs.append((doc, origin))
    return docs


def _run(args: list[str], shown: str) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise UpstreamError(f"{shown}: {Path(args[0]).name} {args[1]} did not finish within {TIMEOUT_S} s") from None
    except OSError as exc:
        raise UpstreamError(f"cannot run {args[0]}: {exc}") from None
    if proc.returncode:
        said = " ".join(proc.stderr.split())[-1500:] or f"exit status {proc.returncode}"
        raise UpstreamError(f"{shown}: {Path(args[0]).name} {args[1]} failed: {said}")
    return proc.stdout


def _kustomize(
    root: Path, folder: Path, release: releases.Release | None, progress: Progress, repo: Repository | None = None
) -> list[tuple[dict, str]]:
    """Build ``folder`` (inside ``root``, a module's tree or this repository) in a copy whose
    remote resources are the files of their pinned releases."""
    where = f"{release.module}@{release.version}:" if release else ""
    with tempfile.TemporaryDirectory(prefix="trainyard-upstream-") as tmp:
        copy_root = Path(tmp) / "tree"
        names: dict[Path, str] = {}  # a file in the copy -> what to call it in messages
        reached = kustomize.kustomizations(folder, root)
        for f in reached:
            dest = copy_root / f.relative_to(root)
            _copy_writable(f, dest)
            for p in dest.rglob("*"):
                if p.is_file():
                    names[p.resolve()] = where + (p.relative_to(copy_root)).as_posix()
        for f in reached:
            rel = f.relative_to(root).as_posix()
            _localize(copy_root / rel, Path(tmp), names, f"{where}{rel}", progress)
        target = copy_root / folder.relative_to(root)
        shown = where + folder.relative_to(root).as_posix() if release else (repo.rel(folder) if repo else str(folder))
        built = kustomize.build_folder(target, shown, strip=(copy_root,))
        return [(doc, names.get(origin, shown) if origin else shown) for doc, origin in built]


def _localize(folder: Path, tmp: Path, names: dict[Path, str], shown: str, progress: Progress) -> None:
    """Rewrite the remote entries of ``folder``'s kustomization (a copy) to files or folders of
    their pinned releases."""
    file = kustomization_file(folder)
    if file is None:
        return
    try:
        doc = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        return  # kustomize reports it, naming the file
    if not isinstance(doc, dict):
        return
    changed = False
    for key in ("resources", "bases", "components"):
        entries = doc.get(key)
        if not isinstance(entries, list):
            continue
        for i, entry in enumerate(entries):
            if not kustomize.is_remote(entry):
                continue
            url = str(entry).strip()
            entries[i] = _fetch(url, folder, tmp, names, f"{shown}/{file.name}", progress)
            changed = True
    if changed:
        file.write_text(rawyaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def _release_of(owner: str, name: str, ref: str, url: str, where: str) -> releases.Release:
    release = releases.by_git(f"https://github.com/{owner}/{name}", ref)
    if release is None:
        known = ", ".join(r.git_tag for r in releases.of_repo(f"https://github.com/{owner}/{name}")) or "none"
        raise UpstreamError(
            f"{where}: {url} is not from a pinned release (trainyard/repo/model/releases.py pins "
            f"github.com/{owner}/{name} at: {known})"
        )
    return release


def _fetch(url: str, folder: Path, tmp: Path, names: dict[Path, str], where: str, progress: Progress) -> str:
    """The local entry that stands for remote ``url``: a file written into ``folder`` (kustomize
    loads files only inside the kustomization's root)."""
    local = folder / f"upstream-{hashlib.sha256(url.encode()).hexdigest()[:12]}.yaml"
    m = GITHUB_RAW.match(url)
    if m:
        release = _release_of(m[1], m[2], m[3], url, where)
        root = _root(release, progress)
        path = (root / m[4]).resolve()
        if not path.is_file() or root.resolve() not in path.parents:
            raise UpstreamError(f"{where}: {url}: {m[4]} is not a file of {release.module}@{release.version}")
        shutil.copyfile(path, local)
        names[local.resolve()] = url
        return local.name
    m = GITHUB_ASSET.match(url)
    if m:
        release = _release_of(m[1], m[2], m[3], url, where)
        asset = next((a for a in release.assets if a.name == m[4]), None)
        if asset is None:
            raise UpstreamError(
                f"{where}: {url}: {release.name} {release.version} has no release asset {m[4]!r} that trainyard "
                "can build from the tag (trainyard/repo/model/releases.py)"
            )
        local.write_text(build_asset(release, asset, progress=progress), encoding="utf-8")
        names[local.resolve()] = f"{url} (built from {release.module}@{release.version}:{asset.kustomization})"
        return local.name
    raise UpstreamError(
        f"{where}: {url} is a remote resource trainyard cannot read offline (a git folder included: no release "
        "needs one): list a file of a pinned release by its raw.githubusercontent.com URL at the tag, or vendor "
        "the file into the repository"
    )
