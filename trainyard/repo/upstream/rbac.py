"""kube-apiserver's RBAC authorizer, and the CEL ``authorizer`` library that asks it.

:class:`Rbac` decides as kube-apiserver's RBAC authorizer does on a given set of ClusterRoles,
Roles and bindings (plugin/pkg/auth/authorizer/rbac: RuleAllows; pkg/apis/rbac/v1/evaluation_helpers.go:
VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches, NonResourceURLMatches;
pkg/registry/rbac/validation/rule.go: appliesToUser). RBAC only allows: no matching rule is "no
opinion", and ``allowed()`` is then false.

``authorizer`` follows kubernetes/apiserver pkg/cel/library/authz.go: ``authorizer.group(g)
.resource(r)[.subresource(s)][.namespace(ns)][.name(n)].check(verb)``, ``authorizer.path(p)
.check(verb)``, ``authorizer.serviceAccount(ns, name)`` (the same checks for that service
account) and ``authorizer.requestResource`` (a check on the request's own resource) give a
Decision with ``allowed()``, ``reason()``, ``errored()`` and ``error()``, each decided by
:class:`Rbac` (:data:`AUTHORIZER_LIBRARY`, the members :mod:`trainyard.repo.upstream.vap` gives its
CEL runtime).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainyard.repo.upstream.cel_runtime import Member

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"  # apiserver pkg/authentication/serviceaccount


@dataclass(frozen=True)
class User:
    """authentication/v1 UserInfo of the principal making the request."""

    username: str
    groups: tuple[str, ...] = ("system:authenticated",)
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> User:
        """A service account's user as the token authenticator makes it (its groups included)."""
        return cls(
            f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        )

    def as_json(self) -> dict:
        out: dict = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra}
        return out


# --- RBAC, as kube-apiserver's RBAC authorizer decides ---------------------------------------------


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes of one check."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True


def _verb_matches(rule: dict, verb: str) -> bool:
    return any(v in ("*", verb) for v in rule.get("verbs") or [])


def _group_matches(rule: dict, group: str) -> bool:
    return any(g in ("*", group) for g in rule.get("apiGroups") or [])


def _resource_matches(rule: dict, combined: str, subresource: str) -> bool:
    for r in rule.get("resources") or []:
        if r in ("*", combined):
            return True
        if subresource and r == f"*/{subresource}":
            return True
    return False


def _name_matches(rule: dict, name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def _url_matches(rule: dict, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url in ("*", path) or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def rule_allows(attrs: Attributes, rule: dict) -> bool:
    if attrs.resource_request:
        combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
        return (
            _verb_matches(rule, attrs.verb)
            and _group_matches(rule, attrs.group)
            and _resource_matches(rule, combined, attrs.subresource)
            and _name_matches(rule, attrs.name)
        )
    return _verb_matches(rule, attrs.verb) and _url_matches(rule, attrs.path)


def applies_to(user: User, subject: dict, namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return user.username == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.username == f"{SERVICE_ACCOUNT_PREFIX}{sa_namespace}:{name}"
    return False


class Rbac:
    """The RBAC authorizer over a fixed set of RBAC objects (ClusterRole, ClusterRoleBinding, Role,
    RoleBinding documents; anything else is ignored)."""

    def __init__(self, docs: Iterable[object] = ()) -> None:
        self.cluster_roles: dict[str, dict] = {}
        self.roles: dict[tuple[str, str], dict] = {}
        self.cluster_bindings: list[dict] = []
        self.bindings: list[dict] = []
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("apiVersion") != "rbac.authorization.k8s.io/v1":
                continue
            meta = doc.get("metadata") or {}
            kind, name, ns = doc.get("kind"), meta.get("name"), meta.get("namespace") or ""
            if kind == "ClusterRole":
                self.cluster_roles[name] = doc
            elif kind == "Role":
                self.roles[(ns, name)] = doc
            elif kind == "ClusterRoleBinding":
                self.cluster_bindings.append(doc)
            elif kind == "RoleBinding":
                self.bindings.append(doc)

    def _rules(self, ref: dict, namespace: str) -> list[dict]:
        if ref.get("kind") == "ClusterRole":
            role = self.cluster_roles.get(ref.get("name"))
        elif ref.get("kind") == "Role":
            role = self.roles.get((namespace, ref.get("name")))
        else:
            role = None
        return list((role or {}).get("rules") or [])

    def authorize(self, user: User, attrs: Attributes) -> tuple[bool, str]:
        """(allowed, reason): allowed by the first binding whose subject is the user and whose role
        has a rule for the attributes; otherwise no opinion."""
        candidates = [(b, "") for b in self.cluster_bindings]
        if attrs.namespace:
            ns_bindings = [b for b in self.bindings if (b.get("metadata") or {}).get("namespace") == attrs.namespace]
            candidates += [(b, attrs.namespace) for b in ns_bindings]
        for binding, namespace in candidates:
            subject = next((s for s in binding.get("subjects") or [] if applies_to(user, s, namespace)), None)
            if subject is None:
                continue
            ref = binding.get("roleRef") or {}
            if any(rule_allows(attrs, rule) for rule in self._rules(ref, namespace)):
                where = f" in {namespace}" if namespace else ""
                return True, (
                    f'RBAC: allowed by {binding.get("kind")} "{(binding.get("metadata") or {}).get("name")}"{where} '
                    f'of {ref.get("kind")} "{ref.get("name")}" to {subject.get("kind")} "{subject.get("name")}"'
                )
        return False, ""


# --- the authorizer CEL library -------------------------------------------------------------------
#
# kubernetes/apiserver pkg/cel/library/authz.go: ``authorizer`` (Authorizer) has group(string)
# -> GroupCheck, path(string) -> PathCheck, serviceAccount(string, string) -> Authorizer and the
# field requestResource (a ResourceCheck); GroupCheck.resource(string) -> ResourceCheck;
# ResourceCheck.subresource/namespace/name(string) -> ResourceCheck; ResourceCheck.check(string)
# and PathCheck.check(string) -> Decision; Decision.allowed() bool, reason() string, errored()
# bool, error() string. Its values are maps here (the only values the compiled runtime hands to
# Python functions), each with the kind it stands for and the principal it checks as.

KIND = "@kind"
_rbacs: weakref.WeakValueDictionary[str, Rbac] = weakref.WeakValueDictionary()


def _principal(rbac: Rbac, user: User) -> dict[str, Any]:
    token = str(id(rbac))
    _rbacs[token] = rbac
    return {"@rbac": token, "@user": user.username, "@groups": list(user.groups)}


def authorizer_value(rbac: Rbac, user: User, request_attrs: Attributes | None = None) -> dict[str, Any]:
    """``authorizer``: checks as ``user``; ``requestResource`` is a check on ``request_attrs``."""
    out: dict[str, Any] = {KIND: "Authorizer", **_principal(rbac, user)}
    if request_attrs is not None:
        out["requestResource"] = _resource_check(out, request_attrs)
    return out


def _resource_check(principal: Mapping[str, Any], attrs: Attributes) -> dict[str, Any]:
    fields = {k: principal[k] for k in ("@rbac", "@user", "@groups")}
    return {KIND: "ResourceCheck", **fields, "@attrs": dict(attrs.__dict__)}


def _expect(receiver: Mapping[str, Any], *kinds: str) -> Mapping[str, Any]:
    if not isinstance(receiver, Mapping) or receiver.get(KIND) not in kinds:
        raise TypeError(f"no such overload: applies to {' or '.join(kinds)}")
    return receiver


def _with(check: Mapping[str, Any], **changes: str) -> dict[str, Any]:
    check = _expect(check, "ResourceCheck")
    return {**check, "@attrs": {**check["@attrs"], **{k: str(v) for k, v in changes.items()}}}


def _group(receiver: Mapping[str, Any], group: str) -> dict[str, Any]:
    receiver = _expect(receiver, "Authorizer")
    return {**{k: receiver[k] for k in ("@rbac", "@user", "@groups")}, KIND: "GroupCheck", "@group": str(group)}


def _resource(receiver: Mapping[str, Any], resource: str) -> dict[str, Any]:
    receiver = _expect(receiver, "GroupCheck")
    return _resource_check(receiver, Attributes(verb="", group=receiver["@group"], resource=str(resource)))


def _path(receiver: Mapping[str, Any], path: str) -> dict[str, Any]:
    receiver = _expect(receiver, "Authorizer")
    return {**{k: receiver[k] for k in ("@rbac", "@user", "@groups")}, KIND: "PathCheck", "@path": str(path)}


def _service_account(receiver: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any]:
    receiver = _expect(receiver, "Authorizer")
    return authorizer_value(_rbac_of(receiver), User.service_account(str(namespace), str(name)))


def _rbac_of(receiver: Mapping[str, Any]) -> Rbac:
    rbac = _rbacs.get(receiver["@rbac"])
    if rbac is None:
        raise TypeError("the authorizer of this request is gone")
    return rbac


def _check(receiver: Mapping[str, Any], verb: str) -> dict[str, Any]:
    receiver = _expect(receiver, "ResourceCheck", "PathCheck")
    if receiver[KIND] == "ResourceCheck":
        attrs = Attributes(**{**receiver["@attrs"], "verb": str(verb)})
    else:
        attrs = Attributes(verb=str(verb), path=receiver["@path"], resource_request=False)
    user = User(receiver["@user"], tuple(receiver["@groups"]))
    allowed, reason = _rbac_of(receiver).authorize(user, attrs)
    return {KIND: "Decision", "@allowed": allowed, "@reason": reason}


AUTHORIZER_LIBRARY = (
    Member("group", 1, _group),
    Member("resource", 1, _resource),
    Member("subresource", 1, lambda c, s: _with(c, subresource=s)),
    Member("namespace", 1, lambda c, ns: _with(c, namespace=ns)),
    Member("name", 1, lambda c, n: _with(c, name=n)),
    Member("path", 1, _path),
    Member("serviceAccount", 2, _service_account),
    Member("check", 1, _check),
    Member("allowed", 0, lambda d: bool(_expect(d, "Decision")["@allowed"]), "bool"),
    Member("reason", 0, lambda d: str(_expect(d, "Decision")["@reason"]), "string"),
    # RBAC never errors: errored() is false and error() empty
    Member("errored", 0, lambda d: not _expect(d, "Decision"), "bool"),
    Member("error", 0, lambda d: "" if _expect(d, "Decision") else "no decision", "string"),
)
