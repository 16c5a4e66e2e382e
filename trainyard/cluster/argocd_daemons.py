"""Argo CD itself on a local control plane: its application controller, repo-server and
ApplicationSet controller (built from kube/argocd/go.mod), Redis from Debian's package, and the
repository served to them from a git repository on disk.

They run as Argo CD's own development setup runs them outside a cluster (argo-cd@v3.6.2:Procfile):
``ARGOCD_FAKE_IN_CLUSTER=true`` with ``KUBECONFIG`` makes ``https://kubernetes.default.svc`` the
local API server; the repo-server listens in plain text on loopback (and Redis, with its
protected mode on); GnuPG is off. The repo-server runs the kustomize and Helm the repository
renders with (the pins of ``.venv/bin``) and Argo CD's git wrapper scripts from its module. The
processes join the cluster's state, so ``trainyard cluster down`` stops them too.

Argo CD's repo-server fetches every source by its URL. This repository is ``DIR/repo.git``, whose
``base/repo/repo.env`` names it (gitrepo.py). The upstream sources (GitHub tags, files
and release assets, chart repositories, OCI charts) are served under their own URLs from the
pinned releases by :mod:`trainyard.cluster.sources`: the repo-server runs in a mount namespace of
its own whose ``/etc/hosts`` sends those host names to the sources' loopback address, trusting only
the sources' CA (``SSL_CERT_FILE`` for Go: Argo CD, kustomize, Helm; ``GIT_SSL_CAINFO`` for git).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from trainyard.cluster import components, controlplane, services, sources
from trainyard.cluster.client import ApiError
from trainyard.cluster.controlplane import Started
from trainyard.cluster.processes import Daemon, free_port, spawn
from trainyard.contract.errors import UserError
from trainyard.repo.model import gomodules, kustomize, upstream

Progress = Callable[[str], None]
NAMESPACE = "argocd"
ARGO_MODULE = "github.com/argoproj/argo-cd/v3"
# the scripts the repo-server runs around git (argo-cd@v3.6.2:hack/, installed by its Dockerfile)
GIT_SCRIPTS = ("git-verify-wrapper.sh", "git-ask-pass.sh")
NO_PERSISTENCE = ("--save", "", "--appendonly", "no")  # Redis is a cache here


@dataclass
class Running:
    sources: Daemon
    redis: Daemon
    repo_server: Daemon
    controller: Daemon
    applicationset: Daemon


def _require(command: str, package: str) -> str:
    found = shutil.which(command)
    if not found:
        raise UserError(f"{command} is missing: install Debian's {package} package (apt-get install {package})")
    return found


def _ready(port: int, path: str = "/metrics") -> Callable[[], bool]:
    return lambda: httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200


def _secret(started: Started) -> None:
    """argocd-secret, which Argo CD's install creates and its settings read (the key only signs the
    API server's sessions, which do not run here)."""
    import secrets

    with started.client() as kube:
        kube.create_if_absent(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "argocd-secret", "namespace": NAMESPACE},
                "stringData": {"server.secretkey": secrets.token_hex(16)},
            }
        )


def _tools(into: Path) -> None:
    """Link into ``into`` the kustomize and helm the repository renders with (the pins of
    ``.venv/bin`` where installed), so Argo CD renders with the same ones."""
    build = kustomize.command()
    if build[1:] != ("build",):
        hint = kustomize.INSTALL_HINT
        raise UserError(f"Argo CD's repo-server runs kustomize itself, and only kubectl was found; {hint}")
    for name, path in (("kustomize", build[0]), ("helm", upstream.helm_command())):
        (into / name).unlink(missing_ok=True)
        (into / name).symlink_to(path)


def start(started: Started, *, progress: Progress = print) -> Running:
    """Start Redis and Argo CD's three components against ``started``."""
    redis = _require("redis-server", "redis-server")
    git = _require("git", "git")
    folder = components.build("argocd", progress=progress)  # one binary, a link per component name
    version = components._required(components.TARGETS["argocd"].module, ARGO_MODULE)
    hack = gomodules.cache_dir(gomodules.go_binary()) / f"{gomodules.escape(ARGO_MODULE)}@{version}" / "hack"
    home = started.folder / "argocd"
    for sub in ("bin", "tmp", "gpg/keys", "gpg/source", "tls", "ssh"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    for script in GIT_SCRIPTS:
        target = home / "bin" / script
        shutil.copyfile(hack / script, target)
        target.chmod(0o755)
    _tools(home / "bin")
    env = dict(
        os.environ,
        KUBECONFIG=str(started.paths.kubeconfig),
        PATH=os.pathsep.join([str(home / "bin"), str(Path(git).parent), os.environ.get("PATH", "")]),
        TMPDIR=str(home / "tmp"),  # the repo-server's clones
        ARGOCD_FAKE_IN_CLUSTER="true",
        ARGOCD_GPG_ENABLED="false",
        ARGOCD_GNUPGHOME=str(home / "gpg/keys"),
        ARGOCD_GPG_DATA_PATH=str(home / "gpg/source"),
        ARGOCD_TLS_DATA_PATH=str(home / "tls"),
        ARGOCD_SSH_DATA_PATH=str(home / "ssh"),
    )
    logs = started.paths.logs
    state = started.state
    ports = {name: free_port() for name in ("redis", "repo", "repo-metrics", "controller", "set", "set-probe", "hook")}

    def launch(
        name: str, argv: list[str], own: tuple[int, ...], ready: Callable[[], bool], what: str, env: dict | None = None
    ) -> Daemon:
        daemon = spawn(name, argv, logs / f"{name}.log", ports=own, env=env)
        state.daemons.append(daemon)
        state.save(started.folder)
        controlplane.wait_ready(daemon, ready, what, timeout=120)
        return daemon

    def answers() -> bool:
        return subprocess.run(["redis-cli", "-p", str(ports["redis"]), "ping"], capture_output=True).returncode == 0

    if os.geteuid() != 0:
        raise UserError("Argo CD's upstream sources listen on port 443: run as root")
    end = sources.prepare(home / "sources")
    trust = ssl.create_default_context(cafile=str(end.ca))
    sources_daemon = launch(
        "upstream-sources",
        [
            sys.executable,
            "-m",
            "trainyard.cluster.sources",
            "--address",
            end.address,
            "--cert",
            str(end.cert),
            "--key",
            str(end.key),
            "--cache",
            str(sources.cache_dir()),
        ],
        (),
        lambda: httpx.get(f"https://{end.address}/v2/", verify=trust, timeout=2).status_code == 200,
        "the upstream sources answering",
    )
    redis_addr = f"127.0.0.1:{ports['redis']}"
    repo_addr = f"127.0.0.1:{ports['repo']}"
    _secret(started)
    r = launch(
        "redis",
        # loopback only, and protected mode (no connections but from loopback while no password is set)
        [redis, "--port", str(ports["redis"]), "--bind", "127.0.0.1", "--protected-mode", "yes", *NO_PERSISTENCE],
        (ports["redis"],),
        answers if shutil.which("redis-cli") else lambda: True,
        "Redis answering",
    )
    # the repo-server alone fetches sources: /etc/hosts replaced in its own mount namespace only
    in_namespace = services.own_hosts(end.hosts_file)
    repo = launch(
        "argocd-repo-server",
        [
            *in_namespace,
            str(folder / "argocd-repo-server"),
            # both listeners default to 0.0.0.0 (argo-cd@v3.6.2:common/common.go DefaultAddressRepoServer,
            # DefaultAddressRepoServerMetrics; flags in cmd/argocd-repo-server/commands/argocd_repo_server.go)
            "--address",
            "127.0.0.1",
            "--port",
            str(ports["repo"]),
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            str(ports["repo-metrics"]),
            "--disable-tls",
            "--client-ca-path=",
            "--redis",
            redis_addr,
            "--loglevel",
            "info",
        ],
        (ports["repo"], ports["repo-metrics"]),
        _ready(ports["repo-metrics"]),
        "the repo-server's metrics",
        env={**env, "SSL_CERT_FILE": str(end.ca), "GIT_SSL_CAINFO": str(end.ca)},
    )
    controller = launch(
        "argocd-application-controller",
        [
            str(folder / "argocd-application-controller"),
            "--namespace",
            NAMESPACE,
            "--repo-server",
            repo_addr,
            "--repo-server-plaintext",
            "--redis",
            redis_addr,
            # its metrics listener is bound to 0.0.0.0 in the code, with no flag to move it
            # (argo-cd@v3.6.2:controller/appcontroller.go NewApplicationController, metricsAddr): the
            # one listener of a local cluster that is not on loopback (docs/cluster.md)
            "--metrics-port",
            str(ports["controller"]),
            "--loglevel",
            "info",
        ],
        (ports["controller"],),
        _ready(ports["controller"]),
        "the application controller's metrics",
        env,
    )
    appset = launch(
        "argocd-applicationset-controller",
        [
            str(folder / "argocd-applicationset-controller"),
            "--namespace",
            NAMESPACE,
            "--argocd-repo-server",
            repo_addr,
            "--repo-server-plaintext",
            "--metrics-addr",
            f"127.0.0.1:{ports['set']}",
            "--probe-addr",
            f"127.0.0.1:{ports['set-probe']}",
            "--webhook-addr",
            f"127.0.0.1:{ports['hook']}",
            "--loglevel",
            "info",
        ],
        (ports["set"], ports["set-probe"], ports["hook"]),
        _ready(ports["set"]),
        "the ApplicationSet controller's metrics",
        env,
    )
    progress(f"Argo CD {version}: repo-server, application controller and ApplicationSet controller running")
    return Running(sources_daemon, r, repo, controller, appset)


APPLICATIONS = f"/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/applications"


def describe_sync(app: dict) -> list[str]:
    """An Application's last sync as Argo CD reports it: phase, revision, each object, health."""
    status = app.get("status") or {}
    op = status.get("operationState") or {}
    result = op.get("syncResult") or {}
    health = (status.get("health") or {}).get("status", "Unknown")
    sync = (status.get("sync") or {}).get("status", "Unknown")
    lines = [f"sync {op.get('phase', 'none')} at {str(result.get('revision', ''))[:12]} "
             f"({op.get('message', '').strip()}); now {sync}, health {health}"]  # fmt: skip
    for r in result.get("resources") or []:
        where = f"{r.get('namespace')}/" if r.get("namespace") else ""
        lines.append(f"  {r.get('kind')} {where}{r.get('name')}: {r.get('status')} ({r.get('message', '').strip()})")
    for c in status.get("conditions") or []:
        lines.append(f"  {c.get('type')}: {c.get('message')}")
    return lines


def _transition_time(condition: dict) -> dt.datetime | None:
    """A condition's lastTransitionTime (RFC 3339, metav1.Time), None when absent or not one: such a
    condition is not known to be new, and the timeout's message shows it."""
    raw = condition.get("lastTransitionTime")
    if not isinstance(raw, str) or len(raw) > 64:
        return None
    try:
        when = dt.datetime.fromisoformat(raw)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def wait_synced(kube, name: str, revision: str, timeout: float, *, since: dt.datetime | None = None) -> dict:
    """Until Argo CD has synced Application ``name`` at ``revision`` and compared it Synced after;
    a sync that failed, a source Argo CD cannot render since ``since`` (its ComparisonError, which
    names the file), or neither within ``timeout`` is refused with what Argo CD says. ``since``: when
    the push of ``revision`` began (the call by default). The repository's push hook has Argo CD
    compare before ``git push`` returns, so a caller that pushed passes the time before it."""
    # a condition's time has whole seconds (metav1.Time)
    since = (since or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    deadline = time.monotonic() + timeout
    app: dict = {}
    while time.monotonic() < deadline:
        try:
            app = kube.get(f"{APPLICATIONS}/{name}")
        except ApiError as exc:
            if exc.code != 404:
                raise
            app = {}
        status = app.get("status") or {}
        op = status.get("operationState") or {}
        at = (op.get("syncResult") or {}).get("revision") or ((op.get("operation") or {}).get("sync") or {}).get(
            "revision"
        )
        if at == revision and op.get("phase") in ("Succeeded", "Failed", "Error"):
            if op["phase"] != "Succeeded":
                raise UserError(f"Argo CD could not sync {name} at {revision[:12]}:\n" + "\n".join(describe_sync(app)))
            sync = status.get("sync") or {}
            if sync.get("status") == "Synced" and sync.get("revision") == revision:
                return app  # compared again after the sync: what it applied is what git holds
        for c in status.get("conditions") or []:
            when = _transition_time(c)
            if c.get("type") == "ComparisonError" and when is not None and when >= since:
                raise UserError(f"Argo CD cannot render {name} at {revision[:12]}:\n" + "\n".join(describe_sync(app)))
        time.sleep(0.5)
    said = "\n".join(describe_sync(app)) if app else "the Application was not created"
    raise UserError(f"Argo CD did not sync {name} at {revision[:12]} within {timeout:g} s:\n{said}")


def wait_settled(kube, names: list[str], timeout: float, progress: Progress) -> None:
    """Until Argo CD has compared every Application of ``names`` and carried the syncs its
    automated policies start (the upstream releases' objects the local install leaves out) as far
    as they go here: each Synced, no operation running but one that waits for the health of
    objects whose pods do not run here (said by name). Refused, naming the Applications and what
    Argo CD says of them, after ``timeout``."""
    t0 = time.monotonic()
    pending: dict[str, dict] = {}
    while time.monotonic() - t0 < timeout:
        live = {a["metadata"]["name"]: a for a in kube.get(APPLICATIONS)["items"]}
        pending, waiting = {}, []
        for name in names:
            status = (live.get(name) or {}).get("status") or {}
            op = status.get("operationState") or {}
            if op.get("phase") == "Running" and str(op.get("message", "")).startswith(WAITING_FOR_HEALTH):
                waiting.append(f"{name} ({op['message']})")
            elif op.get("phase") == "Running" or not status.get("reconciledAt"):
                pending[name] = live.get(name) or {}
            elif (status.get("sync") or {}).get("status") != "Synced":
                pending[name] = live[name]
        if not pending:
            progress(f"Argo CD has taken over: {len(names)} Applications Synced ({time.monotonic() - t0:.1f} s)")
            for w in waiting:
                progress(f"  its sync of {w}: their pods do not run here")
            return
        time.sleep(1)
    said = "\n".join(
        f"  {n}: " + "; ".join(describe_sync(a)) if a else f"  {n}: not created" for n, a in pending.items()
    )
    raise UserError(f"Argo CD did not settle within {timeout:g} s:\n{said}")


def health(kube) -> dict[str, list[str]]:
    """Each Application's health as Argo CD reports it, by status: the names, with Argo CD's
    reason (its health message, cut short) for any not Healthy."""
    by: dict[str, list[str]] = {}
    for app in kube.get(APPLICATIONS)["items"]:
        h = (app.get("status") or {}).get("health") or {}
        status, message = str(h.get("status", "Unknown")), " ".join(str(h.get("message", "")).split())
        name = app["metadata"]["name"]
        if status != "Healthy" and message:
            name += f" ({message[:157] + '...' if len(message) > 160 else message})"
        by.setdefault(status, []).append(name)
    return {k: sorted(v) for k, v in sorted(by.items())}


# what an operation says while it waits for objects to be healthy (gitops-engine@v3.6.2:
# pkg/sync/sync_context.go setRunningPhase: "waiting for %s %s/%s/%s", reason "healthy state of")
WAITING_FOR_HEALTH = "waiting for healthy state of "
