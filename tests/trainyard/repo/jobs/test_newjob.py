"""trainyard new-job: the folder it writes validates; it refuses what it should."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import errors_of
from trainyard.cli import main
from trainyard.contract.errors import UserError
from trainyard.contract.metrics import DEFAULT_METRICS_PORT, ENV_METRICS_PORT, METRICS_PORT_NAME
from trainyard.repo import validate
from trainyard.repo.jobs import newjob
from trainyard.repo.model import kustomize


@pytest.mark.parametrize(
    "req",
    [
        newjob.JobRequest(name="resnet", cluster="dev", nodes=2, gpus=1, trainer_args=["--model", "mlp"]),
        newjob.JobRequest(name="solo", cluster="dev", nodes=1, gpus=0),
        newjob.JobRequest(name="wide", cluster="prod-roce", nodes=4, gpus=8, image_tag="0.2.0"),
        newjob.JobRequest(name="ib", cluster="prod-ib", nodes=2, gpus=8),
        newjob.JobRequest(name="resnet1", cluster="dev", kind="pytorch", nodes=2, gpus=1),
        newjob.JobRequest(name="solo1", cluster="dev", kind="pytorch", nodes=1, gpus=0),
        newjob.JobRequest(
            name="big", cluster="prod-roce", kind="pytorch", nodes=4, gpus=8, elastic=(2, 8), image_tag="0.2.0"
        ),
        newjob.JobRequest(name="allreduce", cluster="prod-ib", kind="mpi", nodes=3, gpus=8),
        newjob.JobRequest(name="tfdist", cluster="dev", kind="tf", nodes=2, gpus=1),
    ],
    ids=["trainjob", "trainjob-single-node", "trainjob-roce", "trainjob-ib", "pytorch", "single-node", "elastic",
         "mpi", "tf"],
)  # fmt: skip
def test_new_job_output_validates(repo_copy, req):
    written = newjob.create(repo_copy, req)
    assert {p.name for p in written} >= {"kustomization.yaml", "job.yaml"}
    kustomize.clear_cache()
    report = validate.validate(repo_copy, [req.cluster])
    assert errors_of(report) == []
    (jp,) = [jp for jp in report.previews[req.cluster] if jp.job.name == req.name]
    expected = {
        "trainjob": req.nodes,
        "pytorch": req.nodes,
        "mpi": req.nodes + 1,
        "tf": req.nodes,
    }[req.kind]
    assert len(jp.pods) == expected
    for pod in jp.pods:  # every pod that runs the trainer (not the MPI launcher) declares the metrics port
        if pod.name.endswith("-launcher"):
            continue
        (c,) = pod.after["spec"]["containers"]
        assert {"name": METRICS_PORT_NAME, "containerPort": DEFAULT_METRICS_PORT, "protocol": "TCP"} in c["ports"]
        assert {"name": ENV_METRICS_PORT, "value": str(DEFAULT_METRICS_PORT)} in c["env"]
    assert not [w for w in report.warnings() if "not scraped" in w.message]
    container = jp.pods[0].after["spec"]["containers"][0]
    if req.kind != "mpi":
        assert f"/checkpoints/{req.name}" in container["args"]
    if req.image_tag:
        assert container["image"].endswith(f":{req.image_tag}")
    if req.kind == "trainjob":  # the runtime of the cluster's fabric, nodes x processes for torchrun
        profile = {"dev": "tcp", "prod-roce": "roce", "prod-ib": "ib"}[req.cluster]
        assert jp.job.doc["spec"]["runtimeRef"]["name"] == f"trainyard-{profile}"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PET_NNODES"] == str(req.nodes)
        assert env["PET_NPROC_PER_NODE"] == str(max(req.gpus, 1))
        assert env["TRAINYARD_FABRIC"] == profile
        assert jp.job.labels["kueue.x-k8s.io/queue-name"] == "training"


def test_new_job_cli_passes_trainer_args_and_validates(repo_copy, capsys, monkeypatch):
    monkeypatch.chdir(repo_copy.root)
    kustomize.clear_cache()
    code = main(
        ["new-job", "cifar", "--cluster", "dev", "--nodes", "2", "--gpus", "1", "--", "--model", "mlp", "--lr", "0.1"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "wrote overlays/dev/jobs/cifar/job.yaml" in out
    assert "pod cifar-node-0-1-<generated>: profile tcp" in out
    assert "cluster dev validates with overlays/dev/jobs/cifar" in out
    text = (repo_copy.root / "overlays/dev/jobs/cifar/job.yaml").read_text()
    assert '- "--lr"\n      - "0.1"' in text


def test_new_job_cli_writes_a_v1_job_with_kind(repo_copy, capsys, monkeypatch):
    monkeypatch.chdir(repo_copy.root)
    kustomize.clear_cache()
    assert main(["new-job", "cifar1", "--cluster", "dev", "--kind", "pytorch", "--nodes", "2", "--gpus", "1"]) == 0
    assert "pod cifar1-worker-0: profile tcp" in capsys.readouterr().out


def test_the_readme_example_fits_the_dev_cluster(repo_copy, capsys, monkeypatch):
    """new-job resnet --cluster dev --nodes 2 --gpus 1: its pods together fit the dev quota."""
    monkeypatch.chdir(repo_copy.root)
    kustomize.clear_cache()
    assert main(["new-job", "resnet", "--cluster", "dev", "--nodes", "2", "--gpus", "1"]) == 0, capsys.readouterr()
    text = (repo_copy.root / "overlays/dev/jobs/resnet/job.yaml").read_text()
    assert "memory: 64Gi" not in text  # 64Gi per GPU would make two pods of the whole 64Gi quota


def test_new_job_names_the_folder_that_failed_before_it(repo_copy, capsys, monkeypatch):
    monkeypatch.chdir(repo_copy.root)
    (repo_copy.root / "overlays/dev/jobs/mnist-ddp/job.yaml").write_text("- op: replace\n value: [\n")
    kustomize.clear_cache()
    assert main(["new-job", "cifar", "--cluster", "dev", "--nodes", "2", "--gpus", "1"]) == 1
    err = capsys.readouterr().err
    assert "overlays/dev/jobs/cifar was written and has no error of its own" in err
    assert "in overlays/dev/jobs/mnist-ddp/job.yaml, which failed before" in err


def test_new_job_refuses_to_overwrite(repo_copy, capsys, monkeypatch):
    monkeypatch.chdir(repo_copy.root)
    assert main(["new-job", "mnist-ddp", "--cluster", "dev", "--nodes", "2", "--gpus", "1"]) == 2
    assert "overlays/dev/jobs/mnist-ddp already exists" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (newjob.JobRequest(name="My_Job", cluster="dev"), "DNS-1035"),
        (newjob.JobRequest(name="x", cluster="moon"), "clusters/moon: no such cluster"),
        (newjob.JobRequest(name="x", cluster="dev", kind="mpi", elastic=(1, 2)), "PyTorch jobs only"),
        (newjob.JobRequest(name="x", cluster="dev", elastic=(1, 2)), "a TrainJob has no elastic policy"),
        (newjob.JobRequest(name="x", cluster="dev", kind="pytorch", nodes=9, elastic=(1, 4)), "within --elastic 1:4"),
        (newjob.JobRequest(name="x", cluster="dev", image_tag="latest"), "branch-like tag \\(latest\\)"),
        (newjob.JobRequest(name="x", cluster="dev", image_tag="main"), "branch-like tag \\(main\\)"),
        (newjob.JobRequest(name="x", cluster="dev", image_tag="v1"), "major-version line"),
        (newjob.JobRequest(name="x", cluster="dev", image_tag="a:b"), "not a valid image reference"),
        (newjob.JobRequest(name="x", cluster="dev", image_tag="\x00" * 500), "not a valid image reference"),
        (newjob.JobRequest(name="a" * 60, cluster="dev", kind="pytorch", nodes=2), "too long"),
        (newjob.JobRequest(name="a" * 49, cluster="dev", nodes=2), "JobSet would name a pod"),
        (newjob.JobRequest(name="x", cluster="dev", nodes=0), "at least one node"),
    ],
)
def test_new_job_refusals(repo_copy, req, message):
    with pytest.raises(UserError, match=message):
        newjob.create(repo_copy, req)
    assert not (repo_copy.root / "overlays" / req.cluster / "jobs" / req.name).exists()


def test_parse_elastic():
    assert newjob.parse_elastic("2:8") == (2, 8)
    for bad in ("8:2", "0:3", "2-8"):
        with pytest.raises(UserError):
            newjob.parse_elastic(bad)
