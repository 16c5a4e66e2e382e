"""Processes a local cluster starts and must be able to stop from another command.

``trainyard cluster up`` returns while etcd, kube-apiserver and the rest keep running; ``down``
runs later in another process. So each one is started in a session of its own (a signal to the
terminal that ran ``up`` does not reach it) and recorded with its start time from /proc, so that
``down`` never signals a process that merely reused the pid, nor a group that is not its own
(:func:`is_ours`).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# The kubelet's CrashLoopBackOff, for an exited container it starts again: the first restart at
# once, then after 10 s, doubling up to 5 minutes; a container that ran 10 minutes (twice the
# cap) since its last start begins again at once. k8s.io/kubernetes@v1.36.5:
# pkg/kubelet/kubelet.go (initialCrashLoopBackOff, MaxCrashLoopBackOff =
# pkg/kubelet/apis/config/v1beta1 MaxContainerBackOff), kuberuntime/kuberuntime_manager.go
# doBackOff over k8s.io/client-go@v0.36.5 util/flowcontrol/backoff.go (Next, IsInBackOffSince,
# hasExpired).
CRASHLOOP_INITIAL_S = 10
CRASHLOOP_MAX_S = 300


class CrashLoopBackOff:
    """When the kubelet starts one container again after it exited."""

    def __init__(self) -> None:
        self.backoff = 0.0
        self.last_start: float | None = None

    def restart_at(self, exited: float) -> float:
        """The time the container that exited at ``exited`` is started again (and it is)."""
        if self.last_start is None or exited - self.last_start > 2 * CRASHLOOP_MAX_S:
            start, self.backoff = exited, CRASHLOOP_INITIAL_S
        else:
            start, self.backoff = exited + self.backoff, min(self.backoff * 2, CRASHLOOP_MAX_S)
        self.last_start = start
        return start


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")  # Linux: the ports connect() picks from
LOWEST_PORT = 10000  # below: well-known and registered services' ports


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds now, for a process started next to bind. Taken below
    the ephemeral range where it can: a port the kernel hands out for binding port 0 comes from the
    range outbound connections take their source ports from, and on a busy machine one of them took
    a daemon's port between this choice and its bind (a controller then failed 'address already in
    use'). Port 0's choice when no port below the range is free after a few tries."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(32 if low > LOWEST_PORT else 0):
        port = rng.randrange(LOWEST_PORT, low)
        if not port_in_use(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` (a closed connection in TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def listening(port: int) -> bool:
    """Whether a process accepts connections on 127.0.0.1:``port``. Unlike ``port_in_use``, another
    process's outbound connection that happens to have ``port`` as its ephemeral source port does
    not count (on a loaded machine one often has: a stopped daemon's port is free to the kernel)."""
    with socket.socket() as s:
        s.settimeout(2)
        if s.connect_ex(("127.0.0.1", port)) != 0:
            return False
        return s.getsockname() != s.getpeername()  # TCP's simultaneous open: a socket connected to itself


def wait_for(
    condition: Callable[[], T],
    timeout: float = 15.0,
    what: str = "condition",
    proc: subprocess.Popen | None = None,
    interval: float = 0.05,
) -> T:
    """Poll ``condition`` until it returns something true. TimeoutError naming ``what`` after
    ``timeout`` seconds, RuntimeError at once if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            value = condition()
            if value:
                return value
            raise RuntimeError(f"process exited with status {proc.returncode} before: {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for: {what}")
        time.sleep(interval)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (field 3 on), None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited, not yet reaped: as good as gone
        return None
    return fields


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if gone."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def is_ours(pid: int, started: int) -> bool:
    """Whether ``pid`` is still the process :func:`spawn` started: the same start time (a pid
    reused since has another), still the leader of its own process group (spawn made it one, so
    the group ``stop`` signals is exactly its own) and running as this user."""
    fields = _stat_fields(pid)
    if fields is None or int(fields[19]) != started or int(fields[2]) != pid:  # field 5: the group
        return False
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:
        return False


@dataclass
class Daemon:
    """One started process: its name, pid, start time, log file and the ports it listens on; for a
    process that plays a Deployment's container, the Deployment (``namespace/name``, whose pods the
    sandbox's kubelet reports as this process) and the port its readiness probe is answered on."""

    name: str
    pid: int
    started: int
    log: str
    ports: tuple[int, ...] = ()
    plays: str = ""
    probe_port: int = 0

    def alive(self) -> bool:
        return is_ours(self.pid, self.started)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            text = Path(self.log).read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to its process group, SIGKILL after ``timeout`` seconds, until no process of the
        group is left (a wrapper that dies at once may leave its child still shutting down)."""
        if not self.alive():
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while _group_alive(self.pid) and time.monotonic() < deadline:
                _reap(self.pid)
                time.sleep(0.05)
            if not _group_alive(self.pid):
                return
        raise RuntimeError(f"{self.name} (pid {self.pid}) did not stop")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Daemon:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            started=int(data["started"]),
            log=str(data["log"]),
            ports=tuple(int(p) for p in data.get("ports", ())),
            plays=str(data.get("plays", "")),
            probe_port=int(data.get("probe_port", 0)),
        )


def _group_alive(pgid: int) -> bool:
    """A process of group ``pgid`` is left (its leader's zombie, once reaped, is not)."""
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our child (started by this process)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def spawn(
    name: str,
    argv: list[str],
    log: Path,
    ports: tuple[int, ...] = (),
    env: dict | None = None,
    *,
    plays: str = "",
    probe_port: int = 0,
) -> Daemon:
    """Start ``argv`` in a new session, stdout and stderr to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    started = start_time(proc.pid)
    if started is None:  # exited at once: report it through the caller's readiness check
        started = -1
    return Daemon(name, proc.pid, started, str(log), ports, plays, probe_port)
