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
