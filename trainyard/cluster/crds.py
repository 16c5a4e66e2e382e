"""The CustomResourceDefinitions a local cluster installs before the repository's bootstrap.

Every upstream Application brings its release's CRDs with the rest of its objects: the emulated
Argo CD renders it from the release's Go module with the tool Argo CD uses
(:mod:`trainyard.repo.model.upstream`), and :mod:`trainyard.cluster.sync` takes the CRDs from
that render. What no Application installs is Argo CD itself, whose install a cluster needs before
``kubectl apply -k clusters/<cluster>``: its CRDs (Application, ApplicationSet, AppProject), read
from the same pinned modules. Nor does any install Prometheus Operator: on a cluster whose facts say
it runs (``spec.monitoring: prometheus-operator``) its CRDs of the kinds base/monitoring uses are
installed with Argo CD's, so kube-apiserver checks and stores the monitors and rules (the operator
itself does not run here).
"""

from __future__ import annotations

from collections.abc import Callable

from trainyard.repo.model import declared, upstream

Progress = Callable[[str], None]


def before_bootstrap(facts: declared.ClusterFacts, *, progress: Progress = print) -> list[dict]:
    """The CRDs a cluster has before the bootstrap: Argo CD's, and Prometheus Operator's (PodMonitor,
    ServiceMonitor, PrometheusRule) where the facts say the operator runs."""
    return upstream.bootstrap_crds(facts.prometheus_operator, progress=progress)


def kinds(docs: list[dict]) -> set[tuple[str, str, str]]:
    """(group, version, kind) of every served version of ``docs``."""
    return {
        (d["spec"]["group"], v["name"], d["spec"]["names"]["kind"])
        for d in docs
        for v in d["spec"]["versions"]
        if v.get("served")
    }
