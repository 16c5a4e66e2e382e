"""The CEL ``authorizer`` library as kube-apiserver defines it (apiserver pkg/cel/library/authz.go),
decided by RBAC as kube-apiserver's RBAC authorizer decides (rbac/v1 evaluation_helpers.go,
registry/rbac/validation/rule.go)."""

from __future__ import annotations

import pytest

from trainyard.repo.upstream import vap
from trainyard.repo.upstream.rbac import Rbac, User
from trainyard.repo.upstream.vap import Request

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": []}}


def role(kind: str, name: str, rules: list[dict], namespace: str | None = None) -> dict:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules}


def binding(kind: str, name: str, role_kind: str, role_name: str, subjects: list[dict], namespace=None) -> dict:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


RBAC = Rbac(
    [
        role("ClusterRole", "skip", [{"apiGroups": ["trainyard.dev"], "resources": ["fabrics"], "verbs": ["skip"]}]),
        binding("ClusterRoleBinding", "platform", "ClusterRole", "skip", [{"kind": "Group", "name": "platform"}]),
        role("Role", "ml-skip", [{"apiGroups": ["trainyard.dev"], "resources": ["fabrics"], "verbs": ["*"]}], "ml"),
        binding("RoleBinding", "carol", "Role", "ml-skip", [{"kind": "User", "name": "carol"}], "ml"),
        binding(
            "RoleBinding", "sa", "ClusterRole", "skip", [{"kind": "ServiceAccount", "name": "runner"}], namespace="ml"
        ),
        role(
            "ClusterRole",
            "misc",
            [
                {"apiGroups": [""], "resources": ["pods/log", "services/*"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["*/scale"], "verbs": ["update"]},
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["only-this"], "verbs": ["get"]},
                {"nonResourceURLs": ["/healthz", "/metrics/*"], "verbs": ["get"]},
            ],
        ),
        binding("ClusterRoleBinding", "dave", "ClusterRole", "misc", [{"kind": "User", "name": "dave"}]),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}},
    ]
)
ALICE = User("alice", ("platform", "system:authenticated"))
CAROL = User("carol")
DAVE = User("dave")
RUNNER = User.service_account("ml", "runner")


def allowed(text: str, user: User, namespace: str = "ml") -> bool:
    return bool(vap.expression(text, POD, Request(user=user, namespace=namespace), RBAC))


SKIP = "authorizer.group('trainyard.dev').resource('fabrics').namespace('{ns}').check('{verb}').allowed()"


@pytest.mark.parametrize(
    ("user", "namespace", "verb", "expected"),
    [
        (ALICE, "ml", "skip", True),  # a ClusterRoleBinding to her group: every namespace
        (ALICE, "other", "skip", True),
        (ALICE, "ml", "create", False),  # only the verb the role names
        (CAROL, "ml", "skip", True),  # a RoleBinding: its namespace only
        (CAROL, "ml", "anything", True),  # "*" verbs
        (CAROL, "other", "skip", False),
        (CAROL, "", "skip", False),  # cluster scope: RoleBindings do not apply
        (RUNNER, "ml", "skip", True),  # a service account subject, namespaced by the binding
        (User.service_account("other", "runner"), "ml", "skip", False),
        (User("bob", ("developers",)), "ml", "skip", False),
    ],
)
def test_resource_checks(user, namespace, verb, expected):
    assert allowed(SKIP.format(ns=namespace, verb=verb), user) is expected


def test_subresources_names_and_paths():
    sub = "authorizer.group('').resource('{r}').subresource('{s}').namespace('ml').check('get').allowed()"
    assert allowed(sub.format(r="pods", s="log"), DAVE)
    assert not allowed("authorizer.group('').resource('pods').namespace('ml').check('get').allowed()", DAVE)
    # RBAC knows "*/subresource", not "resource/*" (ResourceMatches): that rule matches nothing
    assert not allowed(sub.format(r="services", s="proxy"), DAVE)
    scale = "authorizer.group('').resource('{r}').subresource('scale').namespace('ml').check('update').allowed()"
    assert allowed(scale.format(r="deployments"), DAVE)
    cm = "authorizer.group('').resource('configmaps').namespace('ml').name('{n}').check('get').allowed()"
    assert allowed(cm.format(n="only-this"), DAVE) and not allowed(cm.format(n="other"), DAVE)
    assert allowed("authorizer.path('/healthz').check('get').allowed()", DAVE)
    assert allowed("authorizer.path('/metrics/cadvisor').check('get').allowed()", DAVE)
    assert not allowed("authorizer.path('/readyz').check('get').allowed()", DAVE)


def test_service_account_and_request_resource_checks():
    sa = "authorizer.serviceAccount('ml', 'runner').group('trainyard.dev').resource('fabrics').namespace('ml')"
    assert allowed(f"{sa}.check('skip').allowed()", User("nobody"))  # as that service account, whoever asks
    # requestResource: the request's own resource (pods in ml) with a verb
    assert not allowed("authorizer.requestResource.check('create').allowed()", ALICE)


def test_decisions_carry_a_reason_and_no_error():
    text = SKIP.format(ns="ml", verb="skip").removesuffix(".allowed()")
    reason = vap.expression(f"{text}.reason()", POD, Request(user=ALICE), RBAC)
    assert reason == 'RBAC: allowed by ClusterRoleBinding "platform" of ClusterRole "skip" to Group "platform"'
    assert not vap.expression(f"{text}.errored()", POD, Request(user=ALICE), RBAC)
    denied = SKIP.format(ns="other", verb="skip").removesuffix(".allowed()")
    assert vap.expression(f"{denied}.reason()", POD, Request(user=CAROL), RBAC) == ""  # no opinion


def test_the_request_carries_user_info_as_admission_v1_does():
    request = Request(user=ALICE, namespace="ml")
    assert vap.expression("request.userInfo.username", POD, request) == "alice"
    assert vap.expression("'platform' in request.userInfo.groups", POD, request)
    assert vap.expression("request.namespace == 'ml' && request.operation == 'CREATE'", POD, request)
    assert vap.expression("request.kind.kind == 'Pod' && request.resource.resource == 'pods'", POD, request)
    assert vap.expression("oldObject == null", POD, request)
