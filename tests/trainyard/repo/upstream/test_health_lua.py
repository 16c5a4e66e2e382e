"""The Lua health checks of argocd-cm, run as Argo CD runs them (trainyard.repo.upstream.health:
Lua 5.1 through lupa, with gopher-lua's reduced libraries)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainyard.repo.upstream.health import HEALTH_PREFIX, run_health

FIXTURES = Path(__file__).parent / "fixtures" / "argocd"


@pytest.fixture(scope="module")
def argocd_cm(report) -> dict[str, str]:
    app = report.renders["dev"].app("trainyard-argocd-config")
    cm = next(r for r in app.resources if r.kind == "ConfigMap")
    assert cm.name == "argocd-cm" and cm.namespace == "argocd"
    assert cm.annotations["argocd.argoproj.io/sync-options"] == "Prune=false,Delete=false"
    return cm.doc["data"]


def test_keys_for_every_job_kind_and_applications(argocd_cm):
    assert sorted(argocd_cm) == sorted(
        HEALTH_PREFIX + k
        for k in (
            "kubeflow.org_PyTorchJob",
            "kubeflow.org_TFJob",
            "kubeflow.org_MPIJob",
            "argoproj.io_Application",
            "trainer.kubeflow.org_TrainJob",
            "jobset.x-k8s.io_JobSet",
            "kueue.x-k8s.io_Workload",
        )
    )


def test_the_sandbox_has_no_string_library():
    with pytest.raises(Exception, match="string"):
        run_health("local hs = {}; hs.status = string.format('%d', 1); return hs", {})
    with pytest.raises(Exception):  # noqa: B017 - whatever Lua says, a string method must not work
        run_health("local hs = {}; hs.status = ('x'):upper(); return hs", {})


def _cases(name: str) -> list:
    return [pytest.param(c, id=c["case"]) for c in yaml.safe_load((FIXTURES / f"{name}.yaml").read_text())]


@pytest.mark.parametrize("case", _cases("trainjob"))
def test_trainjob_health(argocd_cm, case):
    health = run_health(argocd_cm[f"{HEALTH_PREFIX}trainer.kubeflow.org_TrainJob"], case["object"])
    assert health["status"] == case["expect"]["status"], health
    assert case["expect"]["message"] in health["message"], health


@pytest.mark.parametrize("case", _cases("jobset"))
def test_jobset_health(argocd_cm, case):
    health = run_health(argocd_cm[f"{HEALTH_PREFIX}jobset.x-k8s.io_JobSet"], case["object"])
    assert health["status"] == case["expect"]["status"], health
    assert case["expect"]["message"] in health["message"], health


@pytest.mark.parametrize("case", _cases("workload"))
def test_workload_health(argocd_cm, case):
    health = run_health(argocd_cm[f"{HEALTH_PREFIX}kueue.x-k8s.io_Workload"], case["object"])
    assert health["status"] == case["expect"]["status"], health
    assert case["expect"]["message"] in health["message"], health


def _job(*conditions: tuple[str, str, str]) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j"},
        "status": {
            "conditions": [{"type": t, "status": s, "reason": t, "message": m} for t, s, m in conditions],
        },
    }


CREATED = ("Created", "True", "PyTorchJob j is created.")
RUNNING = ("Running", "True", "PyTorchJob j is running.")
RUNNING_DONE = ("Running", "False", "PyTorchJob j is running.")
SUCCEEDED = ("Succeeded", "True", "PyTorchJob j is successfully completed.")
FAILED = ("Failed", "True", "PyTorchJob j is failed because 1 Worker replica(s) failed.")
SUSPENDED = ("Suspended", "True", "PyTorchJob j is suspended.")
RESTARTING = ("Restarting", "True", "PyTorchJob j is restarting because 1 Master replica(s) failed.")


@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob", "MPIJob"])
@pytest.mark.parametrize(
    ("conditions", "status", "message"),
    [
        ((CREATED, RUNNING_DONE, SUCCEEDED), "Healthy", "successfully completed"),
        ((CREATED, RUNNING_DONE, FAILED), "Degraded", "failed because"),
        ((CREATED, SUSPENDED), "Suspended", "suspended"),
        ((CREATED, RUNNING), "Progressing", "is running"),
        ((CREATED, RESTARTING), "Progressing", "restarting"),
        ((CREATED,), "Progressing", "is created"),
        ((), "Progressing", "Waiting for the Training Operator"),
    ],
)
def test_kubeflow_job_health(argocd_cm, kind, conditions, status, message):
    script = argocd_cm[f"{HEALTH_PREFIX}kubeflow.org_{kind}"]
    health = run_health(script, _job(*conditions))
    assert health["status"] == status
    assert message in health["message"]


def test_job_without_status(argocd_cm):
    script = argocd_cm[f"{HEALTH_PREFIX}kubeflow.org_PyTorchJob"]
    assert run_health(script, {"kind": "PyTorchJob", "metadata": {"name": "j"}})["status"] == "Progressing"


def test_condition_without_message(argocd_cm):
    script = argocd_cm[f"{HEALTH_PREFIX}kubeflow.org_MPIJob"]
    job = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert run_health(script, job) == {"status": "Degraded", "message": "The job failed"}


@pytest.mark.parametrize(
    ("app_status", "expected"),
    [
        ({"health": {"status": "Healthy"}}, {"status": "Healthy", "message": ""}),
        ({"health": {"status": "Degraded", "message": "Deployment x exceeded its progress deadline"}},
         {"status": "Degraded", "message": "Deployment x exceeded its progress deadline"}),
        ({}, {"status": "Progressing", "message": ""}),
        (None, {"status": "Progressing", "message": ""}),
    ],
)  # fmt: skip
def test_application_health_for_waves(argocd_cm, app_status, expected):
    script = argocd_cm[f"{HEALTH_PREFIX}argoproj.io_Application"]
    obj = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "a"}}
    if app_status is not None:
        obj["status"] = app_status
    assert run_health(script, obj) == expected
