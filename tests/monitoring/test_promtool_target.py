"""``make promtool`` (a prerequisite of make test and make test-fast): nothing when promtool is on
PATH, Debian's prometheus package through apt-get when root, else the package to install and exit 2.

The commands it meets are stand-ins on a PATH of their own (``id`` says who runs it, ``apt-get``
records its arguments), so the decision is observed without installing anything.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="needs GNU make")
INSTALL = "install -y --no-install-recommends prometheus"


def stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def make_promtool(bin_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MAKE, "-s", "-f", str(ROOT / "Makefile"), "promtool"],
        cwd=ROOT,
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def bin_dir(tmp_path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    return folder


def test_promtool_and_prometheus_on_path_are_left_alone(bin_dir):
    stub(bin_dir, "promtool", "exit 0")
    stub(bin_dir, "prometheus", "exit 0")
    stub(bin_dir, "apt-get", f"echo apt-get called >> {bin_dir}/calls")
    done = make_promtool(bin_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert not (bin_dir / "calls").exists()


def test_root_with_apt_get_installs_prometheus_and_updates_lists_when_needed(bin_dir):
    calls = bin_dir / "calls"
    stub(bin_dir, "id", "echo 0")
    # the first install fails (no package lists yet); after apt-get update it succeeds
    stub(
        bin_dir,
        "apt-get",
        f'echo "$*" >> {calls}\n'
        f'if [ "$1" = update ]; then : > {bin_dir}/lists; fi\n'
        f'if [ "$1" = install ] && [ ! -e {bin_dir}/lists ]; then exit 100; fi',
    )
    done = make_promtool(bin_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.read_text().splitlines() == [INSTALL, "update", INSTALL]
    assert f"apt-get {INSTALL}" in done.stdout  # it says what it does


def test_without_root_it_names_the_package_and_fails(bin_dir):
    stub(bin_dir, "id", "echo 1000")
    stub(bin_dir, "apt-get", f"echo apt-get called >> {bin_dir}/calls")
    done = make_promtool(bin_dir)
    assert done.returncode != 0
    assert "missing: install Debian's prometheus package (apt-get install prometheus)" in done.stdout
    assert not (bin_dir / "calls").exists()


def test_promtool_without_prometheus_for_the_demo_is_installed_too(bin_dir):
    calls = bin_dir / "calls"
    stub(bin_dir, "promtool", "exit 0")
    stub(bin_dir, "id", "echo 0")
    stub(bin_dir, "apt-get", f'echo "$@" >> {calls}')
    done = make_promtool(bin_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls.read_text().splitlines() == [INSTALL]


def test_root_without_apt_get_names_the_package_and_fails(bin_dir):
    stub(bin_dir, "id", "echo 0")
    done = make_promtool(bin_dir)
    assert done.returncode != 0
    assert "install Debian's prometheus package" in done.stdout


def test_make_test_test_fast_and_demo_depend_on_it():
    for target in ("test", "test-fast", "demo"):
        done = subprocess.run(
            [MAKE, "-f", str(ROOT / "Makefile"), "-p", "-n", "-q", target],
            cwd=ROOT, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        rule = next(line for line in done.stdout.splitlines() if line.startswith(f"{target}:"))
        assert "promtool" in rule.split(":", 1)[1].split(), rule
