"""Helpers for the trainer tests: real processes, real namespaces, waits on real conditions."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainyard.contract.metrics import ENV_METRICS_PORT
from trainyard.sandbox.processes import descendants, training_workers

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
PYTHON = sys.executable
# Variables a developer's shell (or a pod) may carry that would change what the tests run.
SCRUB = ("PET_", "MASTER_", "NCCL_", "GLOO_", "TRAINYARD_", "TORCHELASTIC_", "TORCH_DISABLE_SHARE")
SCRUB_EXACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB) and k not in SCRUB_EXACT}
    env["PYTHONUNBUFFERED"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""  # CPU and gloo, even on a machine with GPUs
    # runs side by side would share the default metrics port; a test that scrapes passes its own
    env[ENV_METRICS_PORT] = "off"
    env.update(extra)
    return env


def trainyard(*args: str) -> list[str]:
    return [PYTHON, "-m", "trainyard.cli", *args]


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line being written right now
            out.append(json.loads(line))
    return out


def events(path: Path, name: str) -> list[dict]:
    return [r for r in read_jsonl(path) if r.get("event") == name]


def steps(path: Path) -> list[dict]:
    return [r for r in read_jsonl(path) if "event" not in r]


def max_step(path: Path) -> int:
    return max((r["step"] for r in steps(path)), default=0)


def committed_steps(ckpt: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in ckpt.glob("step-*") if (p / ".metadata").is_file())


def worker_pids(launcher: int) -> dict[int, int]:
    """Global rank -> pid of the train processes torchrun (the exec'ed launcher) started."""
    return training_workers(descendants([launcher]))


class Run:
    """A ``trainyard launch`` (or any) process, its output captured to a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._fh = log.open("wb")
        self.proc = subprocess.Popen(
            argv, env=env, stdout=self._fh, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"{self.log.name}: still running after {timeout:.0f}s; output:\n{self.output()[-4000:]}")
        finally:
            self._fh.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        # torchrun starts each worker in a session of its own: kill them one by one.
        for pid in descendants([self.proc.pid]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)


@pytest.fixture
def runs() -> Iterator[Callable[..., Run]]:
    """Start processes that are killed (whole session) at the end of the test, pass or fail."""
    started: list[Run] = []

    def start(argv: list[str], env: dict[str, str], log: Path) -> Run:
        run = Run(argv, env, log)
        started.append(run)
        return run

    yield start
    for run in started:
        if run.proc.poll() is None:
            run.kill()


# ---------------------------------------------------------------------------------------- netns


def _can_netns() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, tmpfs mounts)"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    name = f"typrobe{uuid.uuid4().hex[:6]}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns is not usable here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


NETNS_SKIP = _can_netns()
needs_netns = pytest.mark.skipif(NETNS_SKIP is not None, reason=NETNS_SKIP or "")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs mounts, capability bounding set)")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Netns:
    """A network namespace with veth pairs whose host ends are removed on close."""

    def __init__(self) -> None:
        self.name = f"ty{uuid.uuid4().hex[:8]}"
        self.host_links: list[str] = []
        ip("netns", "add", self.name)
        ip("-n", self.name, "link", "set", "lo", "up")

    def veth(self, inside: str, address: str | None = "192.168.77.2/24", up: bool = True, peer_up: bool = True) -> str:
        host = f"v{uuid.uuid4().hex[:10]}"
        ip("link", "add", host, "type", "veth", "peer", "name", inside, "netns", self.name)
        self.host_links.append(host)
        if peer_up:
            ip("link", "set", host, "up")
        if address:
            ip("-n", self.name, "addr", "add", address, "dev", inside)
        if up:
            ip("-n", self.name, "link", "set", inside, "up")
        return host

    def exec(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def close(self) -> None:
        for link in self.host_links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@pytest.fixture
def netns() -> Iterator[Callable[[], Netns]]:
    made: list[Netns] = []

    def make() -> Netns:
        ns = Netns()
        made.append(ns)
        return ns

    yield make
    for ns in made:
        ns.close()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount small tmpfs file systems under tmp_path; unmounted at the end, pass or fail."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        target = tmp_path / f"shm-{len(mounted)}"
        target.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)], check=True)
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True)
