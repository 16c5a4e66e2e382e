"""The CustomResourceDefinitions a local cluster installs before the repository's bootstrap.

Every upstream Application brings its release's CRDs with the rest of its objects: the emulated
Argo CD renders it from the release's Go module with the tool Argo CD uses
(:mod:`trainyard.repo.model.upstream`), and :mod:`trainyard.cluster.sync` takes the CRDs from
that render. What no Application installs is Argo CD itself, whose install a cluster needs before
``kubectl apply -k clusters/<cluster>``: its CRDs (Application, ApplicationSet, AppProject), read
from the same pinned modules.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from trainyard.repo.model import upstream

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # yaml.safe_load_all, in C where built

Progress = Callable[[str], None]


def argocd(*, progress: Progress = print) -> list[dict]:
    """Argo CD's CRDs (Application, ApplicationSet, AppProject): what its install brings."""
    return upstream.argocd_crds(progress=progress)


def kinds(docs: list[dict]) -> set[tuple[str, str, str]]:
    """(group, version, kind) of every served version of ``docs``."""
    return {
        (d["spec"]["group"], v["name"], d["spec"]["names"]["kind"])
        for d in docs
        for v in d["spec"]["versions"]
        if v.get("served")
    }
