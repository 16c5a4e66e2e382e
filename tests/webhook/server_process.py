"""A real ``trainyard serve`` process for tests, and Kubernetes-style volume updates.

``AtomicDir`` writes files the way the kubelet updates Secret and ConfigMap volumes: into a new
timestamped directory, then an atomic rename of the ``..data`` symlink, with each visible file
a symlink through ``..data`` (pkg/volume/util/atomic_writer.go).
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, timeout: float = 15.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class AtomicDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.generation = 0

    def write(self, files: dict[str, bytes]) -> None:
        self.generation += 1
        target = self.path / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        target.mkdir()
        for name, data in files.items():
            (target / name).write_bytes(data)
        tmp = self.path / "..data_tmp"
        os.symlink(target.name, tmp)
        os.replace(tmp, self.path / "..data")
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        for old in self.path.glob("..20*"):
            if old != target:
                for f in old.iterdir():
                    f.unlink()
                old.rmdir()


class Server:
    """``trainyard serve`` in a subprocess; ``client()`` speaks TLS verified against ``ca``."""

    def __init__(self, policies: Path, tls: Path, ca: Path, profile: str = "roce", log: Path | None = None) -> None:
        self.port = free_port()
        self.ca = ca
        self.base = f"https://127.0.0.1:{self.port}"
        self.log_path = log
        self.log = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainyard.cli",
                "serve",
                "--policies",
                str(policies),
                "--profile",
                profile,
                "--tls-dir",
                str(tls),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--reload-interval",
                "0.1",
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=self.log,
        )
        with self.client() as c:
            wait_for(lambda: self._healthy(c), what="the webhook to answer /healthz")

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base, verify=self.ssl_context(), timeout=10, **kwargs)

    def _healthy(self, c: httpx.Client) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}: {self.logs()}")
        try:
            return c.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def peer_certificate(self) -> bytes:
        with (
            socket.create_connection(("127.0.0.1", self.port)) as raw,
            self.ssl_context().wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            return tls.getpeercert(binary_form=True)

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        if self.log is not subprocess.DEVNULL:
            self.log.close()
        return code
