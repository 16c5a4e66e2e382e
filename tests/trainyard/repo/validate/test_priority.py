"""Priority classes: the cluster's facts list the classes jobs may use; validate refuses any other
(naming the file and the field), the generated admission policy refuses it with the same CEL
kube-apiserver runs, and a listed class (or none) passes."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import edit, errors_of
from trainyard.repo import validate
from trainyard.repo.generate import priority
from trainyard.repo.model import declared
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream import bindings

MNIST = "overlays/dev/jobs/mnist-ddp"
SMOKE = "overlays/dev/jobs/smoke-ddp"
FACTS = "clusters/dev/cluster.yaml"
WORKER = "/spec/pytorchReplicaSpecs/Worker/template/spec"
LABEL_PATH = "/metadata/labels/kueue.x-k8s.io~1priority-class"  # beside the queue-name label of the bases


def _patch(repo, path: str, value: str) -> None:
    job = repo.root / MNIST / "job.yaml"
    job.write_text(job.read_text() + f"- op: add\n  path: {path}\n  value: {value}\n")


def _facts(repo, classes: str, workload: str = "[]") -> None:
    edit(repo, FACTS, "jobPriorityClasses: []", f"jobPriorityClasses: {classes}")
    edit(repo, FACTS, "jobWorkloadPriorityClasses: []", f"jobWorkloadPriorityClasses: {workload}")


@pytest.mark.parametrize("name", ["system-node-critical", "system-cluster-critical", "batch-high"])
def test_a_pod_template_class_outside_the_list_is_refused(repo_copy, name):
    _patch(repo_copy, f"{WORKER}/priorityClassName", name)
    errors = errors_of(validate.validate(repo_copy, ["dev"]), "dev")
    field = f"spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName: {name!r} is not a priority class"
    assert any(MNIST in e and field in e and "spec.jobPriorityClasses in clusters/dev/cluster.yaml" in e
               for e in errors), errors  # fmt: skip
    # the generated policy, in CEL, refuses the pod the operator would make
    assert any(f"trainyard-job-priority rejects it: Pod mnist-ddp-worker-0: spec.priorityClassName {name}" in e
               for e in errors), errors  # fmt: skip


def test_a_kueue_priority_label_outside_the_list_is_refused(repo_copy):
    job = repo_copy.root / SMOKE / "job.yaml"
    job.write_text(job.read_text() + f"- op: add\n  path: {LABEL_PATH}\n  value: top\n")
    errors = errors_of(validate.validate(repo_copy, ["dev"]), "dev")
    assert any(SMOKE in e and "metadata.labels[kueue.x-k8s.io/priority-class]: 'top'" in e for e in errors), errors
    assert any("trainyard-job-priority rejects it: TrainJob smoke-ddp: label kueue.x-k8s.io/priority-class top" in e
               for e in errors), errors  # fmt: skip


def test_a_listed_class_passes(repo_copy):
    """Positive control: the classes the facts list, once generated, pass validate and the policy."""
    from trainyard.repo.generate import files

    _facts(repo_copy, "[batch-high]", "[team-high]")
    for g in files.expected(repo_copy):
        if g.path.endswith(priority.FILE):
            (repo_copy.root / g.path).write_text(g.text)
    _patch(repo_copy, f"{WORKER}/priorityClassName", "batch-high")
    _patch(repo_copy, LABEL_PATH, "team-high")
    assert errors_of(validate.validate(repo_copy, ["dev"]), "dev") == []


def test_a_stale_policy_is_reported(repo_copy):
    _facts(repo_copy, "[batch-high]")
    errors = errors_of(validate.validate(repo_copy, ["dev"]))
    assert any("overlays/dev/platform/namespaces/priority-policy.yaml" in e and "differs" in e for e in errors), errors


@pytest.mark.parametrize("name", ["system-node-critical", "system-anything"])
def test_the_facts_cannot_list_a_system_class(repo_copy, name):
    _facts(repo_copy, f"[{name}]")
    with pytest.raises(declared.DeclarationError) as refused:
        declared.load(repo_copy, "dev")
    assert "jobPriorityClasses" in str(refused.value) and "system priority" in str(refused.value)


def _verdicts(allowed: list[str], workload: list[str], doc: dict) -> list[str]:
    facts = declared.ClusterFacts.model_validate(
        {
            "apiVersion": declared.API_VERSION,
            "kind": declared.KIND,
            "metadata": {"name": "c"},
            "spec": {
                "kubernetesVersion": "1.33",
                "nodePools": [{"name": "p", "count": 1, "allocatable": {"cpu": "1", "memory": "1Gi"}}],
                "jobPriorityClasses": allowed,
                "jobWorkloadPriorityClasses": workload,
            },
        }
    )
    objs = [Resource(doc=priority.policy(facts)), Resource(doc=priority.binding())]
    labels = {"ml-training": {"kubernetes.io/metadata.name": "ml-training"}}
    return bindings.evaluate(bindings.collect(objs), doc, labels)


def _pod(**spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml-training"},
            "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}  # fmt: skip


@pytest.mark.parametrize(
    ("allowed", "spec", "refused"),
    [
        ([], {}, False),
        ([], {"priorityClassName": ""}, False),
        ([], {"priorityClassName": "system-node-critical"}, True),
        (["batch-high"], {"priorityClassName": "batch-high"}, False),
        (["batch-high", "batch-low"], {"priorityClassName": "batch-low"}, False),
        (["batch-high"], {"priorityClassName": "system-cluster-critical"}, True),
        (["batch-high"], {"priorityClassName": "Batch-High"}, True),
        ([], {"priorityClassName": None}, False),  # kube-apiserver decodes a null as the field left out
    ],
)
def test_the_policys_cel_on_pods(allowed, spec, refused):
    verdicts = _verdicts(allowed, [], _pod(**spec))
    assert bool(verdicts) == refused, verdicts
    if refused:
        listed = ", ".join(sorted(allowed)) or "none"
        assert f"(jobPriorityClasses in its cluster.yaml: {listed})" in verdicts[0]


def test_the_policy_binds_only_the_job_namespace():
    pod = _pod(priorityClassName="system-node-critical")
    pod["metadata"]["namespace"] = "kube-system"
    assert _verdicts([], [], pod) == []


@pytest.mark.parametrize(
    ("labels", "refused"),
    [
        ("absent", False),
        ({priority.KUEUE_LABEL: "team-high"}, False),
        ({priority.KUEUE_LABEL: "top"}, True),
        ({priority.KUEUE_LABEL: ""}, False),
        ({priority.KUEUE_LABEL: None}, False),  # nulls: no label, as kube-apiserver decodes them
        (None, False),
    ],
)
def test_the_policys_cel_on_a_jobs_kueue_label(labels, refused):
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "j", "namespace": "ml-training"}, "spec": {}}  # fmt: skip
    if labels != "absent":
        job["metadata"]["labels"] = labels
    assert bool(_verdicts([], ["team-high"], job)) == refused
