"""Which priority a job may run at: a ValidatingAdmissionPolicy per cluster, generated from the
classes its facts list (``spec.jobPriorityClasses``, ``spec.jobWorkloadPriorityClasses`` in
clusters/<cluster>/cluster.yaml).

Why: any namespace may name any PriorityClass, ``system-node-critical`` and
``system-cluster-critical`` included (kubernetes/kubernetes@v1.36.0:plugin/pkg/admission/priority/
admission.go admitPod resolves the name and checks only that the class exists), and a pod at that
priority preempts platform pods and other tenants' jobs. Kueue's label
``kueue.x-k8s.io/priority-class`` (kubernetes-sigs/kueue@v0.19.2:pkg/controller/constants
WorkloadPriorityClassLabel) gives a job's Workload a WorkloadPriorityClass, with which Kueue
preempts other Workloads.

The policy refuses, in the job namespaces:

- a pod created with a ``spec.priorityClassName`` the facts do not list. The door is the pod:
  whatever makes it (JobSet from a TrainJob, the v1 operator from a PyTorchJob) copies the
  template's class onto it. Priority admission, a mutating plugin, runs first and writes the
  cluster's globalDefault class into a pod that names none (admitPod: ``pod.Spec.PriorityClassName =
  pcName``): a cluster with such a class lists it too. The class is immutable after creation
  (API validation), so CREATE is enough;
- any object created or updated with a ``kueue.x-k8s.io/priority-class`` label naming a class the
  facts do not list: the job kinds a job folder may create, and their pods.

``trainyard validate`` evaluates the same policy on every pod it previews and every object of a
job folder, and refuses the field itself, naming the file (:mod:`trainyard.repo.validate.priority`).
"""

from __future__ import annotations

import json

import yaml

from trainyard.repo.generate.pod_security import _Dumper
from trainyard.repo.model import declared
from trainyard.repo.model.rendered_facts import TRAINING_NAMESPACE

NAME = "trainyard-job-priority"
FILE = "priority-policy.yaml"
FOLDER = "namespaces"  # overlays/<cluster>/platform/namespaces, with the namespace it binds
KUEUE_LABEL = "kueue.x-k8s.io/priority-class"
# The kinds a job folder may create that Kueue reads the label from (security.JOB_FOLDER_KINDS' jobs)
JOB_RESOURCES = (("trainer.kubeflow.org", "trainjobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "tfjobs"),
                 ("kubeflow.org", "mpijobs"))  # fmt: skip


def _cel_list(names: list[str]) -> str:
    return json.dumps(sorted(names)).replace('"', "'")


def policy(facts: declared.ClusterFacts) -> dict:
    classes = _cel_list(facts.spec.job_priority_classes)
    workload = _cel_list(facts.spec.job_workload_priority_classes)
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        *(
            {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": [res]}
            for group, res in JOB_RESOURCES
        ),
    ]
    what = "object.kind + ' ' + (has(object.metadata.name) ? object.metadata.name : '<generated>')"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "trainyard"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            "variables": [
                {"name": "allowed", "expression": classes},
                {"name": "allowedWorkload", "expression": workload},
                {
                    "name": "label",
                    # type() guards: kube-apiserver drops a null map or value before admission, and so
                    # does this (a null is no label); validate evaluates objects as written
                    "expression": f"has(object.metadata.labels) && type(object.metadata.labels) == map && "
                    f"'{KUEUE_LABEL}' in object.metadata.labels && "
                    f"type(object.metadata.labels['{KUEUE_LABEL}']) == string "
                    f"? object.metadata.labels['{KUEUE_LABEL}'] : ''",
                },
            ],
            "validations": [
                {
                    "expression": "object.kind != 'Pod' || !has(object.spec.priorityClassName) || "
                    "type(object.spec.priorityClassName) != string || object.spec.priorityClassName == '' || "
                    "object.spec.priorityClassName in variables.allowed",
                    "messageExpression": f"{what} + ': spec.priorityClassName ' + object.spec.priorityClassName + "
                    f"' is not a class jobs may use on this cluster (jobPriorityClasses in its cluster.yaml: ' + "
                    f"(size(variables.allowed) == 0 ? 'none' : variables.allowed.join(', ')) + ')'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.label == '' || variables.label in variables.allowedWorkload",
                    "messageExpression": f"{what} + ': label {KUEUE_LABEL} ' + variables.label + "
                    f"' is not a class jobs may use on this cluster (jobWorkloadPriorityClasses in its cluster.yaml: ' "
                    f"+ (size(variables.allowedWorkload) == 0 ? 'none' : variables.allowedWorkload.join(', ')) + ')'",
                    "reason": "Forbidden",
                },
            ],
        },
    }


def binding() -> dict:
    """Bound to the job namespace by name, as the pod security policy is (pod_security.binding)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "trainyard"}},
        "spec": {
            "policyName": NAME,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [TRAINING_NAMESPACE]}
                    ]
                }
            },
        },
    }


def render(facts: declared.ClusterFacts, source: str) -> str:
    head = (
        f"# Generated by `trainyard generate` from {source}; do not edit (trainyard validate fails when this\n"
        "# file differs from what the cluster's declared facts generate). The priority classes a job's pods and\n"
        "# Kueue workloads may name (trainyard/repo/generate/priority.py).\n"
    )
    return head + yaml.dump_all([policy(facts), binding()], Dumper=_Dumper, sort_keys=False, width=110)
