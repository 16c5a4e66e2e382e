"""trainyard new-job --image/--command: a job folder that runs the user's own code, validated.

On the trainer image, or one built FROM it that the platform declares (policies/*.yaml
trainerImages), the command runs under ``trainyard launch --run`` and the pods get the fabric; on
any other image the command is the container's and validate says what the job loses. Every kind.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import errors_of
from trainer.command import ENV_CHECKPOINT_DIR
from trainyard.cli import main
from trainyard.contract.errors import UserError
from trainyard.repo import validate
from trainyard.repo.jobs import newjob
from trainyard.repo.model import kustomize

DERIVED = "registry.example.com/teams/llm-finetune:v1.4.0"
FOREIGN = "nvcr.io/nvidia/pytorch:25.01-py3"
SCRIPT = ["python", "train.py", "--epochs", "3", "--name", "a b"]
LOSES = "so admission gives it no fabric. It loses: the fabric's NCCL env"


def _job(repo, req: newjob.JobRequest):
    newjob.create(repo, req)
    kustomize.clear_cache()
    report = validate.validate(repo, [req.cluster])
    assert errors_of(report) == []
    (jp,) = [jp for jp in report.previews[req.cluster] if jp.job.name == req.name]
    return report, jp


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize("kind", ["trainjob", "pytorch", "tf", "mpi"])
@pytest.mark.parametrize("image", [None, DERIVED])
def test_a_command_on_a_trainer_image_runs_under_launch_with_the_fabric(repo_copy, kind, image):
    cluster, nodes, gpus, fabric = ("prod-ib", 3, 8, "ib") if kind == "mpi" else ("dev", 2, 1, "tcp")
    req = newjob.JobRequest(name=f"own-{kind}", cluster=cluster, kind=kind, nodes=nodes, gpus=gpus, image=image,
                            command=list(SCRIPT))  # fmt: skip
    report, jp = _job(repo_copy, req)
    assert not [w for w in report.warnings() if LOSES in w.message]
    for pod in jp.pods:
        (c,) = pod.after["spec"]["containers"]
        if not pod.name.endswith("-launcher"):
            assert _env(c)["TRAINYARD_FABRIC"] == fabric  # the webhook's fabric
        if image:
            assert c["image"] == image
        if pod.name.endswith("-launcher"):
            assert c["args"][-1].endswith(f"{ENV_CHECKPOINT_DIR}=/checkpoints/{req.name} exec python train.py "
                                          "--epochs 3 --name 'a b'")  # fmt: skip
            continue
        if kind == "mpi":
            continue  # the workers sleep; mpirun starts the ranks in them
        assert c.get("command", ["trainyard", "launch"]) == ["trainyard", "launch"]
        assert c["args"] == ["--run", "--", *SCRIPT]
        assert _env(c)[ENV_CHECKPOINT_DIR] == f"/checkpoints/{req.name}"


@pytest.mark.parametrize("kind", ["trainjob", "pytorch", "tf"])
def test_a_command_on_another_image_is_its_command_and_validate_says_what_it_loses(repo_copy, kind):
    req = newjob.JobRequest(name=f"ngc-{kind}", cluster="dev", kind=kind, nodes=2, gpus=1, image=FOREIGN,
                            command=["torchrun", "--nproc-per-node", "1", "train.py"])  # fmt: skip
    report, jp = _job(repo_copy, req)
    (warning,) = [w for w in report.warnings() if LOSES in w.message]
    assert warning.where.startswith(f"overlays/dev/jobs/{req.name} ")
    assert "build your image FROM the trainer image and ask the platform to list its repository" in warning.message
    assert f"it runs {FOREIGN}" in warning.message
    for pod in jp.pods:
        (c,) = pod.after["spec"]["containers"]
        assert c["image"] == FOREIGN and c["command"] == req.command and "args" not in c
        assert "TRAINYARD_FABRIC" not in _env(c) and _env(c)[ENV_CHECKPOINT_DIR] == f"/checkpoints/{req.name}"


def test_the_cli_splits_the_command_and_appends_the_words_after_the_separator(repo_copy, capsys, monkeypatch):
    monkeypatch.chdir(repo_copy.root)
    kustomize.clear_cache()
    argv = ["new-job", "mine", "--cluster", "dev", "--nodes", "2", "--gpus", "1", "--command",
            "python -m mypkg.train --note 'two words'", "--", "--lr", "1e-4", "it's"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr()
    text = (repo_copy.root / "overlays/dev/jobs/mine/job.yaml").read_text()
    words = ["--run", "--", "python", "-m", "mypkg.train", "--note", "two words", "--lr", "1e-4", "it's"]
    assert "\n    args:" + "".join(f'\n      - "{w}"' for w in words) in text
    assert f"name: {ENV_CHECKPOINT_DIR}" in text


def test_the_cli_shows_what_a_job_on_another_image_loses(repo_copy, capsys, monkeypatch):
    """Kueue's sample PyTorchJob (kubernetes-sigs/kueue site/static/examples/jobs/sample-pytorchjob.yaml)."""
    monkeypatch.chdir(repo_copy.root)
    kustomize.clear_cache()
    argv = ["new-job", "pytorch-simple", "--cluster", "dev", "--kind", "pytorch", "--nodes", "2", "--gpus", "0",
            "--image", "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
            "--command", "python3 /opt/pytorch-mnist/mnist.py --epochs=1"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "warning: [dev] overlays/dev/jobs/pytorch-simple " in out and LOSES in out
    assert "pod pytorch-simple-worker-0: skip: no container runs a trainer image" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--command", "python train.py --name 'x"], "no closing quotation"),
        (["--command", "python train.py \\"], "no escaped character"),
        (["--command", ""], "--command is empty"),
        (["--command", "   "], "--command is empty"),
        (["--command", "python train.py\x00--evil"], "contains a NUL byte"),
        (["--command", "x" * (newjob.MAX_COMMAND + 1)], f"at most {newjob.MAX_COMMAND}"),
        (["--command", "cd src && python train.py"], "'&&' is shell syntax"),
        (["--command", "python train.py > log"], "'>' is shell syntax"),
        (["--command", "NCCL_DEBUG=INFO python train.py"], "sets a variable, which only a shell does"),
        (["--command", "--epochs 3"], "an option, not a program"),
        (["--command", "torchrun --nproc-per-node 8 train.py"], "torchrun starts its own worker group"),
        (["--command", "python -m torch.distributed.run train.py"], "is torchrun"),
        (["--command", "python -m 'a b'"], "python -m takes a module name"),
        (["--image", "registry.example.com/ml/trainer"], "has no tag, so the runtime pulls latest"),
        (["--image", "registry.example.com/ml/trainer:latest"], "a branch-like tag (latest)"),
        (["--image", "registry.example.com/ml/trainer:main"], "a branch-like tag (main)"),
        (["--image", "Not An Image"], "is not an image reference"),
        (["--image", "a" * 10_000], "is not an image reference"),
        (["--image", FOREIGN], "not a trainer image (its repository is in no policies/*.yaml trainerImages)"),
        (["--image", FOREIGN, "--command", "python t.py", "--kind", "mpi"], "--kind mpi --image"),
        (["--image", DERIVED, "--image-tag", "0.2.0"], "--image and --image-tag: give one"),
    ],
)
def test_bad_input_is_refused_with_one_line_and_nothing_written(repo_copy, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(repo_copy.root)
    code = main(["new-job", "bad", "--cluster", "dev", "--nodes", "1", "--gpus", "1", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (repo_copy.root / "overlays/dev/jobs/bad").exists()


@pytest.mark.parametrize("image", ["registry.example.com/ml/trainer:0.1.0", f"{DERIVED}@sha256:{'c' * 64}"])
def test_a_fixed_release_tag_or_a_digest_passes(repo_copy, image):
    newjob.check_image(image)
    req = newjob.JobRequest(name="pinned", cluster="dev", nodes=1, gpus=1, image=image)
    _, jp = _job(repo_copy, req)
    assert jp.pods[0].after["spec"]["containers"][0]["image"] == image


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.lists(st.text(max_size=10), max_size=3))
def test_any_command_text_is_split_or_refused_by_name(text, extra):
    try:
        words = newjob.parse_command(text, extra)
    except UserError as exc:
        assert str(exc).startswith("--command"), exc
        return
    assert words[len(words) - len(extra) :] == extra and words and words[0].strip()
    assert not any("\x00" in w for w in words)
