"""The Makefile's install stamps: one per extras set, so switching EXTRAS installs what is missing.

``make -n`` prints what make would run without running it, so the decision is observed directly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


@pytest.fixture
def checkout(tmp_path):
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv/bin").mkdir(parents=True)
    python = tmp_path / ".venv/bin/python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    old = time.time() - 60
    os.utime(tmp_path / "pyproject.toml", (old, old))
    return tmp_path


def plan(where: Path, *args: str) -> str:
    done = subprocess.run(["make", "-n", *args], cwd=where, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def stamp(where: Path, extras: str) -> None:
    (where / f".venv/.installed-{extras}").touch()


def test_a_repo_only_install_does_not_satisfy_test_or_demo(checkout):
    stamp(checkout, "repo")
    assert "pip install" not in plan(checkout, "validate", "EXTRAS=repo")
    for target in ("test", "demo"):
        assert "pip install -q -e '.[dev]'" in plan(checkout, target)


def test_each_set_is_installed_once_until_pyproject_changes(checkout):
    stamp(checkout, "dev")
    assert "pip install" not in plan(checkout, "test")
    assert "pip install -q -e '.[repo]'" in plan(checkout, "validate", "EXTRAS=repo")
    later = time.time() + 5
    os.utime(checkout / "pyproject.toml", (later, later))
    assert "pip install -q -e '.[dev]'" in plan(checkout, "test")


def test_test_needs_dev_even_when_extras_is_exported(checkout):
    stamp(checkout, "repo")
    env = {**os.environ, "EXTRAS": "repo"}
    done = subprocess.run(["make", "-n", "test"], cwd=checkout, capture_output=True, text=True, env=env, timeout=30)
    assert "pip install -q -e '.[dev]'" in done.stdout


def test_demo_builds_what_it_runs_and_test_builds_everything(checkout):
    stamp(checkout, "dev")
    demo = plan(checkout, "demo")
    assert "cluster build kube controllers" in demo
    assert "cluster build >" not in demo  # every target, Argo CD included: the cluster tier's
    assert "cluster build >" in plan(checkout, "test")


def test_make_test_runs_both_tiers_and_the_slow_tiers_are_the_markers(checkout):
    """Every marker pyproject.toml lists is a slow tier: a new one left out of the Makefile would
    run its tests in parallel with the fast tiers."""
    import tomllib

    markers = {line.split(":")[0] for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
               ["ini_options"]["markers"]}  # fmt: skip
    stamp(checkout, "dev")
    test = plan(checkout, "test")
    fast_run, slow_run = (line for line in test.splitlines() if "-m pytest" in line)
    assert "-n auto" in fast_run and "-n" not in slow_run.split("pytest")[1]
    assert {w for w in fast_run.split('"')[1].replace("(", " ").replace(")", " ").split()} - {"not", "or"} == markers
    assert {w for w in slow_run.split('"')[1].split()} - {"or"} == markers
    assert "[ $fast = 0 ] && [ $slow = 0 ]" in test  # the slow tiers run even when the fast ones fail
