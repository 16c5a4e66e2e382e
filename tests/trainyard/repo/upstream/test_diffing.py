"""Argo CD's diff as trainyard emulates it (trainyard/repo/upstream/diffing.py), on Argo CD's own
test cases: argo-cd@v3.5.1:util/argo/normalizers/diff_normalizer_test.go and
gitops-engine/pkg/diff/diff_test.go (with its testdata, copied to fixtures/argocd/gitops-engine-diff),
then the JSON pointer quirks of evanphx/json-patch, what jq may be, sync option names and hostile
input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainyard.repo.upstream import diffing
from trainyard.repo.upstream.diffing import DiffError, Rule, Settings

FIXTURES = Path(__file__).parent / "fixtures" / "argocd" / "gitops-engine-diff"

# argo-cd@v3.5.1:test/testdata.go DeploymentManifest and ConfigMapManifest
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "nginx-deployment", "labels": {"app": "nginx"}},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "nginx"}},
        "template": {
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.15.4", "ports": [{"containerPort": 80}]}]},
        },
    },
}
CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "my-configmap"},
    "data": {"config.yaml": "auth: token\nconfig:field"},
}
# diff_normalizer_test.go testCRDYAML
CRD = yaml.safe_load("""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
spec:
  conversion:
    strategy: None
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, shortNames: [cert, certs],
          singular: certificate}
  scope: Namespaced
  version: v1alpha1
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          json:
            x-kubernetes-preserve-unknown-fields: true
""")


CONTAINERS = "jsonPointers:\n- /spec/template/spec/containers"


def app(ignore: list | None = None, options: list | None = None, annotations: dict | None = None) -> dict:
    spec: dict = {"project": "default"}
    if ignore is not None:
        spec["ignoreDifferences"] = ignore
    if options is not None:
        spec["syncPolicy"] = {"syncOptions": options}
    meta: dict = {"name": "demo", "namespace": "argocd"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": meta, "spec": spec}


def normalized(settings_: Settings, obj: dict) -> dict:
    return diffing.ignore_normalize(copy.deepcopy(obj), settings_.matching(obj))


def containers(obj: dict) -> object:
    return obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", "ABSENT")


# --- util/argo/normalizers/diff_normalizer_test.go ------------------------------------------------


def test_normalize_object_with_matched_group_kind():
    """TestNormalizeObjectWithMatchedGroupKind: a pointer that names nothing is skipped, the other
    removes the containers."""
    s = Settings.of(app([{"group": "apps", "kind": "Deployment",
                          "jsonPointers": ["/not-matching-path", "/spec/template/spec/containers"]}]))  # fmt: skip
    assert containers(DEPLOYMENT) != "ABSENT"
    assert containers(normalized(s, DEPLOYMENT)) == "ABSENT"
    with pytest.raises(DiffError):  # Normalize(nil) is an error
        diffing.diff(s, None, None)


def test_normalize_no_matched_group_kinds():
    """TestNormalizeNoMatchedGroupKinds."""
    s = Settings.of(app([{"group": "", "kind": "Service", "jsonPointers": ["/spec"]}]))
    assert normalized(s, DEPLOYMENT)["spec"] == DEPLOYMENT["spec"]


@pytest.mark.parametrize(
    "data",
    [
        # TestNormalizeMatchedResourceOverrides: argocd-cm's split key
        {"resource.customizations.ignoreDifferences.apps_Deployment": CONTAINERS},
        # the same in the single resource.customizations key
        {
            "resource.customizations": "apps/Deployment:\n  ignoreDifferences:\n    "
            + CONTAINERS.replace("\n", "\n    ")
        },
        # TestNormalizeGlobMatch: */*, and the "all" key that means it
        {"resource.customizations.ignoreDifferences.all": CONTAINERS},
    ],
)
def test_normalize_matched_resource_overrides_and_glob(data):
    s = Settings.of(app(), data)
    assert containers(normalized(s, DEPLOYMENT)) == "ABSENT"


def test_normalize_missing_json_pointer():
    """TestNormalizeMissingJsonPointer: pointers that name nothing leave both objects as they are."""
    data = {
        "resource.customizations.ignoreDifferences.apps_Deployment": "jsonPointers: [/garbage]",
        "resource.customizations.ignoreDifferences.apiextensions.k8s.io_CustomResourceDefinition": (
            "jsonPointers: [/spec/additionalPrinterColumns/0/priority]"
        ),
    }
    s = Settings.of(app(), data)
    assert normalized(s, DEPLOYMENT) == DEPLOYMENT
    assert normalized(s, CRD) == CRD


def test_normalize_jq_path_expression():
    """TestNormalizeJQPathExpression: the selected init container goes, the other stays."""
    s = Settings.of(
        app(
            [
                {
                    "group": "apps",
                    "kind": "Deployment",
                    "jqPathExpressions": ['.spec.template.spec.initContainers[] | select(.name == "init-container-0")'],
                }
            ]
        )
    )
    dep = copy.deepcopy(DEPLOYMENT)
    dep["spec"]["template"]["spec"]["initContainers"] = [{"name": "init-container-0"}, {"name": "init-container-1"}]
    got = normalized(s, dep)["spec"]["template"]["spec"]["initContainers"]
    assert got == [{"name": "init-container-1"}]


def test_normalize_illegal_jq_path_expression():
    """TestNormalizeIllegalJQPathExpression: gojq cannot parse it; Argo CD's normalizer is not built
    (the comparison fails), validate refuses it and so does the diff."""
    expression = '.spec.template.spec.containers[] | select(.name == "missing-quote)'
    assert diffing.jq_problems(expression)
    s = Settings.of(app([{"group": "apps", "kind": "Deployment", "jqPathExpressions": [expression]}]))
    with pytest.raises(DiffError, match="missing-quote"):
        diffing.diff(s, DEPLOYMENT, DEPLOYMENT)


def test_normalize_jq_path_expression_with_error():
    """TestNormalizeJQPathExpressionWithError: a jq run-time error skips the patch."""
    s = Settings.of(app([{"group": "apps", "kind": "Deployment", "jqPathExpressions": [".spec.fakeField.foo[]"]}]))
    _, error = diffing.run_jq(".spec.fakeField.foo[]", DEPLOYMENT)
    assert error and "Cannot iterate over null" in error
    assert normalized(s, DEPLOYMENT) == DEPLOYMENT


@pytest.mark.parametrize(
    ("pointer", "said"),
    [
        # TestNormalizeExpectedErrorAreSilenced: the two errors Argo CD does not even log
        ("/invalid", "Unable to remove nonexistent key"),
        ("/invalid/json/path", "remove operation does not apply: doc is missing path"),
    ],
)
def test_normalize_expected_errors_are_silenced(pointer, said):
    doc, error = diffing.remove_pointer(DEPLOYMENT, pointer)
    assert doc is DEPLOYMENT and error is not None and said in error


def test_jq_path_expression_fails_with_timeout():
    """TestJqPathExpressionFailWithTimeout: the program that never ends is stopped, the patch skipped;
    the next program runs in a new jq process."""
    expression = "until(true==false; [.] + [1])"
    assert diffing.jq_problems(expression) == []
    doc, error = diffing.run_jq(expression, DEPLOYMENT, timeout=0.5)
    assert doc is DEPLOYMENT and error is not None and "JQ patch execution timed out" in error
    after, error = diffing.run_jq(".metadata.labels", DEPLOYMENT)
    assert error is None and "labels" not in after["metadata"]


def test_jq_path_expression_that_closes_the_del_is_refused_by_its_functions():
    """TestJQPathExpressionReturnsHelpfulError: the expression closes Argo CD's del( itself and runs
    fromjson on null; gojq's and jq's errors differ, and fromjson/tojson are refused by name."""
    expression = '.nothing) | .data["config.yaml"] |= (fromjson | del(.auth) | tojson'
    problems = diffing.jq_problems(expression)
    assert any(p.startswith("fromjson/0") for p in problems) and any(p.startswith("tojson/0") for p in problems)
    # jq itself fails on it too (Argo CD logs the failure and skips the patch)
    doc, error = diffing.run_jq(expression, CONFIG_MAP)
    assert doc is CONFIG_MAP and error is not None


def test_default_status_is_ignored_for_every_kind_and_argocd_cm_can_narrow_it():
    """util/settings/settings.go GetResourceOverrides: ignoreResourceStatusField defaults to all."""
    live = {**DEPLOYMENT, "status": {"replicas": 1}}
    desired = {**DEPLOYMENT, "status": {"replicas": 3}}
    assert diffing.diff(Settings.of(app()), desired, live).paths == ()
    for value in ("none", "off", "false"):
        s = Settings.of(app(), {"resource.compareoptions": f"ignoreResourceStatusField: {value}"})
        assert diffing.diff(s, desired, live).paths == ("/status/replicas",)
    crd_only = Settings.of(app(), {"resource.compareoptions": "ignoreResourceStatusField: crd"})
    assert diffing.diff(crd_only, desired, live).paths == ("/status/replicas",)


# --- gitops-engine/pkg/diff/diff_test.go -----------------------------------------------------------


def fixture(name: str) -> dict:
    text = (FIXTURES / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


NO_STATUS_RULE = Settings()  # diffOptionsForTest: no ignore normalizer
SSA = Settings(structured_merge=True)


@pytest.mark.parametrize(
    ("config", "live", "settings_", "modified"),
    [
        ("deployment-config.json", "deployment-live.json", NO_STATUS_RULE, False),  # TestThreeWayDiffExample3
        ("elasticsearch-config.json", "elasticsearch-live.json", NO_STATUS_RULE, False),  # Example2 (StatefulSet)
        ("mutatingwebhookconfig-config.json", "mutatingwebhookconfig-live.json", NO_STATUS_RULE, False),  # Example4
        ("spinnaker-sa-config.json", "spinnaker-sa-live.json", NO_STATUS_RULE, False),  # ExplicitNamespace
        ("wordpress-config.json", "wordpress-live.json", NO_STATUS_RULE, False),  # TestNullSecretData
        ("grafana-clusterrole-config.json", "grafana-clusterrole-live.json", NO_STATUS_RULE, False),  # NullRoleRule
        ("sealedsecret-config.json", "sealedsecret-live.json", NO_STATUS_RULE, False),  # NullCreationTimestamp
        # TestDiffOptionIgnoreAggregateRoles, both ways
        ("aggr-clusterrole-config.json", "aggr-clusterrole-live.json", NO_STATUS_RULE, True),
        ("aggr-clusterrole-config.json", "aggr-clusterrole-live.json", Settings(ignore_aggregated_roles=True), False),
        # TestStructuredMergeDiff
        ("smd-service-config.yaml", "smd-service-live.yaml", SSA, True),  # will apply default values
        ("smd-service-config-2-ports.yaml", "smd-service-live.yaml", SSA, True),  # will remove entries in list
        ("smd-service-config.yaml", "smd-service-live-with-type.yaml", SSA, True),  # removes previously added
        ("smd-service-config-ports.yaml", "smd-service-live.yaml", SSA, True),  # service with multiple ports
        ("smd-deploy-config.yaml", "smd-deploy-live.yaml", SSA, False),  # deployment defaults
    ],
)
def test_gitops_engine_examples(config, live, settings_, modified):
    assert diffing.diff(settings_, fixture(config), fixture(live)).modified is modified


def test_structured_merge_lists_and_pruning():
    """TestStructuredMergeDiff's assertions on the predicted object: ports merged on their keys,
    what argocd-controller applied before and no longer applies removed."""
    live = fixture("smd-service-live.yaml")
    assert len(diffing.diff(SSA, fixture("smd-service-config-2-ports.yaml"), live).predicted["spec"]["ports"]) == 2
    assert len(diffing.diff(SSA, fixture("smd-service-config-ports.yaml"), live).predicted["spec"]["ports"]) == 5
    removed = diffing.diff(SSA, fixture("smd-service-config.yaml"), fixture("smd-service-live-with-type.yaml"))
    assert "/spec/type" in removed.paths and "type" not in removed.predicted["spec"]


def test_three_way_diff_uses_the_last_applied_configuration():
    """TestThreeWayDiff, steps 1 to 5."""
    config = {
        "apiVersion": "apps/v1beta1",
        "kind": "Deployment",
        "metadata": {"name": "demo", "annotations": {"foo": "bar"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "demo"}}, "template": {
            "metadata": {"labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "demo", "image": "gcr.io/kuar-demo/kuard-amd64:1",
                                     "ports": [{"containerPort": 80}]}]}}},
    }  # fmt: skip
    live = copy.deepcopy(config)
    live["metadata"]["namespace"] = "default"  # a defaulted field is no difference
    assert not diffing.diff(NO_STATUS_RULE, config, live).modified
    live["metadata"]["annotations"][diffing.LAST_APPLIED] = json.dumps(config)
    assert not diffing.diff(NO_STATUS_RULE, config, live).modified
    dropped = copy.deepcopy(config)
    del dropped["metadata"]["annotations"]["foo"]  # the three-way diff sees a removed managed field
    # (the desired annotations are now empty, so removeNamespaceAnnotation drops them and the patch
    # deletes the whole map, as strategicpatch deletes a field the last applied object had)
    assert diffing.diff(NO_STATUS_RULE, dropped, live).paths == ("/metadata/annotations",)
    del live["metadata"]["annotations"][diffing.LAST_APPLIED]  # without it, nothing to compare the removal to
    assert not diffing.diff(NO_STATUS_RULE, dropped, live).modified


def test_three_way_diff_example2_with_difference():
    """TestThreeWayDiffExample2WithDifference: a label added, one changed, one removed."""
    config, live = fixture("elasticsearch-config.json"), fixture("elasticsearch-live.json")
    labels = config["metadata"]["labels"]
    labels["foo"] = "bar"
    labels["chart"] = "elasticsearch-1.7.1"
    del labels["release"]
    got = diffing.diff(NO_STATUS_RULE, config, live)
    assert set(got.paths) == {"/metadata/labels/foo", "/metadata/labels/chart", "/metadata/labels/release"}


def test_diff_of_missing_and_extraneous_objects():
    """TestDiffWithNils and TestInvalidSecretStringData: no live object is a difference, no desired
    one is not (the comparator calls it extraneous)."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "my-secret"}, "stringData": {"foo": 1234}}
    assert diffing.diff(NO_STATUS_RULE, secret, None).modified
    assert not diffing.diff(NO_STATUS_RULE, None, DEPLOYMENT).modified


def test_secret_string_data_and_redacted_data():
    """TestSecretStringData (stringData is data, base64) and TestRedactedSecretData (different
    redacted values are a difference)."""
    config = yaml.safe_load("apiVersion: v1\nkind: Secret\nmetadata: {name: my-secret}\ntype: Opaque\n"
                            "stringData: {foo: bar, bar: '1234'}\ndata: {baz: cXV4}\n")  # fmt: skip
    live = yaml.safe_load("apiVersion: v1\nkind: Secret\nmetadata: {creationTimestamp: '2018-11-19T11:30:40Z', "
                          "name: my-secret, namespace: argocd, resourceVersion: '25848035'}\ntype: Opaque\n"
                          "data: {foo: YmFy, bar: MTIzNA==, baz: cXV4}\n")  # fmt: skip
    assert not diffing.diff(NO_STATUS_RULE, config, live).modified
    config, live = fixture("wordpress-config.json"), fixture("wordpress-live.json")
    config["data"]["wordpress-password"] = "++++++++"
    live["data"]["wordpress-password"] = "++++++++++++"
    assert diffing.diff(NO_STATUS_RULE, config, live).paths == ("/data/wordpress-password",)


def test_unknown_fields_and_invalid_values_are_compared():
    """TestDiffResourceWithInvalidField and TestDiff_KnownTypeInvalidValue."""
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "invalid-cm"}, "invalidKey": "asdf"}
    live = {k: v for k, v in cm.items() if k != "invalidKey"}
    assert diffing.diff(NO_STATUS_RULE, cm, live).paths == ("/invalidKey",)
    bad = copy.deepcopy(DEPLOYMENT)
    bad["spec"]["revisionHistoryLimit"] = "badValue"
    assert not diffing.diff(NO_STATUS_RULE, bad, bad).modified
    other = copy.deepcopy(bad)
    other["spec"]["revisionHistoryLimit"] = "3"
    assert diffing.diff(NO_STATUS_RULE, bad, other).paths == ("/spec/revisionHistoryLimit",)


def test_namespace_of_a_custom_resource_is_ignored():
    """TestIgnoreNamespaceForClusterScopedResources and TestRemoveNamespaceAnnotation."""
    config = {"apiVersion": "foo.io/v1", "kind": "Foo", "metadata": {"name": "my-foo", "namespace": "kube-system"},
              "spec": {"foo": "bar"}}  # fmt: skip
    live = {
        "apiVersion": "foo.io/v1",
        "kind": "Foo",
        "spec": {"foo": "bar"},
        "metadata": {"creationTimestamp": "2018-07-17 09:17:05 UTC", "name": "my-foo", "resourceVersion": "1"},
    }
    assert not diffing.diff(NO_STATUS_RULE, config, live).modified
    obj = diffing._drop_namespace_annotation({"metadata": {"name": "t", "namespace": "d", "annotations": {}}})
    assert obj == {"metadata": {"name": "t"}}
    kept = diffing._drop_namespace_annotation({"metadata": {"namespace": "d", "annotations": "wrong value"}})
    assert kept == {"metadata": {"annotations": "wrong value"}}


def test_endpoints_and_rollouts_are_refused():
    endpoints = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "e"}}
    with pytest.raises(DiffError, match="normalizeEndpoint"):
        diffing.diff(NO_STATUS_RULE, endpoints, endpoints)
    rollout = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r"}}
    with pytest.raises(DiffError, match=r"knowntypes_normalizer\.go"):
        diffing.diff(NO_STATUS_RULE, rollout, rollout)


def test_a_number_a_built_in_kind_stores_as_a_string_is_refused_and_a_custom_resources_is_drift():
    dep = copy.deepcopy(DEPLOYMENT)
    dep["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": 1}}
    live = copy.deepcopy(dep)
    live["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    with pytest.raises(DiffError, match="write it as a string"):
        diffing.diff(NO_STATUS_RULE, dep, live)
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "j"},
           "spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}}  # fmt: skip
    stored = copy.deepcopy(job)
    stored["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = "1"
    got = diffing.diff(NO_STATUS_RULE, job, stored)
    assert got.paths == ("/spec/trainer/resourcesPerNode/limits/nvidia.com~1gpu",)


def test_atomic_list_defaults_of_a_custom_resource_show_as_drift_under_server_side_apply():
    """An atomic list (no x-kubernetes-list-type) is replaced whole by the structured merge: a field
    kube-apiserver defaulted inside its items is drift (why base/monitoring writes `action: replace`)."""
    desired = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "m"},
        "spec": {"podMetricsEndpoints": [{"port": "metrics", "relabelings": [{"targetLabel": "c"}]}]},
    }
    live = copy.deepcopy(desired)
    live["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "replace"
    live["metadata"]["managedFields"] = [{"manager": "argocd-controller", "operation": "Apply",
                                          "apiVersion": "monitoring.coreos.com/v1", "fieldsType": "FieldsV1",
                                          "fieldsV1": {"f:spec": {"f:podMetricsEndpoints": {}}}}]  # fmt: skip
    got = diffing.diff(SSA, desired, live)
    assert got.paths == ("/spec/podMetricsEndpoints/0/relabelings/0/action",)
    desired["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "replace"
    assert not diffing.diff(SSA, desired, live).modified


def test_server_side_diff_and_managed_fields_managers_are_refused():
    with pytest.raises(DiffError, match="ServerSideDiff=true"):
        Settings.of(app(annotations={diffing.COMPARE_OPTIONS_ANNOTATION: "ServerSideDiff=true"}))
    with pytest.raises(DiffError, match="managedFieldsManagers is not emulated"):
        Settings.of(app([{"kind": "Deployment", "managedFieldsManagers": ["kube-controller-manager"]}]))


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"resource.customizations.bogus.apps_Deployment": "x"}, "resource customization type bogus not supported"),
        ({"resource.customizations.ignoreDifferences.a_b_c": "{}"}, "group kind should be in format"),
        (
            {"resource.customizations.knownTypeFields.apps_Deployment": "- field: spec\n  type: core/v1/PodSpec"},
            "knownTypeFields",
        ),
        ({"resource.customizations.ignoreDifferences.all": "managedFieldsManagers: [x]"}, "managedFieldsManagers"),
        ({"resource.compareoptions": "[unclosed"}, "not YAML"),
    ],
)
def test_argocd_cm_settings_that_are_refused(data, said):
    with pytest.raises(DiffError, match=said):
        Settings.of(app(), data)


def test_ignore_resource_updates_and_health_keys_do_not_change_a_diff():
    data = {
        "resource.customizations.health.apps_Deployment": "return {}",
        "resource.customizations.ignoreResourceUpdates.apps_Deployment": "jsonPointers: [/spec/replicas]",
    }
    changed = copy.deepcopy(DEPLOYMENT)
    changed["spec"]["replicas"] = 5
    assert diffing.diff(Settings.of(app(), data), changed, DEPLOYMENT).paths == ("/spec/replicas",)


def test_rules_match_group_and_kind_by_glob_and_name_and_namespace_exactly():
    rule = Rule(kind="*Webhook*", group="admission*", name="x", namespace="")
    assert rule.matches("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "x", "")
    assert not rule.matches("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "y", "")
    assert Rule(kind="Secret").matches("", "Secret", "any", "ns")
    assert not Rule(kind="Secret", namespace="a").matches("", "Secret", "any", "b")
    assert not Rule(kind="[").matches("", "[", "", "")  # a glob gobwas/glob does not compile matches nothing
    assert diffing.glob_problems(Rule(kind="["))


def test_the_repositorys_ignore_rules_hide_what_the_controllers_write():
    """The rules of base/kueue (webhook CA, certificate Secret) and base/apps/jobs.yaml (what Kueue
    and Trainer write into a TrainJob), on what the controllers write."""
    kueue = Settings.of(app(
        [{"group": "admissionregistration.k8s.io", "kind": "MutatingWebhookConfiguration",
          "name": "kueue-mutating-webhook-configuration", "jqPathExpressions": [".webhooks[]?.clientConfig.caBundle"]},
         {"group": "", "kind": "Secret", "name": "kueue-webhook-server-cert", "namespace": "kueue-system",
          "jsonPointers": ["/data"]}],
        ["CreateNamespace=true", "ServerSideApply=true", "RespectIgnoreDifferences=true"]))  # fmt: skip
    hooks = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "kueue-mutating-webhook-configuration"},
        "webhooks": [{"name": "m.kb.io", "clientConfig": {"caBundle": "Cg==", "service": {"name": "s"}}}],
    }
    live = copy.deepcopy(hooks)
    live["webhooks"][0]["clientConfig"]["caBundle"] = "LS0tLS1CRUdJTi0tLS0t"
    assert not diffing.diff(kueue, hooks, live).modified
    live["webhooks"][0]["clientConfig"]["service"]["name"] = "other"  # outside the rule: drift
    assert diffing.diff(kueue, hooks, live).paths == ("/webhooks/0/clientConfig/service/name",)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kueue-webhook-server-cert",
              "namespace": "kueue-system"}, "data": {}}  # fmt: skip
    assert not diffing.diff(kueue, secret, {**secret, "data": {"tls.crt": "eA=="}}).modified
    jobs = Settings.of(app(
        [{"group": "trainer.kubeflow.org", "kind": "TrainJob", "jsonPointers": ["/spec/suspend"],
          "jqPathExpressions": ['.spec.runtimePatches[]? | select(.manager == "kueue.x-k8s.io/manager")',
                                ".spec.runtimePatches[]?.time"]}],
        ["RespectIgnoreDifferences=true", "ApplyOutOfSyncOnly=true"]))  # fmt: skip
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"runtimeRef": {"name": "r"}, "runtimePatches": [{"manager": "example.com/mine"}]}}  # fmt: skip
    written = copy.deepcopy(job)
    written["spec"]["suspend"] = True
    written["spec"]["runtimePatches"] = [
        {"manager": "example.com/mine", "time": "2026-01-01T00:00:00Z"},
        {"manager": "kueue.x-k8s.io/manager", "time": "2026-01-01T00:00:01Z"},
    ]
    written["metadata"]["annotations"] = {diffing.LAST_APPLIED: json.dumps(job)}
    assert not diffing.diff(jobs, job, written).modified
    written["spec"]["runtimeRef"]["name"] = "other"
    assert diffing.diff(jobs, job, written).paths == ("/spec/runtimeRef/name",)


# --- JSON pointers: evanphx/json-patch v5.9.11 remove -------------------------------------------------

DOC = {"a": {"b": [1, 2, 3], "c/d": 1, "e~f": 2, "": 3, "n": None, "s": "x"}, "top": 1}


@pytest.mark.parametrize(
    ("pointer", "removed"),
    [
        ("/a/b/0", ("a", "b", 0)),
        ("/a/b/-1", ("a", "b", 2)),  # SupportNegativeIndices
        ("/a/b/+1", ("a", "b", 1)),  # strconv.Atoi takes a sign
        ("/a/b/01", ("a", "b", 1)),  # and leading zeros
        ("/a/c~1d", ("a", "c/d")),
        ("/a/e~0f", ("a", "e~f")),
        ("/a/", ("a", "")),
        ("/a/n", ("a", "n")),
        ("x/top", ("top",)),  # no leading '/': the first segment is dropped
    ],
)
def test_pointers_remove_what_evanphx_removes(pointer, removed):
    got, error = diffing.remove_pointer(DOC, pointer)
    assert error is None
    expect = copy.deepcopy(DOC)
    node = expect
    for step in removed[:-1]:
        node = node[step]
    del node[removed[-1]]
    assert got == expect and DOC["a"]["b"] == [1, 2, 3]


@pytest.mark.parametrize(
    "pointer",
    ["", "top", "/", "/missing", "/a/b/3", "/a/b/-4", "/a/b/x", "/a/b/-", "/a/n/x", "/a/s/0", "/a/b/0/x", "/top/x"],
)
def test_pointers_that_name_nothing_are_skipped(pointer):
    got, error = diffing.remove_pointer(DOC, pointer)
    assert got is DOC and error


@pytest.mark.parametrize(
    ("pointer", "said"),
    [
        ("", "the empty pointer"),
        ("spec/replicas", "Argo CD removes /replicas"),
        ("spec", "finds no path"),
        ("/a~2b", "'~' must be written '~0'"),
        ("/a~", "'~' must be written '~0'"),
    ],
)
def test_pointer_problems_say_what_argo_cd_does(pointer, said):
    assert any(said in p for p in diffing.pointer_problems(pointer))


@pytest.mark.parametrize("pointer", ["/spec/replicas", "/data", "/a~0b/c~1d", "/webhooks/0/clientConfig/caBundle"])
def test_valid_pointers_have_no_problems(pointer):
    assert diffing.pointer_problems(pointer) == []


# --- jq: what gojq and jq do alike ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        ".webhooks[]?.clientConfig.caBundle",
        '.spec.runtimePatches[]? | select(.manager == "kueue.x-k8s.io/manager")',
        ".spec.runtimePatches[]?.time",
        '.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]',
        '.spec.template.spec.containers[] | select(.name | startswith("istio"))',
        '.data | to_entries[] | select(.key | endswith(".crt")) | .key as $k | $k',
        "if .a then .b else .c end",
        ".items[1:3]",
        '{a: .b, "c": 1} | .a',
        "..|.caBundle?",
    ],
)
def test_jq_expressions_both_run_alike_pass(expression):
    assert diffing.jq_problems(expression) == []


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ('.a | test("x")', "regular expressions"),
        ("keys_unsorted", "gojq has no such function"),
        ("foo", "gojq has no such function"),
        ('"x\\(.a)"', "string interpolation"),
        (".a # a comment", "a comment"),
        ("@base64", "format strings"),
        ("123456789012345678", "big integers"),
        ("$ENV.HOME", "environment"),
        (".a.[0]", "'.[' after a path"),
        ("reduce .[] as $x (0; .)", "reduce"),
        ("def f: .; f", "function definitions"),
        (".a % 2", "remainder"),
        (".a ?// .b", "?//"),
        ("try .a catch .", "catch"),
        (".a | tojson", "tojson/0"),
        ("input", "input iterator"),
        ("", "empty"),
        ("(((", "unbalanced"),
        (".a) | (.b", ""),  # closes del( itself: valid jq, nothing refused but what it says
    ],
)
def test_jq_expressions_that_differ_or_fail_are_refused(expression, said):
    problems = diffing.jq_problems(expression)
    if said:
        assert any(said in p for p in problems), problems
    else:
        assert problems == []


def test_jq_numbers_are_doubles_as_gojq_reads_go_json():
    doc = {"big": 9007199254740993, "f": 2.0, "keep": 1}
    got, error = diffing.run_jq(".keep", doc)
    assert error is None and got == {"big": 9007199254740992, "f": 2}


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        (".a, .b | .c", None),  # del(.a, .b | .c): one deletion of two paths
        (".a) | empty | (.b", "JQ patch did not return any data"),  # closes del( and outputs nothing
        (".a) | ., (.", "JQ patch returned multiple objects"),  # and outputs twice
    ],
)
def test_jq_needs_exactly_one_output(expression, error):
    """diff_normalizer.go jqNormalizerPatch.Apply."""
    assert diffing.jq_problems(expression) == []
    got, said = diffing.run_jq(expression, {"a": {"c": 1}, "b": {"c": 2}})
    assert said == error
    if error is None:
        assert got == {"a": {}, "b": {}}


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
    assert diffing.sync_option_problem(option) is None


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("ServerSideApply=True", "write 'ServerSideApply=true'"),
        (" CreateNamespace=true", "write 'CreateNamespace=true'"),
        ("Force=true", "read only in an object's annotation"),
        ("Prune=true", "Prune only as Prune=confirm, Prune=false"),
        ("RespectIgnoreDifference=true", "unknown sync option"),
        (7, "must be a string"),
    ],
)
def test_unknown_application_sync_options_are_named(option, said):
    assert said in (diffing.sync_option_problem(option) or "")


def test_resource_sync_options():
    assert diffing.sync_option_problem("Prune=false", resource=True) is None
    assert diffing.sync_option_problem("Force=true", resource=True) is None
    assert "read only in an Application" in (diffing.sync_option_problem("CreateNamespace=true", resource=True) or "")
    assert diffing.annotation_csv(" Prune=false, Delete=false ,Prune=false") == ["Prune=false", "Delete=false"]


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"ignoreDifferences": {"kind": "x"}}, "must be a list"),
        ({"ignoreDifferences": ["x"]}, "must be a mapping"),
        ({"ignoreDifferences": [{"kind": 1}]}, "kind must be a string"),
        ({"ignoreDifferences": [{"kind": "x", "jsonPointers": "/a"}]}, "jsonPointers must be a list of strings"),
        ({"ignoreDifferences": [{"kind": "x", "jsonPointer": ["/a"]}]}, "unknown field 'jsonPointer'"),
        ({"syncPolicy": {"syncOptions": "ServerSideApply=true"}}, "syncOptions must be a list of strings"),
        ({"syncPolicy": []}, "must be a mapping"),
    ],
)
def test_application_shapes_are_refused_by_name(spec, said):
    with pytest.raises(DiffError, match=said):
        Settings.of({"metadata": {"name": "a"}, "spec": spec})


# --- hostile input -------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=12),
                         st.floats(allow_nan=False, allow_infinity=False))  # fmt: skip
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=30,
)


@given(st.text(max_size=60))
@settings(max_examples=300, deadline=None)
def test_any_pointer_string_is_answered_without_a_traceback(pointer):
    assert isinstance(diffing.pointer_problems(pointer), list)
    got, error = diffing.remove_pointer(DOC, pointer)
    assert (got is DOC) == (error is not None)
    assert DOC["a"]["b"] == [1, 2, 3]


@given(st.lists(st.text(max_size=6), min_size=1, max_size=4), JSON)
@settings(max_examples=200, deadline=None)
def test_an_escaped_pointer_removes_exactly_its_key(keys, value):
    doc: dict = {}
    node = doc
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    pointer = "".join("/" + diffing.escape(k) for k in keys)
    assert diffing.pointer_problems(pointer) == []
    got, error = diffing.remove_pointer(doc, pointer)
    assert error is None
    node = got
    for k in keys[:-1]:
        node = node[k]
    assert keys[-1] not in node


JQ_ALPHABET = st.sampled_from([*'.[]|?,()"\\ {}:;$@#%+-*/=<>!abcdefgxyz019_', "select(", "del(", "..", " as $x | "])


@given(st.lists(JQ_ALPHABET, max_size=30).map("".join) | st.text(max_size=40))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_jq_string_is_answered_and_what_passes_compiles(expression):
    problems = diffing.jq_problems(expression)
    assert isinstance(problems, list)
    if not problems:
        import jq

        jq.compile(f"del({expression})")


def test_long_and_deep_jq_is_refused_quickly():
    assert "longer than" in diffing.jq_problems("." * 10000)[0]
    assert "nested deeper" in diffing.jq_problems("(" * 500 + ".a" + ")" * 500)[0]


@given(JSON)
@settings(max_examples=200, deadline=None)
def test_an_object_compared_with_itself_has_no_drift(spec):
    for obj in (
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": spec},
        {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": spec},
    ):
        for s in (NO_STATUS_RULE, SSA):
            assert diffing.diff(s, obj, copy.deepcopy(obj)).paths == ()


@pytest.mark.parametrize(
    "bad",
    [
        "a string",
        ["a", "list"],
        {"kind": "X"},
        {"apiVersion": "v1", "kind": "X", "metadata": "not a mapping"},
        {"apiVersion": "v1", "kind": "X", 1: "a key that is not a string"},
        {"apiVersion": "v1", "kind": "X", "spec": float("nan")},
        {"apiVersion": "v1", "kind": "X", "spec": b"bytes"},
    ],
)
def test_objects_of_the_wrong_shape_are_refused(bad):
    with pytest.raises(DiffError):
        diffing.diff(NO_STATUS_RULE, bad, {"apiVersion": "v1", "kind": "X"})


def test_deep_nesting_is_refused_not_a_traceback():
    deep: object = "x"
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(DiffError, match="nested deeper"):
        diffing.diff(NO_STATUS_RULE, {"apiVersion": "v1", "kind": "X", "spec": deep}, {"apiVersion": "v1", "kind": "X"})
    live = {"apiVersion": "v1", "kind": "X", "metadata": {"annotations": {diffing.LAST_APPLIED: "[" * 100000}}}
    assert diffing.diff(NO_STATUS_RULE, {"apiVersion": "v1", "kind": "X"}, live).how == "two-way"
