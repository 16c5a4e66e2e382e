"""The ApplicationSet controller of Argo CD v3.6.2, offline, for what this repository writes: one git
directory generator over this repository, Go templates holding three expressions, and the
Application the controller makes of each folder.

Followed (argo-cd@v3.6.2; generators/ and utils/ are under applicationset/):

- the git directory generator: the repository server's folder listing, hidden folders skipped
  (reposerver/repository/repository.go GetGitDirectories); ``directories[].path`` matched with
  Go's path.Match, literal text and ``*`` (:mod:`trainyard.repo.upstream.go_path`;
  generators/repo_path_utils.go filterPaths); the folder's parameters (buildPathParameters);
- ``goTemplate: true`` with the expressions ``{{ .path.path }}``, ``{{ .path.basename }}`` and
  ``{{ index .path.segments N }}`` in every string of ``spec.template``, map keys included
  (utils/utils.go Render.Replace, deeplyReplace); ``goTemplateOptions`` absent or
  ``missingkey=error``, which changes nothing for parameters that are always there;
- the generated Application (controllers/template/template.go GenerateApplications, utils.go
  RenderTemplateParams, controllers/applicationset_controller.go createOrUpdateInCluster): the
  template's name, labels, annotations and finalizers, the ApplicationSet's namespace, the finalizer
  ``resources-finalizer.argocd.argoproj.io`` when the template names none, the spec as util/argo/argo.go
  NormalizeApplicationSpec stores it. ``metadata.ownerReferences`` is left out: it names the
  ApplicationSet's uid, which kube-apiserver assigns.

Everything else is refused by name, naming the ApplicationSet, its file and the field: other
generators, ``selector``, ``git.files``, a generator's own ``template``, ``exclude``,
``pathParamPrefix``, ``values``, a repository or revision other than this repository's,
``goTemplate: false`` (fasttemplate), any other template expression or option, ``templatePatch``,
``strategy``, ``preservedFields``, ``ignoreApplicationDifferences``, ``syncPolicy``, ``spec.sources``
and source tool settings in the template, two Applications of one name, and hostile input
(non-string keys, keys that render alike, nesting or size beyond bounds). Every scan is linear.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainyard.repo.model.rendered import Resource
from trainyard.repo.model.repository import Repository
from trainyard.repo.upstream.applications import ArgoError
from trainyard.repo.upstream.go_path import PatternNotRead, path_match

RESOURCES_FINALIZER = "resources-finalizer.argocd.argoproj.io"  # v1alpha1/application_defaults.go
# applicationset_controller.go defaultPreservedAnnotations: createOrUpdateInCluster copies these from the
# live Application over the generated one, so a template cannot set them
PRESERVED_ANNOTATIONS = (
    "notified.notifications.argoproj.io",
    "argocd.argoproj.io/refresh",
    "argocd.argoproj.io/hydrate",
)
MAX_DEPTH = 100  # nesting of spec.template; deeper is refused
MAX_NODES = 100_000  # values in one rendered template (YAML aliases can make a small file expand without end)
EXPRESSIONS = "{{ .path.path }}, {{ .path.basename }}, {{ index .path.segments N }}"
# Go's text/template lexer: space between the words of an action is any of these
_EXPRESSION = re.compile(r"[ \t\r\n]*(?:\.path\.(path|basename)|index[ \t\r\n]+\.path\.segments[ \t\r\n]+"
                         r"(0|[1-9][0-9]{0,3}))[ \t\r\n]*")  # fmt: skip

# applicationset_types.go ApplicationSetSpec: fields refused, and why
_REFUSED_SPEC = {
    "templatePatch": "a patch rendered and merged into each Application (controllers/template/template.go "
    "renderTemplatePatch)",
    "strategy": "progressive syncs: RollingSync steps take the generated Applications' syncs over",
    "preservedFields": "keeps annotations and labels of the live Applications, which an offline render cannot know",
    "ignoreApplicationDifferences": "keeps fields of the live Applications, which an offline render cannot know",
    "syncPolicy": "applicationsSync and preserveResourcesOnDeletion, which this repository's ApplicationSet leaves "
    "at their defaults",
}
_GENERATORS = ("list", "clusters", "git", "scmProvider", "clusterDecisionResource", "pullRequest", "matrix", "merge",
               "plugin", "oci")  # fmt: skip
_GIT_KEYS = ("repoURL", "revision", "directories", "requeueAfterSeconds")  # what the render follows of a git generator


class TemplateError(ArgoError):
    """A template this render refuses; the message names the field and the expression."""


def _excerpt(s: str) -> str:
    return repr(s if len(s) <= 80 else s[:80] + "...")


def render(s: str, path: str) -> str:
    """Go's text/template on ``s`` for the folder ``path``, with the expressions of :data:`EXPRESSIONS`
    only; anything else is a TemplateError naming it. Linear: one str.find per delimiter."""
    out, at = [], 0
    while True:
        start = s.find("{{", at)
        if start < 0:
            return "".join(out) + s[at:]
        end = s.find("}}", start + 2)
        if end < 0:
            raise TemplateError(f"{_excerpt(s[start:])}: unclosed action (Go's template parser fails on it)")
        out.append(s[at:start])
        m = _EXPRESSION.fullmatch(s, start + 2, end)
        if m is None:
            raise TemplateError(f"template expression {_excerpt(s[start : end + 2])} is not one trainyard renders "
                                f"offline; the ones it renders: {EXPRESSIONS}")  # fmt: skip
        segments = path.split("/")  # repo_path_utils.go buildPathParameters
        if m.group(1) == "path":
            out.append(path)
        elif m.group(1) == "basename":
            out.append(segments[-1])  # path.Base of a listed folder (relative, no trailing '/')
        elif int(m.group(2)) < len(segments):
            out.append(segments[int(m.group(2))])
        else:
            raise TemplateError(f"{_excerpt(s[start : end + 2])}: error calling index: index out of range: "
                                f"{m.group(2)} (folder {path!r} has {len(segments)} segments)")  # fmt: skip
        at = end + 2


def deeply_replace(node: Any, replace: Callable[[str], str], field: str) -> Any:
    """utils.go deeplyReplace: every string of the tree rendered, map keys too (a value before its
    key). A null value of a mapping is dropped: kube-apiserver prunes nulls of non-nullable fields and
    deeplyReplace skips nil map values. Non-string keys, two keys rendering alike (Go sets map keys
    in its random map order: one of the two would win at random), text that is not UTF-8, a value of
    a type a Kubernetes object cannot hold, and trees deeper than MAX_DEPTH or larger than
    MAX_NODES are refused."""
    budget = [MAX_NODES]

    def text(s: str, where: str) -> str:
        try:
            s.encode("utf-8")
            return replace(s)
        except UnicodeEncodeError:  # a lone surrogate: no Kubernetes object holds it
            raise TemplateError(f"{where}: {_excerpt(s)} is not valid UTF-8 text") from None
        except TemplateError as exc:
            raise TemplateError(f"{where}: {exc}") from None

    def walk(v: Any, where: str, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise TemplateError(f"{field}: more than {MAX_NODES} values (YAML aliases expanding?); not rendered")
        if depth > MAX_DEPTH:
            raise TemplateError(f"{where}: nested deeper than {MAX_DEPTH} levels; not rendered")
        if isinstance(v, str):
            return text(v, where)
        if v is None or isinstance(v, bool | int | float):
            return v
        if isinstance(v, list):
            return [walk(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)]
        if isinstance(v, dict):
            out: dict[str, Any] = {}
            origin: dict[str, str] = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise TemplateError(f"{where}: the key {k!r} is not a string (Kubernetes objects have string keys)")
                if x is None:
                    continue
                value = walk(x, f"{where}.{k}", depth + 1)
                key = text(k, f"{where}: key {_excerpt(k)}")
                if key in out:
                    raise TemplateError(
                        f"{where}: the keys {origin[key]!r} and {k!r} both render to {key!r}; Argo CD keeps one of "
                        "them at random (utils.go deeplyReplace sets map keys in Go's random map order)"
                    )
                out[key], origin[key] = value, k
            return out
        raise TemplateError(f"{where}: a {type(v).__name__} value, which a Kubernetes object cannot hold (quote it)")

    return walk(node, field, 0)


def render_template_params(template: dict, path: str) -> dict[str, Any]:
    """utils.go RenderTemplateParams on template.go GetTempApplication: the template's metadata
    (name, namespace, labels, annotations, finalizers) and spec, every string rendered for ``path``;
    the resources finalizer added when the rendered template names no finalizer (the ApplicationSet's
    ``syncPolicy.preserveResourcesOnDeletion`` is refused)."""
    meta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    app = {
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "finalizers") if k in meta},
        "spec": template.get("spec") if template.get("spec") is not None else {},
    }
    rendered = deeply_replace(app, lambda s: render(s, path), "spec.template")
    if not rendered["metadata"].get("finalizers"):
        rendered["metadata"]["finalizers"] = [RESOURCES_FINALIZER]
    return rendered


def normalize_spec(spec: dict) -> dict:
    """util/argo/argo.go NormalizeApplicationSpec, which createOrUpdateInCluster applies before it
    writes the Application: an empty project is ``default``; a syncPolicy without automated,
    syncOptions, retry and managedNamespaceMetadata is dropped (v1alpha1/types.go SyncPolicy.IsZero).
    Its NormalizeSource drops zero tool settings, which the template may not hold (:func:`_check_template`)."""
    if not spec.get("project"):
        spec["project"] = "default"
    sp = spec.get("syncPolicy")
    unset = ("automated", "retry", "managedNamespaceMetadata")
    if isinstance(sp, dict) and all(sp.get(k) is None for k in unset) and not sp.get("syncOptions"):
        del spec["syncPolicy"]
    return spec


def application_from_template(rendered: dict, appset: Resource, path: str) -> Resource:
    """The Application the controller writes (template.go GenerateApplications: the
    ApplicationSet's namespace; createOrUpdateInCluster: name, labels, annotations, finalizers and the
    normalised spec)."""
    meta = rendered["metadata"]
    metadata: dict[str, Any] = {"name": meta.get("name", "")}
    if appset.namespace:
        metadata["namespace"] = appset.namespace
    for key in ("labels", "annotations", "finalizers"):
        if meta.get(key):
            metadata[key] = meta[key]
    spec = rendered.get("spec") if isinstance(rendered.get("spec"), dict) else {}
    doc = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": metadata,
           "spec": normalize_spec(spec)}  # fmt: skip
    return Resource(doc=doc, origin=appset.origin, source=path, app=appset.app, extra={"generated_by": appset.name})


def list_directories(root: Path) -> list[str]:
    """Every folder of the working tree (relative, '/'-separated) but hidden ones, which the
    repository server skips (repository.go GetGitDirectories)."""
    out: list[str] = []
    for current, dirs, _files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        rel = Path(current).relative_to(root).as_posix()
        if rel != ".":
            out.append(rel)
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# What the ApplicationSet may hold


def _zero(v: Any) -> bool:
    return v is None or v == "" or v is False or v == 0 or v == [] or v == {}


def _only_empty(v: Any, depth: int = 0) -> bool:
    """A generator's own template mergo.Merge leaves the ApplicationSet's unchanged: no value in it
    (False past MAX_DEPTH: refused rather than walked)."""
    if depth > MAX_DEPTH:
        return False
    return v is None or (isinstance(v, dict) and all(_only_empty(x, depth + 1) for x in v.values()))


def _check_spec(spec: dict, refuse: Callable[[str], ArgoError]) -> None:
    """Refuse what changes the Applications and is not rendered."""
    for name, why in _REFUSED_SPEC.items():
        if name in spec and (spec[name] is not None if name == "templatePatch" else not _zero(spec[name])):
            raise refuse(f"spec.{name} ({why}) is not rendered offline by trainyard")
    if spec.get("goTemplate") is not True:
        raise refuse(f"spec.goTemplate {spec.get('goTemplate')!r}: only goTemplate: true is rendered offline by "
                     "trainyard (fasttemplate, Argo CD's default, is not)")  # fmt: skip
    options = spec.get("goTemplateOptions")
    if options not in (None, [], ["missingkey=error"]):
        raise refuse(f"spec.goTemplateOptions {_excerpt(str(options))}: only missingkey=error is rendered offline by "
                     "trainyard")  # fmt: skip


def _check_template(template: dict, refuse: Callable[[str], ArgoError]) -> None:
    """NormalizeSource drops zero kustomize, helm and directory settings: not followed, so refused."""
    spec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    if spec.get("sources") is not None:
        raise refuse("spec.template.spec.sources (multiple sources) is not rendered offline by trainyard")
    source = spec.get("source") if isinstance(spec.get("source"), dict) else {}
    for tool in ("kustomize", "helm", "directory", "plugin"):
        if tool in source:
            raise refuse(f"spec.template.spec.source.{tool} is not rendered offline by trainyard; put the setting "
                         "in the folder's kustomization.yaml")  # fmt: skip


def _git_generator(gen: Any, gi: int, repo: Repository, refuse: Callable[[str], ArgoError]) -> list[str] | None:
    """The path patterns of a git directory generator (None: an empty generator, which makes nothing)."""
    at = f"spec.generators[{gi}]"
    if not isinstance(gen, dict):
        raise refuse(f"{at} must be a mapping, not {type(gen).__name__}")
    kinds = [k for k, v in gen.items() if v is not None]
    others = [k for k in kinds if k != "git"]
    if others:
        kind = others[0]
        if kind == "selector":
            raise refuse(f"{at}.selector (a label selector over the parameters) is not rendered offline by "
                         "trainyard")  # fmt: skip
        if kind not in _GENERATORS:
            raise refuse(f"{at}.{kind}: {kind} is not a field of an ApplicationSet generator")
        raise refuse(f"{at}.{kind}: the {kind} generator is not rendered offline by trainyard; only git "
                     "directories are")  # fmt: skip
    if not kinds:
        return None  # generator_spec_processor.go GetRelevantGenerators: no generator, no parameters
    git = gen["git"]
    if not isinstance(git, dict):
        raise refuse(f"{at}.git must be a mapping")
    for key, value in git.items():
        if key not in _GIT_KEYS and not (key == "template" and _only_empty(value)) and value is not None:
            what = "the git file generator" if key == "files" else key
            raise refuse(f"{at}.git.{key} ({what}) is not rendered offline by trainyard; only git directories with "
                         f"{', '.join(_GIT_KEYS)} are")  # fmt: skip
    if not repo.is_this_repo(git.get("repoURL")):
        raise refuse(f"{at}.git.repoURL {git.get('repoURL')!r} is not this repository ({repo.url}, "
                     "base/repo/repo.env); its folders cannot be listed offline")  # fmt: skip
    if git.get("revision") not in (None, "", repo.revision, "HEAD"):
        raise refuse(f"{at}.git.revision {git.get('revision')!r} is not this repository's revision "
                     f"{repo.revision!r} (base/repo/repo.env); its folders cannot be listed")  # fmt: skip
    dirs = git.get("directories")
    if not isinstance(dirs, list) or not dirs:
        raise refuse(f"{at}.git.directories must list at least one path (Argo CD: generator is empty)")
    patterns = []
    for di, d in enumerate(dirs):
        if not isinstance(d, dict) or not isinstance(d.get("path"), str):
            raise refuse(f"{at}.git.directories[{di}] must be a mapping with a string path")
        extra = sorted(k for k, v in d.items() if k != "path" and v not in (None, False))
        if extra:
            raise refuse(f"{at}.git.directories[{di}].{extra[0]} is not rendered offline by trainyard")
        try:
            path_match(d["path"], "")
        except PatternNotRead as exc:
            raise refuse(f"{at}.git.directories[{di}].path {_excerpt(d['path'])}: {exc}") from None
        patterns.append(d["path"])
    return patterns


def _application(template: dict, appset: Resource, path: str, first: dict[str, str]) -> Resource:
    app = application_from_template(render_template_params(template, path), appset, path)
    if not app.name:
        raise TemplateError("spec.template.metadata.name renders empty (kube-apiserver refuses the Application)")
    if app.name in first:
        raise TemplateError(
            f"two Applications named {app.name} (folders {first[app.name]} and {path}); Argo CD creates the first "
            "only and reports the other (applicationset_controller.go validateGeneratedApplications)"
        )
    for key in PRESERVED_ANNOTATIONS:
        if key in app.annotations:
            raise TemplateError(f"spec.template.metadata.annotations: {key} is kept from the live Application "
                                "(defaultPreservedAnnotations); a template value is not rendered")  # fmt: skip
    return app


def generate_applications(appset: Resource, repo: Repository, directories: list[str] | None = None) -> list[Resource]:
    """The Applications an ApplicationSet makes from this repository's working tree (``directories``:
    the folder listing, for tests). Raises ArgoError on anything Argo CD would fail on and anything
    this render refuses, naming the ApplicationSet and its file."""
    where, what = appset.where(), f"ApplicationSet {appset.name}"

    def refuse(message: str) -> ArgoError:
        return ArgoError(f"{where}: {what}: {message}")

    spec = appset.doc.get("spec")
    if not isinstance(spec, dict):
        raise refuse("spec must be a mapping")
    _check_spec(spec, refuse)
    template = spec.get("template")
    if not isinstance(template, dict):
        raise refuse("spec.template is required")
    _check_template(template, refuse)
    generators = spec.get("generators")
    if not isinstance(generators, list) or not generators:
        raise refuse("spec.generators must list at least one generator")
    gits = [_git_generator(gen, gi, repo, refuse) for gi, gen in enumerate(generators)]
    listing = directories if directories is not None else list_directories(repo.root)
    visible = [p for p in listing if not any(part.startswith(".") for part in p.split("/"))]
    out: list[Resource] = []
    first: dict[str, str] = {}
    for patterns in gits:
        for path in visible if patterns else ():
            if not any(path_match(p, path) for p in patterns):  # filterPaths: any pattern includes
                continue
            try:
                app = _application(template, appset, path, first)
            except TemplateError as exc:
                raise refuse(f"{exc} (folder {path})") from None
            first[app.name] = path
            out.append(app)
    return out
