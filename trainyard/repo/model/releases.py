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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainyard.repo.model.rendered import Resource

# How the newest versions were asked for. `go list -m -versions` omits versions the module proxy
# serves (it listed v0.85.0 as Prometheus Operator's newest while v0.88.0-v0.94.1 were served), so
# each tag newer than the pin (the project's GitHub tags) is asked for by name; a version the
# proxy refuses (403 here) is not served.
BY_TAG = "`go mod download -json MODULE@TAG` for each tag after the pin (GOPROXY; a refused tag is not served)"
BY_INDEX = "`pip index versions PACKAGE` (PyPI)"
REVIEW_DAYS = 60  # a probe older than this fails the tests (tests/trainyard/repo/model/test_releases.py)


@dataclass(frozen=True)
class Issue:
    """A known problem of the pinned version, with what the repository does about it."""

    ref: str  # the upstream issue, pull request or advisory
    what: str
    mitigation: str
    # the first version of its row's release that fixes it ("": none served yet, or not a bug of
    # the release); `trainyard validate`'s rule against it stops once the pin reaches it
    fixed_in: str = ""


def version_key(version: str) -> tuple[int, ...]:
    """``v0.19.2`` -> (0, 19, 2); a pre-release suffix is not compared (no pin carries one)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("-")[0]))


def still_open(key: str, issue: Issue) -> bool:
    """Whether ``issue`` of release ``key`` affects the version pinned now."""
    pinned = BY_KEY[key].version
    return not issue.fixed_in or version_key(pinned) < version_key(issue.fixed_in)


@dataclass(frozen=True)
class Probe:
    """The newest version the registry served on the day it was asked, and how it was asked."""

    newest: str
    on: str  # YYYY-MM-DD
    how: str
    held: str = ""  # why the pin stays below ``newest``, cited ("" when it is the newest)


def gap(pinned: str, newest: str) -> str:
    """``newest``, or how far behind: ``2 minor``, ``3 patch`` (the first part that differs)."""
    a, b = version_key(pinned), version_key(newest)
    if a >= b:
        return "newest"
    for part, x, y in zip(("major", "minor", "patch"), a, b, strict=False):
        if x != y:
            return f"{y - x} {part}"
    return "newer build"


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
    probe: Probe
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


# Kueue v0.19.2 with Trainer v2.3.0: each refused by a rule of trainyard/repo/validate/skew.py until
# the Kueue pin reaches its fixed_in
KUEUE_MANAGER_ENTRY = Issue(
    "kubernetes-sigs/kueue#15210, #15213 (fixed by #15216 in v0.19.4)",
    "Kueue's TrainJob webhook (mtrainjob.kb.io, on CREATE) appends its runtime patch "
    "(manager kueue.x-k8s.io/manager) whether or not the TrainJob holds one: a manifest that holds "
    "it, or a second call of the webhook (mutatingWebhook.reinvocationPolicy: IfNeeded), gives the "
    "TrainJob two entries with one key, and kube-apiserver refuses the create",
    "`trainyard validate` refuses a TrainJob whose runtimePatches name Kueue's manager and a Kueue "
    "install whose TrainJob webhook is reinvoked; the jobs Application ignores Kueue's entry in "
    "the live TrainJob (base/apps/jobs.yaml ignoreDifferences)",
    fixed_in="v0.19.4",
)

KUEUE_FLAVOR_TOLERATIONS = Issue(
    "kubernetes-sigs/kueue#15161, #15162 (fixed by #15195 in v0.19.4)",
    "for a TrainJob, Kueue writes the admitting ResourceFlavor's tolerations as its runtime patch's "
    "tolerations, which replace the tolerations the runtime and the TrainJob's own runtimePatches "
    "give the pods",
    "`trainyard validate` refuses a Kueue-queued TrainJob whose runtime or runtimePatches set "
    "tolerations on a cluster with a ResourceFlavor that has tolerations (the generated flavors "
    "have none); the fabric's tolerations come from pod admission, after Kueue",
    fixed_in="v0.19.4",
)

KUEUE_TRAINER_WRITE_BACK = Issue(
    "kubernetes-sigs/kueue#14842 (in v0.19.3, not served by the Go module proxy on 2026-12-06); "
    "kubeflow/trainer#3157 (spec.trainer immutable)",
    "Kueue v0.19.2 unsuspends a TrainJob by writing the whole object back from Go types: an "
    "explicit empty env value is dropped and a quantity may come back in other text (1000m "
    "as 1); Trainer v2.3.0 holds spec.trainer immutable (CEL self == oldSelf), refuses the "
    "update, and the TrainJob stays suspended",
    "`trainyard validate` refuses a Kueue-queued TrainJob whose spec.trainer has an env entry with "
    'value "" or a quantity whose text the write-back changes, naming the text to write',
    fixed_in="v0.19.3",
)

TRAINER_PATCH_WRITE_BACK = Issue(
    "kubeflow/trainer#3888 (fix #3890 not merged); Kueue v0.20.0 builds against Trainer v2.3 "
    "(kubernetes-sigs/kueue#14504) and patches instead of writing back",
    "Kueue v0.19.2 writes a TrainJob back from Trainer v2.2.1's Go types when it unsuspends it; "
    "Trainer v2.3.0 holds a runtime patch's pod containers, initContainers, volumes, "
    "imagePullSecrets, securityContext, serviceAccountName and terminationGracePeriodSeconds "
    "immutable (CEL self == oldSelf), and the written-back values differ (defaults dropped; "
    "terminationGracePeriodSeconds, new in v2.3.0, lost), so the TrainJob stays suspended",
    "`trainyard validate` refuses a Kueue-queued TrainJob whose runtimePatches set any of those "
    "fields: set them in a runtime (a TrainingRuntime of the job's own). The tests run Kueue "
    "compiled against v2.3.0 (kube/controllers/go.mod): the running pair the README describes",
    fixed_in="v0.20.0",
)


RELEASES: tuple[Release, ...] = (
    Release(
        key="trainer",
        name="Kubeflow Trainer",
        module="github.com/kubeflow/trainer/v2",
        version="v2.3.0",
        git="https://github.com/kubeflow/trainer.git",
        probe=Probe("v2.3.0", "2026-12-06", BY_TAG),
        why="the newest release the Go module proxy serves; the runtimes use "
        "mlPolicy.torch.envInjection, new in v2.3.0",
        supported="the clusters run Kubernetes 1.33-1.36; its controller runs in the tests against "
        "kube-apiserver v1.36.5",
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
        ),
    ),
    Release(
        key="jobset",
        name="JobSet",
        module="sigs.k8s.io/jobset",
        version="v0.12.0",
        git="https://github.com/kubernetes-sigs/jobset.git",
        probe=Probe("v0.12.0", "2026-12-06", BY_TAG),
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
        probe=Probe("v0.19.2", "2026-12-06", BY_TAG + ": v0.19.3 to v0.21.0 refused"),
        why="the newest release the Go module proxy serves; topology-aware scheduling "
        "and the TrainJob integration on by default",
        supported="the clusters run Kubernetes 1.33-1.36; its controller runs in the tests against "
        "kube-apiserver v1.36.5",
        issues=(KUEUE_MANAGER_ENTRY, KUEUE_FLAVOR_TOLERATIONS, KUEUE_TRAINER_WRITE_BACK, TRAINER_PATCH_WRITE_BACK),
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
        probe=Probe("v1.9.4", "2026-12-06", BY_TAG),
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
        probe=Probe("v1.21.2", "2026-12-06", BY_TAG),
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
        probe=Probe("v4.3.0", "2026-12-06", BY_TAG),
        why="the newest release the Go module proxy serves",
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
        probe=Probe("v0.9.4", "2026-12-06", BY_TAG),
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
        probe=Probe("v1.5.3", "2026-12-06", BY_TAG),
        why="the newest release the Go module proxy serves",
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
        probe=Probe("v3.6.2", "2026-12-06", BY_TAG),
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
                "none needed: the cluster tier runs v3.6.2 against kube-apiserver v1.36.5 and finds every "
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
        version="v0.94.1",
        git="https://github.com/prometheus-operator/prometheus-operator.git",
        probe=Probe("v0.94.1", "2026-12-06", BY_TAG + ": v0.94.2 and v0.95.x refused"),
        why="the newest release the Go module proxy serves; its CRDs (example/prometheus-operator-crd) are the "
        "schemas the PodMonitor, ServiceMonitor and PrometheusRules of base/monitoring are checked and applied "
        "against. From v0.85.0 it removes no field the repository sets; it adds minimum: 0 to the limits and "
        "drops the ASCII pattern of label names (UTF-8 names, Prometheus 3)",
        supported="installed by the platform team, outside this repository, on the clusters whose "
        "cluster.yaml says spec.monitoring: prometheus-operator; it runs Prometheus v2.45.0 to v3.14.0 "
        "(prometheus-operator@v0.94.1:pkg/operator/defaults.go PrometheusCompatibilityMatrix, as v0.85.0's "
        "started at v2.45.0 too). Not run here: its CRDs are served by the local cluster, and the sandbox runs "
        "Debian's Prometheus 2.42 with the scrape job the operator writes (trainyard/sandbox/monitoring.py), "
        "whose relabelings Prometheus has had since 2.x",
    ),
)


@dataclass(frozen=True)
class Pin:
    """A version the repository builds, tests or ships with, pinned outside the Applications."""

    key: str
    name: str
    version: str
    pinned_in: str  # where it is pinned (tests/trainyard/repo/model/test_releases.py reads it there)
    why: str
    probe: Probe
    issues: tuple[Issue, ...] = ()


TOOLS: tuple[Pin, ...] = (
    Pin(
        key="kubernetes",
        name="Kubernetes (kube-apiserver, controller-manager, scheduler, kubectl of the tests)",
        version="v1.36.5",
        pinned_in="kube/go.mod k8s.io/kubernetes; trainyard/cluster/components.py KUBERNETES_VERSION",
        why="the newest patch of the newest minor the clusters run, and the first 1.36 patch with "
        "kubernetes/kubernetes#140419 (k8s.io/apiserver@v0.36.5 pkg/cel/mutation/dynamic/objects.go)",
        probe=Probe(
            "v1.37.2",
            "2026-12-06",
            BY_TAG + ": v1.36.6 refused",
            held="the tests' control plane emulates each cluster's minor, 1.33 to 1.36 (clusters/*/cluster.yaml "
            "kubernetesVersion), and a server emulates at most three minors back (k8s.io/apiserver@v0.36.5 "
            "pkg/util/compatibility/version.go kubeEffectiveVersionFloors): v1.37 could not serve the dev "
            "cluster's 1.33",
        ),
        issues=(
            Issue(
                "kubernetes/kubernetes#140419 (backport #140557); #142181",
                "kube-apiserver v1.36.0-v1.36.4 panics on an Object initializer inside a list or map of a "
                "MutatingAdmissionPolicy's JSONPatch value, and the request fails whatever the failurePolicy",
                "`trainyard generate` writes map literals only (a test checks every generated policy), and "
                "`trainyard validate` refuses the shape on a cluster that declares Kubernetes 1.36 or older",
                fixed_in="v1.36.5",
            ),
        ),
    ),
    Pin(
        key="etcd",
        name="etcd (the tests' control plane)",
        version="v3.6.8",
        pinned_in="kube/go.mod go.etcd.io/etcd/server/v3",
        why="the etcd Kubernetes v1.36.5 names (kubernetes@v1.36.5:cmd/kubeadm/app/constants/constants.go "
        "DefaultEtcdVersion 3.6.8-0; build/dependencies.yaml)",
        probe=Probe(
            "v3.7.4",
            "2026-12-06",
            BY_TAG + ": v3.6.17 the newest 3.6",
            held="Kubernetes v1.36.5 is built and tested with 3.6.8 (above); a cluster's etcd is its platform "
            "team's, not the repository's",
        ),
    ),
    Pin(
        key="kustomize",
        name="kustomize",
        version="v5.8.3",
        pinned_in="kube/kustomize/go.mod sigs.k8s.io/kustomize/kustomize/v5",
        why="the kustomize Argo CD v3.6.2 renders with (argo-cd@v3.6.2:hack/tool-versions.sh)",
        probe=Probe("v5.8.3", "2026-12-06", BY_TAG),
    ),
    Pin(
        key="helm",
        name="Helm",
        version="v4.3.2",
        pinned_in="kube/helm/go.mod helm.sh/helm/v4",
        why="the Helm Argo CD v3.6.2 renders with (argo-cd@v3.6.2:hack/tool-versions.sh)",
        probe=Probe("v4.3.2", "2026-12-06", BY_TAG),
    ),
    Pin(
        key="torch",
        name="PyTorch (the trainer image)",
        version="2.15.0",
        pinned_in="pyproject.toml, the trainer extra",
        why="the newest torch on PyPI; the contract knows the NCCL its wheel requires (2.30.7): the variables "
        "NCCL reads (trainyard/contract/nccl_variables.py) and its log lines (trainer/nccl_log.py)",
        probe=Probe("2.15.0", "2026-12-06", BY_INDEX),
    ),
    Pin(
        key="nccl",
        name="NCCL (nvidia-nccl-cu13, the trainer image)",
        version="2.30.7",
        pinned_in="trainer/Dockerfile NCCL_VERSION; trainyard/contract/nccl.py TRAINER_NCCL",
        why="the NCCL torch 2.15.0's wheel requires (nvidia-nccl-cu13==2.30.7, its Requires-Dist)",
        probe=Probe(
            "2.32.6",
            "2026-12-06",
            BY_INDEX,
            held="torch pins its NCCL exactly; a newer one under it is a build PyTorch does not test, and "
            "NVIDIA/nccl#2389 (below) has a mitigation the trainer does not need",
        ),
        issues=(
            Issue(
                "NVIDIA/nccl#2389 (PR #2390 closed unmerged; NVIDIA: fixed in 2.32u1)",
                "the receiving proxy clears a connection's buffer-registration flag: with GPUDirect RDMA and "
                "registered buffers (user buffer registration, CUDA graphs) a collective can hang without an error",
                "the trainer (DDP, no CUDA graphs) calls no ncclCommRegister and captures nothing; a job that "
                "does can turn registration off with NCCL_LOCAL_REGISTER=0 and NCCL_GRAPH_REGISTER=0 (both on by "
                "default: NVIDIA/nccl v2.30.7-1 docs/userguide/source/env.rst) until the image's NCCL is 2.32 or "
                "newer, which no torch on PyPI requires yet",
            ),
        ),
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


def of_chart_repo(repo: str) -> list[Release]:
    """Every release whose published chart is in chart repository ``repo`` (https or OCI)."""
    return [r for r in RELEASES if r.chart and _normal_chart_repo(r.chart.repo) == _normal_chart_repo(repo)]


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


def of_upstream(r: Resource) -> Release | None:
    """The release a rendered object came from, when the render marked it upstream."""
    return of_origin(r.origin) if r.extra.get("upstream") else None
