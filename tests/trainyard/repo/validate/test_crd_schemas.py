"""Custom resources are checked against the structural schema of the CRD that serves them, as
kube-apiserver checks them when Argo CD applies them (strict field validation): a misspelt or
misplaced field fails review, not the sync. Argo CD's own kinds included, and the Applications an
ApplicationSet makes."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.model import schema

SMOKE = "overlays/dev/jobs/smoke-ddp/job.yaml"


def test_the_repository_passes_its_crd_schemas(report):
    assert not [p for p in report.errors() if "schema of CRD" in p.message]


@pytest.mark.parametrize(
    ("rel", "old", "new", "expect"),
    [
        # an Application's sync policy, misspelt (Argo CD's CRD, argo-cd@v3.6.2:manifests/crds)
        ("base/apps/jobs.yaml", "selfHeal: false", "selfheal: false", "unknown field 'selfheal'"),
        # a field at the wrong level of an AppProject
        ("base/apps/projects.yaml", "spec:\n", "spec:\n  sourceRepo: [x]\n", "unknown field 'sourceRepo'"),
        # a TrainJob's field of the wrong type (Trainer's CRD)
        (SMOKE, "numNodes: 2", "numNodes: two", "is not of type 'integer'"),
    ],
    ids=["application-template", "appproject", "trainjob-type"],
)
def test_a_custom_resource_the_crd_refuses_is_refused(repo_copy, rel, old, new, expect):
    edit(repo_copy, rel, old, new)
    errors = [e for e in errors_of(validate.validate(repo_copy, ["dev"])) if "schema of CRD" in e]
    assert any(expect in e for e in errors), errors


def test_structural_unknown_fields_follow_pruning():
    """What kube-apiserver's pruning keeps, the check accepts; what it drops, the check refuses
    (apiextensions-apiserver pruning/algorithm.go)."""
    crd = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "map": {"type": "object", "additionalProperties": {"type": "string"}},
                    "port": {"x-kubernetes-int-or-string": True},
                    "maybe": {"type": "string", "nullable": True},
                    "name": {"type": "string", "pattern": "^(?i)(abort|warn)?$"},
                    "embedded": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {"spec": {"type": "object"}},
                    },
                },
            }
        },
    }
    ok = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "a", "labels": {"b": "c"}},
        "spec": {
            "free": {"anything": [1, {"deep": True}]},
            "map": {"k": "v"},
            "port": "http",
            "maybe": None,
            "name": "WARN",
            "embedded": {"apiVersion": "v1", "kind": "Y", "metadata": {"name": "y"}, "spec": {}},
        },
    }
    assert schema.validate_custom(ok, crd) == []
    assert schema.validate_custom({**ok, "spec": {**ok["spec"], "port": 80}}, crd) == []
    bad = {
        **ok,
        "extra": 1,
        "spec": {**ok["spec"], "map": {"k": 1}, "name": "fail", "embedded": {"spec": {"x": 1}}},
    }
    messages = schema.validate_custom(bad, crd)
    assert any("unknown field 'extra'" in m for m in messages), messages
    assert any(m.startswith("spec.map.k:") for m in messages), messages
    assert any(m.startswith("spec.name:") and "does not match" in m for m in messages), messages
    assert any(m.startswith("spec.embedded.spec:") and "unknown field 'x'" in m for m in messages), messages


@pytest.mark.parametrize("value", ["x" * 100_000, "\udcff", "\x00", "é" * 1000, "[" * 5000])
def test_hostile_strings_get_messages_not_tracebacks(value):
    crd = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"}, "n": {"type": "integer"}}}}}  # fmt: skip
    messages = schema.validate_custom({"spec": {"name": value, "n": value, value: value}}, crd)
    assert any(m.startswith("spec.n:") for m in messages)
    assert all(len(m) < 2000 for m in messages)
