"""The upstream releases the repository installs: what, where from, why this version, what is known.

One row per release. Each names the Go module that holds the release's git tree at its tag
(``kube/releases/go.mod`` requires it at that version and ``go.sum`` holds its hash), the git
repository and tag Argo CD reads, and for a Helm chart the chart repository and version. From
these :mod:`trainyard.repo.model.upstream` renders every upstream Application offline with the
tool Argo CD would use, so ``trainyard validate`` checks what the clusters will run, and
``trainyard pins`` prints this table.

The Application files pin the same versions (their ``targetRevision``, the URLs of the
repository's kustomizations); a source with no row here is refused by the render, and the tests
check that every row is used and that each Application, go.mod and go.sum agree with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REVIEWED = "2026-11-27"  # the day every row below was last checked against upstream (a later row says its own)


@dataclass(frozen=True)
class Issue:
    """A known problem of the pinned version, with what the repository does about it."""

    ref: str  # the upstream issue, pull request or advisory
    what: str
    mitigation: str


@dataclass(frozen=True)
class Chart:
    """A Helm chart as its release publishes it: Argo CD's ``repoURL``/``chart``/``targetRevision``,
    and how the release packages it from the tag (``helm package --version --app-version``)."""

    repo: str
    name: str
    version: str
    path: str  # the chart's folder in the tag's tree
    app_version: str
    recipe: str  # the release step that packages it, cited
    # values the packaging step writes into the chart's values.yaml before `helm package`
    values: tuple[tuple[str, str], ...] = ()  # (dotted key, value)


@dataclass(frozen=True)
class Asset:
    """A file a release publishes besides its tree (a GitHub release asset), built from the tag."""

    name: str
    kustomization: str  # the folder of the tag's tree the release builds it from
    recipe: str  # the release step, cited


@dataclass(frozen=True)
class Release:
    key: str
    name: str
    module: str  # the Go module whose zip is the tag's tree
    version: str  # the module version, which is the git tag
    git: str  # the repository Argo CD (or kustomize) fetches, as the Applications spell it
    why: str
    supported: str
    issues: tuple[Issue, ...] = ()
    chart: Chart | None = None
    assets: tuple[Asset, ...] = ()
    tag: str = ""  # the git tag when it is not the module version

    @property
    def git_tag(self) -> str:
        return self.tag or self.version

    @property
    def github(self) -> str:
        """``owner/name`` of the GitHub repository."""
        m = re.match(r"https://github\.com/([^/]+/[^/]+?)(?:\.git)?/?$", self.git)
        return m[1] if m else ""


RELEASES: tuple[Release, ...] = (
    Release(
        key="trainer",
        name="Kubeflow Trainer",
        module="github.com/kubeflow/trainer/v2",
        version="v2.3.0",
        git="https://github.com/kubeflow/trainer.git",
        why="the newest release the Go module proxy serves (2026-11-27); the runtimes use "
        "mlPolicy.torch.envInjection, new in v2.3.0",
        supported="the clusters run Kubernetes 1.33-1.36; its controller runs in the tests against "
        "kube-apiserver v1.36.3",
        issues=(
            Issue(
                "kubeflow/trainer#3737, #3779 (fixed by #3891, after v2.3.0)",
                "a failed TrainJob whose JobSet is deleted (by hand or by the JobSet's "
                "ttlSecondsAfterFinished) is recreated, and its JobSet's restart count starts again at 0",
                "restarts are bounded by each Job's backoffLimit in the generated runtimes, and nothing "
                "deletes a JobSet: the runtimes set no ttlSecondsAfterFinished and `trainyard validate` "
                "refuses a runtime that does (a TrainJob's runtimePatches cannot set it); docs/trainer-v2-kueue.md "
                "says to delete a failed TrainJob, never its JobSet",
            ),
            Issue(
                "Kueue v0.19.2 is built against Trainer v2.2.1 (kueue@v0.19.2:go.mod)",
                "Trainer v2.3.0's API adds TorchMLPolicySource.envInjection and "
                "PodSpecPatch.terminationGracePeriodSeconds; Kueue's published v0.19.2 image writes TrainJobs "
                "back from v2.2.1's struct when it suspends or resumes them, so a TrainJob's own "
                "terminationGracePeriodSeconds patch would be lost",
                "`trainyard validate` refuses a TrainJob whose runtimePatches set terminationGracePeriodSeconds; "
                "envInjection lives in the runtimes, which Kueue only reads. The tests run Kueue compiled "
                "against v2.3.0 (kube/controllers/go.mod): the running pair the README describes",
            ),
        ),
    ),
    Release(
        key="jobset",
        name="JobSet",
        module="sigs.k8s.io/jobset",
        version="v0.12.0",
        git="https://github.com/kubernetes-sigs/jobset.git",
        why="the version Trainer v2.3.0's manifests install (manifests/third-party/jobset)",
        supported="installed and versioned with Kubeflow Trainer",
        assets=(
            # the release asset the trainer overlay fetches by URL; `make artifacts` builds it
            # (jobset@v0.12.0:Makefile: `kustomize build config/default -o artifacts/manifests.yaml`
            # after `kustomize edit set image controller=...:v0.12.0`, which the tag already holds
            # in config/components/manager/kustomization.yaml)
            Asset("manifests.yaml", "config/default", "jobset@v0.12.0:Makefile target artifacts"),
        ),
    ),
    Release(
        key="kueue",
        name="Kueue",
        module="sigs.k8s.io/kueue",
        version="v0.19.2",
        git="https://github.com/kubernetes-sigs/kueue.git",
        why="the newest release the Go module proxy serves (2026-11-27); topology-aware scheduling "
        "and the TrainJob integration on by default",
        supported="the clusters run Kubernetes 1.33-1.36; its controller runs in the tests against "
        "kube-apiserver v1.36.3",
        chart=Chart(
            repo="registry.k8s.io/kueue/charts",
            name="kueue",
            version="0.19.2",
            path="charts/kueue",
            app_version="v0.19.2",
            # the chart in the tree names a staging image (values.yaml: tag release-0.19); for a
            # promoted tag the packaging step writes the release's images first (yq edits), then
            # packages
            recipe="kueue@v0.19.2:hack/helm-chart-package.sh (yq sets the images, then helm package "
            "--version 0.19.2 --app-version v0.19.2)",
            values=tuple(
                (f"{part}.image.{field}", value)
                for part, image in (
                    ("controllerManager.manager", "kueue"),
                    ("kueueViz.backend", "kueueviz-backend"),
                    ("kueueViz.frontend", "kueueviz-frontend"),
                )
                for field, value in (
                    ("repository", f"registry.k8s.io/kueue/{image}"),
                    ("tag", "v0.19.2"),
                    ("pullPolicy", "IfNotPresent"),
                )
            ),
        ),
    ),
    Release(
        key="training-operator",
        name="Kubeflow Training Operator (v1)",
        module="github.com/kubeflow/training-operator",
        version="v1.9.4",
        git="https://github.com/kubeflow/trainer.git",
        why="the last release of the v1 line (release-1.9), kept for the jobs written for the v1 API",
        supported="maintenance only: new jobs are TrainJobs",
        issues=(
            Issue(
                "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
                "the operator's image is tagged by commit, not by version (set by the tag's "
                "manifests/overlays/standalone)",
                "a commit tag does not move; `trainyard validate` accepts commit tags and refuses names "
                "that move (latest, a branch)",
            ),
        ),
    ),
    Release(
        key="cert-manager",
        name="cert-manager",
        module="github.com/cert-manager/cert-manager",
        version="v1.21.2",
        git="https://github.com/cert-manager/cert-manager.git",
        why="v1.15 reached end of life (its last release v1.15.5; GHSA-r4pg-vg54-wxx4 fixed in v1.15.4) "
        "and was tested up to Kubernetes 1.31; v1.21 is a supported line for Kubernetes 1.33-1.36 "
        "(cert-manager/website: content/docs/releases/README.md), and Kueue v0.19.2 builds against v1.21",
        supported="Kubernetes 1.33-1.36; not run here (its CRDs are served by the local cluster)",
        chart=Chart(
            repo="https://charts.jetstack.io",
            name="cert-manager",
            version="v1.21.2",
            path="deploy/charts/cert-manager",
            app_version="v1.21.2",
            recipe="cert-manager@v1.21.2:make/manifests.mk (helm package --app-version=v1.21.2 --version=v1.21.2)",
        ),
    ),
    Release(
        key="multus",
        name="Multus CNI (thick plugin)",
        module="gopkg.in/k8snetworkplumbingwg/multus-cni.v4",
        version="v4.3.0",
        git="https://github.com/k8snetworkplumbingwg/multus-cni.git",
        why="the newest release the Go module proxy serves (2026-11-27)",
        supported="a CNI plugin, not run here (no container runtime): its objects are rendered and validated, its "
        "CRD served by the local cluster",
        issues=(
            Issue(
                "k8snetworkplumbingwg/multus-cni#1346, #1349",
                "the sample DaemonSet's 50Mi memory limit OOM-kills the daemon when many pods start on a node at once",
                "base/multus/install raises the daemon's memory to 512Mi (request and limit alike, so the "
                "pod stays Guaranteed, multus-cni#1160)",
            ),
            Issue(
                "k8snetworkplumbingwg/multus-cni#1449 (fixed after v4.3.0)",
                "with a primary CNI configured as a conflist (Calico), deleting a pod can leak its primary IP",
                "none in this repository; take the next Multus release once the Go module proxy serves "
                "it, and watch the primary network's IP pool on such clusters",
            ),
            Issue(
                "the tag's deployments/multus-daemonset-thick.yml",
                "runs ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot-thick, a tag rebuilt from master",
                "base/multus/install pins v4.3.0-thick, the tag the release workflow pushes",
            ),
        ),
    ),
    Release(
        key="whereabouts",
        name="Whereabouts IPAM",
        module="github.com/k8snetworkplumbingwg/whereabouts",
        version="v0.9.4",
        git="https://github.com/k8snetworkplumbingwg/whereabouts.git",
        why="v0.8.0's manifests ran the floating :latest image, which no longer holds the IP "
        "reconciler v0.8.0 expects, so stale IPs were never reclaimed; v0.9.4 runs the reconciler as "
        "a Deployment of its own",
        supported="an IPAM plugin, not run here (no container runtime): its objects are rendered and validated, its "
        "CRDs served by the local cluster",
        issues=(
            Issue(
                "the tag's doc/crds/daemonset-install.yaml and reconciler-deployment.yaml",
                "run ghcr.io/k8snetworkplumbingwg/whereabouts:latest",
                "base/whereabouts/install pins v0.9.4, the tag the release workflow pushes "
                "(.github/workflows/image-push-release.yml)",
            ),
        ),
    ),
    Release(
        key="rdma-shared-device-plugin",
        name="RDMA shared device plugin",
        module="github.com/Mellanox/k8s-rdma-shared-dev-plugin",
        version="v1.5.3",
        git="https://github.com/Mellanox/k8s-rdma-shared-dev-plugin.git",
        why="the newest release the Go module proxy serves (2026-11-27)",
        supported="clusters with RDMA NICs (prod-ib, prod-roce); a device plugin, not run here",
        issues=(
            Issue(
                "the tag's deployment/k8s/base/daemonset.yaml",
                "names the image without a tag (latest), and tolerates none of the GPU nodes' taints",
                "base/rdma-device-plugin pins v1.5.3 and adds a toleration of every taint and resource requests",
            ),
        ),
    ),
    Release(
        key="argocd",
        name="Argo CD",
        module="github.com/argoproj/argo-cd/v3",
        version="v3.6.2",
        git="https://github.com/argoproj/argo-cd.git",
        why="the release the cluster tier builds and runs (kube/argocd/go.mod), whose kustomize (5.8.3) and "
        "Helm (4.3.2) render the repository here (argo-cd@v3.6.2:hack/tool-versions.sh); v3.5.x cannot be built "
        "from the Go module proxy (docs/cluster.md); this row reviewed 2026-12-06",
        supported="installed once per cluster by the platform team, before the bootstrap. v3.6 is the newest of "
        "the three minor releases Argo CD supports (argo-cd@v3.6.2:SECURITY.md, Supported Versions; GA planned for "
        "v3.6 on 2026-11-03, for v3.7 on 2027-02-02: docs/developer-guide/release-process-and-cadence.md; the "
        "module proxy dates v3.6.2 2026-11-18); tested "
        "upstream with Kubernetes 1.34-1.37 (docs/operator-manual/tested-kubernetes-versions.md), the clusters "
        "run 1.33-1.36",
        issues=(
            Issue(
                "argo-cd@v3.6.2:docs/operator-manual/upgrading/3.5-3.6.md, Server-Side Apply now uses Server-Side Diff",
                "an Application with the ServerSideApply=true sync option (here trainyard-argocd-config, the "
                "monitoring Application and the upstream releases but the RDMA device plugin) now diffs by a "
                "server-side apply dry run: admission (webhooks and ValidatingAdmissionPolicies) takes part in the "
                "diff, a refused object shows as a diff error, and kube-apiserver serves a dry run per object on "
                "each refresh",
                "none needed: the cluster tier runs v3.6.2 against kube-apiserver v1.36.3 and finds every "
                "Application of this repository Synced (tests/trainyard/cluster/test_argocd_itself.py); no "
                "Application sets argocd.argoproj.io/compare-options, so none opts out",
            ),
            Issue(
                "argo-cd@v3.6.2:pkg/apis/application/v1alpha1/app_project_types.go isDestinationMatched",
                'an AppProject destination whose name or server is a deny pattern ("!x") now vetoes a cluster it '
                "names even where the entry's other identifier matches, and a name deny applies only where the "
                "namespace matches (v3.5.1 allowed the first and applied the second everywhere)",
                "`trainyard validate` follows v3.6.2's rule (trainyard/repo/validate/argo.py "
                "is_destination_permitted); base/apps/projects.yaml writes no deny pattern",
            ),
        ),
    ),
    Release(
        key="prometheus-operator",
        name="Prometheus Operator (CRDs)",
        module="github.com/prometheus-operator/prometheus-operator",
        version="v0.85.0",
        git="https://github.com/prometheus-operator/prometheus-operator.git",
        why="the newest release the Go module proxy serves (2026-12-01); its CRDs "
        "(example/prometheus-operator-crd) are the schemas the PodMonitor, ServiceMonitor and "
        "PrometheusRules of base/monitoring are checked and applied against",
        supported="installed by the platform team, outside this repository, on the clusters whose "
        "cluster.yaml says spec.monitoring: prometheus-operator; not run here (its CRDs are served by the "
        "local cluster)",
    ),
)

BY_KEY = {r.key: r for r in RELEASES}
BY_MODULE = {r.module: r for r in RELEASES}


def _normal_git(url: str) -> str:
    # the spellings of one GitHub repository Argo CD and kustomize treat alike
    url = url.strip().rstrip("/").removesuffix(".git").lower()
    return re.sub(r"^(git@github\.com:|ssh://git@github\.com/|http://github\.com/)", "https://github.com/", url)


def by_git(url: str, tag: str) -> Release | None:
    """The release of git repository ``url`` at ``tag``."""
    for r in RELEASES:
        if _normal_git(r.git) == _normal_git(url) and r.git_tag == tag:
            return r
    return None


def by_chart(repo: str, name: str, version: str) -> Release | None:
    """The release whose published chart is ``name`` at ``version`` in chart repository ``repo``."""
    for r in RELEASES:
        c = r.chart
        if c and c.name == name and c.version == version and _normal_chart_repo(c.repo) == _normal_chart_repo(repo):
            return r
    return None


def _normal_chart_repo(repo: str) -> str:
    return repo.strip().rstrip("/").removeprefix("oci://").lower()


def of_repo(url: str) -> list[Release]:
    """Every release of git repository ``url`` (any tag), to name what a wrong tag could have been."""
    return [r for r in RELEASES if _normal_git(r.git) == _normal_git(url)]


def of_origin(origin: str | None) -> Release | None:
    """The release an upstream object came from, by the origin the render gave it
    (``module@version:file``, or the URL a kustomization listed)."""
    if not origin:
        return None
    module, at, rest = origin.partition("@")
    if at and module in BY_MODULE and rest.split(":", 1)[0] == BY_MODULE[module].version:
        return BY_MODULE[module]
    m = re.match(
        r"https://(?:raw\.githubusercontent\.com|github\.com)/([^/]+)/([^/]+)/(?:releases/download/)?([^/]+)/", origin
    )
    return by_git(f"https://github.com/{m[1]}/{m[2]}", m[3]) if m else None
