"""Argo CD's diff of a desired object against the live one: the drift the application controller
would report for one object of one Application (argo-cd@v3.5.1:controller/state.go CompareAppState
-> util/argo/diff/diff.go StateDiffs -> gitops-engine pkg/diff/diff.go Diff), as far as this
repository relies on it. Argo CD cannot run here, so each step follows its source, cited beside the
code, and what is not emulated is refused (:class:`DiffError`) rather than guessed.

The settings (:meth:`Settings.of`): the Application's ``spec.ignoreDifferences`` and sync options,
and what ``argocd-cm`` adds (``resource.compareoptions``; ``resource.customizations`` and its split
``resource.customizations.ignoreDifferences.<group_kind>`` keys; with no ``ignoreResourceStatusField``
``status`` is ignored for every kind, util/settings/settings.go GetResourceOverrides). The
``ignoreResourceUpdates`` keys only decide which live changes start a refresh; they do not change a
diff and are read only for their shape.

Both objects are normalised the same way, in Argo CD's order (gitops-engine diff.go Diff, Normalize):

1. ``managedFieldsManagers`` (util/argo/diff/diff.go preDiffNormalize) is refused: it removes the
   fields a trusted manager owns through structured-merge-diff's typed values.
2. A kind of client-go's scheme (:mod:`~trainyard.repo.upstream.k8s_patch_meta`) is re-marshalled
   through its Go type (remarshal): here ``null`` values and empty lists of ``omitempty`` fields are
   dropped, as the Go types drop them; a number where the live object holds a string (a quantity the
   Go type re-encodes) is refused. Any other kind is left as it is.
3. ``metadata.creationTimestamp`` is removed; a Secret's ``stringData`` moves into ``data``
   (base64) and an empty or null ``data`` value becomes ``""``; a Role's or ClusterRole's empty
   ``rules`` become null (and an aggregated role's rules too with ``ignoreAggregatedRoles``);
   Endpoints (sorted subsets) are refused.
4. The ignore normalizer (util/argo/normalizers/diff_normalizer.go): every rule whose ``group`` and
   ``kind`` globs (gobwas/glob, as util/glob does) match and whose ``name`` and ``namespace`` are
   empty or equal, in order: each ``jsonPointers`` entry as a JSON patch ``remove`` (evanphx/json-patch
   v5.9.11, quirks included: a pointer without a leading ``/`` drops its first segment, indexes may
   be negative), then each ``jqPathExpressions`` entry as ``del(EXPR)`` with a one-second limit; a
   patch that fails (a path that is not there, a jq error, no or two outputs, the time limit) is
   skipped, as Argo CD skips it. jq runs in the C jq of the ``jq`` package where Argo CD runs gojq:
   :func:`jq_problems` refuses what the two do differently.
5. The known-types normalizer: ``knownTypeFields`` and argoproj.io Rollouts are refused.

Then the comparison (gitops-engine diff.go Diff):

- With ``ServerSideApply=true`` (or the object's own sync-options saying so) a structured merge
  diff: the desired object is applied onto the live one as field manager ``argocd-controller``
  would be (structured-merge-diff's Apply): maps merge field by field; a list merges item by item
  where it is associative (its items' keys) or a set, and is replaced otherwise, each list's kind
  read from the live object's ``managedFields``, which kube-apiserver wrote from that same schema;
  a field ``argocd-controller`` applied before that the desired object no longer has, and that no
  other manager owns, is removed.
- Otherwise a three-way diff against the ``kubectl.kubernetes.io/last-applied-configuration``
  annotation (two-way, the desired object as the last applied one, without it): for a kind of the
  scheme a strategic merge patch (lists merged on their ``patchMergeKey``), for any other a JSON
  merge patch computed on the live object cut down to the fields of the last applied one
  (threeWayMergePatch, RemoveMapFields).
- Server-side diff (``argocd.argoproj.io/compare-options: ServerSideDiff=true``) dry-runs the apply
  in kube-apiserver; it is refused.

The drift is the list of JSON pointers (RFC 6901) where the predicted live object differs from the
live one, both normalised: what Argo CD shows as the object's diff and why it is OutOfSync. The
desired object is the target as the controller holds it: the render with the Application's
tracking id (controller/state.go NormalizeTargetObjects; trainyard/cluster/sync.py tracked writes
it). ``RespectIgnoreDifferences=true`` changes what a sync applies (controller/sync.go
normalizeTargetResources copies the live values of the ignored fields into the target), not the
diff.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainyard.contract.k8s import LAST_APPLIED_ANNOTATION as LAST_APPLIED
from trainyard.repo.model.rendered import tree_copy
from trainyard.repo.upstream import globmatch, k8s_patch_meta
from trainyard.repo.upstream.argocd import ArgoError
from trainyard.repo.upstream.syncorder import SYNC_OPTIONS as SYNC_OPTIONS_ANNOTATION

ARGO = "argo-cd@v3.5.1"
SSA_MANAGER = "argocd-controller"  # common/common.go ArgoCDSSAManager
COMPARE_OPTIONS_ANNOTATION = "argocd.argoproj.io/compare-options"  # common/common.go AnnotationCompareOptions
JQ_TIMEOUT_S = 1.0  # util/argo/normalizers/diff_normalizer.go DefaultJQExecutionTimeout
MAX_DEPTH = 100  # nesting refused beyond this: no Kubernetes object comes near it
MAX_EXPRESSION = 4096  # characters of one jq expression or JSON pointer
MAX_REPLY = 64 << 20  # bytes of one reply from the jq process
_MISSING = object()


class DiffError(ArgoError):
    """The diff meets what it does not emulate, or input of the wrong shape; the message says what
    and where."""


# ---------------------------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class Rule:
    """One ``ResourceIgnoreDifferences`` (pkg/apis/application/v1alpha1/types.go), or one
    ignoreDifferences override of argocd-cm (its group and kind from the override's key)."""

    kind: str
    group: str = ""
    name: str = ""
    namespace: str = ""
    json_pointers: tuple[str, ...] = ()
    jq_paths: tuple[str, ...] = ()
    managers: tuple[str, ...] = ()
    where: str = "spec.ignoreDifferences"

    def matches(self, group: str, kind: str, name: str, namespace: str) -> bool:
        """diff_normalizer.go ignoreNormalizer.Normalize: group and kind by glob.Match, name and
        namespace equal unless empty."""
        return (
            glob_match(self.group, group)
            and glob_match(self.kind, kind)
            and (not self.name or self.name == name)
            and (not self.namespace or self.namespace == namespace)
        )


@dataclass(frozen=True)
class Settings:
    """What one Application's diff reads."""

    rules: tuple[Rule, ...] = ()
    structured_merge: bool = False  # ServerSideApply=true: controller/state.go WithStructuredMergeDiff
    ignore_aggregated_roles: bool = False  # settings.go GetDefaultDiffOptions
    app: str = ""

    @classmethod
    def of(cls, app: object, argocd_cm: object = None) -> Settings:
        """The settings of Application ``app`` (its document), with argocd-cm's ``data`` (a
        mapping, or the ConfigMap) where there is one."""
        if not isinstance(app, Mapping):
            raise DiffError(f"an Application must be a mapping, not {type(app).__name__}")
        meta = app.get("metadata") if isinstance(app.get("metadata"), Mapping) else {}
        name = str(meta.get("name", ""))
        spec = _mapping(app.get("spec"), f"Application {name}: spec")
        rules = list(parse_ignore_differences(spec.get("ignoreDifferences"), f"Application {name}"))
        for rule in rules:
            if rule.managers:
                raise DiffError(managers_refusal(f"Application {name}: {rule.where}"))
        annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        compare = annotation_csv(annotations.get(COMPARE_OPTIONS_ANNOTATION))
        if "ServerSideDiff=true" in compare:
            raise DiffError(
                f"Application {name}: {COMPARE_OPTIONS_ANNOTATION}: ServerSideDiff=true (controller/state.go): "
                "server-side diff dry-runs the apply in kube-apiserver and is not emulated"
            )
        options = sync_options(spec, f"Application {name}")
        data = argocd_cm
        if isinstance(data, Mapping) and data.get("kind") == "ConfigMap":
            data = data.get("data") or {}
        overrides = Overrides.parse(data if data is not None else {})
        return cls(
            rules=tuple(rules) + overrides.rules,
            structured_merge="ServerSideApply=true" in options,  # HasOption: the exact string
            ignore_aggregated_roles=overrides.ignore_aggregated_roles,
            app=name,
        )

    def matching(self, obj: Mapping) -> list[Rule]:
        group, kind, name, namespace = identity(obj)
        return [r for r in self.rules if r.matches(group, kind, name, namespace)]


def managers_refusal(where: str) -> str:
    return (
        f"{where}: managedFieldsManagers is not emulated: Argo CD removes the fields those managers own "
        f"through structured-merge-diff's typed values ({ARGO}:util/argo/managedfields/managed_fields.go "
        "Normalize); list the fields in jsonPointers or jqPathExpressions instead"
    )


def sync_options(spec: Mapping, where: str) -> list[str]:
    policy = spec.get("syncPolicy")
    if policy is None:
        return []
    policy = _mapping(policy, f"{where}: spec.syncPolicy")
    options = policy.get("syncOptions")
    if options is None:
        return []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise DiffError(f"{where}: spec.syncPolicy.syncOptions must be a list of strings")
    return list(options)


def parse_ignore_differences(value: object, where: str) -> Iterator[Rule]:
    """``spec.ignoreDifferences`` as rules; a wrong shape is refused (kube-apiserver would refuse
    it against the Application CRD's schema)."""
    if value is None:
        return
    if not isinstance(value, list):
        raise DiffError(f"{where}: spec.ignoreDifferences must be a list, not {type(value).__name__}")
    for i, item in enumerate(value):
        at = f"spec.ignoreDifferences[{i}]"
        entry = _mapping(item, f"{where}: {at}")
        strings = {}
        for key in ("group", "kind", "name", "namespace"):
            v = entry.get(key, "")
            if v is None:
                v = ""
            if not isinstance(v, str):
                raise DiffError(f"{where}: {at}.{key} must be a string")
            strings[key] = v
        lists = {}
        for key in ("jsonPointers", "jqPathExpressions", "managedFieldsManagers"):
            v = entry.get(key) or []
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise DiffError(f"{where}: {at}.{key} must be a list of strings")
            lists[key] = tuple(v)
        unknown = sorted(set(entry) - {"group", "kind", "name", "namespace", *lists})
        if unknown:
            raise DiffError(f"{where}: {at}: unknown field {unknown[0]!r} (ResourceIgnoreDifferences has none)")
        yield Rule(
            kind=strings["kind"],
            group=strings["group"],
            name=strings["name"],
            namespace=strings["namespace"],
            json_pointers=lists["jsonPointers"],
            jq_paths=lists["jqPathExpressions"],
            managers=lists["managedFieldsManagers"],
            where=at,
        )


@dataclass(frozen=True)
class Overrides:
    """What argocd-cm's data changes in a diff (util/settings/settings.go GetResourceOverrides,
    appendResourceOverridesFromSplitKeys, GetResourceCompareOptions)."""

    rules: tuple[Rule, ...] = ()
    ignore_aggregated_roles: bool = False

    @classmethod
    def parse(cls, data: object) -> Overrides:
        data = _mapping(data, "argocd-cm: data")
        by_key: dict[str, dict[str, Any]] = {}
        whole = data.get("resource.customizations")
        if whole:  # the single key: a YAML map of "group/kind" to overrides
            parsed = _yaml(whole, "argocd-cm: resource.customizations")
            for key, value in _mapping(parsed, "argocd-cm: resource.customizations").items():
                by_key[str(key)] = dict(_mapping(value, f"argocd-cm: resource.customizations: {key}"))
        for key in sorted(k for k in data if isinstance(k, str) and k.startswith("resource.customizations")):
            parts = key.split(".", 3)  # strings.SplitN(k, ".", 4)
            if len(parts) < 4:
                continue
            kind_key = _override_key(parts[3], key)
            what = parts[2]
            if what in ("health", "useOpenLibs", "actions"):
                continue  # not part of a diff
            if what not in ("ignoreDifferences", "ignoreResourceUpdates", "knownTypeFields"):
                raise DiffError(
                    f"argocd-cm: {key}: resource customization type {what} not supported (Argo CD refuses the "
                    f"whole ConfigMap: {ARGO}:util/settings/settings.go appendResourceOverridesFromSplitKeys)"
                )
            by_key.setdefault(kind_key, {})[what] = _yaml(data[key], f"argocd-cm: {key}")
        rules: list[Rule] = []
        for key in sorted(by_key):  # Go iterates the map in no fixed order; sorted here
            override = by_key[key]
            if override.get("knownTypeFields"):
                raise DiffError(
                    f"argocd-cm: knownTypeFields for {key}: the known-types normalizer re-formats fields through "
                    f"Go types ({ARGO}:util/argo/normalizers/knowntypes_normalizer.go) and is not emulated"
                )
            for what in ("ignoreDifferences", "ignoreResourceUpdates"):
                value = override.get(what)
                if value is None:
                    continue
                where = f"argocd-cm: {what} of {key}"
                body = _mapping(value, where)
                (rule,) = parse_ignore_differences([{"kind": "x", **body}], where)
                if rule.managers and what == "ignoreDifferences":
                    raise DiffError(managers_refusal(where))
                if what == "ignoreDifferences" and (rule.json_pointers or rule.jq_paths):
                    group, _, kind = key.rpartition("/") if "/" in key else ("", "", key)
                    if key.count("/") > 1:
                        raise DiffError(f"{where}: override key must be <group>/<kind> or <kind>, got: {key!r}")
                    rules.append(
                        Rule(kind, group, json_pointers=rule.json_pointers, jq_paths=rule.jq_paths, where=where)
                    )
        options = _mapping(_yaml(data.get("resource.compareoptions") or "{}", "argocd-cm: resource.compareoptions"),
                           "argocd-cm: resource.compareoptions")  # fmt: skip
        status = options.get("ignoreResourceStatusField", "all")
        if status is False:  # YAML's off/false
            status = "false"
        status = str(status if status is not None else "")
        if status in ("", "all") or status not in ("crd", "none", "off", "false"):
            rules.append(Rule("*", "*", json_pointers=("/status",), where="argocd-cm: status of every kind"))
        elif status == "crd":
            rules.append(
                Rule(
                    "CustomResourceDefinition",
                    "apiextensions.k8s.io",
                    json_pointers=("/status",),
                    where="argocd-cm: status of CRDs",
                )
            )
        aggregated = options.get("ignoreAggregatedRoles", False)
        return cls(rules=tuple(rules), ignore_aggregated_roles=aggregated is True)


def _override_key(group_kind: str, key: str) -> str:
    """settings.go convertToOverrideKey, with ``all`` for every kind."""
    parts = group_kind.split("_")
    if len(parts) == 2:
        out = f"{parts[0]}/{parts[1]}"
    elif len(parts) == 1 and group_kind:
        out = group_kind
    else:
        raise DiffError(
            f"argocd-cm: {key}: group kind should be in format resource.customizations.<type>.<group_kind> "
            f"(Argo CD refuses the ConfigMap: {ARGO}:util/settings/settings.go convertToOverrideKey)"
        )
    return "*/*" if out == "all" else out


def _yaml(text: object, where: str) -> Any:
    if not isinstance(text, str):
        return text
    if len(text) > 1 << 20:
        raise DiffError(f"{where}: more than 1 MiB")
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise DiffError(f"{where}: nested too deep") from None
    except yaml.YAMLError as exc:
        raise DiffError(f"{where}: not YAML ({str(exc).splitlines()[0]})") from None


def glob_match(pattern: str, text: str) -> bool:
    """util/glob Match(pattern, text) with no separators (gobwas/glob, :mod:`globmatch`); a pattern
    on which gobwas/glob would panic is refused."""
    try:
        return globmatch.glob_match(pattern, text)
    except globmatch.GlobPanic:
        raise DiffError(
            f"the glob {pattern!r}: gobwas/glob panics on it with {text!r}; write another pattern"
        ) from None


def glob_problems(rule: Rule) -> list[str]:
    """The group or kind globs of ``rule`` that gobwas/glob does not compile (Argo CD then matches
    nothing with them, util/glob Match)."""
    out = []
    for key, pattern in (("group", rule.group), ("kind", rule.kind)):
        if globmatch.compile_glob(pattern) is None:
            out.append(f"{key} {pattern!r} is not a glob gobwas/glob compiles: the rule matches nothing")
    return out


# ---------------------------------------------------------------------------------------------
# JSON pointers, as evanphx/json-patch v5.9.11+incompatible applies a "remove"

_GO_INT = re.compile(r"[+-]?[0-9]+")
_ESCAPE = re.compile(r"~[01]")


def decode_token(token: str) -> str:
    """patch.go decodePatchKey: ``~1`` to ``/`` then ``~0`` to ``~`` in one left-to-right pass
    (strings.NewReplacer); any other ``~`` is kept as it is."""
    return _ESCAPE.sub(lambda m: "/" if m.group(0) == "~1" else "~", token)


def pointer_problems(pointer: object) -> list[str]:
    """What is wrong with ``pointer`` as an RFC 6901 JSON pointer, and what Argo CD does with it
    (it never refuses one: a patch whose path is not there is skipped at every diff)."""
    if not isinstance(pointer, str):
        return [f"not a string ({type(pointer).__name__})"]
    if len(pointer) > MAX_EXPRESSION:
        return [f"longer than {MAX_EXPRESSION} characters"]
    out = []
    if pointer == "":
        out.append("the empty pointer names the whole object, which a JSON patch cannot remove: Argo CD skips it")
    elif not pointer.startswith("/"):
        first, _, rest = pointer.partition("/")
        out.append(
            "does not start with '/': evanphx/json-patch drops everything before the first '/' "
            f"({'so Argo CD removes /' + rest if rest else 'and finds no path: Argo CD skips it'}, not {first!r})"
        )
    for token in pointer.split("/")[1:]:
        bad = re.search(r"~(?![01])", token)
        if bad:
            out.append(f"{token!r}: '~' must be written '~0' (and '/' '~1'); Argo CD keeps a stray '~' as it is")
            break
    return out


def remove_pointer(doc: Any, pointer: str) -> tuple[Any, str | None]:
    """(the document with ``pointer`` removed, None) or (``doc`` unchanged, the error that makes
    Argo CD skip the patch): patch.go Patch.remove, findObject, partialDoc/partialArray.remove."""
    split = pointer.split("/")
    if len(split) < 2:
        return doc, f'remove operation does not apply: doc is missing path: "{pointer}"'
    if not isinstance(doc, dict | list):
        return doc, "cannot unmarshal the document into a JSON patch container"
    out = tree_copy(doc)
    node: Any = out
    for part in split[1:-1]:
        nxt = _container_get(node, decode_token(part))
        if not isinstance(nxt, dict | list):  # missing, null or a scalar: findObject returns nil
            return doc, f'remove operation does not apply: doc is missing path: "{pointer}"'
        node = nxt
    key = decode_token(split[-1])
    if isinstance(node, dict):
        if key not in node:
            return doc, f"error in remove for path: '{pointer}': Unable to remove nonexistent key: {key}: missing value"
        del node[key]
        return out, None
    idx = _go_atoi(key)
    if idx is None:
        return doc, f"error in remove for path: '{pointer}': strconv.Atoi: parsing {key!r}: invalid syntax"
    if idx >= len(node) or idx < -len(node):
        return doc, f"error in remove for path: '{pointer}': Unable to access invalid index: {idx}: invalid index"
    del node[idx]  # negative indices count from the end (SupportNegativeIndices)
    return out, None


def _go_atoi(key: str) -> int | None:
    if not _GO_INT.fullmatch(key):
        return None
    value = int(key)
    return value if -(1 << 63) <= value < (1 << 63) else None


def _container_get(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key)
    idx = _go_atoi(key)
    if idx is None or idx >= len(node) or idx < -len(node):
        return None
    return node[idx]


# ---------------------------------------------------------------------------------------------
# jq: what gojq and the C jq do alike, and running it with Argo CD's time limit

# Functions (name/arity) that gojq v0.12.19 and jq 1.8.2 (the jq package's) both define and compute
# alike on JSON; a function that fails in both only makes Argo CD skip the patch, alike.
JQ_FUNCTIONS = frozenset(
    {
        "select/1", "not/0", "empty/0", "error/0", "error/1", "has/1", "in/1", "inside/1", "contains/1",
        "startswith/1", "endswith/1", "length/0", "utf8bytelength/0", "type/0",
        "keys/0", "map/1", "map_values/1", "to_entries/0", "any/0", "any/1", "any/2", "all/0", "all/1", "all/2",
        "first/0", "last/0", "first/1", "last/1", "nth/1", "nth/2", "isempty/1", "values/0", "nulls/0",
        "booleans/0", "numbers/0", "strings/0", "arrays/0", "objects/0", "iterables/0", "scalars/0",
        "recurse/0", "recurse/1", "recurse/2", "until/2", "while/2", "repeat/1", "range/1", "range/2",
        "path/1", "paths/0", "paths/1", "getpath/1", "del/1", "delpaths/1", "add/0",
        "ascii_downcase/0", "ascii_upcase/0", "split/1", "sort/0", "sort_by/1", "group_by/1", "unique/0",
        "unique_by/1", "min/0", "max/0", "min_by/1", "max_by/1", "flatten/0", "IN/1", "IN/2",
    }
)  # fmt: skip
# Why some functions both have are refused: they differ between gojq and jq 1.8.
JQ_DIFFERENT = {
    "ltrimstr": "jq 1.8 fails on a value that is not a string, gojq returns it unchanged",
    "rtrimstr": "jq 1.8 fails on a value that is not a string, gojq returns it unchanged",
    "limit": "jq 1.8 and gojq treat a negative count differently",
    "pick": "not verified alike (new in jq 1.7 and gojq 0.12.14)",
    "test": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "match": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "capture": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "scan": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "splits": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "sub": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "gsub": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "split/2": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "tojson": "gojq sorts object keys and writes numbers its own way",
    "tostring": "gojq sorts object keys and writes numbers its own way",
    "fromjson": "gojq and jq parse JSON extensions (NaN, Infinity) differently",
    "tonumber": "gojq and jq accept different number strings",
    "keys_unsorted": "gojq has no keys_unsorted (it keeps no key order): Argo CD fails to compile it",
    "env": "it reads the application controller's environment",
    "input": "gojq without an input iterator refuses it",
    "inputs": "gojq without an input iterator refuses it",
    "debug": "it writes to the application controller's log",
    "stderr": "it writes to the application controller's log",
    "input_filename": "there is no input file",
    "halt": "it stops the program differently in gojq",
    "halt_error": "it stops the program differently in gojq",
    "walk": "jq 1.8 and gojq walk objects in a different order",
    "reverse": "gojq and jq 1.8 reverse null and strings differently",
    "join": "gojq and jq write numbers and null into the string differently",
    "indices": "gojq counts string offsets in code points, jq's older releases in bytes",
    "index": "gojq counts string offsets in code points, jq's older releases in bytes",
    "rindex": "gojq counts string offsets in code points, jq's older releases in bytes",
    "from_entries": "gojq and jq accept different key names",
    "with_entries": "gojq and jq accept different key names (from_entries)",
    "trim": "gojq and jq trim different whitespace",
    "ltrim": "gojq and jq trim different whitespace",
    "rtrim": "gojq and jq trim different whitespace",
    "ascii": "not in gojq",
    "implode": "gojq and jq handle invalid code points differently",
    "explode": "gojq and jq handle invalid code points differently",
    "tostream": "not verified alike",
    "fromstream": "not verified alike",
    "truncate_stream": "not verified alike",
    "setpath": "gojq and jq differ on paths through null",
    "splits/1": "regular expressions: gojq uses Go's RE2 syntax, jq Oniguruma",
    "infinite": "gojq cannot marshal infinity: the patch fails in Argo CD",
    "nan": "gojq cannot marshal NaN: the patch fails in Argo CD",
}
# gojq v0.12.19's function names (builtin.jq and func.go): a name outside them fails gojq's compile
GOJQ_NAMES = frozenset(
    {
        "IN", "INDEX", "JOIN", "abs", "acos", "acosh", "add", "all", "any", "arrays", "ascii_downcase", "ascii_upcase",
        "asin", "asinh", "atan", "atan2", "atanh", "booleans", "bsearch", "builtins", "capture", "cbrt", "ceil",
        "combinations", "contains", "copysign", "cos", "cosh", "debug", "del", "delpaths", "drem", "empty", "endswith",
        "env", "erf", "erfc", "error", "exp", "exp10", "exp2", "explode", "expm1", "fabs", "fdim", "finites", "first",
        "flatten", "floor", "fma", "fmax", "fmin", "fmod", "format", "frexp", "from_entries", "fromdate",
        "fromdateiso8601", "fromjson", "fromstream", "gamma", "getpath", "gmtime", "group_by", "gsub", "halt",
        "halt_error", "has", "hypot", "implode", "in", "index", "indices", "infinite", "input", "inputs", "inside",
        "isempty", "isfinite", "isinfinite", "isnan", "isnormal", "iterables", "j0", "j1", "jn", "join", "keys", "last",
        "ldexp", "length", "lgamma", "limit", "localtime", "log", "log10", "log1p", "log2", "logb", "ltrim", "ltrimstr",
        "map", "map_values", "match", "max", "max_by", "min", "min_by", "mktime", "modf", "modulemeta", "nan",
        "nearbyint", "nextafter", "nexttoward", "normals", "not", "now", "nth", "nulls", "numbers", "objects", "path",
        "paths", "pick", "pow", "range", "recurse", "remainder", "repeat", "reverse", "rindex", "rint", "round",
        "rtrim", "rtrimstr", "scalars", "scan", "select", "setpath", "significand", "sin", "sinh", "skip", "sort",
        "sort_by", "split", "splits", "sqrt", "startswith", "strftime", "strflocaltime", "strings", "strptime", "sub",
        "tan", "tanh", "test", "tgamma", "to_entries", "toboolean", "todate", "todateiso8601", "tojson", "tonumber",
        "tostream", "tostring", "transpose", "trim", "trimstr", "trunc", "truncate_stream", "type", "unique",
        "unique_by", "until", "utf8bytelength", "values", "walk", "while", "with_entries", "y0", "y1", "yn",
    }
)  # fmt: skip
_KEYWORDS_ALLOWED = frozenset({"if", "then", "elif", "else", "end", "and", "or", "as", "try"})
_KEYWORDS_REFUSED = {
    "catch": "try ... catch: gojq and jq catch different error messages",
    "reduce": "reduce is not verified alike in gojq and jq",
    "foreach": "foreach is not verified alike in gojq and jq",
    "def": "function definitions: gojq refuses keywords as names and module prefixes, jq does not",
    "import": "modules: Argo CD's gojq has no module loader",
    "include": "modules: Argo CD's gojq has no module loader",
    "label": "label/break is not verified alike in gojq and jq",
    "__loc__": "gojq does not support $__loc__",
}
_JQ_TOKEN = re.compile(
    r"""(?P<space>\s+)
    |(?P<comment>\#)
    |(?P<string>")
    |(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    |(?P<field>\.[A-Za-z_][A-Za-z0-9_]*)
    |(?P<recurse>\.\.)
    |(?P<var>\$(?:__loc__|[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*))
    |(?P<format>@[A-Za-z0-9_]+)
    |(?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)
    |(?P<op>\?//=?|\?//|//=|\|=|\+=|-=|\*=|/=|%=|==|!=|<=|>=|//|[.\[\](){}|,:;?=<>+\-*/%])
    """,
    re.VERBOSE,
)
_JQ_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*"')


def jq_problems(expression: object) -> list[str]:
    """Why ``expression`` cannot be a jqPathExpressions entry here ([] if it can): Argo CD compiles
    ``del(EXPRESSION)`` with gojq (diff_normalizer.go NewIgnoreNormalizer; a compile error fails the
    whole Application's comparison), this module runs it with the C jq, so only what the two do alike
    passes: the functions of :data:`JQ_FUNCTIONS`, paths, literals, comparisons, object and array
    construction, ``if``/``try``, ``as $x``; not string interpolation, ``@formats``, comments, ``%``
    or numbers past 2^53. A path into a string (gojq indexes strings, jq refuses) cannot be seen
    before the program runs and is not refused."""
    if not isinstance(expression, str):
        return [f"not a string ({type(expression).__name__})"]
    if len(expression) > MAX_EXPRESSION:
        return [f"longer than {MAX_EXPRESSION} characters"]
    if not expression.strip():
        return ["empty: Argo CD compiles del(), which gojq refuses"]
    program = f"del({expression})"  # Argo CD's wrapping; the expression may close it itself
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(program):
        if program[i] == '"':
            end, problem = _scan_string(program, i)
            if problem:
                return [problem]
            tokens.append(("string", program[i:end]))
            i = end
            continue
        m = _JQ_TOKEN.match(program, i)
        if not m or m.lastgroup == "string":
            return [f"unexpected character {program[i]!r} at {i - 4}"]
        i = m.end()
        if m.lastgroup != "space":
            tokens.append((m.lastgroup or "", m.group(0)))
    return _token_problems(tokens) or _jq_compiles(program)


def _scan_string(program: str, i: int) -> tuple[int, str | None]:
    """The end of the string literal at ``i`` (after its closing quote), or a refusal."""
    j = i + 1
    while j < len(program):
        c = program[j]
        if c == '"':
            return j + 1, None
        if c == "\\":
            nxt = program[j + 1 : j + 2]
            if nxt == "(":
                return j, "string interpolation \\(...): gojq and jq format the values differently"
            if nxt == "u":
                if not re.fullmatch(r"[0-9A-Fa-f]{4}", program[j + 2 : j + 6]):
                    return j, "a \\u escape needs four hexadecimal digits"
                j += 6
                continue
            if nxt not in ('"', "\\", "/", "b", "f", "n", "r", "t"):
                return j, f"the escape \\{nxt} is not one jq and gojq both read"
            j += 2
            continue
        if ord(c) < 0x20:
            return j, "a raw control character in a string: write it as an escape"
        j += 1
    return j, "an unclosed string"


def _token_problems(tokens: list[tuple[str, str]]) -> list[str]:
    problems: list[str] = []
    stack: list[list] = []  # per open bracket: [bracket, function name or None, arity]
    for n, (kind, text) in enumerate(tokens):
        prev = tokens[n - 1] if n else ("", "")
        nxt = tokens[n + 1] if n + 1 < len(tokens) else ("", "")
        if kind == "comment":  # the rest of its line is not read
            return [*problems, "a comment: jq 1.8 continues a comment after a backslash, gojq does not"]
        if kind == "format":
            problems.append(f"{text}: format strings are not verified alike in gojq and jq")
        elif kind == "number":
            digits = re.sub(r"[eE].*$", "", text).replace(".", "").lstrip("0")
            if "e" in text.lower() or len(digits) > 15:
                problems.append(f"number {text}: gojq keeps big integers exact, jq rounds to a double")
        elif kind == "var":
            if text == "$__loc__":
                problems.append(_KEYWORDS_REFUSED["__loc__"])
            elif text in ("$ENV", "$__prog_args", "$__named") or "::" in text:
                problems.append(f"{text}: not the same in gojq and jq (the controller's environment, arguments)")
        elif kind == "field" and text[1:] in _KEYWORDS_ALLOWED | set(_KEYWORDS_REFUSED):
            problems.append(f'{text}: a keyword as a field name; write ."{text[1:]}"')
        elif kind == "op":
            if text in ("?//", "?//="):
                problems.append("?// (destructuring alternatives) is not verified alike in gojq and jq")
            elif text in ("%", "%="):
                problems.append("%: gojq and jq take the remainder of fractional numbers differently")
            elif text in ("(", "[", "{"):
                if len(stack) >= MAX_DEPTH:
                    return [f"nested deeper than {MAX_DEPTH} brackets"]
                called = text == "(" and prev[0] == "ident" and not _is_word(prev[1])
                stack.append([text, prev[1] if called else None, 1])
            elif text in (")", "]", "}"):
                if not stack or {"(": ")", "[": "]", "{": "}"}[stack[-1][0]] != text:
                    return ["unbalanced brackets"]
                _, name, arity = stack.pop()
                if name is not None:
                    problems += _function_problems(name, arity)
            elif text == ";" and stack:
                stack[-1][2] += 1
            elif text == "." and nxt == ("op", "[") and (prev[0] in ("field", "string") or prev[1] in (")", "]", "?")):
                problems.append("'.[' after a path: jq 1.8 and gojq read it differently; write the index at once")
        elif kind == "ident":
            in_object = bool(stack) and stack[-1][0] == "{" and prev[1] in ("{", ",")
            if text in _KEYWORDS_REFUSED:
                problems.append(_KEYWORDS_REFUSED[text])
            elif "::" in text:
                problems.append(f"{text}: modules: Argo CD's gojq has no module loader")
            elif _is_word(text) or in_object or nxt == ("op", "("):
                pass  # a keyword, a literal, an object key, or a call (checked at its closing bracket)
            else:
                problems += _function_problems(text, 0)
    if stack:
        problems.append("unbalanced brackets")
    return list(dict.fromkeys(problems))


def _is_word(text: str) -> bool:
    return text in _KEYWORDS_ALLOWED or text in ("true", "false", "null")


def _function_problems(name: str, arity: int) -> list[str]:
    key = f"{name}/{arity}"
    if key in JQ_FUNCTIONS:
        return []
    if name not in GOJQ_NAMES:
        return [f"{key}: gojq has no such function, so Argo CD fails to compile the expression "
                "(the Application's comparison fails)"]  # fmt: skip
    why = JQ_DIFFERENT.get(key) or JQ_DIFFERENT.get(name) or "not among the functions verified alike in gojq and jq"
    return [f"{key}: {why}"]


def _jq_compiles(program: str) -> list[str]:
    try:
        import jq
    except ImportError:  # the repo extra installs it
        return ["the jq package is not installed (pip install 'trainyard[repo]')"]
    try:
        jq.compile(program)
    except ValueError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return [f"does not compile: {lines[0] if lines else exc}"]
    return []


class _JqProcess:
    """One jq_worker process, started on first use and again after it was killed."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.buffer = b""

    def run(self, program: str, value: Any, timeout: float) -> tuple[list[Any] | None, str | None]:
        with self.lock:
            try:
                return self._run(program, value, timeout)
            except OSError as exc:
                self._kill()
                return None, f"the jq process failed: {exc}"

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            worker = Path(__file__).with_name("jq_worker.py")
            self.proc = subprocess.Popen(
                [sys.executable, "-I", str(worker)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.buffer = b""
        return self.proc

    def _kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            for stream in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    stream.close()  # type: ignore[union-attr]
        self.proc, self.buffer = None, b""

    def _run(self, program: str, value: Any, timeout: float) -> tuple[list[Any] | None, str | None]:
        proc = self._start()
        line = json.dumps({"program": program, "input": value}, ensure_ascii=True).encode() + b"\n"
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line)
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        fd = proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                return None, f"JQ patch execution timed out ({timeout:g}s)"
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._kill()
                return None, "JQ patch returned error: the jq process ended (out of memory?)"
            self.buffer += chunk
            if len(self.buffer) > MAX_REPLY:
                self._kill()
                return None, "JQ patch returned error: its output is larger than 64 MiB"
        reply_line, _, self.buffer = self.buffer.partition(b"\n")
        reply = json.loads(reply_line)
        if "error" in reply:
            return None, f"JQ patch returned error: {reply['error']}"
        return reply["outputs"], None

    def close(self) -> None:
        with self.lock:
            self._kill()


_JQ = _JqProcess()


def run_jq(expression: str, doc: Any, timeout: float = JQ_TIMEOUT_S) -> tuple[Any, str | None]:
    """``del(EXPRESSION)`` on ``doc`` as diff_normalizer.go jqNormalizerPatch.Apply runs it: the
    document as Go's encoding/json decodes it (numbers are doubles), exactly one output, within
    ``timeout``; (result, None) or (``doc``, the error that makes Argo CD skip the patch).
    ``expression`` must have passed :func:`jq_problems`."""
    if not isinstance(doc, dict):
        return doc, "json: cannot unmarshal the document into Go value of type map[string]interface {}"
    outputs, error = _JQ.run(f"del({expression})", _go_numbers(doc, doubles=True), timeout)
    if error is not None:
        return doc, error
    assert outputs is not None
    if not outputs:
        return doc, "JQ patch did not return any data"
    if len(outputs) > 1:
        return doc, "JQ patch returned multiple objects"
    return _go_numbers(outputs[0], doubles=False), None


def _go_numbers(value: Any, *, doubles: bool) -> Any:
    """Numbers as gojq sees them (``doubles``: float64, from encoding/json) or as the document holds
    them once re-read (json.Marshal of a float64, then apimachinery's JSON: int64 where integral)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        f = float(value) if not (isinstance(value, int) and abs(value) > 1e308) else math.copysign(1e308, value)
        if doubles:
            return f
        if math.isfinite(f) and f.is_integer() and abs(f) < 1e21 and abs(f) < 2**63:
            return int(f)
        return f
    if isinstance(value, dict):
        return {k: _go_numbers(v, doubles=doubles) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_numbers(v, doubles=doubles) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Normalisation


def identity(obj: Mapping) -> tuple[str, str, str, str]:
    """(group, kind, name, namespace) of an object."""
    api_version = obj.get("apiVersion")
    api_version = api_version if isinstance(api_version, str) else ""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else ""
    name, namespace = meta.get("name", ""), meta.get("namespace", "")
    return group, str(kind), str(name or ""), str(namespace or "")


def in_scheme(obj: Mapping) -> str | None:
    """The Go type of ``obj``'s kind in client-go's scheme (``package.Kind``), or None."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    gv = api_version if "/" in api_version else f"/{api_version}"
    entry = k8s_patch_meta.SCHEME.get(gv)
    if entry is None or kind not in entry[1]:
        return None
    return f"{entry[0]}.{kind}"


def check_object(obj: object, what: str) -> dict:
    """``obj`` as a Kubernetes object: a mapping with string keys, a string apiVersion and kind,
    nested at most :data:`MAX_DEPTH` deep, holding JSON values only."""
    if not isinstance(obj, dict):
        raise DiffError(f"{what}: a Kubernetes object must be a mapping, not {type(obj).__name__}")
    stack: list[tuple[Any, int, str]] = [(obj, 0, "")]
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise DiffError(f"{what}: nested deeper than {MAX_DEPTH} levels at {path or '/'}")
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise DiffError(f"{what}: {path or '/'}: a key that is not a string ({k!r})")
                stack.append((v, depth + 1, f"{path}/{escape(k)}"))
        elif isinstance(node, list):
            stack.extend((v, depth + 1, f"{path}/{i}") for i, v in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            raise DiffError(f"{what}: {path}: {node} is not a JSON number")
        elif not (node is None or isinstance(node, str | int | float | bool)):
            raise DiffError(f"{what}: {path}: {type(node).__name__} is not a JSON value")
    for key in ("apiVersion", "kind"):
        if not isinstance(obj.get(key), str) or not obj.get(key):
            raise DiffError(f"{what}: {key} must be a non-empty string")
    if obj.get("metadata") is not None and not isinstance(obj.get("metadata"), dict):
        raise DiffError(f"{what}: metadata must be a mapping")
    return obj


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def remarshal(obj: dict, go_type: str | None) -> dict:
    """gitops-engine diff.go remarshal for a kind of the scheme: what Go's json drops on the way
    through the type. A null field and an empty list are dropped (``omitempty``, which every optional
    field of the API types has), except a list field without ``omitempty`` (kept, empty or null)
    and the keys of a map field (kept whatever their value)."""
    if go_type is None:
        return obj
    map_fields = {"labels", "annotations"}  # ObjectMeta's maps (k8s.io/apimachinery meta/v1 types.go)

    def walk(node: Any, type_name: str | None, meta: bool = False) -> Any:
        if isinstance(node, list):
            return [walk(v, type_name) for v in node]
        if not isinstance(node, dict):
            return node
        fields = k8s_patch_meta.TYPES.get(type_name or "", {})
        out = {}
        for k, v in node.items():
            sub, _key, flags = fields.get(k, (None, None, ""))
            is_map = "M" in flags or (meta and k in map_fields)
            if "L" not in flags and (v is None or v == []):
                continue
            if is_map and isinstance(v, dict):
                out[k] = {mk: walk(mv, sub) for mk, mv in v.items()}
            else:
                out[k] = walk(v, sub, meta=k == "metadata")
        return out

    return walk(obj, go_type)


def normalize(obj: dict, settings: Settings, *, full: bool = True) -> dict:
    """gitops-engine diff.go Normalize on a copy of ``obj``: the fixed normalisations, then
    (``full``) the ignore normalizer and the known-types normalizer."""
    obj = tree_copy(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("creationTimestamp", None)
    group, kind, _, _ = identity(obj)
    if group == "" and kind == "Secret":
        _normalize_secret(obj)
    elif group == "rbac.authorization.k8s.io" and kind in ("Role", "ClusterRole"):
        if settings.ignore_aggregated_roles and isinstance(obj.get("aggregationRule"), dict):
            obj["rules"] = None
        if obj.get("rules") == []:
            obj["rules"] = None
    elif group == "" and kind == "Endpoints":
        raise DiffError(f"Endpoints {identity(obj)[2]}: gitops-engine sorts Endpoints subsets (normalizeEndpoint), "
                        "which is not emulated")  # fmt: skip
    if not full:
        return obj
    if group == "argoproj.io" and kind == "Rollout":
        raise DiffError("argoproj.io Rollout: the known-types normalizer re-formats spec.template.spec as a PodSpec "
                        f"({ARGO}:util/argo/normalizers/knowntypes_normalizer.go), which is not emulated")  # fmt: skip
    return ignore_normalize(obj, settings.matching(obj))


def _normalize_secret(obj: dict) -> None:
    """gitops-engine diff.go NormalizeSecret."""
    string_data = obj.get("stringData")
    if isinstance(string_data, dict):
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        for k, v in string_data.items():
            data[k] = base64.b64encode(v.encode("utf-8", "surrogatepass")).decode() if isinstance(v, str) else v
        obj["data"] = data
        del obj["stringData"]
    data = obj.get("data")
    if isinstance(data, dict):
        for k, v in data.items():
            if v is None or v == "":
                data[k] = ""


def ignore_normalize(obj: dict, rules: Iterable[Rule]) -> dict:
    """diff_normalizer.go ignoreNormalizer.Normalize: each matching rule's patches in turn on the
    document, a failing one skipped; the result replaces the object if it is a JSON object (a null
    one empties it; any other leaves the object as it was: Unstructured.UnmarshalJSON fails)."""
    doc: Any = obj
    patched = False
    for rule in rules:
        for pointer in rule.json_pointers:
            new, error = remove_pointer(doc, pointer)
            if error is None:
                doc, patched = new, True
        for expression in rule.jq_paths:
            problems = jq_problems(expression)
            if problems:
                raise DiffError(f"{rule.where}: jqPathExpressions {expression!r}: {problems[0]}")
            new, error = run_jq(expression, doc if doc is not None else {})
            if error is None:
                doc, patched = new, True
    if not patched:
        return obj
    if doc is None:
        return {}
    return doc if isinstance(doc, dict) else obj


# ---------------------------------------------------------------------------------------------
# Comparison


@dataclass(frozen=True)
class Drift:
    """What Argo CD reports for one object: ``paths`` where the predicted live object (the desired
    one applied as the sync would apply it) and the live one differ."""

    paths: tuple[str, ...]
    how: str  # structured merge | three-way | two-way | missing | extraneous
    predicted: Any = field(default=None, repr=False)
    live: Any = field(default=None, repr=False)

    @property
    def modified(self) -> bool:
        return bool(self.paths)


def diff(settings: Settings, desired: object, live: object) -> Drift:
    """The drift of ``desired`` (rendered) against ``live`` (as kube-apiserver returns it); either
    may be None (not in git: extraneous, not OutOfSync by its diff; not in the cluster: missing)."""
    if desired is None and live is None:
        raise DiffError("both the desired and the live object are missing")
    if live is None:
        check_object(desired, "desired object")
        return Drift(("",), "missing")
    if desired is None:
        check_object(live, "live object")
        return Drift((), "extraneous")  # diff.go handleResourceCreateOrDeleteDiff: Modified false
    desired = check_object(desired, "desired object")
    live = check_object(live, "live object")
    where = "{}/{} {}".format(*identity(desired)[:3])
    if identity(desired)[:2] != identity(live)[:2]:
        raise DiffError(f"{where}: the live object is a {identity(live)[1]} of group {identity(live)[0]!r}")
    go_type = in_scheme(desired)
    config = normalize(remarshal(desired, go_type), settings)
    live_n = normalize(remarshal(live, go_type), settings)
    if go_type is not None:
        _refuse_requantified(config, live_n, where)
    annotations = ((desired.get("metadata") or {}).get("annotations")) or {}
    ssa_annotation = isinstance(annotations, dict) and "ServerSideApply=true" in annotation_csv(
        annotations.get(SYNC_OPTIONS_ANNOTATION)
    )
    if settings.structured_merge or ssa_annotation:  # diff.go Diff: structuredMergeDiff
        predicted = _structured_merge(config, live_n, live, go_type, where)
        return _drift(predicted, live_n, "structured merge", strip_last_applied=True)
    orig, how = _last_applied(live, settings), "three-way"
    if orig is None:
        orig, how = config, "two-way"  # diff.go TwoWayDiff: the config is its own last applied one
    orig, config_t = _drop_namespace_annotation(orig), _drop_namespace_annotation(config)
    if go_type is not None:
        predicted = _strategic_three_way(orig, config_t, live_n, go_type, where)
    else:
        predicted = _json_three_way(orig, config_t, live_n)
    return _drift(predicted, live_n, how, strip_last_applied=False)


def _drift(predicted: Any, live: Any, how: str, *, strip_last_applied: bool) -> Drift:
    if strip_last_applied:  # diff.go normalizeTypedValue, on both
        for obj in (predicted, live):
            annotations = (obj.get("metadata") or {}).get("annotations")
            if isinstance(annotations, dict):
                annotations.pop(LAST_APPLIED, None)
    return Drift(tuple(differences(predicted, live)), how, predicted, live)


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """JSON pointers where ``a`` and ``b`` differ (a JSON value compared as Go compares the
    marshalled bytes: numbers by value, ``true`` never equal to ``1``)."""
    stack = [(a, b, path)]
    while stack:
        x, y, at = stack.pop()
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), reverse=True):
                if k not in x or k not in y:
                    yield f"{at}/{escape(k)}"
                else:
                    stack.append((x[k], y[k], f"{at}/{escape(k)}"))
        elif isinstance(x, list) and isinstance(y, list):
            for i in range(max(len(x), len(y)) - 1, -1, -1):
                if i >= len(x) or i >= len(y):
                    yield f"{at}/{i}"
                else:
                    stack.append((x[i], y[i], f"{at}/{i}"))
        elif not _same_scalar(x, y):
            yield at


def _same_scalar(x: Any, y: Any) -> bool:
    if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None:
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return float(x) == float(y)
    return type(x) is type(y) and x == y


def _refuse_requantified(config: Any, live: Any, where: str) -> None:
    """A number in the desired object where the live one holds a string: the Go type may re-encode
    it (a resource.Quantity marshals as its canonical string), which remarshal does and this does not."""
    stack = [(config, live, "")]
    while stack:
        c, v, at = stack.pop()
        if isinstance(c, dict) and isinstance(v, dict):
            stack.extend((c[k], v[k], f"{at}/{escape(k)}") for k in c if k in v)
        elif isinstance(c, list) and isinstance(v, list) and len(c) == len(v):
            stack.extend((c[i], v[i], f"{at}/{i}") for i in range(len(c)))
        elif isinstance(c, int | float) and not isinstance(c, bool) and isinstance(v, str):
            raise DiffError(
                f"{where}: {at}: the number {c!r} is stored as the string {v!r}; Argo CD re-marshals a built-in kind "
                "through its Go type (gitops-engine diff.go remarshal), which is not emulated: write it as a string"
            )


def annotation_csv(value: object) -> list[str]:
    """gitops-engine pkg/sync/resource/annotations.go GetAnnotationCSVs."""
    if not isinstance(value, str):
        return []
    return list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))


def _last_applied(live: dict, settings: Settings) -> dict | None:
    """diff.go GetLastAppliedConfigAnnotation, normalised as Diff normalises it (no remarshal)."""
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(LAST_APPLIED) if isinstance(annotations, dict) else None
    if not isinstance(text, str):
        return None
    try:
        orig = json.loads(text)
    except (ValueError, RecursionError):
        return None  # diff.go Diff logs it and falls back to the two-way diff
    if not isinstance(orig, dict):
        return None
    try:
        check_object(orig, "the last-applied-configuration annotation")
    except DiffError:
        return None
    return normalize(orig, settings)


def _drop_namespace_annotation(obj: dict) -> dict:
    """diff.go removeNamespaceAnnotation."""
    obj = tree_copy(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("namespace", None)
        if "annotations" in meta and (meta["annotations"] is None or meta["annotations"] == {}):
            del meta["annotations"]
    return obj


# --- JSON merge patch (a kind outside the scheme) -------------------------------------------------


def _json_three_way(orig: dict, config: dict, live: dict) -> Any:
    """diff.go threeWayMergePatch for a kind outside the scheme, and ThreeWayDiff's MergePatch of
    the live object: jsonmergepatch.CreateThreeWayJSONMergePatch(orig, config, live cut down to the
    fields of orig)."""
    current = remove_map_fields(orig, live)
    add_change = _keep_nulls(create_merge_patch(current, config), keep=False)
    deletions = _keep_nulls(create_merge_patch(orig, config), keep=True)
    patch = merge_patch(deletions, add_change)  # CreateThreeWayJSONMergePatch: MergePatch(delete, addAndChange)
    return merge_patch(tree_copy(live), patch)


def remove_map_fields(config: Any, live: Any) -> Any:
    """gitops-engine pkg/utils/json/json.go RemoveMapFields / RemoveListFields."""
    if isinstance(config, dict) and isinstance(live, dict):
        return {
            k: (remove_map_fields(v, live[k]) if live[k] is not None else None) for k, v in config.items() if k in live
        }
    if isinstance(config, list) and isinstance(live, list):
        return [remove_map_fields(config[i], v) if i < len(config) and v is not None else v for i, v in enumerate(live)]
    return live


def create_merge_patch(a: Any, b: Any) -> dict:
    """evanphx/json-patch CreateMergePatch of two objects (RFC 7386)."""
    out: dict[str, Any] = {}
    for k, bv in b.items():
        if k not in a:
            out[k] = tree_copy(bv)
        elif isinstance(a[k], dict) and isinstance(bv, dict):
            sub = create_merge_patch(a[k], bv)
            if sub:
                out[k] = sub
        elif not _json_equal(a[k], bv):
            out[k] = tree_copy(bv)
    for k in a:
        if k not in b:
            out[k] = None
    return out


def _json_equal(a: Any, b: Any) -> bool:
    return not any(True for _ in differences(a, b))


def _keep_nulls(m: dict, *, keep: bool) -> dict:
    """jsonmergepatch keepOrDeleteNullInObj."""
    out: dict[str, Any] = {}
    for k, v in m.items():
        if v is None:
            if keep:
                out[k] = None
        elif isinstance(v, dict):
            if not v:
                if not keep:
                    out[k] = v
                continue
            sub = _keep_nulls(v, keep=keep)
            if sub:
                out[k] = sub
        elif not keep:
            out[k] = v
    return out


def merge_patch(doc: Any, patch: Any) -> Any:
    """evanphx/json-patch MergePatch (RFC 7386): a null in ``patch`` deletes, an object merges, any
    other value replaces; an object set where there was none loses its nulls (pruneNulls)."""
    if not isinstance(patch, dict):
        return tree_copy(patch)
    out = tree_copy(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_patch(out[k], v)
        elif isinstance(v, dict):
            out[k] = _prune_nulls(v)
        else:
            out[k] = tree_copy(v)
    return out


def _prune_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _prune_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_prune_nulls(x) for x in v]
    return v


# --- strategic merge patch (a kind of the scheme) ------------------------------------------------


def _strategic_three_way(orig: dict, config: dict, live: dict, go_type: str, where: str) -> Any:
    """strategicpatch.CreateThreeWayMergePatch(orig, config, live) applied to the live object
    (diff.go threeWayMergePatch, applyPatch): the desired fields merged into the live object (lists
    on their patchMergeKey, any other list replaced), then what the last applied object had and the
    desired one no longer has deleted; then the scheme's defaults (:func:`_scheme_defaults`)."""
    if go_type.rpartition(".")[2] == "StatefulSet" and go_type.split("/")[0] in ("apps", "extensions"):
        config = _stateful_set_workaround(orig, config, live)
    predicted = _smp_merge(live, config, go_type, where, "")
    predicted = _smp_delete(predicted, orig, config, go_type)
    return _scheme_defaults(predicted, go_type)


def _stateful_set_workaround(orig: dict, config: dict, live: dict) -> dict:
    """diff.go statefulSetWorkaround: the patch is computed against a live object whose
    ``volumeClaimTemplates`` keep only the fields of the last applied ones (kube-apiserver defaults
    more than can be reproduced); where the desired templates equal those, the patch leaves them
    alone, so the desired object takes the live ones."""
    spec_o, spec_c, spec_l = (x.get("spec") if isinstance(x.get("spec"), dict) else {} for x in (orig, config, live))
    o, c, v = (x.get("volumeClaimTemplates") for x in (spec_o, spec_c, spec_l))
    if not (isinstance(o, list) and isinstance(c, list) and isinstance(v, list)):
        return config
    if _json_equal(remove_map_fields(o, v), c):
        config = tree_copy(config)
        config["spec"]["volumeClaimTemplates"] = tree_copy(v)
    return config


def _fields(type_name: str | None) -> dict:
    return k8s_patch_meta.TYPES.get(type_name or "", {})


def _smp_merge(live: Any, config: Any, type_name: str | None, where: str, at: str) -> Any:
    if isinstance(config, dict) and isinstance(live, dict):
        out = tree_copy(live)
        for k, v in config.items():
            sub, key, _flags = _fields(type_name).get(k, (None, None, ""))
            here = f"{at}/{escape(k)}"
            if k not in live:
                out[k] = tree_copy(v)
            elif key and isinstance(v, list) and isinstance(live[k], list):
                out[k] = _smp_merge_list(live[k], v, key, sub, where, here)
            else:
                out[k] = _smp_merge(live[k], v, sub, where, here)
        return out
    return tree_copy(config)


def _smp_merge_list(live: list, config: list, key: str, item_type: str | None, where: str, at: str) -> list:
    out = tree_copy(live)
    for item in config:
        if not isinstance(item, dict) or key not in item:
            raise DiffError(f"{where}: {at}: a list item without its merge key {key!r} (strategic merge patch)")
        found = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
        if found is None:
            out.append(tree_copy(item))
        else:
            out[found] = _smp_merge(out[found], item, item_type, where, f"{at}/{found}")
    return out


def _smp_delete(predicted: Any, orig: Any, config: Any, type_name: str | None) -> Any:
    """The deletions of the three-way patch: a field of ``orig`` that ``config`` lacks, an item of a
    merged list (by its key) that ``config`` lacks."""
    if not (isinstance(predicted, dict) and isinstance(orig, dict) and isinstance(config, dict)):
        return predicted
    for k, ov in orig.items():
        if k not in predicted:
            continue
        sub, key, _flags = _fields(type_name).get(k, (None, None, ""))
        if k not in config:
            del predicted[k]
        elif key and isinstance(ov, list) and isinstance(config[k], list) and isinstance(predicted[k], list):
            wanted = {json.dumps(x.get(key), sort_keys=True) for x in config[k] if isinstance(x, dict)}
            gone = {json.dumps(x.get(key), sort_keys=True) for x in ov if isinstance(x, dict)} - wanted
            kept = [
                x for x in predicted[k] if not (isinstance(x, dict) and json.dumps(x.get(key), sort_keys=True) in gone)
            ]
            for item in kept:
                if isinstance(item, dict):
                    o = next((x for x in ov if isinstance(x, dict) and x.get(key) == item.get(key)), None)
                    c = next((x for x in config[k] if isinstance(x, dict) and x.get(key) == item.get(key)), None)
                    if o is not None and c is not None:
                        _smp_delete(item, o, c, sub)
            predicted[k] = kept
        elif isinstance(ov, dict):
            _smp_delete(predicted[k], ov, config[k], sub)
    return predicted


# Defaults the scheme's defaulting functions set inside lists that the desired object replaces
# whole (k8s.io/kubernetes@v1.36.0 pkg/apis/admissionregistration/v1/defaults.go SetDefaults_Rule:
# scope "*", on every Rule: a webhook's rules, an admission policy's resource rules), which Argo CD
# applies to the predicted object through gitops-engine's scheme (diff.go applyPatch,
# normalizeTypedValue); by kind, at a path whose "*" steps are list items.
_RULE = {"scope": "*"}
SCHEME_DEFAULTS: dict[str, tuple[tuple[tuple[str, ...], dict[str, Any]], ...]] = {
    "admissionregistration/v1.MutatingWebhookConfiguration": ((("webhooks", "*", "rules", "*"), _RULE),),
    "admissionregistration/v1.ValidatingWebhookConfiguration": ((("webhooks", "*", "rules", "*"), _RULE),),
    # pkg/apis/admissionregistration/v1beta1/defaults.go SetDefaults_Rule
    "admissionregistration/v1beta1.MutatingWebhookConfiguration": ((("webhooks", "*", "rules", "*"), _RULE),),
    "admissionregistration/v1beta1.ValidatingWebhookConfiguration": ((("webhooks", "*", "rules", "*"), _RULE),),
    "admissionregistration/v1.ValidatingAdmissionPolicy": (
        (("spec", "matchConstraints", "resourceRules", "*"), _RULE),
        (("spec", "matchConstraints", "excludeResourceRules", "*"), _RULE),
    ),
    "admissionregistration/v1.MutatingAdmissionPolicy": (
        (("spec", "matchConstraints", "resourceRules", "*"), _RULE),
        (("spec", "matchConstraints", "excludeResourceRules", "*"), _RULE),
    ),
}


def _scheme_defaults(predicted: Any, go_type: str) -> Any:
    """The defaults of :data:`SCHEME_DEFAULTS` for ``go_type`` set where they are absent."""
    for path, defaults in SCHEME_DEFAULTS.get(go_type, ()):
        nodes = [predicted]
        for step in path:
            nxt = []
            for node in nodes:
                if step == "*" and isinstance(node, list):
                    nxt += [x for x in node if isinstance(x, dict | list)]
                elif step != "*" and isinstance(node, dict) and isinstance(node.get(step), dict | list):
                    nxt.append(node[step])
            nodes = nxt
        for node in nodes:
            if isinstance(node, dict):
                for k, v in defaults.items():
                    node.setdefault(k, v)
    return predicted


# --- structured merge (ServerSideApply=true) ------------------------------------------------------


class _Shape:
    """What the live object's managedFields say about one field, all managers together."""

    __slots__ = ("fields", "items", "keys", "leaf", "list_kinds")

    def __init__(self) -> None:
        self.fields: dict[str, _Shape] = {}
        self.items: _Shape | None = None
        self.keys: tuple[str, ...] = ()
        self.list_kinds: set[str] = set()
        self.leaf = False


def _fields_v1(entry: object) -> dict:
    if not isinstance(entry, dict):
        return {}
    value = entry.get("fieldsV1")
    return value if isinstance(value, dict) else {}


def _shape_of(managed: list) -> _Shape:
    root = _Shape()
    for entry in managed:
        stack = [(_fields_v1(entry), root, 0)]
        while stack:
            node, shape, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise DiffError(f"managedFields nested deeper than {MAX_DEPTH} levels")
            children = [k for k in node if k != "."]
            if not children:
                shape.leaf = True
            for k in children:
                child = node[k] if isinstance(node[k], dict) else {}
                if k.startswith("f:"):
                    nxt = shape.fields.setdefault(k[2:], _Shape())
                elif k[:2] in ("k:", "v:", "i:"):
                    shape.list_kinds.add(k[0])
                    if k[0] == "k" and not shape.keys:
                        try:
                            parsed = json.loads(k[2:])
                        except ValueError:
                            parsed = None
                        if isinstance(parsed, dict):
                            shape.keys = tuple(parsed)
                    if shape.items is None:
                        shape.items = _Shape()
                    nxt = shape.items
                else:
                    continue
                stack.append((child, nxt, depth + 1))
    return root


# List map keys whose absent value the schema defaults (k8s.io/api core/v1 types.go: ContainerPort,
# ServicePort and EndpointPort ``protocol`` +default="TCP"); structured-merge-diff matches items on it.
_KEY_DEFAULTS = {"protocol": "TCP"}


def _structured_merge(config: dict, live: dict, raw_live: dict, go_type: str | None, where: str) -> dict:
    """structured-merge-diff's Updater.Apply of ``config`` as argocd-controller onto ``live``
    (diff.go structuredMergeDiff, apply): merged, then pruned of what argocd-controller applied
    before and no longer applies; a kind of the scheme then gets its defaults (normalizeTypedValue)."""
    managed = (raw_live.get("metadata") or {}).get("managedFields") or []
    if not isinstance(managed, list):
        raise DiffError(f"{where}: metadata.managedFields must be a list")
    shape = _shape_of(managed)
    merged = _smd_merge(live, config, shape, go_type is not None, where, "")
    mine: list[dict] = []
    others: list[dict] = []
    for entry in managed:
        if not isinstance(entry, dict):
            continue
        if entry.get("manager") == SSA_MANAGER and entry.get("operation") == "Apply":
            if entry.get("apiVersion") not in (None, config.get("apiVersion")):
                raise DiffError(
                    f"{where}: argocd-controller applied this object as {entry.get('apiVersion')}; converting its "
                    "managed fields to another version (structured-merge-diff's converter) is not emulated"
                )
            mine.append(_fields_v1(entry))
        else:
            others.append(_fields_v1(entry))
    owned_by_others = set()
    for fields in others:
        owned_by_others |= set(_managed_paths(fields))
    for path in _managed_paths(*mine):
        if path in owned_by_others or not path:
            continue
        if _resolve(config, path) is _MISSING:
            _remove(merged, path)
    if go_type is not None:
        merged = _scheme_defaults(merged, go_type)
    return merged


def _managed_paths(*sets: dict) -> Iterator[tuple]:
    """Each path a fieldsV1 set holds (a leaf, or a node marked "."): tuples of its keys."""
    for fields in sets:
        stack: list[tuple[dict, tuple]] = [(fields, ())]
        while stack:
            node, path = stack.pop()
            if len(path) > MAX_DEPTH:
                raise DiffError(f"managedFields nested deeper than {MAX_DEPTH} levels")
            children = [k for k in node if k != "."]
            if path and (not children or "." in node):
                yield path
            for k in children:
                if isinstance(node[k], dict):
                    stack.append((node[k], (*path, k)))


def _step(node: Any, element: str) -> Any:
    """One fieldsV1 path element ("f:name", "k:{...}", "v:value", "i:n") into ``node``."""
    kind, text = element[:2], element[2:]
    if kind == "f:":
        return node.get(text, _MISSING) if isinstance(node, dict) else _MISSING
    if not isinstance(node, list):
        return _MISSING
    if kind == "i:":
        idx = int(text) if text.isdigit() else -1
        return node[idx] if 0 <= idx < len(node) else _MISSING
    try:
        want = json.loads(text)
    except ValueError:
        return _MISSING
    for item in node:
        if kind == "k:" and isinstance(want, dict) and isinstance(item, dict):
            if all(_same_scalar(item.get(k, _KEY_DEFAULTS.get(k)), v) for k, v in want.items()):
                return item
        elif kind == "v:" and _json_equal(item, want):
            return item
    return _MISSING


def _resolve(node: Any, path: tuple) -> Any:
    for element in path:
        node = _step(node, element)
        if node is _MISSING:
            return _MISSING
    return node


def _remove(node: Any, path: tuple) -> None:
    parent = _resolve(node, path[:-1])
    target = _step(parent, path[-1])
    if target is _MISSING:
        return
    if isinstance(parent, dict):
        parent.pop(path[-1][2:], None)
    elif isinstance(parent, list):
        for i, item in enumerate(parent):
            if item is target:
                del parent[i]
                break


def _smd_merge(live: Any, config: Any, shape: _Shape | None, scheme: bool, where: str, at: str) -> Any:
    if isinstance(config, dict) and isinstance(live, dict):
        if shape is not None and shape.leaf and not shape.fields and not shape.items and live:
            return tree_copy(config)  # an atomic map or struct: kube-apiserver owns it whole
        out = tree_copy(live)
        for k, v in config.items():
            child = shape.fields.get(k) if shape is not None else None
            out[k] = _smd_merge(live[k], v, child, scheme, where, f"{at}/{escape(k)}") if k in live else tree_copy(v)
        return out
    if isinstance(config, list) and isinstance(live, list) and shape is not None:
        if "k" in shape.list_kinds and shape.keys:
            return _smd_merge_assoc(live, config, shape, scheme, where, at)
        if "v" in shape.list_kinds:
            out = tree_copy(live)
            out += [tree_copy(v) for v in config if not any(_json_equal(v, x) for x in live)]
            return out
    return tree_copy(config)  # atomic (or a type the managed fields do not show): replaced


def _smd_merge_assoc(live: list, config: list, shape: _Shape, scheme: bool, where: str, at: str) -> list:
    defaults = _KEY_DEFAULTS if scheme else {}

    def key_of(item: Any) -> tuple | None:
        if not isinstance(item, dict):
            return None
        return tuple(json.dumps(item.get(k, defaults.get(k)), sort_keys=True) for k in shape.keys)

    out = tree_copy(live)
    index = {key_of(x): i for i, x in enumerate(out)}
    for item in config:
        k = key_of(item)
        if k is None:
            raise DiffError(f"{where}: {at}: an item of an associative list that is not a mapping")
        if k in index:
            out[index[k]] = _smd_merge(out[index[k]], item, shape.items, scheme, where, f"{at}/{index[k]}")
        else:
            index[k] = len(out)
            out.append(tree_copy(item))
    return out


def _mapping(value: object, where: str) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DiffError(f"{where} must be a mapping, not {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------------
# Sync options by name

# An Application's spec.syncPolicy.syncOptions: each is compared as an exact string
# (pkg/apis/application/v1alpha1/types.go SyncOptions.HasOption, GetOptionValue), so a misspelt one
# is silently without effect. The options the controller reads (controller/sync.go, controller/
# state.go, controller/appcontroller.go) and the default-valued forms gitops-engine names
# (gitops-engine/pkg/sync/common/types.go); docs/user-guide/sync-options.md describes each.
APP_SYNC_OPTIONS = frozenset(
    {
        "Validate=false", "SkipDryRunOnMissingResource=true", "PruneLast=true", "Replace=true", "Replace=false",
        "ServerSideApply=true", "ServerSideApply=false", "ApplyOutOfSyncOnly=true", "ApplyOutOfSyncOnly=false",
        "CreateNamespace=true", "RespectIgnoreDifferences=true", "FailOnSharedResource=true",
        "ClientSideApplyMigration=false", "ClientSideApplyMigration=true", "PrunePropagationPolicy=foreground",
        "PrunePropagationPolicy=background", "PrunePropagationPolicy=orphan", "Prune=false", "Prune=confirm",
        "Delete=false", "Delete=confirm",
    }
)  # fmt: skip
# An object's argocd.argoproj.io/sync-options annotation (comma-separated, trimmed:
# gitops-engine/pkg/sync/resource/annotations.go GetAnnotationCSVs), as gitops-engine's sync_context.go
# and the controller read it.
RESOURCE_SYNC_OPTIONS = frozenset(
    {
        "Prune=false", "Prune=confirm", "Delete=false", "Delete=confirm", "Validate=false",
        "SkipDryRunOnMissingResource=true", "PruneLast=true", "Replace=true", "Replace=false", "Force=true",
        "ServerSideApply=true", "ServerSideApply=false",
    }
)  # fmt: skip


def sync_option_problem(option: object, *, resource: bool = False) -> str | None:
    """Why ``option`` is not a sync option Argo CD reads there (None if it is one)."""
    known = RESOURCE_SYNC_OPTIONS if resource else APP_SYNC_OPTIONS
    if not isinstance(option, str):
        return f"a sync option must be a string, not {type(option).__name__}"
    if option in known:
        return None
    said = f"unknown sync option {option!r}"
    near = [k for k in sorted(known | (APP_SYNC_OPTIONS if resource else RESOURCE_SYNC_OPTIONS))
            if k.lower() == option.strip().lower().replace(" ", "")]  # fmt: skip
    if near and near[0] in known:
        return f"{said}: Argo CD compares the exact string; write {near[0]!r}"
    if near:
        where = (
            "an Application's spec.syncPolicy.syncOptions"
            if resource
            else "an object's annotation " + (SYNC_OPTIONS_ANNOTATION)
        )
        return f"{said}: {near[0]} is read only in {where}"
    name = option.partition("=")[0].strip()
    values = sorted(k for k in known if k.partition("=")[0].lower() == name.lower())
    if values:
        return f"{said}: Argo CD reads {name} only as {', '.join(values)}"
    return f"{said} ({ARGO}:docs/user-guide/sync-options.md lists them; it would be ignored)"
