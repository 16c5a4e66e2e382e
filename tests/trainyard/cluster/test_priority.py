"""The job priority policy (trainyard/repo/generate/priority.py) in a real kube-apiserver: a job's
pod at a class the cluster's facts do not list (system-node-critical above all) is refused, the
same pod as the job makes it is admitted, and a job with a Kueue priority-class label outside the
list is refused. Every create is a dry run."""

from __future__ import annotations

import copy

import pytest

from tests.trainyard.cluster.test_admission import JOBS, _job_pods, _render, stored
from trainyard.cluster.client import ApiError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def kube(clusters):
    client = clusters.kube("dev")
    yield client
    client.close()


@pytest.mark.parametrize("priority", ["system-node-critical", "system-cluster-critical"])
def test_a_jobs_pod_at_a_system_priority_is_refused(kube, priority):
    pod = copy.deepcopy(_job_pods("dev")[0])
    stored(kube, pod, JOBS)  # positive control: the pod as the job makes it is admitted
    pod["spec"]["priorityClassName"] = priority
    with pytest.raises(ApiError) as refused:
        stored(kube, pod, JOBS)
    assert refused.value.code == 403  # the policy's reason: Forbidden
    assert "trainyard-job-priority" in refused.value.message
    assert f"spec.priorityClassName {priority} is not a class jobs may use" in refused.value.message


def test_a_job_with_a_kueue_priority_label_outside_the_list_is_refused(kube):
    job = next(r.doc for r in _render("dev").resources() if r.kind == "TrainJob" and r.namespace == JOBS)
    job = copy.deepcopy(job)
    job["metadata"]["name"] = "priority-dryrun"
    kube.create(job, dry_run=True)  # positive control
    job["metadata"].setdefault("labels", {})["kueue.x-k8s.io/priority-class"] = "top"
    with pytest.raises(ApiError) as refused:
        kube.create(job, dry_run=True)
    assert refused.value.code == 403
    assert "trainyard-job-priority" in refused.value.message
    assert "label kueue.x-k8s.io/priority-class top is not a class" in refused.value.message
