"""A null where a map or an object goes: accepted wherever kube-apiserver accepts it. A built-in
object decodes a JSON null as the field left out; a custom resource loses a null in a field its
schema does not make nullable before it is validated (PruneNonNullableNullsWithoutDefaults)."""

from __future__ import annotations

import copy

from tests.trainyard.repo.conftest import errors_of
from trainyard.repo import validate
from trainyard.repo.model import schema

SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "plain": {"type": "object"},
                "nullable": {"type": "object", "nullable": True},
                "defaulted": {"type": "string", "default": "x"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}


def test_prune_nulls_follows_kube_apiservers_rule():
    doc = {
        "spec": {
            "plain": None,  # pruned
            "nullable": None,  # kept: the schema allows null
            "defaulted": None,  # kept here: defaulting fills it in
            "unknown": None,  # kept: pruning of unknown fields is another step (strict validation names it)
            "items": [{"a": None}, None],  # inside items too; a null item is not a field
            "map": {"k": None},  # additionalProperties: the same rule
        }
    }
    pruned = copy.deepcopy(doc)
    schema.prune_nulls(pruned, SCHEMA)
    assert pruned == {"spec": {"nullable": None, "defaulted": None, "unknown": None, "items": [{}, None], "map": {}}}


def test_a_custom_resource_with_null_maps_passes_its_crd_schema():
    assert schema.validate_custom({"spec": {"plain": None, "map": None}}, SCHEMA) == []
    assert schema.validate_custom({"spec": {"plain": "text"}}, SCHEMA)  # a wrong type is still wrong


def test_a_built_in_object_with_null_fields_passes():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": None, "annotations": None},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36.1", "env": None}], "volumes": None},
    }
    assert schema.validate(pod) == []


JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: nulls
  annotations:
  labels:
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        metadata:
          annotations:
        spec:
          containers:
            - name: pytorch
              image: registry.example.com/ml/trainer:0.1.0
              env:
              ports: [{name: metrics, containerPort: 9404, protocol: TCP}]
              resources:
                limits: {cpu: "1", memory: 4Gi}
"""


def test_validate_accepts_null_labels_and_annotations_in_a_job_folder(repo_copy):
    folder = repo_copy.root / "overlays/dev/jobs/nulls"
    folder.mkdir()
    (folder / "job.yaml").write_text(JOB)
    (folder / "kustomization.yaml").write_text("namespace: ml-training\nresources:\n  - job.yaml\n")
    report = validate.validate(repo_copy, ["dev"])
    assert [e for e in errors_of(report) if "jobs/nulls" in e] == []
    assert any(jp.job.name == "nulls" for jp in report.previews["dev"]), "the job was not previewed"
