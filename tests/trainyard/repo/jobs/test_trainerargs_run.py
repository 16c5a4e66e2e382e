"""validate judges a ``trainyard launch --run -- COMMAND`` container by launch's rules for commands
(trainer/command.py), not by train's parser: the same refusals the pod would meet, before merge."""

from __future__ import annotations

import pytest

from trainyard.repo.jobs import trainerargs

IMAGE = "registry.example.com/ml/trainer:0.1.0"


def _container(**fields: object) -> dict:
    return {"name": "node", "image": IMAGE, **fields}


@pytest.mark.parametrize(
    "container",
    [
        _container(args=["--run", "--", "python", "train.py", "--epochs", "3"]),  # the image's entrypoint
        _container(command=["trainyard", "launch", "--run", "--", "python", "-m", "pkg.train"]),
        _container(command=["python", "-m", "trainer", "launch", "--run", "--", "./run.sh", "--model", "x"]),
    ],
)
def test_a_users_command_is_not_read_as_train_arguments(container):
    found = trainerargs.check(container, trainer_image=True, replicas=2)
    assert found.errors == [] and found.warnings == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run", "--", "torchrun", "train.py"], "torchrun starts its own worker group"),
        (["--run", "--"], "no command after --"),
        (["--run", "--", "python", "-m", "a/b"], "python -m takes a module name"),
    ],
)
def test_a_command_launch_would_refuse_is_an_error_before_merge(args, message):
    found = trainerargs.check(_container(args=args), trainer_image=True)
    assert len(found.errors) == 1 and message in found.errors[0]
    assert found.errors[0].startswith("trainyard launch --run: ")


def test_without_run_the_words_are_still_train_arguments():
    found = trainerargs.check(_container(args=["--", "python", "train.py"]), trainer_image=True)
    assert "unrecognized arguments: python train.py" in found.errors[0]
