"""The ApplicationSet controller of Argo CD v3.5.1, offline: the Applications an ApplicationSet with
git directory generators makes from this repository's working tree.

Followed (each rule below cites its argo-cd@v3.5.1 source: git.go, value_interpolation.go and
generator_spec_processor.go are in applicationset/generators/, utils.go, template_functions.go and
policy.go in applicationset/utils/, applicationset_controller.go and template/template.go in
applicationset/controllers/):

- the git directory generator (applicationset/generators/git.go): the repository server's folder
  listing (hidden folders skipped), ``directories[].path`` matched with Go's path.Match
  (:func:`path_match`, a port; ``exclude: true`` wins over any include), the parameters of each
  folder with ``goTemplate`` (``.path.path``, ``.path.basename``, ``.path.basenameNormalized``,
  ``.path.segments``, under ``.<pathParamPrefix>.path`` when set) or without it (``path``,
  ``path.basename``, ``path.basenameNormalized``, ``path[n]``), and ``values``, each rendered with
  those parameters and added as ``.values.<key>`` (a ``map[string]string``) or ``values.<key>``;
- every string of ``spec.template``, map keys included, rendered as Render.deeplyReplace does
  (:mod:`trainyard.repo.upstream.gotemplate`), with ``goTemplateOptions``;
- the generated Application (template/template.go GenerateApplications, utils.go
  RenderTemplateParams, applicationset_controller.go createOrUpdateInCluster): the template's
  name, labels, annotations and finalizers, the ApplicationSet's namespace, the finalizer
  ``resources-finalizer.argocd.argoproj.io`` when the template names none and
  ``syncPolicy.preserveResourcesOnDeletion`` is not true, the spec as util/argo
  NormalizeApplicationSpec stores it. Not rendered: ``metadata.ownerReferences`` (the controller
  points it at the ApplicationSet's uid, which kube-apiserver assigns).

Refused by name, never rendered differently: other generators, ``selector``, ``git.files``,
a ``git.template`` with content, a repository or revision other than this repository's,
``templatePatch``, ``strategy``, ``preservedFields``, ``ignoreApplicationDifferences``,
``syncPolicy.applicationsSync`` other than ``sync``, two Applications of one name, template
features :mod:`~trainyard.repo.upstream.gotemplate` does not emulate, and hostile input (non-string
keys, keys that render alike, nesting or size beyond bounds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from trainyard.repo.model.rendered import Resource, tree_copy
from trainyard.repo.model.repository import Repository
from trainyard.repo.upstream import gotemplate
from trainyard.repo.upstream.gotemplate import NotEmulated, TemplateError

if TYPE_CHECKING:
    from trainyard.repo.upstream.argocd import ArgoError

RESOURCES_FINALIZER = "resources-finalizer.argocd.argoproj.io"  # pkg/apis/application/v1alpha1/application_defaults.go
# applicationset_controller.go defaultPreservedAnnotations: createOrUpdateInCluster copies these from the
# live Application over the generated one, so a template cannot set them
PRESERVED_ANNOTATIONS = (
    "notified.notifications.argoproj.io",
    "argocd.argoproj.io/refresh",
    "argocd.argoproj.io/hydrate",
)
MAX_DEPTH = 100  # nesting of spec.template; deeper is refused
MAX_NODES = 100_000  # values in one rendered template (YAML aliases can make a small file expand without end)
MAX_PATTERN = 4096  # bytes of a directories[].path pattern (a path longer than PATH_MAX matches nothing)

# applicationset_types.go ApplicationSetSpec: fields refused, and why
_REFUSED_SPEC = {
    "templatePatch": "a patch rendered and merged into each Application (controllers/template/template.go "
    "renderTemplatePatch)",
    "strategy": "progressive syncs: RollingSync steps take the generated Applications' syncs over "
    "(applicationset_controller.go, controllers/progressivesync)",
    "preservedFields": "keeps annotations and labels of the live Applications (applicationset_controller.go "
    "createOrUpdateInCluster), which an offline render cannot know",
    "ignoreApplicationDifferences": "keeps fields of the live Applications (createOrUpdateInCluster, "
    "utils.BuildIgnoreDiffConfig), which an offline render cannot know",
}
_GENERATORS = ("list", "clusters", "git", "scmProvider", "clusterDecisionResource", "pullRequest", "matrix", "merge",
               "plugin")  # fmt: skip


def _argocd() -> Any:
    # argocd imports this module (generate_applications); it is imported here only when needed
    from trainyard.repo.upstream import argocd

    return argocd


# ---------------------------------------------------------------------------------------------
# Go's path.Match (path/match.go), on UTF-8 bytes as Go matches them


class BadPattern(ValueError):
    pass


def _decode_rune(b: bytes, i: int) -> tuple[int, int]:
    """utf8.DecodeRune: (rune, width); an invalid sequence is (U+FFFD, 1)."""
    lead = b[i]
    if lead < 0x80:
        return lead, 1
    width = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    if width == 0:
        return 0xFFFD, 1
    try:
        return ord(b[i : i + width].decode("utf-8")), width
    except UnicodeDecodeError:
        return 0xFFFD, 1


def _scan_chunk(p: bytes, i: int) -> tuple[bool, bytes, int]:
    star = False
    while i < len(p) and p[i] == 0x2A:  # '*'
        i += 1
        star = True
    inrange = False
    j = i
    while j < len(p):
        c = p[j]
        if c == 0x5C:  # '\\'
            if j + 1 < len(p):
                j += 1
        elif c == 0x5B:  # '['
            inrange = True
        elif c == 0x5D:  # ']'
            inrange = False
        elif c == 0x2A and not inrange:
            return star, p[i:j], j
        j += 1
    return star, p[i:], len(p)


def _get_esc(chunk: bytes, i: int) -> tuple[int, int]:
    if i >= len(chunk) or chunk[i] in (0x2D, 0x5D):  # '-', ']'
        raise BadPattern
    if chunk[i] == 0x5C:
        i += 1
        if i >= len(chunk):
            raise BadPattern
    r, n = _decode_rune(chunk, i)
    if r == 0xFFFD and n == 1:
        raise BadPattern
    i += n
    if i >= len(chunk):
        raise BadPattern
    return r, i


def _match_chunk(chunk: bytes, s: bytes, si: int) -> tuple[int, bool]:
    """path/match.go matchChunk: the rest of ``s`` after ``chunk`` matched at ``si``; the chunk is
    checked to the end even after a mismatch (a malformed one raises BadPattern)."""
    failed = False
    ci = 0
    while ci < len(chunk):
        failed = failed or si >= len(s)
        c = chunk[ci]
        if c == 0x5B:  # character class
            r = 0
            if not failed:
                r, n = _decode_rune(s, si)
                si += n
            ci += 1
            negated = ci < len(chunk) and chunk[ci] == 0x5E  # '^'
            ci += negated
            match, nrange = False, 0
            while True:
                if ci < len(chunk) and chunk[ci] == 0x5D and nrange > 0:
                    ci += 1
                    break
                lo, ci = _get_esc(chunk, ci)
                hi = lo
                if chunk[ci] == 0x2D:
                    hi, ci = _get_esc(chunk, ci + 1)
                match = match or lo <= r <= hi
                nrange += 1
            failed = failed or match == negated
        elif c == 0x3F:  # '?'
            if not failed:
                failed = s[si] == 0x2F
                si += _decode_rune(s, si)[1]
            ci += 1
        else:
            if c == 0x5C:
                ci += 1
                if ci >= len(chunk):
                    raise BadPattern
            if not failed:
                failed = chunk[ci] != s[si]
                si += 1
            ci += 1
    return (0, False) if failed else (si, True)


def path_match(pattern: str, name: str) -> bool:
    """Go's path.Match(pattern, name); BadPattern where Go returns ErrBadPattern."""
    p = pattern.encode("utf-8", "surrogateescape")
    s = name.encode("utf-8", "surrogateescape")
    pi, si = 0, 0
    while pi < len(p):
        star, chunk, pi = _scan_chunk(p, pi)
        if star and not chunk:  # a trailing * matches the rest unless it holds a '/'
            return s.find(b"/", si) < 0
        t, ok = _match_chunk(chunk, s, si)
        if ok and (t == len(s) or pi < len(p)):
            si = t
            continue
        if star:
            found = False
            i = si
            while i < len(s) and s[i] != 0x2F:  # a star cannot skip a '/'
                t, ok = _match_chunk(chunk, s, i + 1)
                if ok and not (pi == len(p) and t < len(s)):
                    si, found = t, True
                    break
                i += 1
            if found:
                continue
        while pi < len(p):  # before false, the rest of the pattern must be well formed
            _, chunk, pi = _scan_chunk(p, pi)
            _match_chunk(chunk, b"", 0)
        return False
    return si == len(s)


# ---------------------------------------------------------------------------------------------
# The git directory generator (applicationset/generators/git.go)


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]  # path.Base of a listed folder (relative, no trailing '/')


def directory_params(path: str, go: bool, prefix: str) -> dict[str, Any]:
    """git.go generateParamsFromApps: one folder's parameters."""
    base = _basename(path)
    if go:
        value = {"path": path, "basename": base, "basenameNormalized": gotemplate.sanitize_name(base),
                 "segments": path.split("/")}  # fmt: skip
        return {prefix: {"path": value}} if prefix else {"path": value}
    key = f"{prefix}.path" if prefix else "path"
    flat = {key: path, f"{key}.basename": base, f"{key}.basenameNormalized": gotemplate.sanitize_name(base)}
    for i, seg in enumerate(path.split("/")):
        if seg:
            flat[f"{key}[{i}]"] = seg
    return flat


def append_values(values: dict[str, str], params: dict[str, Any], go: bool, options: list | None) -> None:
    """value_interpolation.go appendTemplatedValues: each value rendered with the folder's parameters
    (not with the other values), then added: ``values`` as a map[string]string, or ``values.<key>``."""
    tmp: dict[str, Any] = {}
    for key in sorted(values):  # Go iterates in random order; the values do not see each other
        try:
            result = _replace(values[key], params, go, options)
        except TemplateError as exc:
            raise type(exc)(f"values[{key}]: {exc}") from None
        if go:
            tmp.setdefault("values", gotemplate.StrMap())[key] = result
        else:
            tmp[f"values.{key}"] = result
    params.update(tmp)


def filter_directories(items: list[tuple[str, bool]], listing: list[str]) -> Iterator[str]:
    """git.go filterApps: the folders some include pattern matches and no exclude pattern does.
    Argo CD logs a malformed pattern and ignores it for that folder; it is refused here."""
    for path in listing:
        include = exclude = False
        for pattern, excluded in items:
            try:
                matched = path_match(pattern, path)
            except BadPattern:
                raise TemplateError(
                    f"path {pattern!r} is not a pattern of Go's path.Match (syntax error in pattern); Argo CD "
                    "logs it and matches no folder with it"
                ) from None
            include = include or (matched and not excluded)
            exclude = exclude or (matched and excluded)
        if include and not exclude:
            yield path


def git_directory_params(
    items: list[tuple[str, bool]],
    listing: list[str],
    go: bool,
    prefix: str = "",
    values: dict[str, str] | None = None,
    options: list | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """git.go generateParamsForGitDirectories: (folder, parameters) for each generated folder."""
    for path in filter_directories(items, listing):
        try:
            _utf8(path)
            params = directory_params(path, go, prefix)
            append_values(values or {}, params, go, options)
        except TemplateError as exc:
            raise type(exc)(f"folder {path!r}: {exc}") from None
        yield path, params


# ---------------------------------------------------------------------------------------------
# Rendering (applicationset/utils/utils.go)


def _replace(s: str, params: dict[str, Any], go: bool, options: list | None) -> str:
    """utils.go Render.Replace."""
    if go:
        return gotemplate.render(s, params, gotemplate.missingkey_option(options))
    return gotemplate.fasttemplate(s, params)


def _utf8(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no Kubernetes object holds it
        raise TemplateError(f"{gotemplate._excerpt(s)} is not valid UTF-8 text") from None


def deeply_replace(node: Any, replace: Callable[[str], str], field: str) -> Any:
    """utils.go deeplyReplace: every string of the tree rendered, map keys too (a value before its
    key). A null value of a mapping is dropped: kube-apiserver prunes nulls of non-nullable fields and
    deeplyReplace skips nil map values. Non-string keys, two keys rendering alike (Go sets map keys
    in its random map order: one of the two would win at random), a value of any type a Kubernetes
    object cannot hold, and trees deeper than MAX_DEPTH or larger than MAX_NODES are refused."""
    budget = [MAX_NODES]

    def walk(v: Any, where: str, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise NotEmulated(f"{field}: more than {MAX_NODES} values (YAML aliases expanding?); not rendered")
        if depth > MAX_DEPTH:
            raise NotEmulated(f"{where}: nested deeper than {MAX_DEPTH} levels; not rendered")
        if isinstance(v, str):
            try:
                _utf8(v)
                return replace(v)
            except TemplateError as exc:
                raise type(exc)(f"{where}: {exc}") from None
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
                try:
                    _utf8(k)
                    key = replace(k)
                except TemplateError as exc:
                    raise type(exc)(f"{where}: key {k!r}: {exc}") from None
                if key in out:
                    raise NotEmulated(
                        f"{where}: the keys {origin[key]!r} and {k!r} both render to {key!r}; Argo CD keeps one of "
                        "them at random (utils.go deeplyReplace sets map keys in Go's random map order)"
                    )
                out[key], origin[key] = value, k
            return out
        raise TemplateError(f"{where}: a {type(v).__name__} value, which a Kubernetes object cannot hold (quote it)")

    return walk(node, field, 0)


def render_template_params(
    template: dict, sync_policy: dict | None, params: dict[str, Any], go: bool, options: list | None
) -> dict[str, Any]:
    """utils.go RenderTemplateParams on template.go GetTempApplication: the template's metadata
    (name, namespace, labels, annotations, finalizers) and spec, every string rendered; the
    resources finalizer added when the rendered template names no finalizer and
    ``preserveResourcesOnDeletion`` is not true. With no parameters the template is returned as it
    is (no rendering, no finalizer), as there."""
    meta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    app = {
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "finalizers") if k in meta},
        "spec": template.get("spec") if template.get("spec") is not None else {},
    }
    if not params:
        return tree_copy(app)
    rendered = deeply_replace(app, lambda s: _replace(s, params, go, options), "spec.template")
    preserve = isinstance(sync_policy, dict) and sync_policy.get("preserveResourcesOnDeletion") is True
    if not rendered["metadata"].get("finalizers") and not preserve:
        rendered["metadata"]["finalizers"] = [RESOURCES_FINALIZER]
    return rendered


def _zero(v: Any) -> bool:
    return v is None or v == "" or v is False or v == 0 or v == [] or v == {}


_KUSTOMIZE_NONZERO = ("namePrefix", "nameSuffix", "version", "namespace", "images", "replicas", "commonLabels",
                      "commonAnnotations", "patches", "components", "kubeVersion", "apiVersions",
                      "ignoreMissingComponents")  # fmt: skip  # types.go ApplicationSourceKustomize.IsZero
_HELM_NONZERO = ("version", "releaseName", "valueFiles", "parameters", "fileParameters", "values", "passCredentials",
                 "ignoreMissingValueFiles", "skipCrds", "skipTests", "skipSchemaValidation", "kubeVersion",
                 "apiVersions", "namespace")  # fmt: skip  # types.go ApplicationSourceHelm.IsZero


def normalize_spec(spec: dict) -> dict:
    """util/argo/argo.go NormalizeApplicationSpec, which createOrUpdateInCluster applies before it
    writes the Application: an empty project is ``default``; a syncPolicy without automated,
    syncOptions, retry and managedNamespaceMetadata is dropped; on ``spec.source`` (not
    ``spec.sources``: the loop there normalises copies) a zero kustomize or helm block is dropped and
    a zero directory keeps only include and exclude."""
    if not spec.get("project"):
        spec["project"] = "default"
    sp = spec.get("syncPolicy")
    unset = ("automated", "retry", "managedNamespaceMetadata")
    if isinstance(sp, dict) and all(sp.get(k) is None for k in unset) and not sp.get("syncOptions"):
        del spec["syncPolicy"]
    source = spec.get("source")
    if not spec.get("sources") and isinstance(source, dict):
        kz = source.get("kustomize")
        if isinstance(kz, dict) and all(_zero(kz.get(k)) for k in _KUSTOMIZE_NONZERO):
            del source["kustomize"]
        helm = source.get("helm")
        if isinstance(helm, dict) and all(_zero(helm.get(k)) for k in _HELM_NONZERO) and "valuesObject" not in helm:
            del source["helm"]
        d = source.get("directory")
        if isinstance(d, dict) and d.get("recurse") is not True:
            jsonnet = d.get("jsonnet") if isinstance(d.get("jsonnet"), dict) else {}
            if all(_zero(jsonnet.get(k)) for k in ("extVars", "tlas", "libs")):
                kept = {k: d[k] for k in ("exclude", "include") if d.get(k)}
                if kept:
                    source["directory"] = kept
                else:
                    del source["directory"]
    return spec


def application_from_template(rendered: dict, appset: Resource, path: str) -> Resource:
    """The Application the controller writes (template.go GenerateApplications: the
    ApplicationSet's namespace; createOrUpdateInCluster: name, labels, annotations, finalizers and the
    normalised spec). ``ownerReferences`` is left out: it names the ApplicationSet's uid."""
    meta = rendered["metadata"]
    metadata: dict[str, Any] = {"name": meta.get("name", "")}
    if appset.namespace:
        metadata["namespace"] = appset.namespace
    for key in ("labels", "annotations", "finalizers"):
        if meta.get(key):
            metadata[key] = meta[key]
    spec = rendered.get("spec") if isinstance(rendered.get("spec"), dict) else {}
    doc = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": metadata,
        "spec": normalize_spec(spec),
    }
    return Resource(doc=doc, origin=appset.origin, source=path, app=appset.app, extra={"generated_by": appset.name})


# ---------------------------------------------------------------------------------------------
# The ApplicationSet


def _only_empty(v: Any) -> bool:
    """A generator's own template mergo.Merge leaves the ApplicationSet's unchanged: no value in it."""
    if v is None:
        return True
    if isinstance(v, dict):
        return all(_only_empty(x) for x in v.values())
    return False


def _check_spec(spec: dict, refuse: Callable[[str], ArgoError]) -> dict | None:
    """Refuse what changes the Applications and is not emulated; return the syncPolicy. Fields the
    ApplicationSet CRD does not have are dropped by kube-apiserver (and refused by trainyard validate's
    CRD schema check); ``applyNestedSelectors`` is ignored by Argo CD (applicationset_types.go: deprecated)."""
    for name, why in _REFUSED_SPEC.items():
        if name in spec and (spec[name] is not None if name == "templatePatch" else not _zero(spec[name])):
            raise refuse(f"spec.{name} ({why}) is not emulated by trainyard render")
    policy = spec.get("syncPolicy")
    if policy is None:
        return None
    if not isinstance(policy, dict):
        raise refuse("spec.syncPolicy must be a mapping")
    preserve = policy.get("preserveResourcesOnDeletion")
    if preserve is not None and not isinstance(preserve, bool):
        raise refuse(f"spec.syncPolicy.preserveResourcesOnDeletion must be true or false, not {preserve!r}")
    sync = policy.get("applicationsSync")
    # utils/policy.go DefaultPolicy: honoured only where the controller runs with --enable-policy-override,
    # and "sync" is what the controller does by default: create, update and delete as rendered
    if sync not in (None, "sync"):
        raise refuse(
            f"spec.syncPolicy.applicationsSync {sync!r} (Applications not updated or not deleted as the git "
            "folders change, utils/policy.go) is not emulated by trainyard render; only sync is"
        )
    return policy


def _git_generator(gen: Any, gi: int, repo: Repository, refuse: Callable[[str], ArgoError]) -> dict | None:
    at = f"spec.generators[{gi}]"
    if not isinstance(gen, dict):
        raise refuse(f"{at} must be a mapping, not {type(gen).__name__}")
    kinds = [k for k, v in gen.items() if v is not None]
    if "selector" in kinds:
        raise refuse(f"{at}.selector (a label selector over the parameters, generators/generator_spec_processor.go "
                     "Transform) is not emulated by trainyard render")  # fmt: skip
    others = [k for k in kinds if k != "git"]
    if others:
        kind = others[0]
        if kind not in _GENERATORS:
            raise refuse(f"{at}.{kind}: {kind} is not a field of an ApplicationSet generator")
        raise refuse(f"{at}.{kind}: the {kind} generator is not emulated by trainyard render; only git directories are")
    if not kinds:
        return None  # generator_spec_processor.go GetRelevantGenerators: no generator, no parameters
    git = gen["git"]
    if not isinstance(git, dict):
        raise refuse(f"{at}.git must be a mapping")
    if not repo.is_this_repo(git.get("repoURL")):
        raise refuse(
            f"{at}.git.repoURL {git.get('repoURL')!r} is not this repository ({repo.url}, base/repo/repo.env); its "
            "folders cannot be listed offline"
        )
    revision = git.get("revision")
    if revision not in (None, "", repo.revision, "HEAD"):
        raise refuse(
            f"{at}.git.revision {revision!r} is not this repository's revision {repo.revision!r} "
            "(base/repo/repo.env); the folders of another revision cannot be listed from the working tree"
        )
    dirs = git.get("directories")
    if not dirs:  # git.go GenerateParams: directories first, then files, else ErrEmptyAppSetGenerator
        if git.get("files"):
            raise refuse(f"{at}.git.files (the git file generator) is not emulated by trainyard render; only "
                         "directories are")  # fmt: skip
        raise refuse(f"{at}.git has neither directories nor files (Argo CD: generator is empty)")
    if not isinstance(dirs, list):
        raise refuse(f"{at}.git.directories must be a list")
    if not _only_empty(git.get("template")):
        raise refuse(
            f"{at}.git.template (merged under spec.template with mergo, generator_spec_processor.go "
            "mergeGeneratorTemplate) is not emulated by trainyard render; put it in spec.template"
        )
    items = []
    for di, d in enumerate(dirs):
        if not isinstance(d, dict) or not isinstance(d.get("path"), str):
            raise refuse(f"{at}.git.directories[{di}] must be a mapping with a string path")
        if d.get("exclude") not in (None, True, False):
            raise refuse(f"{at}.git.directories[{di}].exclude must be true or false")
        if len(d["path"].encode("utf-8", "surrogateescape")) > MAX_PATTERN:
            raise refuse(f"{at}.git.directories[{di}].path is longer than {MAX_PATTERN} bytes; not matched")
        items.append((d["path"], d.get("exclude") is True))
    prefix = git.get("pathParamPrefix") or ""
    values = git.get("values") or {}
    if not isinstance(prefix, str):
        raise refuse(f"{at}.git.pathParamPrefix must be a string")
    if not isinstance(values, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
        raise refuse(f"{at}.git.values must map strings to strings")
    # requeueAfterSeconds only sets how often Argo CD lists the folders again: nothing it generates
    return {"items": items, "prefix": prefix, "values": values}


def _application(
    template: dict,
    sync_policy: dict | None,
    params: dict[str, Any],
    go: bool,
    options: list | None,
    appset: Resource,
    path: str,
    first: dict[str, str],
) -> Resource:
    rendered = render_template_params(template, sync_policy, params, go, options)
    app = application_from_template(rendered, appset, path)
    if not app.name:
        raise TemplateError("spec.template.metadata.name renders empty (kube-apiserver refuses the Application)")
    if app.name in first:
        raise NotEmulated(
            f"two Applications named {app.name} (folders {first[app.name]} and {path}); Argo CD creates the first "
            "only and reports the other (applicationset_controller.go validateGeneratedApplications)"
        )
    for key in PRESERVED_ANNOTATIONS:
        if key in app.annotations:
            raise NotEmulated(
                f"spec.template.metadata.annotations: {key} is kept from the live Application by the controller "
                "(applicationset_controller.go defaultPreservedAnnotations); a template value is not emulated"
            )
    # createOrUpdateInCluster also appends the live Application's pre-/post-delete hook finalizers
    # (defaultPreservedFinalizers): the hooks' own bookkeeping while it is deleted, never in git
    return app


def generate_applications(appset: Resource, repo: Repository, directories: list[str] | None = None) -> list[Resource]:
    """The Applications an ApplicationSet with git directory generators makes from this repository's
    working tree (``directories``: the folder listing, for tests). Raises ArgoError on anything
    Argo CD would fail on and on anything not emulated."""
    argocd = _argocd()
    where, what = appset.where(), f"ApplicationSet {appset.name}"

    def refuse(message: str) -> ArgoError:
        return argocd.ArgoError(f"{where}: {what}: {message}")

    spec = appset.doc.get("spec")
    if not isinstance(spec, dict):
        raise refuse("spec must be a mapping")
    sync_policy = _check_spec(spec, refuse)
    go = spec.get("goTemplate", False)
    if go is None:
        go = False
    if not isinstance(go, bool):
        raise refuse(f"spec.goTemplate must be true or false, not {go!r}")
    options = spec.get("goTemplateOptions")
    if options is not None and not isinstance(options, list):
        raise refuse("spec.goTemplateOptions must be a list of strings")
    template = spec.get("template")
    if not isinstance(template, dict):
        raise refuse("spec.template is required")
    generators = spec.get("generators")
    if not isinstance(generators, list) or not generators:
        raise refuse("spec.generators must list at least one generator")
    gits = [_git_generator(gen, gi, repo, refuse) for gi, gen in enumerate(generators)]
    listing: list[str] | None = directories
    out: list[Resource] = []
    first: dict[str, str] = {}
    for gi, git in enumerate(gits):
        if git is None:
            continue
        if listing is None:
            listing = argocd.list_directories(repo.root)
        # the repository server skips hidden folders (reposerver/repository/repository.go GetGitDirectories)
        visible = [p for p in listing if not any(part.startswith(".") for part in p.split("/"))]
        found = git_directory_params(git["items"], visible, go, git["prefix"], git["values"], options)
        while True:
            try:
                path, params = next(found)
            except StopIteration:
                break
            except TemplateError as exc:
                raise refuse(f"spec.generators[{gi}].git: {exc}") from None
            try:
                app = _application(template, sync_policy, params, go, options, appset, path, first)
            except TemplateError as exc:
                raise refuse(f"{exc} (folder {path})") from None
            first[app.name] = path
            out.append(app)
    return out
