"""The CustomResourceDefinitions of the releases the repository pins, read from their Go modules.

An upstream Application (base/<x>/application.yaml: a remote git repository, chart or release
manifest) installs its release's CRDs; a local cluster needs exactly those, so that
kube-apiserver knows every kind the repository applies. Each release's Go module ships them as
files (a module zip holds the repository tree at the tag). The module is fetched at the pinned
version with ``go mod download MODULE@VERSION``, run in kube/releases, whose go.sum holds the
hash it must have, and the files are read from the module cache.

Two releases install their CRDs through a Helm chart whose CRD templates are in the module; the
few template actions in them are rendered here with the values the Application sets (see
:func:`_kueue_chart` and :func:`_cert_manager_chart`), and anything else left unrendered is an
error, not a guess.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainyard.cluster.components import KUBE_MODULE, go_binary
from trainyard.contract.errors import UserError

RELEASES_MODULE = KUBE_MODULE / "releases"
ARGOCD_INSTALL = "argocd"  # not an Application: the Argo CD install every Application needs first
CRD = "CustomResourceDefinition"
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # yaml.safe_load_all, in C where built

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Release:
    app: str  # the Application (metadata.name) whose sync installs these CRDs
    module: str
    version: str
    glob: str  # the CRD files, relative to the module's root
    chart: str = ""  # the chart whose CRD templates these files are ("" for plain YAML)

    @property
    def where(self) -> str:
        return f"{self.module}@{self.version}:{self.glob}"


# One row per release; the Application files pin the same versions (tests/trainyard/cluster/test_crds.py
# reads them), kube/releases/go.mod and go.sum pin the modules.
RELEASES: tuple[Release, ...] = (
    # kubeflow/trainer@v2.3.0:manifests/overlays/manager lists ../../base/crds, whose
    # kustomization lists these three files
    Release("trainyard-trainer", "github.com/kubeflow/trainer/v2", "v2.3.0",
            "manifests/base/crds/trainer.kubeflow.org_*.yaml"),
    # The same overlay includes manifests/third-party/jobset: JobSet v0.12.0's release manifest,
    # built from config/default (jobset@v0.12.0:Makefile), whose CRD is this base plus a
    # conversion-webhook stanza that is never called, JobSet serving one version (v1alpha2)
    Release("trainyard-trainer", "sigs.k8s.io/jobset", "v0.12.0",
            "config/components/crd/bases/jobset.x-k8s.io_*.yaml"),
    # The chart's CRD templates (made from config/components/crd/bases by hack/processing-plan.yaml,
    # adding the conversion webhook Kueue's certificate rotator fills in; the release packaging,
    # hack/helm-chart-package.sh, leaves them as they are)
    Release("trainyard-kueue", "sigs.k8s.io/kueue", "v0.19.2",
            "charts/kueue/templates/crd/kueue.x-k8s.io_*.yaml", chart="kueue"),
    # kubeflow/trainer@v1.9.4 (this module's tags): manifests/overlays/standalone -> ../../base,
    # which lists ./crds, whose kustomization lists these six files
    Release("trainyard-training-operator", "github.com/kubeflow/training-operator", "v1.9.4",
            "manifests/base/crds/kubeflow.org_*.yaml"),
    # The chart's templates/crds.yaml is these files concatenated (cert-manager@v1.15.3:
    # make/manifests.mk, hack/concat-yaml.sh)
    Release("trainyard-cert-manager", "github.com/cert-manager/cert-manager", "v1.15.3",
            "deploy/crds/crd-*.yaml", chart="cert-manager"),
    # base/multus/install applies this file by URL (raw.githubusercontent.com/.../v4.3.0/...);
    # its first document is the NetworkAttachmentDefinition CRD
    Release("trainyard-multus", "gopkg.in/k8snetworkplumbingwg/multus-cni.v4", "v4.3.0",
            "deployments/multus-daemonset-thick.yml"),
    # The Application syncs doc/crds, including these two files
    Release("trainyard-whereabouts", "github.com/k8snetworkplumbingwg/whereabouts", "v0.8.0",
            "doc/crds/whereabouts.cni.cncf.io_*.yaml"),
    # Argo CD's own: manifests/crds (its kustomization lists these three)
    Release(ARGOCD_INSTALL, "github.com/argoproj/argo-cd/v3", "v3.5.1", "manifests/crds/*-crd.yaml"),
)  # fmt: skip

# Application -> the releases whose CRDs it installs
APPLICATIONS: dict[str, tuple[Release, ...]] = {}
for _r in RELEASES:
    APPLICATIONS[_r.app] = (*APPLICATIONS.get(_r.app, ()), _r)

# What the Applications give Helm (base/kueue/application.yaml, base/cert-manager/application.yaml;
# the tests check both): release name, namespace (the destination), values that reach the CRDs.
KUEUE_HELM = {"releaseName": "kueue", "namespace": "kueue-system", "enableCertManager": False}
CERT_MANAGER_HELM = {"releaseName": "cert-manager", "crds.enabled": True, "crds.keep": True}


def release(module: str) -> Release:
    """The pinned release of Go module ``module``."""
    for r in RELEASES:
        if r.module == module:
            return r
    raise UserError(f"no pinned release of {module} (trainyard/cluster/crds.py RELEASES)")


def release_crds(app_name: str | None = None, *, progress: Progress = print) -> list[dict]:
    """The CRDs the upstream Application ``app_name`` installs, or (None) every row's, Argo CD's
    own first; fresh copies the caller may change. UserError for an unknown name, a missing Go,
    or a module that cannot be fetched or does not match kube/releases/go.sum."""
    if app_name is None:
        rows = sorted(RELEASES, key=lambda r: r.app != ARGOCD_INSTALL)
    elif app_name in APPLICATIONS:
        rows = list(APPLICATIONS[app_name])
    else:
        raise UserError(
            f"no CRDs are known for Application {app_name!r}; trainyard/cluster/crds.py RELEASES lists "
            f"{', '.join(sorted(APPLICATIONS))}"
        )
    return [copy.deepcopy(doc) for r in rows for doc in _crds(r, progress)]


def for_application(name: str, *, progress: Progress = print) -> list[dict]:
    """The CRDs the upstream Application ``name`` installs ([] for one RELEASES does not list)."""
    return release_crds(name, progress=progress) if name in APPLICATIONS and name != ARGOCD_INSTALL else []


def argocd(*, progress: Progress = print) -> list[dict]:
    """Argo CD's CRDs (Application, ApplicationSet, AppProject): what its install brings."""
    return release_crds(ARGOCD_INSTALL, progress=progress)


def kinds(docs: list[dict]) -> set[tuple[str, str, str]]:
    """(group, version, kind) of every served version of ``docs``."""
    return {
        (d["spec"]["group"], v["name"], d["spec"]["names"]["kind"])
        for d in docs
        for v in d["spec"]["versions"]
        if v.get("served")
    }


def module_dir(release: Release, *, progress: Progress = print) -> Path:
    """The module's folder in the Go module cache, fetched if needed; its hash is kube/releases/go.sum's."""
    pinned = go_sum().get((release.module, release.version))
    if not pinned:
        # Without a go.sum line the go command would only ask the checksum database.
        raise UserError(
            f"kube/releases/go.sum has no hash for {release.module} {release.version}: add the module to "
            f"kube/releases/go.mod and record its hash (`go mod download -json {release.module}@{release.version}` "
            "prints it as Sum, checked against sum.golang.org)"
        )
    go = go_binary()
    cached = _cache_dir(go) / f"{_escape(release.module)}@{release.version}"
    if not cached.is_dir():
        progress(f"fetching {release.module}@{release.version} (Go module, checked against kube/releases/go.sum)")
    # GOWORK=off: a go.work above this folder must not choose the main module
    env = dict(os.environ, GOWORK="off")
    cmd = [go, "mod", "download", "-json", f"{release.module}@{release.version}"]
    try:
        proc = subprocess.run(cmd, cwd=RELEASES_MODULE, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        raise UserError(f"fetching {release.module}@{release.version} took over 15 minutes; check GOPROXY") from None
    try:
        info = json.loads(proc.stdout or "{}")
    except ValueError:
        info = {}
    if proc.returncode or info.get("Error") or not info.get("Dir"):
        said = (info.get("Error") or proc.stderr or f"exit status {proc.returncode}").strip()
        raise UserError(
            f"cannot fetch {release.module}@{release.version} (in kube/releases): {said}; the Go module proxy "
            "(GOPROXY) must be reachable, or the module already in the module cache"
        )
    if info.get("Sum") != pinned:  # the go command checks this itself; a second look costs nothing
        raise UserError(f"{release.module}@{release.version} has hash {info.get('Sum')}, kube/releases/go.sum {pinned}")
    return Path(info["Dir"])


def go_sum() -> dict[tuple[str, str], str]:
    """(module, version) -> h1 hash of the module's files, from kube/releases/go.sum."""
    out = {}
    for line in (RELEASES_MODULE / "go.sum").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 3 and not parts[1].endswith("/go.mod"):
            out[(parts[0], parts[1])] = parts[2]
    return out


def _cache_dir(go: str) -> Path:
    out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout.strip()
    return Path(out)


def _escape(module: str) -> str:
    # the module cache's case encoding (golang.org/x/mod/module EscapePath): 'A' -> '!a'
    return re.sub(r"[A-Z]", lambda m: "!" + m[0].lower(), module)


_READ: dict[Release, tuple[dict, ...]] = {}  # read once per process; callers get copies


def _crds(release: Release, progress: Progress) -> tuple[dict, ...]:
    if release not in _READ:
        _READ[release] = _read(module_dir(release, progress=progress), release)
    return _READ[release]


def _read(folder: Path, release: Release) -> tuple[dict, ...]:
    files = sorted(folder.glob(release.glob))
    if not files:
        raise UserError(f"{release.where}: no file matches")
    docs: list[dict] = []
    for path in files:
        where = f"{release.module}@{release.version}:{path.relative_to(folder).as_posix()}"
        text = path.read_text(encoding="utf-8")
        if release.chart == "kueue":
            text = _kueue_text(text, where)
        try:
            found = [d for d in yaml.load_all(text, Loader=LOADER) if isinstance(d, dict) and d.get("kind") == CRD]
        except yaml.YAMLError as exc:
            raise UserError(f"{where}: not YAML: {exc}") from None
        if release.chart == "kueue":
            found = [_kueue_labels(d, release) for d in found]
        elif release.chart == "cert-manager":
            found = [_cert_manager_chart(d, release, where) for d in found]
        for doc in found:
            _check(doc, where)
        docs += found
    if not docs:
        raise UserError(f"{release.where}: no CustomResourceDefinition in these files")
    return tuple(docs)


def _check(doc: dict, where: str) -> None:
    spec = doc.get("spec") or {}
    if doc.get("apiVersion") != "apiextensions.k8s.io/v1" or not spec.get("group") or not spec.get("versions"):
        raise UserError(f"{where}: {doc.get('metadata', {}).get('name')}: not an apiextensions.k8s.io/v1 CRD")
    left = _template_strings(doc)
    if left:
        raise UserError(f"{where}: a Helm template action is left unrendered: {left[0]!r}")


def _template_strings(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _template_strings(k) + _template_strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _template_strings(v)]
    return [node] if isinstance(node, str) and "{{" in node else []


# kueue@v0.19.2:charts/kueue/templates/_helpers.tpl: kueue.fullname, kueue.labels (with
# kueue.chart and kueue.selectorLabels); the chart and its version are the release's
# (hack/helm-chart-package.sh: `helm package --version ${GIT_TAG/#v/} --app-version ${GIT_TAG}`)
_KUEUE_ACTIONS = (
    # the licence header and the generator's note
    (re.compile(r"\{\{-? */\*.*?\*/ *-?\}\}\s*", re.S), lambda v: ""),
    # enableCertManager false: the block is dropped (the chart's values.yaml default)
    (re.compile(r"\n *\{\{- if \.Values\.enableCertManager \}\}.*?\{\{- end \}\}", re.S), lambda v: ""),
    # the labels are set on the parsed object (labels: is then empty)
    (re.compile(r"\n *\{\{- include \"kueue\.labels\" \. \| nindent 4 \}\}"), lambda v: ""),
    (re.compile(r"\{\{ include \"kueue\.fullname\" \. \}\}"), lambda v: v["fullname"]),
    (re.compile(r"\{\{ \.Release\.Namespace \}\}"), lambda v: v["namespace"]),
)


def _kueue_values() -> dict[str, str]:
    chart, rel = "kueue", str(KUEUE_HELM["releaseName"])
    # kueue.fullname: the release name when it contains the chart's name
    return {"fullname": (rel if chart in rel else f"{rel}-{chart}")[:63].rstrip("-"),
            "namespace": str(KUEUE_HELM["namespace"])}  # fmt: skip


def _kueue_text(text: str, where: str) -> str:
    if KUEUE_HELM["enableCertManager"]:
        raise UserError(f"{where}: only the chart's default enableCertManager: false is rendered here")
    values = _kueue_values()
    for pattern, value in _KUEUE_ACTIONS:
        text = pattern.sub(lambda _m, value=value: value(values), text)
    if "{{" in text:
        line = next(x for x in text.splitlines() if "{{" in x)
        raise UserError(f"{where}: a Helm template action this module does not render: {line.strip()!r}")
    return text


def _kueue_labels(doc: dict, release: Release) -> dict:
    meta = doc["metadata"]
    if meta.get("annotations") is None:  # the annotations: key of a template whose only one was cert-manager's
        meta.pop("annotations", None)
    meta["labels"] = {
        "helm.sh/chart": f"{release.chart}-{release.version.removeprefix('v')}",
        "app.kubernetes.io/name": release.chart,
        "app.kubernetes.io/instance": str(KUEUE_HELM["releaseName"]),
        "control-plane": "controller-manager",
        "app.kubernetes.io/version": release.version,
        "app.kubernetes.io/managed-by": "Helm",
    }
    return doc


# cert-manager@v1.15.3:deploy/charts/cert-manager/templates/_helpers.tpl: cert-manager.name,
# labels, chartName (Chart.template.yaml: name cert-manager; the release tool sets version and
# appVersion to the tag, make/manifests.mk). The template actions of deploy/crds sit in YAML
# comments ('# START crd {{- if or .Values.crds.enabled ...}}', '# Generated labels {{- include
# "labels" ...}}') or in three label values; the comments are gone once parsed.
def _cert_manager_chart(doc: dict, release: Release, where: str) -> dict:
    if not CERT_MANAGER_HELM["crds.enabled"]:
        raise UserError(f"{where}: with crds.enabled false the chart installs no CRDs")
    name = release.chart
    rendered = {
        '{{ template "cert-manager.name" . }}': name,
        "{{ .Release.Name }}": str(CERT_MANAGER_HELM["releaseName"]),
    }
    meta = doc["metadata"]
    labels = {k: rendered.get(v, v) for k, v in (meta.get("labels") or {}).items()}
    labels |= {
        "app.kubernetes.io/version": release.version,
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": f"{name}-{release.version}",
    }
    meta["labels"] = labels
    # '# START annotations {{- if .Values.crds.keep }}' guards the one annotation
    annotations = dict(meta.get("annotations") or {})
    if annotations != {"helm.sh/resource-policy": "keep"}:
        raise UserError(f"{where}: annotations {annotations} are not the chart's crds.keep annotation")
    if not CERT_MANAGER_HELM["crds.keep"]:
        meta.pop("annotations")
    return doc
