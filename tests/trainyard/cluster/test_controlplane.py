"""The local control plane's life: start, refuse a busy DIR, recover a stale one, stop everything.

Real etcd, kube-apiserver and kube-controller-manager, built from kube/go.mod (the first run of the
suite builds them, with progress on stderr).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_demo import processes_under
from trainyard.cluster import components, controlplane
from trainyard.cluster.processes import listening, start_time, wait_for
from trainyard.contract.errors import UserError
from trainyard.repo.model import gomodules

pytestmark = pytest.mark.cluster
REPO_ROOT = Path(__file__).resolve().parents[3]


def _pids(folder: Path) -> list[int]:
    state = json.loads((folder / "cluster.json").read_text())
    return [d["pid"] for d in state["daemons"]]


def _gone(pids: list[int]) -> bool:
    return all(start_time(pid) is None for pid in pids)


def test_start_serves_the_pinned_version_and_down_leaves_nothing(tmp_path: Path):
    started = controlplane.start(tmp_path / "c", "t", "1.36", progress=lambda _: None)
    folder = started.folder
    pids = _pids(folder)
    ports = [p for d in started.state.daemons for p in d.ports]
    if len(pids) != 4:  # nothing left running when the test fails
        controlplane.down(folder)
    assert len(pids) == 4 and not _gone(pids)
    with started.client() as kube:
        assert kube.get("/version")["gitVersion"] == components.KUBERNETES_VERSION
    # a person can point the pinned kubectl at it
    out = subprocess.run(
        [str(folder / "bin" / "kubectl"), "--kubeconfig", str(folder / "kubeconfig"), "get", "serviceaccounts",
         "-n", "default", "-o", "name"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert out.split() == ["serviceaccount/default"]  # made by the real kube-controller-manager

    stopped = controlplane.down(folder)
    assert sorted(s.split()[0] for s in stopped) == [
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"
    ]  # fmt: skip
    assert _gone(pids)
    assert not [p for p in ports if listening(p)]
    assert not (folder / "cluster.json").exists() and not (folder / "etcd").exists()
    assert (folder / "logs" / "kube-apiserver.log").stat().st_size > 0  # kept for a post-mortem
    with pytest.raises(UserError, match="nothing to stop"):
        controlplane.down(folder)


def test_up_twice_on_one_dir_is_refused_and_a_stale_dir_is_cleared(tmp_path: Path):
    folder = tmp_path / "c"
    started = controlplane.start(folder, "t", "1.36", progress=lambda _: None)
    try:
        with pytest.raises(
            UserError, match=r"already runs cluster t at https://127\.0\.0\.1:\d+.*trainyard cluster down"
        ):
            controlplane.start(folder, "t", "1.36", progress=lambda _: None)
        # the processes die without `down` (a reboot, kill -9): the DIR is stale, not busy
        pids = _pids(folder)
        for pid in pids:
            os.killpg(pid, signal.SIGKILL)
        for d in started.state.daemons:
            d.stop()
        said: list[str] = []
        controlplane.start(folder, "t", "1.36", progress=said.append)
        assert any("no longer running; starting afresh" in s for s in said)
        assert set(_pids(folder)).isdisjoint(pids)
    finally:
        controlplane.down(folder)


def test_a_foreign_folder_is_refused(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty and holds no cluster"):
        controlplane.start(tmp_path, "t", "1.36", progress=lambda _: None)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_port_in_use_is_named_and_nothing_is_left_running(tmp_path: Path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port} .* is in use"):
            controlplane.start(tmp_path / "c", "t", "1.36", port=port, progress=lambda _: None)
    state = json.loads((tmp_path / "c" / "cluster.json").read_text())
    assert state["daemons"] == []  # etcd, started first, was stopped again


def test_an_api_server_that_dies_is_reported_with_its_log(tmp_path: Path):
    folder = tmp_path / "c"
    with pytest.raises(
        controlplane.ClusterError, match=r"(?s)kube-apiserver exited before.*unknown flag: --no-such-flag"
    ):
        controlplane.start(folder, "t", "1.36", prepare=lambda _p, _s: ["--no-such-flag"], progress=lambda _: None)
    assert json.loads((folder / "cluster.json").read_text())["daemons"] == []


@pytest.mark.parametrize(("version", "served"), [("1.33", False), ("1.36", True)])
def test_the_api_server_emulates_the_declared_version(tmp_path: Path, version: str, served: bool):
    """MutatingAdmissionPolicy is GA in 1.36 and absent from a 1.33 cluster's API (alpha then):
    a 1.33 cluster's control plane refuses what its real counterpart would."""
    started = controlplane.start(tmp_path / "c", "t", version, progress=lambda _: None)
    try:
        with started.client() as kube:
            kinds = {r["kind"] for r in kube.get("/apis/admissionregistration.k8s.io/v1")["resources"]}
            assert ("MutatingAdmissionPolicy" in kinds) is served
            assert "ValidatingAdmissionPolicy" in kinds
    finally:
        controlplane.down(started.folder)


def test_without_go_the_error_says_what_to_install(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gomodules, "GO_FALLBACKS", ())
    with pytest.raises(UserError, match=r"Go toolchain is not on PATH.*install Go >= 1\.26"):
        components.build("kube")


def test_a_sigterm_while_kube_apiserver_starts_leaves_nothing_running(tmp_path: Path):
    """SIGTERM runs the cleanup Ctrl-C runs; a daemon whose readiness was being awaited, recorded
    nowhere yet, is stopped too (it once kept running, orphaned, after the command had exited)."""
    folder = tmp_path / "c"
    argv = [sys.executable, "-m", "trainyard.cli", "cluster", "up", "--cluster", "dev", "--dir", str(folder)]
    up = subprocess.Popen(
        [*argv, "--no-controllers", "--no-argocd", "--no-kubelet"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = folder / "logs" / "kube-apiserver.log"
    wait_for(lambda: log.exists() or up.poll() is not None, timeout=120, what="kube-apiserver started", interval=0.02)
    up.send_signal(signal.SIGTERM)
    _, err = up.communicate(timeout=60)
    assert up.returncode == 143, err
    assert err.endswith("terminated\n")
    assert processes_under(folder) == []
