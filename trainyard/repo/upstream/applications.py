"""The Argo CD objects the offline render works with: an Application, what one renders to, a
cluster's render, and the error of a source it does not render; the rest of the render imports it."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainyard.contract.errors import UserError
from trainyard.repo.model.problems import Problem
from trainyard.repo.model.rendered import Resource, sync_wave

ARGO_GROUP = "argoproj.io"
SYNC_WAVE = "argocd.argoproj.io/sync-wave"  # argo-cd@v3.6.2:gitops-engine/pkg/sync/common/types.go


class ArgoError(UserError):
    exit_code = 1


@dataclass
class Application:
    resource: Resource
    generated_by: str | None = None  # the ApplicationSet that made it

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def spec(self) -> dict:
        spec = self.resource.doc.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def source(self) -> dict:
        src = self.spec.get("source")
        return src if isinstance(src, dict) else {}

    @property
    def destination(self) -> dict:
        dst = self.spec.get("destination")
        return dst if isinstance(dst, dict) else {}

    @property
    def project(self) -> str:
        return str(self.spec.get("project", ""))

    @property
    def wave(self) -> int:
        return sync_wave(self.resource.doc)

    @property
    def has_wave(self) -> bool:
        return SYNC_WAVE in self.resource.annotations

    def where(self) -> str:
        return self.resource.where()


@dataclass
class Upstream:
    repo_url: str
    revision: str
    path: str | None = None
    chart: str | None = None
    images: tuple[str, ...] = ()  # image pins a kustomization of this repository sets on it
    remote_resource: bool = False  # fetched by kustomize while building this repository's folder

    def describe(self) -> str:
        if self.remote_resource:
            what = f"{self.repo_url} (fetched by kustomize)"
        else:
            kind = f"chart {self.chart}" if self.chart else f"path {self.path or '.'}"
            what = f"{self.repo_url} {kind} at {self.revision or '(no revision)'}"
        return what + (f", images pinned to {', '.join(self.images)}" if self.images else "")


@dataclass
class AppRender:
    app: Application
    resources: list[Resource] = field(default_factory=list)
    upstream: list[Upstream] = field(default_factory=list)
    path: str | None = None  # the folder rendered, for apps of this repository
    self_reference: bool = False  # its path was already rendered (the root app)

    @property
    def name(self) -> str:
        return self.app.name


@dataclass
class ClusterRender:
    cluster: str
    root: list[Resource]
    apps: list[AppRender]
    problems: list[Problem] = field(default_factory=list)

    def resources(self) -> list[Resource]:
        """Everything applied: the bootstrap objects and every rendered Application's."""
        out = list(self.root)
        for a in self.apps:
            out.extend(a.resources)
        return out

    def app(self, name: str) -> AppRender | None:
        return next((a for a in self.apps if a.name == name), None)

    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]
