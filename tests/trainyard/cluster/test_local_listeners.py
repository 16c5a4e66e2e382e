"""A local cluster listens on loopback, and its etcd answers only kube-apiserver's certificate.

The dev cluster is started as ``trainyard cluster up`` starts it (control plane, the fabric
webhook, Kueue, JobSet, Trainer and the training operator), with Argo CD, Redis and the upstream
sources its repo-server fetches (on a loopback address of their own) beside it; then every
listening socket of every process they started (their whole sessions, children included) is
read from /proc/net/{tcp,tcp6,udp,udp6} and mapped to its process through /proc/PID/fd. Two
listeners cannot be moved, because upstream binds them to every address in the code: Argo CD's
application controller's metrics (argo-cd@v3.6.2:controller/appcontroller.go,
``0.0.0.0:<metrics-port>``) and the training operator's webhook server (training-operator@v1.9.4:
cmd/training-operator.v1/main.go gives controller-runtime's webhook server a port and no host).
They are named here exactly, so that any other one fails the test, and so does either of them
once upstream lets it be moved.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from tests.trainyard.cluster.conftest import REPO_ROOT
from trainyard.cluster import argocd_daemons as argocd_itself
from trainyard.cluster import controlplane, pki
from trainyard.cluster.up import up
from trainyard.repo.model import repository

pytestmark = pytest.mark.cluster

EXPECTED = {
    "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "trainyard-webhook", "kueue",
    "trainer-controller-manager", "jobset", "training-operator.v1", "redis", "argocd-repo-server",
    "argocd-application-controller", "argocd-applicationset-controller", "upstream-sources",
}  # fmt: skip


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("listeners")
    started = up(repository.load(REPO_ROOT), "dev", base / "cluster", progress=lambda _: None)
    try:
        argo = argocd_itself.start(started, progress=lambda _: None)
        yield started, argo
    finally:
        controlplane.down(started.folder)


def _session(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _sockets_of(sessions: dict[int, str]) -> dict[int, str]:
    """Socket inode -> the name of the daemon whose session holds it."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (name := sessions.get(_session(int(entry)) or -1)) is None:
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue  # exited meanwhile
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found[int(target[8:-1])] = name
    return found


def _address(hex_address: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """/proc/net/tcp's ``0100007F:1F90``: the address in host order per 32-bit word, then the port."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words), int(port, 16)


def _listening() -> list[tuple[str, int, ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """(protocol, inode, address, port) of every listening TCP socket and unconnected UDP socket."""
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        for line in lines:
            f = line.split()
            local, remote, state, inode = f[1], f[2], f[3], int(f[9])
            listening = state == "0A" if proto.startswith("tcp") else _address(remote)[1] == 0
            if listening and inode:
                address, port = _address(local)
                out.append((proto, inode, address, port))
    return out


def _loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_every_listener_of_a_local_cluster_is_on_loopback(running):
    started, argo = running
    daemons = started.state.daemons
    sessions = {d.pid: d.name for d in daemons}
    assert set(sessions.values()) == EXPECTED
    owners = _sockets_of(sessions)
    by_daemon: dict[str, list[str]] = defaultdict(list)
    exposed = set()
    for proto, inode, address, port in _listening():
        name = owners.get(inode)
        if name is None:
            continue  # another process's
        by_daemon[name].append(f"{proto} {address}:{port}")
        if not _loopback(address):
            exposed.add((name, port))
    assert set(by_daemon) == EXPECTED, f"no listener found for {EXPECTED - set(by_daemon)}"
    with started.client() as kube:  # where the operator's webhook Service leads (services.py)
        routed = kube.get("/apis/discovery.k8s.io/v1/namespaces/kubeflow/endpointslices/training-operator-local")
    operator_webhook = routed["ports"][0]["port"]
    assert exposed == {
        ("argocd-application-controller", argo.controller.ports[0]),
        ("training-operator.v1", operator_webhook),
    }, dict(by_daemon)


def _etcd(started) -> tuple[str, int]:
    etcd = next(d for d in started.state.daemons if d.name == "etcd")
    return controlplane.etcd_url(etcd), etcd.ports[1]


def test_etcd_refuses_a_client_without_its_certificate(running):
    started, _ = running
    p: pki.Pki = started.paths.pki
    url, peer = _etcd(started)
    assert httpx.get(f"{url}/health", verify=p.etcd_client_context(), timeout=10).json()["health"] == "true"

    trust_only = ssl.create_default_context(cafile=str(p.etcd_ca))
    admin = ssl.create_default_context(cafile=str(p.etcd_ca))
    admin.load_cert_chain(str(p.cert("admin")), str(p.key("admin")))  # the cluster's CA, not etcd's
    for context in (trust_only, admin):
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/health", verify=context, timeout=10)
        with (
            pytest.raises((ssl.SSLError, ConnectionResetError)),  # the peer port too
            socket.create_connection(("127.0.0.1", peer), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            tls.sendall(b"GET /version HTTP/1.1\r\nHost: localhost\r\n\r\n")
            tls.recv(1)
    try:  # TLS only: plain HTTP is closed or answered with an error
        plain = httpx.get(url.replace("https://", "http://") + "/health", timeout=10)
    except httpx.TransportError:
        return
    assert plain.status_code != 200 and "health" not in plain.text


def test_keys_and_tokens_in_dir_are_readable_by_their_owner_alone(running):
    started, _ = running
    secrets = [
        p
        for p in started.folder.rglob("*")
        if p.is_file() and not p.is_symlink()
        if p.suffix in (".key", ".kubeconfig") or p.name in ("token", "kubeconfig")
    ]
    assert len(secrets) > 10
    loose = {str(p): oct(p.stat().st_mode & 0o777) for p in secrets if p.stat().st_mode & 0o077}
    assert not loose
    assert started.folder.stat().st_mode & 0o777 == 0o700
