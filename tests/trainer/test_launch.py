"""How ``trainyard launch`` turns a Training Operator pod's env into torchrun's command line.

The env dicts follow what the operator's PyTorchJob controller writes (pkg/controller.v1/pytorch:
MASTER_ADDR/MASTER_PORT from the master replica, WORLD_SIZE = replicas x nprocPerNode, RANK the
replica's index (+1 for workers), PET_NPROC_PER_NODE, PET_NODE_RANK, PET_NNODES; with an
elasticPolicy PET_RDZV_ENDPOINT/BACKEND/ID, PET_MAX_RESTARTS and PET_NNODES=min:max).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.trainer.conftest import clean_env, trainyard
from trainer.launch import plan
from trainyard.contract.errors import UserError

TRAIN = ["--model", "gpt-125m", "--checkpoint-dir", "/checkpoints/job"]


def flags(argv: list[str]) -> dict[str, str | None]:
    """torchrun's options (before -m trainer) as a dict; flags without a value map to None."""
    end = argv.index("-m", 3)
    out: dict[str, str | None] = {}
    items = argv[3:end]
    i = 0
    while i < len(items):
        if i + 1 < len(items) and not items[i + 1].startswith("--"):
            out[items[i]] = items[i + 1]
            i += 2
        else:
            out[items[i]] = None
            i += 1
    return out


def master(**extra: str) -> dict[str, str]:
    return {
        "MASTER_ADDR": "llama-finetune-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "8",
        "RANK": "0",
        "PET_NPROC_PER_NODE": "4",
        "PET_NODE_RANK": "0",
        "PET_NNODES": "2",
        "PYTHONUNBUFFERED": "0",
        **extra,
    }


def test_master_pod_of_a_static_job_hosts_the_rendezvous():
    p = plan(master(), TRAIN, python="python3")
    f = flags(p.argv)
    assert p.argv[:3] == ["python3", "-m", "torch.distributed.run"]
    assert p.argv[-len(TRAIN) - 3 :] == ["-m", "trainer", "train", *TRAIN]
    assert f["--nnodes"] == "2" and f["--nproc-per-node"] == "4"
    assert f["--rdzv-backend"] == "c10d"
    assert f["--rdzv-endpoint"] == "llama-finetune-master-0:23456"
    assert f["--rdzv-conf"] == "is_host=true"
    assert f["--max-restarts"] == "3"
    assert "--standalone" not in f
    assert p.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_worker_pod_joins_and_advertises_the_address_that_reaches_the_master():
    env = master(RANK="1", PET_NODE_RANK="1", MASTER_ADDR="127.0.0.1")
    f = flags(plan(env, TRAIN).argv)
    assert f["--rdzv-conf"] == "is_host=false"
    assert f["--local-addr"] == "127.0.0.1"  # the source address of the route to MASTER_ADDR


def test_older_operator_without_pet_nnodes_counts_pods_from_world_size():
    env = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "3"}
    p = plan(env, [])
    f = flags(p.argv)
    assert f["--nnodes"] == "4" and f["--nproc-per-node"] == "1"
    assert f["--rdzv-conf"] == "is_host=false"
    assert any("WORLD_SIZE" in n for n in p.notes)


def test_elastic_job_uses_the_operator_rendezvous_as_given():
    env = {
        "PET_RDZV_ENDPOINT": "elastic-job-worker-0:23456",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ID": "elastic-job",
        "PET_NNODES": "2:4",
        "PET_MAX_RESTARTS": "5",
        "PET_NPROC_PER_NODE": "8",
        "RANK": "2",
    }
    f = flags(plan(env, []).argv)
    assert f["--nnodes"] == "2:4"
    assert f["--rdzv-endpoint"] == "elastic-job-worker-0:23456" and f["--rdzv-id"] == "elastic-job"
    assert "--rdzv-conf" not in f  # the hosting pod is found by torchrun's host name match
    assert f["--max-restarts"] == "5"


def test_single_pod_is_standalone_and_flags_override_env():
    p = plan({"PET_NNODES": "1", "PET_NPROC_PER_NODE": "8"}, [], nproc_per_node="2", max_restarts=0)
    f = flags(p.argv)
    assert "--standalone" in f and "--rdzv-endpoint" not in f
    assert f["--nproc-per-node"] == "2" and f["--max-restarts"] == "0"


def test_gloo_follows_the_fabric_interface():
    p = plan({"PET_NNODES": "1", "NCCL_SOCKET_IFNAME": "=lo"}, [])
    assert p.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert "GLOO_SOCKET_IFNAME" not in plan({"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "eth0"}, []).env


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PET_NNODES": "2"}, "no MASTER_ADDR"),
        ({"PET_NNODES": "two"}, "PET_NNODES='two'"),
        ({"PET_NNODES": "2", "MASTER_ADDR": "m", "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
        ({"WORLD_SIZE": "x"}, "WORLD_SIZE='x' is not an integer"),
        ({"PET_NPROC_PER_NODE": "0"}, "processes per pod '0'"),
    ],
)
def test_unusable_env_is_a_user_error(env, message):
    with pytest.raises(UserError, match=message):
        plan(env, [])


def test_train_arguments_follow_the_separator():
    env = clean_env(PET_NNODES="1")
    out = subprocess.run(
        trainyard("launch", "--nproc-per-node", "2", "--dry-run", "--", "--max-steps", "7", "--seed", "3"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    # everything after the first -- goes to train untouched (launch only checks that train takes it)
    assert out.stdout.splitlines()[-1].endswith("-m trainer train --max-steps 7 --seed 3")
    assert "--nproc-per-node 2" in out.stdout
    # without --, a train flag is a usage error that says where train arguments go
    out = subprocess.run(trainyard("launch", "--model", "tiny"), capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert "unrecognized arguments: --model tiny" in out.stderr


def test_dry_run_prints_the_command_from_the_pod_env():
    out = subprocess.run(
        trainyard("launch", "--dry-run", "--", "--model", "tiny", "--max-steps", "5"),
        capture_output=True,
        text=True,
        env=clean_env(**master(RANK="1", PET_NODE_RANK="1", MASTER_ADDR="127.0.0.1")),
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in lines
    assert lines[-1].endswith("-m trainer train --model tiny --max-steps 5")
    assert "--rdzv-endpoint 127.0.0.1:23456" in lines[-1]


def test_launch_env_error_is_clean():
    out = subprocess.run(
        trainyard("launch", "--dry-run"), capture_output=True, text=True, env=clean_env(PET_NNODES="3")
    )
    assert out.returncode == 2
    assert out.stderr.startswith("error: 3 pods but no MASTER_ADDR")
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("train_args", "message"),
    [
        (["--max-steps", "x"], "argument --max-steps: invalid int value: 'x'"),
        (["--keep", "1"], "--keep 1: keep at least 2 checkpoints"),
        (["--modle", "tiny"], "unrecognized arguments: --modle tiny"),
        (["--batch-size", "3"], "--batch-size 3 does not divide into 2 rank(s) x --grad-accum 1; use a multiple of 2"),
    ],
)
def test_bad_train_arguments_fail_fast_once_with_exit_2(tmp_path, train_args, message):
    """Refused before preflight and torchrun: one line, exit 2, no worker ever started."""
    out = subprocess.run(
        trainyard("launch", "--", "--checkpoint-dir", str(tmp_path / "ckpt"), *train_args),
        capture_output=True,
        text=True,
        env=clean_env(PET_NNODES="1", PET_NPROC_PER_NODE="2"),
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(
        "error: trainyard launch: train arguments (after --): "
    )
    assert message in out.stderr and out.stdout == ""  # preflight and torchrun never ran
    assert not (tmp_path / "ckpt").exists()


def test_train_usage_errors_show_the_train_usage_line():
    for argv in (["train", "--bogus"], ["train", "--max-steps", "x"]):
        out = subprocess.run(trainyard(*argv), capture_output=True, text=True, env=clean_env(), timeout=60)
        assert out.returncode == 2
        assert out.stderr.startswith("usage: trainyard train "), out.stderr
        assert out.stderr.strip().splitlines()[-1].startswith("trainyard train: error: ")
