"""The Training Operator v1.9.4 contract: the pods it creates and what its webhook refuses."""

from __future__ import annotations

import copy
import json

import pytest

from trainyard.contract.metrics import DEFAULT_METRICS_PORT, ENV_METRICS_PORT
from trainyard.repo.upstream import training_operator

METRICS_ENV = {ENV_METRICS_PORT: str(DEFAULT_METRICS_PORT)}  # from the job base, kept by the operator


def _job_of(report, cluster: str, name: str) -> dict:
    for r in report.renders[cluster].resources():
        if training_operator.is_job(r.doc) and r.name == name:
            return copy.deepcopy(r.doc)
    raise AssertionError(f"no job {name} in {cluster}")


def _env(pod: dict, container: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][container].get("env", [])}


def test_mnist_ddp_master_and_worker(report):
    pods = training_operator.expand_job(_job_of(report, "dev", "mnist-ddp"))
    assert [p["metadata"]["name"] for p in pods] == ["mnist-ddp-master-0", "mnist-ddp-worker-0"]
    master, worker = pods
    assert master["metadata"]["namespace"] == "ml-training"
    assert master["metadata"]["labels"] == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "mnist-ddp",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
    }
    assert "training.kubeflow.org/job-role" not in worker["metadata"]["labels"]
    assert _env(master) == {
        **METRICS_ENV,
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "mnist-ddp-master-0",
        "PET_MASTER_ADDR": "mnist-ddp-master-0",
        "WORLD_SIZE": "2",
        "RANK": "0",
        "PET_NODE_RANK": "0",
        "PET_NPROC_PER_NODE": "1",
        "PET_NNODES": "2",
    }
    assert _env(worker)["RANK"] == "1" and _env(worker)["PET_NODE_RANK"] == "1"
    assert worker["spec"]["initContainers"][0]["name"] == "init-pytorch"
    assert "nslookup mnist-ddp-master-0" in worker["spec"]["initContainers"][0]["command"][2]
    assert "initContainers" not in master["spec"]
    assert master["spec"]["restartPolicy"] == "OnFailure"
    assert master["spec"]["containers"][0]["args"][:3] == ["--", "--model", "mlp"]


def test_world_size_counts_processes_per_node(report):
    job = _job_of(report, "dev", "mnist-ddp")
    job["spec"]["nprocPerNode"] = "4"
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    pods = training_operator.expand_job(job)
    assert len(pods) == 4
    assert {_env(p)["WORLD_SIZE"] for p in pods} == {"16"}
    assert [_env(p)["RANK"] for p in pods] == ["0", "1", "2", "3"]
    assert _env(pods[0])["PET_NPROC_PER_NODE"] == "4"


def test_llama_finetune_is_elastic(report):
    pods = training_operator.expand_job(_job_of(report, "prod-roce", "llama-finetune"))
    assert [p["metadata"]["name"] for p in pods] == [f"llama-finetune-worker-{i}" for i in range(4)]
    env = _env(pods[2])
    assert env == {
        **METRICS_ENV,
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "8",
        "PET_RDZV_ENDPOINT": "llama-finetune-worker-0:23456",
        "PET_RDZV_BACKEND": "c10d",
        "PET_NNODES": "2:4",
        "PET_MAX_RESTARTS": "10",
    }
    # no Master: no MASTER_ADDR/RANK, no init container; worker 0 takes the master role
    # (training-operator@v1.9.4:pkg/controller.v1/pytorch/pytorchjob_controller.go IsMasterRole)
    assert all("initContainers" not in p["spec"] for p in pods)
    roles = [p["metadata"]["labels"].get("training.kubeflow.org/job-role") for p in pods]
    assert roles == ["master"] + [None] * (len(pods) - 1)


def test_elastic_defaults_and_rendezvous_options():
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "e", "namespace": "ns"},
        "spec": {
            "elasticPolicy": {"rdzvHost": "etcd", "rdzvPort": 2379, "rdzvId": "x", "standalone": True,
                              "rdzvConf": [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}]},
            "pytorchReplicaSpecs": {"Worker": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "pytorch", "image": "registry.example.com/ml/trainer:0.1.0"}]}}}},
        },
    }  # fmt: skip
    pods = training_operator.expand_job(job)
    env = _env(pods[0])
    assert env["PET_NNODES"] == "3:3"  # min/max default to the worker replicas
    assert env["PET_RDZV_ENDPOINT"] == "etcd:2379"
    assert env["PET_RDZV_CONF"] == "a=1,b=2" and env["PET_RDZV_ID"] == "x" and env["PET_STANDALONE"] == ""
    assert env["PET_NPROC_PER_NODE"] == "auto"  # nprocPerNode defaults to auto
    # the default port was added to the pytorch container
    assert pods[0]["spec"]["containers"][0]["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert pods[0]["spec"]["restartPolicy"] == "OnFailure"


def test_horovod_mpijob(report):
    pods = training_operator.expand_job(_job_of(report, "prod-ib", "horovod"))
    assert [p["metadata"]["name"] for p in pods] == ["horovod-launcher", "horovod-worker-0", "horovod-worker-1"]
    launcher, worker = pods[0], pods[1]
    assert launcher["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert "training.kubeflow.org/replica-index" not in launcher["metadata"]["labels"]
    assert launcher["spec"]["serviceAccountName"] == "horovod-launcher"
    assert launcher["spec"]["initContainers"][0]["name"] == "kubectl-delivery"
    # v1.9.1 moved the image to ghcr.io (kubeflow/trainer@v1.9.4:pkg/config/config.go)
    assert launcher["spec"]["initContainers"][0]["image"] == "ghcr.io/kubeflow/training-v1/kubectl-delivery:latest"
    assert _env(launcher)["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"
    assert _env(launcher)["NVIDIA_VISIBLE_DEVICES"] == ""  # a CPU launcher hides the GPUs
    assert worker["spec"]["containers"][0]["command"] == ["sleep"]
    assert worker["spec"]["subdomain"] == "horovod"
    assert {"name": "mpi-job-config", "mountPath": "/etc/mpi"} in worker["spec"]["containers"][0]["volumeMounts"]
    assert worker["metadata"]["labels"]["training.kubeflow.org/operator-name"] == "mpijob-controller"


def _tfjob(replicas: dict[str, int]) -> dict:
    container = {"name": "tensorflow", "image": "registry.example.com/ml/trainer:0.1.0"}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf", "namespace": "ml"},
        "spec": {
            "tfReplicaSpecs": {
                t: {"replicas": n, "template": {"spec": {"containers": [dict(container)]}}} for t, n in replicas.items()
            }
        },
    }


def test_tfjob_tf_config():
    pods = training_operator.expand_job(_tfjob({"Chief": 1, "Worker": 2}))
    assert [p["metadata"]["name"] for p in pods] == ["tf-chief-0", "tf-worker-0", "tf-worker-1"]
    config = json.loads(_env(pods[2])["TF_CONFIG"])
    assert config == {
        "cluster": {
            "chief": ["tf-chief-0.ml.svc:2222"],
            "worker": ["tf-worker-0.ml.svc:2222", "tf-worker-1.ml.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    assert pods[0]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert pods[0]["spec"]["restartPolicy"] == "Never"  # TFJob's default
    # a single-replica TFJob is not distributed: no TF_CONFIG
    assert "env" not in training_operator.expand_job(_tfjob({"Worker": 1}))[0]["spec"]["containers"][0]


MASTER_REPLICAS = "Master.replicas: Forbidden: must be 1"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda j: j["metadata"].update(name="Mnist_DDP"), "must be a DNS-1035 label"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), MASTER_REPLICAS),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].pop("replicas"), MASTER_REPLICAS),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(name="x"),
            "Required value: must have at least one container with name pytorch",
        ),
        (lambda j: j["spec"]["pytorchReplicaSpecs"].update(Launcher={}), "unsupported replica type"),
        (  # the webhook sees the object before any defaulting: replica types are case-sensitive
            lambda j: j["spec"]["pytorchReplicaSpecs"].update(worker=j["spec"]["pytorchReplicaSpecs"].pop("Worker")),
            "spec.pytorchReplicaSpecs.worker: unsupported replica type",
        ),
        (lambda j: j["spec"].update(pytorchReplicaSpec={}), "spec.pytorchReplicaSpec: not a field of PyTorchJob"),
        (lambda j: j["spec"]["runPolicy"].update(ttl=5), "spec.runPolicy.ttl: not a field"),
        (lambda j: j["spec"].update(elasticPolicy={"nProcPerNode": 2}), "must not be used with spec.nprocPerNode"),
        (lambda j: j["metadata"].update(name="x" * 60), "at most 63"),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].pop("image"),
            "image: Required value: must be required",
        ),
        # new in v1.9 (pkg/webhooks/pytorch/pytorchjob_webhook.go, pkg/common/util/webhooks.go)
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=0),
            "Worker.replicas: Forbidden: must be at least 1",
        ),
        (lambda j: j["spec"]["runPolicy"].update(managedBy="example.com/mine"), "managedBy: 'example.com/mine' is not"),
    ],
)
def test_admission_rules(report, change, expected):
    job = _job_of(report, "dev", "mnist-ddp")
    change(job)
    problems = training_operator.admission_problems(job)
    assert any(expected in p for p in problems), problems
    with pytest.raises(training_operator.JobError):
        training_operator.expand_job(job)


def test_tfjob_two_chiefs_and_mpijob_launcher():
    problems = training_operator.admission_problems(_tfjob({"Chief": 1, "Master": 1}))
    assert any("more than 1 Chief or Master" in p for p in problems)
    mpi = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MPIJob",
        "metadata": {"name": "m"},
        "spec": {
            "mpiReplicaSpecs": {
                "Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "i:1"}]}}}
            }
        },
    }
    assert any("Launcher: required" in p for p in training_operator.admission_problems(mpi))
