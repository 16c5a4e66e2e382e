"""``trainyard validate`` on what Argo CD reads by name: sync options, ignoreDifferences (JSON
pointers, jq paths, stale rules) and argocd-cm's keys (trainyard/repo/validate/argo.py
check_sync_options, trainyard/repo/upstream/argo_fields.py), and what it refuses by name instead of
emulating."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.model import kustomize

KUEUE = "base/kueue/application.yaml"
JOBS = "base/apps/jobs.yaml"


def _report(repo, cluster="dev"):
    kustomize.clear_cache()
    return validate.validate(repo, [cluster])


def test_the_repositorys_sync_options_and_ignore_rules_pass(report):
    said = [str(p) for p in report.problems if "sync option" in p.message or "ignoreDifferences" in p.message]
    assert said == []


def test_a_misspelt_sync_option_is_refused_by_name(repo_copy):
    edit(repo_copy, KUEUE, "      - ServerSideApply=true ", "      - ServerSideApply=True ")
    errors = errors_of(_report(repo_copy))
    assert any(
        "Application argocd/trainyard-kueue" in e
        and "spec.syncPolicy.syncOptions[1]: unknown sync option 'ServerSideApply=True'" in e
        and "write 'ServerSideApply=true'" in e
        for e in errors
    ), errors


def test_an_unknown_resource_sync_option_is_refused(repo_copy):
    edit(
        repo_copy,
        "base/argocd/kustomization.yaml",
        "sync-options: Prune=false,Delete=false",
        "sync-options: Prune=false,Delete=never",
    )
    errors = errors_of(_report(repo_copy))
    # (checked with the render: trainyard/repo/upstream/syncorder.py)
    assert any("argocd.argoproj.io/sync-options" in e and "'Delete=never'" in e for e in errors), errors


def test_a_pointer_without_its_slash_is_refused_saying_what_argo_cd_would_remove(repo_copy):
    edit(repo_copy, KUEUE, "        - /data\n", "        - data/tls.crt\n")
    errors = errors_of(_report(repo_copy))
    assert any(
        "spec.ignoreDifferences[2].jsonPointers[0] 'data/tls.crt'" in e and "Argo CD removes /tls.crt" in e
        for e in errors
    ), errors


def test_a_jq_expression_beyond_a_path_is_refused_by_name(repo_copy):
    edit(repo_copy, JOBS, 'select(.manager == "kueue.x-k8s.io/manager")', 'select(.manager | test("kueue"))')
    errors = errors_of(_report(repo_copy))
    assert any(
        "spec.ignoreDifferences[0].jqPathExpressions[0]" in e
        and "beyond the jq forms checked offline" in e
        and "cluster tier" in e
        for e in errors
    ), errors


def test_a_glob_in_an_ignore_rules_kind_is_refused_by_name(repo_copy):
    edit(repo_copy, KUEUE, "    - kind: Secret  #", "    - kind: Sec*  #")
    errors = errors_of(_report(repo_copy))
    assert any("spec.ignoreDifferences[2].kind 'Sec*': a glob pattern is not checked offline" in e for e in errors), (
        errors
    )


@pytest.mark.parametrize("key", ["group", "jqPathExpressions", "managedFieldsManagers"])
def test_an_empty_field_argo_cd_drops_on_write_is_refused(repo_copy, key):
    """Found by Argo CD itself: an ignoreDifferences entry with `group: ""` is written back without
    it whenever Argo CD updates the Application, so the root Application syncs it for ever."""
    empty = '""' if key == "group" else "[]"
    edit(repo_copy, KUEUE, "    - kind: Secret  #", f"    - {key}: {empty}\n      kind: Secret  #")
    errors = errors_of(_report(repo_copy))
    assert any(f"spec.ignoreDifferences[2].{key}: " in e and "leave it out" in e for e in errors), errors


def test_argocd_cm_diff_settings_are_refused_by_name(repo_copy):
    edit(
        repo_copy,
        "base/argocd/kustomization.yaml",
        "      - resource.customizations.health.kubeflow.org_TFJob=kubeflow-job-health.lua\n",
        "      - resource.customizations.health.kubeflow.org_TFJob=kubeflow-job-health.lua\n"
        "      - resource.customizations.ignoreDifferences.apps_Deployment=kubeflow-job-health.lua\n",
    )
    errors = errors_of(_report(repo_copy))
    assert any(
        "argocd-cm: resource.customizations.ignoreDifferences.apps_Deployment: ignoreDifferences overrides "
        "are not checked offline" in e
        for e in errors
    ), errors


def test_managed_fields_managers_are_refused(repo_copy):
    edit(repo_copy, KUEUE, "      jsonPointers:\n        - /data\n",
         "      jsonPointers:\n        - /data\n      managedFieldsManagers:\n        - kueue\n")  # fmt: skip
    errors = errors_of(_report(repo_copy))
    assert any("spec.ignoreDifferences[2].managedFieldsManagers: not checked offline" in e for e in errors), errors


def test_a_rule_that_matches_nothing_is_warned_as_stale(repo_copy):
    edit(repo_copy, KUEUE, "name: kueue-webhook-server-cert", "name: kueue-webhook-server-certs")
    warnings = [str(w) for w in _report(repo_copy).warnings()]
    assert any(
        "trainyard-kueue" in w
        and "spec.ignoreDifferences[2] (core/Secret/kueue-system/kueue-webhook-server-certs)"
        " matches no object that Application trainyard-kueue renders: a stale rule?"
        in w
        for w in warnings
    ), warnings


def test_an_ignore_rule_used_by_one_cluster_only_is_not_warned_of_when_all_are_checked(repo):
    """trainyard-webhook ignores the caBundle of the webhook configuration the clusters that run the
    webhook render (prod-ib runs admission by policy and renders none)."""
    alone = [str(w) for w in validate.validate(repo, ["prod-ib"]).warnings()]
    assert any("trainyard-webhook" in w and "a stale rule?" in w for w in alone), alone
