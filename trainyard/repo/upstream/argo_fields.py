"""What ``trainyard validate`` checks offline in the Argo CD fields this repository writes: sync
options Argo CD knows by name, ``ignoreDifferences`` entries with literal group, kind, name and
namespace, RFC 6901 JSON pointers and jq paths of the forms this repository uses, and argocd-cm keys
that do not change a diff.

This is not a diff engine. Whether an object drifts under its rules is for the real Argo CD, which
the cluster tier runs (tests/trainyard/cluster/test_argocd_itself.py). What the offline check does
not read (a glob in group or kind, a jq expression beyond a path, managedFieldsManagers, argocd-cm's
diff settings) is refused by name with :data:`CLUSTER_TIER` in the message, never passed in silence.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainyard.repo.upstream.applications import ArgoError
from trainyard.repo.upstream.syncorder import SYNC_OPTIONS as SYNC_OPTIONS_ANNOTATION

ARGO = "argo-cd@v3.6.2"
MAX_EXPRESSION = 4096  # characters of one jq expression or JSON pointer
CLUSTER_TIER = "the real Argo CD judges it in the cluster tier (tests/trainyard/cluster/test_argocd_itself.py)"


class FieldError(ArgoError):
    """A field of the wrong shape, or one the offline check does not read; the message says which."""


@dataclass(frozen=True)
class Rule:
    """One ``ResourceIgnoreDifferences`` (pkg/apis/application/v1alpha1/types.go)."""

    kind: str
    group: str = ""
    name: str = ""
    namespace: str = ""
    json_pointers: tuple[str, ...] = ()
    jq_paths: tuple[str, ...] = ()
    managers: tuple[str, ...] = ()
    where: str = "spec.ignoreDifferences"

    def matches(self, group: str, kind: str, name: str, namespace: str) -> bool:
        """Literal group and kind (a glob is refused by :func:`rule_problems`); name and namespace
        equal unless empty (argo-cd@v3.6.2:util/argo/normalizers/diff_normalizer.go Normalize)."""
        return (
            self.group == group
            and self.kind == kind
            and (not self.name or self.name == name)
            and (not self.namespace or self.namespace == namespace)
        )


def _mapping(value: object, where: str) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FieldError(f"{where} must be a mapping, not {type(value).__name__}")
    return value


def sync_options(spec: Mapping[Any, Any], where: str) -> list[str]:
    policy = spec.get("syncPolicy")
    if policy is None:
        return []
    policy = _mapping(policy, f"{where}: spec.syncPolicy")
    options = policy.get("syncOptions")
    if options is None:
        return []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise FieldError(f"{where}: spec.syncPolicy.syncOptions must be a list of strings")
    return list(options)


# ResourceIgnoreDifferences' fields written with omitempty (argo-cd@v3.6.2:pkg/apis/application/
# v1alpha1/types.go); kind is not
OMITTED_WHEN_EMPTY = ("group", "name", "namespace", "jsonPointers", "jqPathExpressions", "managedFieldsManagers")


def parse_ignore_differences(value: object, where: str) -> Iterator[Rule]:
    """``spec.ignoreDifferences`` as rules; a wrong shape is refused (kube-apiserver would refuse
    it against the Application CRD's schema)."""
    if value is None:
        return
    if not isinstance(value, list):
        raise FieldError(f"{where}: spec.ignoreDifferences must be a list, not {type(value).__name__}")
    for i, item in enumerate(value):
        at = f"spec.ignoreDifferences[{i}]"
        entry = _mapping(item, f"{where}: {at}")
        for key in OMITTED_WHEN_EMPTY:
            if key in entry and entry[key] in ("", [], None):
                raise FieldError(
                    f"{where}: {at}.{key}: {entry[key]!r}: leave it out. Argo CD drops an empty {key} whenever it "
                    "writes the Application (argo-cd@v3.6.2:pkg/apis/application/v1alpha1/types.go "
                    f'ResourceIgnoreDifferences, json:"{key},omitempty"), so the Application that manages this '
                    "one finds it different from git for ever and syncs it again and again"
                    + (" (the core group is the default)" if key == "group" else "")
                )
        strings = {}
        for key in ("group", "kind", "name", "namespace"):
            v = entry.get(key, "")
            if v is None:
                v = ""
            if not isinstance(v, str):
                raise FieldError(f"{where}: {at}.{key} must be a string")
            strings[key] = v
        lists = {}
        for key in ("jsonPointers", "jqPathExpressions", "managedFieldsManagers"):
            v = entry.get(key) or []
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise FieldError(f"{where}: {at}.{key} must be a list of strings")
            lists[key] = tuple(v)
        unknown = sorted(set(entry) - {"group", "kind", "name", "namespace", *lists})
        if unknown:
            raise FieldError(f"{where}: {at}: unknown field {unknown[0]!r} (ResourceIgnoreDifferences has none)")
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


def identity(obj: Mapping[Any, Any]) -> tuple[str, str, str, str]:
    """(group, kind, name, namespace) of an object."""
    api_version = obj.get("apiVersion")
    api_version = api_version if isinstance(api_version, str) else ""
    meta = _mapping(obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else None, "metadata")
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else ""
    name, namespace = meta.get("name", ""), meta.get("namespace", "")
    return group, str(kind), str(name or ""), str(namespace or "")


# Argo CD matches group and kind with gobwas/glob (argo-cd@v3.6.2:util/argo/normalizers/diff_normalizer.go
# Normalize -> util/glob Match); this repository writes only literal ones, so any glob character
# is refused rather than emulated.
_GLOB_CHARS = re.compile(r"[*?\[\]{}\\!]")


def rule_problems(rule: Rule) -> list[str]:
    """What the offline check does not read in ``rule`` (each message names the field)."""
    out = []
    if rule.managers:
        out.append(
            f"{rule.where}.managedFieldsManagers: not checked offline (Argo CD removes the fields those managers "
            f"own through structured-merge-diff, {ARGO}:util/argo/managedfields/managed_fields.go); "
            f"list the fields in jsonPointers or jqPathExpressions, or {CLUSTER_TIER}"
        )
    for key, value in (("group", rule.group), ("kind", rule.kind)):
        if _GLOB_CHARS.search(value):
            out.append(
                f"{rule.where}.{key} {value!r}: a glob pattern is not checked offline (only a literal {key}); "
                f"{CLUSTER_TIER}"
            )
    return out


# ---------------------------------------------------------------------------------------------
# JSON pointers: RFC 6901 syntax, and what Argo CD does with a malformed one (evanphx/json-patch
# v5.9.11 applies each as a "remove"; a patch whose path is not there is skipped, never refused:
# argo-cd@v3.6.2:util/argo/normalizers/diff_normalizer.go Normalize)


def pointer_problems(pointer: object) -> list[str]:
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
        if re.search(r"~(?![01])", token):
            out.append(f"{token!r}: '~' must be written '~0' (and '/' '~1'); Argo CD keeps a stray '~' as it is")
            break
    return out


# ---------------------------------------------------------------------------------------------
# jq: Argo CD compiles ``del(EXPRESSION)`` with gojq (argo-cd@v3.6.2:util/argo/normalizers/
# diff_normalizer.go NewIgnoreNormalizer; a compile error fails the Application's comparison). The
# offline check reads only the forms this repository writes, on which gojq and jq agree: a path of
# ``.name``, ``["key"]``, ``[N]``, ``[]`` (each optionally ``?``), followed by stages ``| PATH`` or
# ``| select(PATH == LITERAL)`` (``!=`` too). Anything else is refused by name.

_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*"'
_INDEX = rf"\[(?:{_STRING}|[0-9]+)?\]"
_FIRST = rf"(?:\.[A-Za-z_][A-Za-z0-9_]*|\.{_INDEX})\??"
_NEXT = rf"(?:\.[A-Za-z_][A-Za-z0-9_]*|{_INDEX})\??"  # gojq and jq before 1.7 refuse '.[' after a path
_PATH = rf"\s*(?:\.|{_FIRST}(?:{_NEXT})*)\s*"
_LITERAL = rf"(?:{_STRING}|-?[0-9]{{1,15}}|true|false|null)"
_SELECT = rf"\s*select\({_PATH}(?:==|!=)\s*{_LITERAL}\s*\)\s*"
_JQ_FORM = re.compile(rf"{_PATH}(?:\|(?:{_SELECT}|{_PATH}))*")


def jq_problems(expression: object) -> list[str]:
    if not isinstance(expression, str):
        return [f"not a string ({type(expression).__name__})"]
    if len(expression) > MAX_EXPRESSION:
        return [f"longer than {MAX_EXPRESSION} characters"]
    if not expression.strip():
        return ["empty: Argo CD compiles del(), which gojq refuses"]
    if _JQ_FORM.fullmatch(expression) and expression.strip() != ".":
        return []
    return [
        "beyond the jq forms checked offline (a path of .name, [\"key\"], [N], [] and ?, then '| path' or "
        f"'| select(path == literal)'); {CLUSTER_TIER}"
    ]


# ---------------------------------------------------------------------------------------------
# argocd-cm


def argocd_cm_problems(data: object) -> list[str]:
    """argocd-cm keys the offline check reads: the split ``resource.customizations.<type>.<group_kind>``
    keys of types that do not change a diff (health, useOpenLibs, actions, which this repository
    writes). The diff settings are refused by name: the single ``resource.customizations`` key,
    ``ignoreDifferences``/``ignoreResourceUpdates``/``knownTypeFields`` overrides and
    ``resource.compareoptions`` (argo-cd@v3.6.2:util/settings/settings.go GetResourceOverrides)."""
    data = _mapping(data, "argocd-cm: data")
    out = []
    for key in sorted(k for k in data if isinstance(k, str)):
        if key in ("resource.customizations", "resource.compareoptions"):
            out.append(f"argocd-cm: {key}: diff settings are not checked offline; {CLUSTER_TIER}")
            continue
        if not key.startswith("resource.customizations."):
            continue
        parts = key.split(".", 3)  # settings.go appendResourceOverridesFromSplitKeys: strings.SplitN(k, ".", 4)
        if len(parts) < 4:
            continue
        what, group_kind = parts[2], parts[3]
        if len(group_kind.split("_")) > 2 or not group_kind:  # settings.go convertToOverrideKey
            out.append(
                f"argocd-cm: {key}: group kind should be in format resource.customizations.<type>.<group_kind> "
                f"(Argo CD refuses the ConfigMap: {ARGO}:util/settings/settings.go convertToOverrideKey)"
            )
        elif what in ("ignoreDifferences", "ignoreResourceUpdates", "knownTypeFields"):
            out.append(f"argocd-cm: {key}: {what} overrides are not checked offline; {CLUSTER_TIER}")
        elif what not in ("health", "useOpenLibs", "actions"):
            out.append(
                f"argocd-cm: {key}: resource customization type {what} not supported (Argo CD refuses the "
                f"whole ConfigMap: {ARGO}:util/settings/settings.go appendResourceOverridesFromSplitKeys)"
            )
    return out


# ---------------------------------------------------------------------------------------------
# Sync options by name

# An Application's spec.syncPolicy.syncOptions, compared as exact strings (argo-cd@v3.6.2:
# pkg/apis/application/v1alpha1/types.go SyncOptions.HasOption), so a misspelt one is without effect:
# those the controller reads (controller/sync.go, state.go, appcontroller.go; gitops-engine
# pkg/sync/common/types.go), as docs/user-guide/sync-options.md describes them.
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
# Read only in an object's argocd.argoproj.io/sync-options annotation (gitops-engine sync_context.go)
RESOURCE_ONLY_OPTIONS = frozenset({"Force=true"})


def sync_option_problem(option: object) -> str | None:
    """Why ``option`` is not a sync option Argo CD reads in an Application (None if it is one)."""
    if not isinstance(option, str):
        return f"a sync option must be a string, not {type(option).__name__}"
    if option in APP_SYNC_OPTIONS:
        return None
    said = f"unknown sync option {option!r}"
    near = [k for k in sorted(APP_SYNC_OPTIONS | RESOURCE_ONLY_OPTIONS)
            if k.lower() == option.strip().lower().replace(" ", "")]  # fmt: skip
    if near and near[0] in APP_SYNC_OPTIONS:
        return f"{said}: Argo CD compares the exact string; write {near[0]!r}"
    if near:
        return f"{said}: {near[0]} is read only in an object's annotation {SYNC_OPTIONS_ANNOTATION}"
    name = option.partition("=")[0].strip()
    values = sorted(k for k in APP_SYNC_OPTIONS if k.partition("=")[0].lower() == name.lower())
    if values:
        return f"{said}: Argo CD reads {name} only as {', '.join(values)}"
    return f"{said} ({ARGO}:docs/user-guide/sync-options.md lists them; it would be ignored)"
