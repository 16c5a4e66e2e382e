"""The keys of a kustomization as kustomize reads them: without regard to case.

kustomize decodes a kustomization by converting its YAML to JSON and decoding that into its Go types
with encoding/json (sigs.k8s.io/kustomize/api@v0.21.3 types/kustomization.go ``Unmarshal``; the TODO
there says why it is not strict). encoding/json matches a struct field by its exact name or, failing
that, by ``bytes.EqualFold``: Unicode simple case folding (go1.26 src/encoding/json/fold.go
``foldName``), so ``Resources:``, ``RESOURCES:`` and ``reſources:`` (U+017F LONG S) are all the
``resources`` field, and ``Path:`` in a patch is its ``path``. A check that reads the exact names
would miss them; :func:`problems` refuses every key of the kustomization's struct fields that
folds to one of kustomize's field names without being written as it (the two spellings of one
field, the other way kustomize could see a key written twice, are then refused with it).

The keys of map fields (labels, annotations, ``openapi``, ``pairs``, Helm values) are data: Go
decodes them into a map, case-sensitively, and they are not looked at here.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from trainyard.repo.model import rawyaml

# Every json field name of api@v0.21.3 types/*.go and kyaml@v0.21.3 resid/*.go (Selector's inline
# ResId: group, version, kind, name, namespace); only the spelling matters here, not which type has it.
FIELDS = frozenset((
    "additionalValuesFiles", "allowKindChange", "allowNameChange", "annotationSelector", "annotations",
    "apiVersion", "apiVersions", "bases", "behavior", "buildMetadata", "chartHome", "chartName", "chartRepoName",
    "chartRepoUrl", "chartVersion", "cloud", "commonAnnotations", "commonLabels", "components", "configHome",
    "configMapGenerator", "configurations", "count", "crds", "create", "debug", "delimiter", "devel", "digest",
    "disableNameSuffixHash", "encoding", "env", "envs", "extraArgs", "fieldPath", "fieldPaths", "fieldref",
    "fields", "files", "generatorOptions", "generators", "group", "helmBin", "helmChartInflationGenerator",
    "helmCharts", "helmGlobals", "helmHome", "imageTags", "images", "immutable", "includeCRDs", "includeSelectors",
    "includeTemplates", "includeVolumeClaimTemplates", "index", "kind", "kubeVersion", "kubernetesService",
    "labelSelector", "labels",
    "legacySortOptions", "literals", "metadata", "name", "namePrefix", "nameSuffix", "nameTemplate", "namespace",
    "newName", "newTag", "objref", "openapi", "options", "order", "orderFirst", "orderLast", "pairs", "patch",
    "patches", "patchesJson6902", "patchesStrategicMerge", "path", "projectId", "reject", "releaseName",
    "releaseNamespace", "replacements", "replicas", "repo", "resources", "secretGenerator", "select",
    "serviceAccount", "skipHooks", "skipTests", "sortOptions", "source", "sourceValue", "tagSuffix", "target",
    "targets", "transformers", "type", "validators", "values", "valuesFile", "valuesInline", "valuesLocal",
    "valuesMerge", "vars", "version",
))  # fmt: skip
# fields of type map[string]string or map[string]interface{}: their keys are data
MAP_FIELDS = frozenset(
    ("annotations", "commonAnnotations", "commonLabels", "labels", "openapi", "pairs", "valuesInline", "valuesLocal")
)


def go_fold(text: str) -> str:
    """A key folded so that two keys fold alike exactly when encoding/json would take them for the
    same ASCII field name: ASCII letters without case, and the two other characters whose simple case
    folding reaches an ASCII letter (U+212A KELVIN SIGN: k, U+017F LATIN SMALL LETTER LONG S: s;
    Unicode CaseFolding.txt); any other character only folds to characters that are not ASCII."""
    return "".join("k" if c == "\u212a" else "s" if c == "\u017f" else c.lower() if c.isascii() else c for c in text)


_FOLDED = {go_fold(f): f for f in FIELDS}


def canonical(key: str) -> str | None:
    """The kustomize field ``key`` decodes into, or None when it is none of them."""
    return key if key in FIELDS else _FOLDED.get(go_fold(key))


def problems(doc: yaml.Node) -> Iterator[tuple[int, str]]:
    """(line, message) for every key of ``doc`` (a kustomization) that kustomize reads as a field
    written otherwise."""
    stack = [doc]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(reversed(node.value))
            continue
        if not isinstance(node, yaml.MappingNode):
            continue
        for key, value in node.value:
            name = rawyaml.scalar(key)
            if name is None or key.tag == rawyaml.MERGE:
                if key.tag == rawyaml.MERGE:
                    stack.append(value)
                continue
            field = canonical(name)
            if field is not None and field != name:
                yield (
                    rawyaml.line(key),
                    (
                        f"{name[:80]!r}: kustomize reads this key as {field!r} (it matches field names without regard "
                        f"to case), which trainyard reads by its exact name; write it {field!r}"
                    ),
                )
            if field in MAP_FIELDS and isinstance(value, yaml.MappingNode):
                continue  # data, matched exactly
            stack.append(value)
