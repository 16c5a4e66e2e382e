"""The Argo CD fields ``trainyard validate`` checks offline (trainyard/repo/upstream/argo_fields.py):
sync options by name, ignoreDifferences shapes, JSON pointers, the jq path forms this repository
writes, argocd-cm keys; and what is refused by name for the real Argo CD of the cluster tier."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.repo.upstream import argo_fields
from trainyard.repo.upstream.argo_fields import FieldError, Rule

# --- ignoreDifferences rules ----------------------------------------------------------------------


def _rules(spec):
    return list(argo_fields.parse_ignore_differences(spec.get("ignoreDifferences"), "Application a"))


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"ignoreDifferences": {"kind": "x"}}, "must be a list"),
        ({"ignoreDifferences": ["x"]}, "must be a mapping"),
        ({"ignoreDifferences": [{"kind": 1}]}, "kind must be a string"),
        ({"ignoreDifferences": [{"kind": "x", "jsonPointers": "/a"}]}, "jsonPointers must be a list of strings"),
        ({"ignoreDifferences": [{"kind": "x", "jsonPointer": ["/a"]}]}, "unknown field 'jsonPointer'"),
    ],
)
def test_ignore_differences_shapes_are_refused_by_name(spec, said):
    with pytest.raises(FieldError, match=said):
        _rules(spec)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"syncPolicy": {"syncOptions": "ServerSideApply=true"}}, "syncOptions must be a list of strings"),
        ({"syncPolicy": []}, "must be a mapping"),
    ],
)
def test_sync_policy_shapes_are_refused_by_name(spec, said):
    with pytest.raises(FieldError, match=said):
        argo_fields.sync_options(spec, "Application a")


def test_rules_match_literal_group_and_kind_and_name_and_namespace_exactly():
    rule = Rule(kind="MutatingWebhookConfiguration", group="admissionregistration.k8s.io", name="x")
    assert rule.matches("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "x", "")
    assert not rule.matches("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "y", "")
    assert Rule(kind="Secret").matches("", "Secret", "any", "ns")
    assert not Rule(kind="Secret", namespace="a").matches("", "Secret", "any", "b")
    assert argo_fields.rule_problems(rule) == []


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        (Rule(kind="*Webhook*", group="admissionregistration.k8s.io"), "kind '*Webhook*': a glob pattern"),
        (Rule(kind="Secret", group="admission*"), "group 'admission*': a glob pattern"),
        (Rule(kind="["), "kind '[': a glob pattern"),
        (Rule(kind="Secret", managers=("kueue",)), "managedFieldsManagers: not checked offline"),
    ],
)
def test_what_a_rule_uses_beyond_literals_is_refused_by_name(rule, said):
    problems = argo_fields.rule_problems(rule)
    assert any(said in p and "cluster tier" in p for p in problems), problems


# --- JSON pointers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pointer", "said"),
    [
        ("", "the empty pointer"),
        ("spec/replicas", "Argo CD removes /replicas"),
        ("spec", "finds no path"),
        ("/a~2b", "'~' must be written '~0'"),
        ("/a~", "'~' must be written '~0'"),
        (7, "not a string"),
    ],
)
def test_pointer_problems_say_what_argo_cd_does(pointer, said):
    assert any(said in p for p in argo_fields.pointer_problems(pointer))


@pytest.mark.parametrize("pointer", ["/spec/replicas", "/data", "/a~0b/c~1d", "/webhooks/0/clientConfig/caBundle"])
def test_valid_pointers_have_no_problems(pointer):
    assert argo_fields.pointer_problems(pointer) == []


# --- jq: the path forms this repository writes -------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        ".webhooks[]?.clientConfig.caBundle",
        '.spec.runtimePatches[]? | select(.manager == "kueue.x-k8s.io/manager")',
        ".spec.runtimePatches[]?.time",
        '.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]',
        ".spec.template.spec.containers[0].env",
        ".[0]",
        '.items[] | select(.name != "x") | .value',
    ],
)
def test_jq_paths_pass(expression):
    assert argo_fields.jq_problems(expression) == []


@pytest.mark.parametrize(
    "expression",
    [
        '.a | test("x")',
        "keys_unsorted",
        '"x\\(.a)"',
        ".a # a comment",
        "@base64",
        "$ENV.HOME",
        ".a.[0]",
        "reduce .[] as $x (0; .)",
        "def f: .; f",
        ".a % 2",
        "try .a catch .",
        "..|.caBundle?",
        '.spec.template.spec.containers[] | select(.name | startswith("istio"))',
        ".a) | (.b",  # closes Argo CD's del( itself
        ".",
    ],
)
def test_jq_beyond_paths_is_refused_by_name(expression):
    problems = argo_fields.jq_problems(expression)
    assert any("beyond the jq forms checked offline" in p and "cluster tier" in p for p in problems), problems


@pytest.mark.parametrize(("expression", "said"), [("", "empty"), ("   ", "empty"), (3, "not a string")])
def test_jq_of_the_wrong_shape_is_refused(expression, said):
    assert any(said in p for p in argo_fields.jq_problems(expression))


# --- argocd-cm ----------------------------------------------------------------------------------


def test_the_argocd_cm_keys_this_repository_writes_pass():
    data = {
        "resource.customizations.health.kubeflow.org_PyTorchJob": "return {}",
        "resource.customizations.health.argoproj.io_Application": "return {}",
        "url": "https://argocd.example",
    }
    assert argo_fields.argocd_cm_problems(data) == []


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"resource.customizations.bogus.apps_Deployment": "x"}, "resource customization type bogus not supported"),
        ({"resource.customizations.ignoreDifferences.a_b_c": "{}"}, "group kind should be in format"),
        ({"resource.customizations.health.": "x"}, "group kind should be in format"),
        ({"resource.customizations.ignoreDifferences.all": "jsonPointers: [/status]"}, "not checked offline"),
        ({"resource.customizations.ignoreResourceUpdates.apps_Deployment": "{}"}, "not checked offline"),
        ({"resource.customizations.knownTypeFields.apps_Deployment": "[]"}, "not checked offline"),
        ({"resource.customizations": "apps/Deployment: {}"}, "diff settings are not checked offline"),
        ({"resource.compareoptions": "ignoreAggregatedRoles: true"}, "diff settings are not checked offline"),
    ],
)
def test_argocd_cm_settings_that_are_refused_by_name(data, said):
    problems = argo_fields.argocd_cm_problems(data)
    assert any(said in p and next(iter(data)) in p for p in problems), problems


def test_argocd_cm_data_of_the_wrong_shape_is_refused():
    with pytest.raises(FieldError, match="must be a mapping"):
        argo_fields.argocd_cm_problems(["x"])


# --- sync options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option",
    [
        "ServerSideApply=true",
        "RespectIgnoreDifferences=true",
        "CreateNamespace=true",
        "ApplyOutOfSyncOnly=true",
        "Prune=false",
        "Prune=confirm",
        "Delete=confirm",
        "PrunePropagationPolicy=orphan",
        "Validate=false",
        "FailOnSharedResource=true",
        "ClientSideApplyMigration=false",
    ],
)
def test_known_application_sync_options(option):
    assert argo_fields.sync_option_problem(option) is None


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("ServerSideApply=True", "write 'ServerSideApply=true'"),
        (" CreateNamespace=true", "write 'CreateNamespace=true'"),
        ("Force=true", "read only in an object's annotation argocd.argoproj.io/sync-options"),
        ("Prune=true", "Prune only as Prune=confirm, Prune=false"),
        ("RespectIgnoreDifference=true", "unknown sync option"),
        (7, "must be a string"),
    ],
)
def test_unknown_application_sync_options_are_named(option, said):
    assert said in (argo_fields.sync_option_problem(option) or "")


# --- hostile input: always an answer, never a traceback ---------------------------------------------


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_any_string_is_answered_without_a_traceback(text):
    assert isinstance(argo_fields.pointer_problems(text), list)
    assert isinstance(argo_fields.jq_problems(text), list)
    assert isinstance(argo_fields.rule_problems(Rule(kind=text, group=text)), list)
    assert isinstance(argo_fields.argocd_cm_problems({text: text}), list)


def test_long_jq_is_refused_quickly():
    assert argo_fields.jq_problems("." + "a" * 5000) == ["longer than 4096 characters"]
    assert argo_fields.jq_problems(".a" + "[]?" * 1000 + " | " + "(" * 1000)
