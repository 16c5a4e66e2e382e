"""``make test-changed`` runs ``trainyard dev tests --run`` with its base and pytest flags, and
``make help`` names it. ``make -n`` prints what make would run without running it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def make(where: Path, *args: str) -> str:
    done = subprocess.run(["make", *args], cwd=where, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv/bin").mkdir(parents=True)
    (tmp_path / ".venv/.installed-dev").touch()  # installed: make plans no pip install
    return tmp_path


def test_make_test_changed_runs_the_map_with_pytest(checkout):
    plan = make(checkout, "-n", "test-changed").splitlines()
    assert ".venv/bin/trainyard dev tests --base main --run -- -q " in plan
    plan = make(checkout, "-n", "test-changed", "TEST_BASE=origin/main", "TEST_CHANGED_FLAGS=-m 'not cluster'")
    assert ".venv/bin/trainyard dev tests --base origin/main --run -- -q -m 'not cluster'" in plan.splitlines()


def test_make_help_names_it(checkout):
    assert "make test-changed the tests that cover what changed against main" in make(checkout, "help")
