"""``trainyard cluster up`` and ``down``: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler on loopback.

Started as envtest starts them (controller-runtime@v0.24.1:pkg/internal/testing/controlplane:
explicit flags, a generated PKI, RBAC), plus what envtest leaves out so that pods can be created
as in a cluster: the ServiceAccount admission plugin stays on and kube-controller-manager runs
(it creates each namespace's ``default`` ServiceAccount and the tokens pods mount). The API
server emulates the cluster's declared Kubernetes minor (``--emulated-version``: a v1.36 server
serves the APIs and feature defaults of 1.33..1.36), so a 1.33 cluster is refused an API that
arrived later.

Everything lives in DIR: ``cluster.json`` (what runs: pids with their start times, ports), the
PKI, etcd's data, one log per process and ``kubeconfig``. ``down`` stops exactly what ``up``
recorded. DIR, the folders above it and ``cluster.json`` are trusted only when nobody but the
caller can change them (folder.py); every process listens on 127.0.0.1 alone, and etcd serves
TLS to clients with a certificate from its own CA only (pki.py).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from trainyard.cluster import components, gitrepo, pki, services
from trainyard.cluster.client import ApiError, Kube
from trainyard.cluster.folder import check_folder, check_private_file, secure_folder
from trainyard.cluster.processes import Daemon, free_port, listening, port_in_use, spawn, wait_for
from trainyard.contract.errors import UserError
from trainyard.contract.files import FileTooLarge, read_bounded, write_private

STATE = "cluster.json"
SERVICE_CIDR = "10.0.0.0/24"  # envtest's; nothing routes it (no kube-proxy)
READY_TIMEOUT = 60.0

Progress = Callable[[str], None]


class ClusterError(UserError):
    exit_code = 1


@dataclass
class State:
    """What ``up`` started in DIR; written to DIR/cluster.json."""

    cluster: str
    kubernetes: str  # the emulated minor, e.g. "1.33"
    server: str
    daemons: list[Daemon] = field(default_factory=list)
    admission: str = "webhook"
    notes: list[str] = field(default_factory=list)

    def save(self, folder: Path) -> None:
        data = {
            "cluster": self.cluster,
            "kubernetes": self.kubernetes,
            "server": self.server,
            "admission": self.admission,
            "daemons": [d.to_json() for d in self.daemons],
            "notes": self.notes,
        }
        write_private(folder / STATE, (json.dumps(data, indent=2) + "\n").encode())

    @classmethod
    def load(cls, folder: Path) -> State | None:
        """The state in ``folder``, trusted only if the caller owns it and nobody else may write it
        (it names the processes ``down`` signals); None if there is none."""
        path = folder / STATE
        try:
            check_private_file(path)
        except FileNotFoundError:
            return None
        try:
            data = json.loads(read_bounded(path, what="the state file"))
            return cls(
                cluster=str(data["cluster"]),
                kubernetes=str(data["kubernetes"]),
                server=str(data["server"]),
                admission=str(data.get("admission", "webhook")),
                daemons=[Daemon.from_json(d) for d in data.get("daemons", [])],
                notes=[str(n) for n in data.get("notes", [])],
            )
        except FileTooLarge as exc:
            raise UserError(f"{exc}; it is not a state file written by trainyard cluster up") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"{path}: not a state file written by trainyard cluster up ({exc})") from None


@dataclass(frozen=True)
class Paths:
    dir: Path

    @property
    def pki(self) -> pki.Pki:
        return pki.Pki(self.dir / "pki")

    @property
    def etcd_data(self) -> Path:
        return self.dir / "etcd"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    def kubeconfig_for(self, identity: str) -> Path:
        return self.dir / "kubeconfigs" / f"{identity}.kubeconfig"


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str = "admin") -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "trainyard", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "trainyard", "context": {"cluster": "trainyard", "user": user}}],
        "current-context": "trainyard",
    }
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())


def admin(folder: Path) -> Kube:
    """A client of the cluster in ``folder`` as its admin."""
    folder = _existing(folder)
    state = State.load(folder)
    if state is None:
        raise UserError(f"{folder}: no cluster here (no {STATE}); start one with trainyard cluster up --dir {folder}")
    return Kube(state.server, Paths(folder).pki.client_context())


# --- the processes -----------------------------------------------------------------------------


def _fail(daemon: Daemon, what: str) -> ClusterError:
    tail = daemon.log_tail()
    hint = ""
    if "address already in use" in tail:
        hint = f" (a port it needs is in use: {', '.join(map(str, daemon.ports))}; free it or choose another)"
    return ClusterError(f"{daemon.name} {what}{hint}; the end of {daemon.log}:\n{tail.strip()[-2000:]}")


def wait_ready(daemon: Daemon, ready: Callable[[], bool], what: str, timeout: float = READY_TIMEOUT) -> None:
    """Poll ``ready`` until true; a clear error with the end of the log if ``daemon`` dies or stalls.
    A daemon that does not become ready, or whose wait is interrupted (Ctrl-C, SIGTERM), is
    stopped: its caller may not have recorded it anywhere ``down`` would find it yet."""

    def check() -> bool:
        if not daemon.alive():
            raise _fail(daemon, f"exited before {what}")
        try:
            return ready()
        except (httpx.HTTPError, OSError, ApiError):
            return False

    try:
        wait_for(check, timeout=timeout, what=what, interval=0.1)
    except TimeoutError:
        error = _fail(daemon, f"did not become ready ({what}) within {timeout:g} s")
        daemon.stop()
        raise error from None
    except BaseException:
        daemon.stop()
        raise


def etcd_url(etcd: Daemon) -> str:
    return f"https://127.0.0.1:{etcd.ports[0]}"


def _start_etcd(kube: str, paths: Paths) -> Daemon:
    client, peer = free_port(), free_port()
    url = f"https://127.0.0.1:{client}"
    p = paths.pki
    server_cert, server_key = p.cert(pki.ETCD_SERVER), p.key(pki.ETCD_SERVER)
    # The flags envtest gives etcd (controlplane/etcd.go), with TLS as kubeadm gives it
    # (k8s.io/kubernetes@v1.36.5:cmd/kubeadm/app/phases/etcd/local.go getEtcdCommand): clients and
    # the peer port need a certificate from etcd's CA. No fsync: the data dies with the cluster.
    argv = [
        kube,
        "etcd",
        f"--data-dir={paths.etcd_data}",
        f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}",
        f"--listen-peer-urls=https://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=https://127.0.0.1:{peer}",
        f"--initial-cluster=default=https://127.0.0.1:{peer}",
        f"--cert-file={server_cert}",
        f"--key-file={server_key}",
        "--client-cert-auth=true",
        f"--trusted-ca-file={p.etcd_ca}",
        f"--peer-cert-file={server_cert}",
        f"--peer-key-file={server_key}",
        "--peer-client-cert-auth=true",
        f"--peer-trusted-ca-file={p.etcd_ca}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]
    daemon = spawn("etcd", argv, paths.logs / "etcd.log", ports=(client, peer))
    context = p.etcd_client_context()

    def healthy() -> bool:
        return httpx.get(f"{url}/health", timeout=1, verify=context).json().get("health") == "true"

    wait_ready(daemon, healthy, "etcd /health")
    return daemon


def _apiserver_argv(kube: str, paths: Paths, etcd: Daemon, port: int, version: str, extra: list[str]) -> list[str]:
    p = paths.pki
    return [
        # its own /etc/hosts, where the EndpointSlices of locally served Services lead (services.py)
        *services.own_hosts(services.write_hosts(paths.dir / "hosts", {services.HOST: "127.0.0.1"})),
        kube,
        "kube-apiserver",
        f"--etcd-servers={etcd_url(etcd)}",
        f"--etcd-cafile={p.etcd_ca}",
        f"--etcd-certfile={p.cert(pki.ETCD_CLIENT)}",
        f"--etcd-keyfile={p.key(pki.ETCD_CLIENT)}",
        "--bind-address=127.0.0.1",
        # without it the server looks for an address on the default route (apiserver@v0.36.5:
        # pkg/server/options/server_run_options.go); the kubernetes Service's endpoints cannot be
        # loopback, so the endpoint reconciler is off
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--secure-port={port}",
        f"--cert-dir={paths.dir / 'pki'}",
        f"--tls-cert-file={p.cert('apiserver')}",
        f"--tls-private-key-file={p.key('apiserver')}",
        f"--client-ca-file={p.ca}",
        # the aggregation layer's front proxy, as kubeadm configures it
        # (k8s.io/kubernetes@v1.36.5: cmd/kubeadm/app/phases/controlplane/manifests.go)
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--requestheader-client-ca-file={p.front_proxy_ca}",
        f"--requestheader-allowed-names={pki.FRONT_PROXY_CLIENT}",
        f"--proxy-client-cert-file={p.cert(pki.FRONT_PROXY_CLIENT)}",
        f"--proxy-client-key-file={p.key(pki.FRONT_PROXY_CLIENT)}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer=https://127.0.0.1:{port}",
        f"--service-account-key-file={p.service_account_pub}",
        f"--service-account-signing-key-file={p.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--allow-privileged=true",
        f"--emulated-version=kube={version}",
        # Services resolved to their EndpointSlices, not their cluster IPs (services.py)
        "--enable-aggregator-routing=true",
        *extra,
    ]


def _start_apiserver(
    kube: str, paths: Paths, etcd: Daemon, version: str, port: int, extra: list[str]
) -> tuple[Daemon, str]:
    if port and port_in_use(port):
        raise ClusterError(f"port {port} (--port) is in use on 127.0.0.1; choose another or leave --port out")
    port = port or free_port()
    argv = _apiserver_argv(kube, paths, etcd, port, version, extra)
    daemon = spawn("kube-apiserver", argv, paths.logs / "kube-apiserver.log", ports=(port,))
    server = f"https://127.0.0.1:{port}"
    with Kube(server, paths.pki.client_context(), timeout=2) as kube:
        wait_ready(daemon, lambda: kube.http.get("/readyz").status_code == 200, "kube-apiserver /readyz")
    return daemon, server


def _start_component(kube: str, paths: Paths, server: str, version: str, name: str, flags: list[str]) -> Daemon:
    """kube-controller-manager or kube-scheduler: its kubeconfig (kubeadm's identity, pki.CLIENTS),
    on loopback, without leader election, emulating the cluster's minor as its API server does (a
    v1.36 controller would watch APIs a 1.33 server does not serve, e.g. resource.k8s.io/v1, and
    wait forever)."""
    p = paths.pki
    config = paths.kubeconfig_for(name)
    write_kubeconfig(config, server, p.ca, p.cert(name), p.key(name), name)
    port = free_port()
    argv = [
        kube,
        name,
        f"--kubeconfig={config}",
        f"--authentication-kubeconfig={config}",
        f"--authorization-kubeconfig={config}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--emulated-version=kube={version}",
        *flags,
    ]
    return spawn(name, argv, paths.logs / f"{name}.log", ports=(port,))


def _start_controller_manager(kube: str, paths: Paths, server: str, version: str) -> Daemon:
    p = paths.pki
    flags = [
        f"--service-account-private-key-file={p.service_account_key}",
        f"--root-ca-file={p.ca}",
        "--use-service-account-credentials=true",
        # no cloud, no node CIDRs: node-ipam has nothing to do (CONTROL-PLANE notes, app/core.go)
        "--controllers=*,-node-ipam-controller",
    ]
    return _start_component(kube, paths, server, version, "kube-controller-manager", flags)


def _start_scheduler(kube: str, paths: Paths, server: str, version: str) -> Daemon:
    return _start_component(kube, paths, server, version, "kube-scheduler", [])


# --- up and down -------------------------------------------------------------------------------


def check_free(folder: Path, progress: Progress = print) -> None:
    """Refuse a DIR that runs a cluster; clear one whose cluster died (stale)."""
    state = State.load(folder)
    if state is not None:
        running = [d for d in state.daemons if d.alive()]
        if running:
            names = ", ".join(f"{d.name} (pid {d.pid})" for d in running)
            raise UserError(
                f"{folder} already runs cluster {state.cluster} at {state.server}: {names}; "
                f"stop it first with: trainyard cluster down --dir {folder}"
            )
        progress(f"{folder}: the cluster {state.cluster} recorded here is no longer running; starting afresh")
        clear(folder)
        return
    if folder.exists() and any(folder.iterdir()):
        raise UserError(
            f"{folder} is not empty and holds no cluster started by trainyard cluster up; choose an empty or new folder"
        )


def clear(folder: Path, keep_logs: bool = False) -> None:
    """Remove what ``up`` writes in ``folder`` (only that)."""
    paths = Paths(folder)
    subs = [paths.etcd_data, paths.dir / "pki", paths.bin, paths.dir / "kubeconfigs", paths.dir / "webhook",
            paths.dir / "argocd"]  # fmt: skip
    for sub in subs + ([] if keep_logs else [paths.logs]):
        shutil.rmtree(sub, ignore_errors=True)
    for f in (paths.kubeconfig, folder / STATE, folder / "admission.yaml", folder / "webhook-clients.kubeconfig",
              folder / "hosts"):  # fmt: skip
        f.unlink(missing_ok=True)


@dataclass
class Started:
    """The control plane ``start`` brought up; ``state`` is saved in DIR as each process starts."""

    folder: Path
    state: State
    paths: Paths
    served: gitrepo.Served | None = None  # the repository Argo CD reads, where it runs

    def client(self) -> Kube:
        return Kube(self.state.server, self.paths.pki.client_context())


def start(
    folder: Path,
    cluster: str,
    version: str,
    *,
    port: int = 0,
    prepare: Callable[[Paths, State], list[str]] | None = None,
    wait_controllers: bool = True,
    checked: bool = False,
    progress: Progress = print,
) -> Started:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler; on any failure nothing is
    left running.

    ``prepare`` runs once the PKI exists and returns more kube-apiserver flags (files it wrote);
    a process it starts goes into the state it is given, so that a failure stops it too. Without
    ``wait_controllers`` kube-controller-manager and the scheduler are started, not waited for.
    ``checked``: the caller ran :func:`check_free` (and may have written into DIR since)."""
    folder = secure_folder(folder)
    if not checked:
        check_free(folder, progress)
    paths = Paths(folder)
    kube = components.command("kube-apiserver", progress=progress).rsplit("/", 1)[0] + "/kube"
    state = State(cluster=cluster, kubernetes=version, server="")
    try:
        pki.create(paths.dir / "pki")
        flags = prepare(paths, state) if prepare else []
        t0 = time.monotonic()
        etcd = _start_etcd(kube, paths)
        state.daemons.append(etcd)
        state.save(folder)
        apiserver, server = _start_apiserver(kube, paths, etcd, version, port, flags)
        state.daemons.append(apiserver)
        state.server = server
        state.save(folder)
        progress(
            f"kube-apiserver {components.KUBERNETES_VERSION} (emulating {version}) ready at {server} "
            f"in {time.monotonic() - t0:.1f} s"
        )
        p = paths.pki
        write_kubeconfig(paths.kubeconfig, server, p.ca, p.cert("admin"), p.key("admin"))
        kcm = _start_controller_manager(kube, paths, server, version)
        state.daemons.append(kcm)
        state.daemons.append(_start_scheduler(kube, paths, server, version))
        state.save(folder)
        if wait_controllers:
            with Kube(server, p.client_context()) as k:
                # KCM is working once the ServiceAccount controller made default's ServiceAccount
                wait_ready(
                    kcm,
                    lambda: bool(k.get("/api/v1/namespaces/default/serviceaccounts/default")),
                    "the default ServiceAccount",
                )
        _link_tools(paths, kube)
    except BaseException:
        stop(state)
        state.daemons.clear()
        state.save(folder)
        raise
    return Started(folder, state, paths)


def _link_tools(paths: Paths, kube: str) -> None:
    """DIR/bin/kubectl: the pinned kubectl, for ``PATH=DIR/bin:$PATH``."""
    paths.bin.mkdir(exist_ok=True)
    link = paths.bin / "kubectl"
    link.unlink(missing_ok=True)
    link.symlink_to(Path(kube).parent / "kubectl")


def stop(state: State) -> list[str]:
    """Stop every recorded process, last started first; return what was stopped."""
    stopped = []
    for daemon in reversed(state.daemons):
        if daemon.alive():
            daemon.stop()
            stopped.append(f"{daemon.name} (pid {daemon.pid})")
    return stopped


def _existing(folder: Path) -> Path:
    """``folder`` resolved and checked (folder.py); a UserError if there is none."""
    try:
        return check_folder(folder)
    except FileNotFoundError:
        raise UserError(f"{folder}: no such folder, so no cluster runs there") from None


def down(folder: Path) -> list[str]:
    """Stop the cluster in ``folder``; its PKI, data and state are removed, its logs kept."""
    folder = _existing(folder)
    state = State.load(folder)
    if state is None:
        raise UserError(f"{folder}: no cluster here (no {STATE}); nothing to stop")
    stopped = stop(state)
    busy = [port for d in state.daemons for port in d.ports if listening(port)]
    clear(folder, keep_logs=True)
    if busy:
        raise ClusterError(f"stopped, but something still listens on ports {busy}")
    return stopped
