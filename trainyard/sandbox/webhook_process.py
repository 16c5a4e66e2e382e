"""Run ``trainyard serve`` as a local process: for the demo, the benchmarks and the tests.

The webhook is started exactly as in a cluster (same command, same TLS), on a free loopback
port, and callers talk to it with a client that verifies the server against the local CA.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import IO

import httpx

from trainyard.cluster.processes import free_port, wait_for


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class LocalWebhook:
    """``trainyard serve`` in a subprocess, ready when constructed; stop() drains it (SIGTERM)."""

    def __init__(
        self,
        policies: Path,
        tls: Path,
        ca: Path,
        profile: str,
        log: Path | None = None,
        reload_interval: float = 0.1,
        extra_args: tuple[str, ...] = (),
        startup_timeout: float = 30.0,
        cpus: set[int] | None = None,
        command: list[str] | None = None,
        server_name: str = "localhost",
        client_cert: tuple[Path, Path] | None = None,
    ) -> None:
        """``command`` replaces ``trainyard serve`` (the benchmark's floor server takes the same
        flags); ``cpus`` pins the server to those cores. ``server_name`` is the name the server's
        certificate must carry (``trainyard certs`` writes one for localhost and 127.0.0.1). The
        probes and metrics listen on ``probe_port`` (plain HTTP). ``client_cert`` (certificate,
        key) is presented by :meth:`client` and :meth:`ssl_context`, as kube-apiserver would to a
        server started with ``--client-ca``."""
        self.port = free_port()
        self.probe_port = free_port()
        self.ca = ca
        self.client_cert = client_cert
        self.base = f"https://127.0.0.1:{self.port}"
        self.log_path = log
        self._log: IO[bytes] | int = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
        argv = command or [sys.executable, "-m", "trainyard.cli", "serve"]
        argv += ["--policies", str(policies), "--profile", profile, "--tls-dir", str(tls)]
        argv += [
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--reload-interval",
            str(reload_interval),
            "--tls-server-name",
            server_name,
            "--probe-port",
            str(self.probe_port),
            *extra_args,
        ]
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=self._log, preexec_fn=pin)
        try:
            with self.client() as c:
                wait_for(lambda: self._healthy(c), timeout=startup_timeout, what="the webhook to answer /healthz")
        except BaseException:
            self.stop(signal.SIGKILL)
            raise

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if self.client_cert is not None:
            ctx.load_cert_chain(*self.client_cert)
        return ctx

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base, verify=self.ssl_context(), timeout=10, **kwargs)

    def _healthy(self, c: httpx.Client) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the webhook exited with status {self.proc.returncode}: {self.logs()[-2000:]}")
        try:
            return c.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def peer_certificate(self) -> bytes:
        """The certificate a new TLS connection is served (DER)."""
        with (
            socket.create_connection(("127.0.0.1", self.port)) as raw,
            self.ssl_context().wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            return tls.getpeercert(binary_form=True)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if not isinstance(self._log, int):
            self._log.close()
        return code

    def __enter__(self) -> LocalWebhook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
