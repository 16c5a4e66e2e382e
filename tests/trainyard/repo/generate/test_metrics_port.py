"""Every trainer pod declares the metrics port: the generated runtimes and the v1 job bases, as
kustomize renders them, name it on the trainer container with the env that tells the trainer
where to serve, with the contract's names and numbers; none of it clashes with what the
controllers add."""

from __future__ import annotations

import pytest
import yaml

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.contract.metrics import DEFAULT_METRICS_PORT, ENV_METRICS_PORT, METRICS_PORT_NAME
from trainyard.repo.generate import files, runtimes
from trainyard.repo.model import kustomize
from trainyard.repo.model.rendered import containers, pod_templates
from trainyard.repo.upstream import training_operator, trainjob
from webhook.policy import load_policies

PORT = {"name": METRICS_PORT_NAME, "containerPort": DEFAULT_METRICS_PORT, "protocol": "TCP"}
ENV = {"name": ENV_METRICS_PORT, "value": str(DEFAULT_METRICS_PORT)}
PROFILES = ("ib", "roce", "tcp")


def _node(runtime: dict) -> dict:
    (rj,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    (node,) = rj["template"]["spec"]["template"]["spec"]["containers"]
    assert node["name"] == trainjob.NODE
    return node


@pytest.mark.parametrize("name", PROFILES)
def test_each_runtime_declares_the_metrics_port_on_its_trainer(repo, name):
    generated = _node(runtimes.cluster_training_runtime(load_policies(REPO_ROOT / "policies").get(name)))
    (rendered,) = [r.doc for r in kustomize.build(repo, f"{files.RUNTIMES.as_posix()}/{name}")]
    for node in (generated, _node(rendered)):
        assert node["ports"] == [PORT]
        assert ENV in node["env"]
    init = rendered["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert all("ports" not in c for c in init["initContainers"])  # preflight serves nothing


@pytest.mark.parametrize("name", PROFILES)
def test_torch_keeps_the_metrics_port_beside_its_own(name):
    """Trainer's torch plugin upserts an unnamed containerPort 29500 and PET_MASTER_PORT into the
    node container (kubeflow/trainer@v2.3.0 torch.go): the metrics port stays, by name and number."""
    profile = load_policies(REPO_ROOT / "policies").get(name)
    runtime = runtimes.cluster_training_runtime(profile)
    job = {
        "apiVersion": trainjob.API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": "probe", "namespace": "ml-training"},
        "spec": {"runtimeRef": {"name": runtimes.runtime_name(name)}, "trainer": {"numNodes": 2}},
    }
    (pod, *_) = trainjob.expand(job, runtime).pods
    (node,) = [c for c in pod["spec"]["containers"] if c["name"] == trainjob.NODE]
    assert PORT in node["ports"] and {"containerPort": trainjob.TRAINER_PORT} in node["ports"]
    env = {e["name"]: e.get("value") for e in node["env"]}
    assert env[ENV_METRICS_PORT] == str(DEFAULT_METRICS_PORT)
    assert env[trainjob.PET_MASTER_PORT] == str(trainjob.TRAINER_PORT) != env[ENV_METRICS_PORT]


# The container each operator configures (kubeflow/trainer@v1.9.4: pkg/apis/kubeflow.org/v1/*_types.go
# DefaultContainerName), and the replicas that run the trainer: the MPI launcher's mpirun starts the
# ranks in the workers and serves nothing.
BASES = {
    "pytorchjob": ("pytorch", {"Master", "Worker"}, "pytorchjob-port", 23456),
    "tfjob": ("tensorflow", {"Chief", "Worker"}, "tfjob-port", 2222),
    "mpijob": ("mpi", {"Worker"}, None, None),
}


@pytest.mark.parametrize("base", list(BASES))
def test_each_v1_base_declares_the_metrics_port_where_the_trainer_runs(repo, base):
    container, serving, operator_port, operator_number = BASES[base]
    (job,) = [r.doc for r in kustomize.build(repo, f"base/jobs/{base}")]
    seen = set()
    for path, tpl in pod_templates(job):
        replica = path.split(".")[2]
        (c,) = [c for _, c in containers(tpl) if c["name"] == container]
        if replica not in serving:
            assert "ports" not in c and ENV_METRICS_PORT not in {e["name"] for e in c.get("env", [])}
            continue
        seen.add(replica)
        assert PORT in c["ports"] and ENV in c["env"]
        others = [p for p in c["ports"] if p != PORT]
        assert [(p["name"], p["containerPort"]) for p in others] == ([(operator_port, operator_number)]
                                                                     if operator_port else [])  # fmt: skip
    assert seen == serving


@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob"])
def test_the_v1_operators_port_and_env_do_not_touch_the_metrics_port(kind):
    """The operator's default port (by its own name) and MASTER_PORT/TF_CONFIG: the metrics port
    and env pass through the operator's defaulting and env as written."""
    base = {"PyTorchJob": "pytorchjob", "TFJob": "tfjob"}[kind]
    job = yaml.safe_load((REPO_ROOT / f"base/jobs/{base}/{base}.yaml").read_text())
    job["metadata"]["namespace"] = "ml-training"
    for pod in training_operator.expand_job(job):
        (c,) = pod["spec"]["containers"]
        assert PORT in c["ports"]
        assert [e for e in c["env"] if e["name"] == ENV_METRICS_PORT] == [ENV]
        assert len({p["containerPort"] for p in c["ports"]}) == len(c["ports"])
        assert len({p.get("name") for p in c["ports"]}) == len(c["ports"])
