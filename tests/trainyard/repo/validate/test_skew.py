"""Known skews of the pinned releases: each refused with its upstream issue while the pin carries
it, and accepted once the pin reaches the version that fixes it (the rule reads the pin)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.generate import mutating_policy
from trainyard.repo.model import kustomize, releases

JOB = "overlays/dev/jobs/smoke-ddp/job.yaml"


def _pin(monkeypatch, key: str, version: str) -> None:
    monkeypatch.setitem(releases.BY_KEY, key, dataclasses.replace(releases.BY_KEY[key], version=version))


def _add_to_job(repo, path: str, value) -> None:
    file = repo.root / JOB
    ops = [*yaml.safe_load(file.read_text()), {"op": "add", "path": path, "value": value}]
    file.write_text(yaml.safe_dump(ops))


def _patch(pod_spec: dict, manager: str = "example.com/tuning") -> dict:
    return {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod_spec}}}}]}
            }
        },
    }


def _dev_errors(repo) -> list[str]:
    return errors_of(validate.validate(repo, ["dev"]))


def test_the_repository_carries_no_known_skew(report):
    refs = [i.ref for r in releases.RELEASES for i in r.issues if i.fixed_in]
    assert refs  # the rules below have issues to answer
    assert not [e for e in errors_of(report) if any(ref in e for ref in refs) or "#140419" in e]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("containers", [{"name": "node", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]),
        ("volumes", [{"name": "data", "emptyDir": {}}]),
        ("terminationGracePeriodSeconds", 120),
    ],
)
def test_a_runtime_patch_kueue_cannot_write_back_is_refused_until_kueue_0_20(repo_copy, monkeypatch, field, value):
    """kubeflow/trainer#3888: Kueue v0.19.2 cannot resume such a TrainJob."""
    _add_to_job(repo_copy, "/spec/runtimePatches", [_patch({field: value})])
    pod = "trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
    where = f"spec.runtimePatches[0].{pod}.{field}"
    errors = _dev_errors(repo_copy)
    assert any(where in e and "kubeflow/trainer#3888" in e and "stays suspended" in e for e in errors), errors
    _pin(monkeypatch, "kueue", releases.TRAINER_PATCH_WRITE_BACK.fixed_in)
    assert not any(where in e for e in _dev_errors(repo_copy))


def test_a_trainer_field_kueue_writes_back_differently_is_refused_until_kueue_0_19_3(repo_copy, monkeypatch):
    """kueue#14842: v0.19.2 writes spec.trainer back from Go types; Trainer holds it immutable."""
    edit(repo_copy, JOB, "        memory: 8Gi\n", "        memory: 8192Mi\n")
    _add_to_job(repo_copy, "/spec/trainer/env", [{"name": "EXTRA", "value": ""}])
    errors = _dev_errors(repo_copy)
    assert any(
        "spec.trainer.resourcesPerNode.limits[memory]: '8192Mi' comes back as '8Gi'; write '8Gi'" in e
        and "kubernetes-sigs/kueue#14842" in e
        for e in errors
    ), errors
    assert any("spec.trainer.env[0].value: an empty value comes back absent" in e for e in errors), errors
    _pin(monkeypatch, "kueue", releases.KUEUE_TRAINER_WRITE_BACK.fixed_in)
    assert not any("spec.trainer." in e for e in _dev_errors(repo_copy))


def test_kueues_own_runtime_patch_in_a_manifest_is_refused_until_kueue_0_19_4(repo_copy, monkeypatch):
    """kueue#15210: the webhook appends its entry again and kube-apiserver refuses the duplicate key."""
    _add_to_job(repo_copy, "/spec/runtimePatches", [_patch({}, manager="kueue.x-k8s.io/manager")])
    errors = _dev_errors(repo_copy)
    assert any(
        "spec.runtimePatches[0].manager: kueue.x-k8s.io/manager is Kueue's own entry" in e
        and "kubernetes-sigs/kueue#15210" in e
        for e in errors
    ), errors
    _pin(monkeypatch, "kueue", releases.KUEUE_MANAGER_ENTRY.fixed_in)
    assert not any("kueue.x-k8s.io/manager is Kueue's own entry" in e for e in _dev_errors(repo_copy))


def test_a_reinvoked_kueue_trainjob_webhook_is_refused(repo_copy, upstream_tools):
    """kueue#15210: the chart value mutatingWebhook.reinvocationPolicy, IfNeeded (set in the
    Application, kept beside the values the monitoring component merges in on dev)."""
    edit(
        repo_copy,
        "base/kueue/application.yaml",
        "      releaseName: kueue\n",
        "      releaseName: kueue\n"
        "      valuesObject:\n        mutatingWebhook:\n          reinvocationPolicy: IfNeeded\n",
    )
    errors = _dev_errors(repo_copy)
    assert any(
        "(mtrainjob.kb.io).reinvocationPolicy: IfNeeded" in e and "kubernetes-sigs/kueue#15210" in e for e in errors
    ), errors


def test_a_flavors_tolerations_over_a_trainjobs_are_refused_until_kueue_0_19_4(repo_copy, monkeypatch):
    """kueue#15161: the flavor's tolerations replace the TrainJob's in Kueue's runtime patch."""
    toleration = {"key": "example.com/spot", "operator": "Exists", "effect": "NoSchedule"}
    _add_to_job(repo_copy, "/spec/runtimePatches", [_patch({"tolerations": [toleration]})])
    assert not any("kueue#15161" in e for e in _dev_errors(repo_copy))  # no flavor has tolerations
    kustomize.clear_cache()  # the folder is built again, edited
    edit(
        repo_copy,
        "overlays/dev/platform/kueue/queues.yaml",
        "  topologyName: trainyard\n",
        "  topologyName: trainyard\n  tolerations:\n  - key: example.com/gpu\n    operator: Exists\n",
    )
    errors = _dev_errors(repo_copy)
    assert any(
        "tolerations from spec.runtimePatches[0]" in e and "lab-gpu" in e and "kubernetes-sigs/kueue#15161" in e
        for e in errors
    ), errors
    _pin(monkeypatch, "kueue", releases.KUEUE_FLAVOR_TOLERATIONS.fixed_in)
    assert not any("kueue#15161" in e for e in _dev_errors(repo_copy))


def test_an_object_initializer_in_a_jsonpatch_value_is_refused(repo_copy):
    """kubernetes#140419: kube-apiserver v1.36.0-v1.36.4 panics on it; prod-ib declares 1.36."""
    rel = f"{mutating_policy.FOLDER}/{mutating_policy.FILE}"
    docs = list(yaml.safe_load_all((repo_copy.root / rel).read_text()))
    docs[0]["spec"]["mutations"][0]["jsonPatch"]["expression"] = (
        "[JSONPatch{op: 'add', path: '/spec/hostAliases', value: [Object.spec.hostAliases{ip: '10.0.0.1'}]}]"
    )
    (repo_copy.root / rel).write_text(yaml.safe_dump_all(docs))
    errors = errors_of(validate.validate(repo_copy, ["prod-ib"]))
    assert any(
        "spec.mutations[0].jsonPatch.expression: Object.spec.hostAliases{...}" in e
        and "kubernetes/kubernetes#140419" in e
        for e in errors
    ), errors
