"""The upstream controllers of a cluster, run from their own release manifests beside kube-apiserver.

Each upstream Application (Kueue, Kubeflow Trainer with JobSet, the v1 training operator) is
installed from the objects its render holds: the same render ``trainyard validate`` checks, read
from the release's Go module with the kustomize or Helm Argo CD bundles
(:mod:`trainyard.repo.model.upstream`), so the local cluster runs what Argo CD would apply, less
its Deployments and CRDs (the CRDs are synced with every other CRD). Each controller then runs as
its Deployment's manager container would run in a pod, with this machine as the kubelet:

- the binary is the upstream main at the pinned release (components.py, target ``controllers``),
  with the container's args and env (``fieldRef`` to the pod's namespace and name resolved);
- it authenticates as its ServiceAccount with a token from the TokenRequest API, found where
  client-go's in-cluster config looks (``/var/run/secrets/kubernetes.io/serviceaccount``, with
  ``KUBERNETES_SERVICE_HOST``/``PORT`` naming kube-apiserver), so the release's own RBAC rules
  decide what it may do;
- it is started again when it exits, with the kubelet's CrashLoopBackOff (restartPolicy Always);
- its volumes are there: the webhook Secret at ``/tmp/k8s-webhook-server/serving-certs`` and the
  token, each bind-mounted in a mount namespace of the controller's own (``unshare``), so that
  four controllers that all write that same path (their certificate rotators hard-code it:
  jobset@v0.12.0, trainer@v2.3.0, training-operator@v1.9.4 pkg/util/cert or pkg/cert) never
  meet, nor the controllers of another local cluster; its ConfigMap is a file named in its args.

What differs from a pod, and why:

- All share the host's loopback, so the ports their configuration gives (health :8081, metrics
  :8443, webhook :9443, each the same in all four) are moved to free ones on 127.0.0.1 (the
  training operator's webhook port excepted: its address cannot be set).
- The webhook configurations and CRD conversion webhooks stay as the release writes them, calling
  their Service; the Service leads to the controller's webhook port through an EndpointSlice of
  its own (services.py), as the EndpointSlice controller would lead it to the pod.
- The webhook certificate: each release runs a certificate rotator (cert-controller@v0.16.0
  pkg/rotator) that keeps the Secret it finds if the CA verifies for the rotator's CA name, the
  serving certificate for ``<service>.<namespace>.svc``, both valid 90 days on, and the CA key is
  PKCS#1 RSA (rotator.go ValidCert, buildArtifactsFromSecret). The Secret is created with such a
  pair, whose serving certificate also names 127.0.0.1 (for the readiness check); the rotator
  keeps it, mounts it and injects its CA into the configurations, as in a cluster, and reports
  ready only once it has (rotator.go ensureReady).
- Kueue's visibility API (VisibilityOnDemand, an aggregated API behind two APIServices) listens
  on a free loopback port, its Service routed there as the webhooks' are; it writes its
  self-signed serving certificate to ``/visibility`` (hard-coded), a folder of its own bind-mounted
  there (the mount point is made on the host's root, empty); kube-apiserver proxies to it with
  the front proxy's client certificate (pki.py). The APIServices are left to Argo CD's sync.
- The sandbox's kubelet reports each Deployment's pods as the controller's process, Ready as their
  readiness probe says when sent to the moved health port (trainyard/sandbox/played.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import shutil
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainyard.cluster import components, services
from trainyard.cluster.client import Kube
from trainyard.cluster.processes import CRASHLOOP_INITIAL_S, CRASHLOOP_MAX_S, Daemon, free_port, spawn
from trainyard.contract.errors import UserError
from trainyard.contract.files import write_private

Progress = Callable[[str], None]

CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # the path each rotator and Deployment uses
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # client-go rest.InClusterConfig
TOKEN_SECONDS = 7 * 24 * 3600  # a local cluster lives for a working day or a test run
CERT_DAYS = 365  # the rotators replace a pair that expires within 90 days
SKIPPED = frozenset({"Deployment", "CustomResourceDefinition", "APIService"})
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class ControllerError(UserError):
    exit_code = 1


@dataclass(frozen=True)
class Controller:
    """One controller of a release: the binary, its Deployment and its certificate rotator's names."""

    binary: str  # as components.TARGETS["controllers"] names it
    deployment: str  # the Deployment in the release manifests whose first container it is
    ca: str  # the rotator's CA name (its cert.go)
    service: str  # the webhook Service; the serving certificate is for <service>.<namespace>.svc
    secret: str  # the Secret the rotator keeps
    # moves its listeners to the given free ports (in its config, or as flags it returns)
    ports: Callable[[dict, dict[str, int]], list[str]]
    # an aggregated API it serves: its Service, whose port 443 is routed to ports["visibility"],
    # and the path it writes its self-signed serving certificate to (a folder of its own)
    api_service: str = ""
    api_cert_dir: str = ""


@dataclass(frozen=True)
class Install:
    """What one upstream Application installs that runs here: its namespace and its controllers."""

    app: str
    namespace: str
    controllers: tuple[Controller, ...]


def _serving_ports(config: dict, ports: dict[str, int]) -> list[str]:
    """Move a controller-runtime Configuration's listeners to free loopback ports."""
    config.setdefault("health", {})["healthProbeBindAddress"] = f"127.0.0.1:{ports['health']}"
    config.setdefault("metrics", {})["bindAddress"] = f"127.0.0.1:{ports['metrics']}"
    webhook = config.setdefault("webhook", {})
    webhook["port"], webhook["host"] = ports["webhook"], "127.0.0.1"
    if "statusServer" in config:  # Trainer v2.3's runtime status endpoint (:10443)
        config["statusServer"]["port"] = ports["status"]
    return []


def _kueue_ports(config: dict, ports: dict[str, int]) -> list[str]:
    """The controller-runtime listeners, and the visibility API server's
    (kueue@v0.19.2 apis/config/v1beta2 VisibilityServerConfiguration; 0.0.0.0:8082 by default)."""
    config["visibilityServer"] = {"bindAddress": "127.0.0.1", "bindPort": ports["visibility"]}
    return _serving_ports(config, ports)


def _operator_ports(config: dict, ports: dict[str, int]) -> list[str]:
    # training-operator@v1.9.4:cmd/training-operator.v1/main.go takes flags, not a file; its
    # webhook server takes a port only (webhook.Options{Port}), so it listens on every address
    # (controller-runtime@v0.24.1:pkg/webhook/server.go: an empty Host): the one controller
    # listener not on loopback (docs/cluster.md)
    return [
        f"--webhook-server-port={ports['webhook']}",
        f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
        f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
    ]


# Names: each Application's rendered objects, and cert.go of each release.
INSTALLS: tuple[Install, ...] = (
    Install(
        "trainyard-kueue",
        "kueue-system",
        (
            Controller(
                "kueue",
                "kueue-controller-manager",
                "kueue-ca",
                "kueue-webhook-service",
                "kueue-webhook-server-cert",
                _kueue_ports,
                # kueue@v0.19.2 pkg/visibility/server.go: certDir, the service of its APIServices
                api_service="kueue-visibility-server",
                api_cert_dir="/visibility",
            ),
        ),
    ),
    Install(
        "trainyard-trainer",
        "kubeflow-system",
        # manifests/overlays/manager, with JobSet (its release asset, built from the jobset module)
        # moved into kubeflow-system
        (
            Controller(
                "trainer-controller-manager",
                "kubeflow-trainer-controller-manager",
                "kubeflow-trainer-ca",
                "kubeflow-trainer-controller-manager",
                "kubeflow-trainer-webhook-cert",
                _serving_ports,
            ),
            Controller(
                "jobset",
                "jobset-controller-manager",
                "jobset-ca",
                "jobset-webhook-service",
                "jobset-webhook-server-cert",
                _serving_ports,
            ),
        ),
    ),
    Install(
        "trainyard-training-operator",
        "kubeflow",
        (
            Controller(
                "training-operator.v1",
                "training-operator",
                "training-operator-ca",
                "training-operator",
                "training-operator-webhook-cert",
                _operator_ports,
            ),
        ),
    ),
)
BY_APP = {i.app: i for i in INSTALLS}


# --- certificates --------------------------------------------------------------------------------


def _rsa_pem(key: rsa.RSAPrivateKey) -> bytes:
    # PKCS#1: what the rotator parses (x509.ParsePKCS1PrivateKey)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def rotator_secret_data(ca_name: str, dns_name: str) -> dict[str, bytes]:
    """ca.crt, ca.key, tls.crt, tls.key that a cert-controller rotator keeps (module docstring)."""
    now = dt.datetime.now(dt.UTC)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=CERT_DAYS)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        # the rotator checks the CA as a certificate for its CA name (validCACert)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)]))
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return {
        "ca.crt": ca.public_bytes(pem),
        "ca.key": _rsa_pem(ca_key),
        "tls.crt": cert.public_bytes(pem),
        "tls.key": _rsa_pem(key),
    }


# --- running -------------------------------------------------------------------------------------


@dataclass
class Running:
    controller: Controller
    daemon: Daemon
    ports: dict[str, int]
    webhook_url: str
    ca: bytes  # the CA of its webhook certificate
    webhooks: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) of its configurations


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _container_env(container: dict, namespace: str, pod: str) -> dict[str, str]:
    env = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path in ("metadata.namespace", "metadata.name"):
            env[e["name"]] = namespace if path == "metadata.namespace" else pod
        else:
            raise ControllerError(f"env {e['name']}: a source a local controller cannot give ({e.get('valueFrom')})")
    return env


def _token(kube: Kube, namespace: str, sa: str) -> str:
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_SECONDS},
    }
    got = kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token", json=body)
    return got["status"]["token"]


RESTARTING = "trainyard: the controller exited"  # the wrapper's line in the log before each restart


def _mount_wrapper(mounts: dict[str, Path], argv: list[str]) -> list[str]:
    """``argv`` in a mount namespace of its own with each host folder bind-mounted at its path,
    started again whenever it exits, as the kubelet restarts a Deployment's container
    (restartPolicy Always) with its CrashLoopBackOff (:class:`CrashLoopBackOff`: at once, then
    from 10 s doubling to 5 minutes). ``down`` stops the whole process group, the loop with it."""
    script = ["set -e"]
    for i, target in enumerate(mounts):
        script.append(f'mkdir -p "{target}"; mount --bind "${{{i + 1}}}" "{target}"')
    script += [
        f"shift {len(mounts)}",
        "delay=0",
        "while :; do",
        '  began=$(date +%s); status=0; "$@" || status=$?',
        f"  if [ $(($(date +%s) - began)) -gt {2 * CRASHLOOP_MAX_S} ]; then delay=0; fi",
        f'  echo "{RESTARTING} with status $status; restarting it in $delay s" >&2',
        '  sleep "$delay"',
        f'  if [ "$delay" -eq 0 ]; then delay={CRASHLOOP_INITIAL_S}; else delay=$((delay * 2)); fi',
        f'  if [ "$delay" -gt {CRASHLOOP_MAX_S} ]; then delay={CRASHLOOP_MAX_S}; fi',
        "done",
    ]
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", "\n".join(script), "sh", *[str(p) for p in mounts.values()], *argv,
    ]  # fmt: skip


def start_install(
    kube: Kube,
    install: Install,
    rendered: list[dict],
    folder: Path,
    server: str,
    ca_file: Path,
    *,
    progress: Progress = print,
) -> list[Running]:
    """Apply ``install``'s objects, ``rendered`` (its Application's render), route its webhook
    Services to the controllers (services.py), and start them."""
    if shutil.which("unshare") is None:
        raise ControllerError("the 'unshare' command (util-linux) is needed to run the upstream controllers")
    if os.geteuid() != 0:
        raise ControllerError(
            "the upstream controllers run in mount namespaces of their own, which needs root; run as root, "
            "or `trainyard cluster up --no-controllers --no-argocd --no-kubelet` for the control plane and "
            "admission alone"
        )
    work = folder / "controllers" / install.app
    docs = [d for d in rendered if d.get("kind") != "Namespace"]  # the sync made the destination
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    bins = components.build("controllers", progress=progress)
    running: list[Running] = []
    certs: dict[str, dict[str, bytes]] = {}
    plans = []
    for c in install.controllers:
        ports = {name: free_port() for name in ("health", "metrics", "webhook", "status", "visibility")}
        certs[c.secret] = rotator_secret_data(c.ca, f"{c.service}.{install.namespace}.svc")
        plans.append((c, ports))
    present = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    for c in install.controllers:
        if c.secret not in present:  # a rotator keeps the Secret it finds; one the render lacks is made
            meta = {"name": c.secret, "namespace": install.namespace}
            docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque"})
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        if kind in SKIPPED:
            continue
        kube.apply(doc, manager="argocd-controller")
    for c, _ in plans:
        # the pair, written by the rotator's field manager (the binary's name, controller-runtime's
        # default), so that Argo CD's apply of the Secret as rendered (no data) leaves it
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": c.secret, "namespace": install.namespace},
                  "data": {k: _b64(v) for k, v in certs[c.secret].items()}}  # fmt: skip
        kube.apply(secret, manager=c.binary)
    for c, ports in plans:
        said = services.route(kube, install.namespace, c.service, ports["webhook"])
        progress(f"  {said}")
        if c.api_service:
            progress(f"  {services.route(kube, install.namespace, c.api_service, ports['visibility'])}")
        hooks = [
            (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in WEBHOOK_KINDS and c.service in _services(d)
        ]
        run = _start(kube, install, c, ports, deployments, docs, work, bins, server, ca_file, certs)
        run.webhooks = hooks
        running.append(run)
    return running


def _services(doc: dict) -> set[str]:
    """The Services a webhook configuration calls."""
    return {((h.get("clientConfig") or {}).get("service") or {}).get("name", "") for h in doc.get("webhooks") or []}


def _start(
    kube: Kube,
    install: Install,
    c: Controller,
    ports: dict[str, int],
    deployments: dict[str, dict],
    docs: list[dict],
    work: Path,
    bins: Path,
    server: str,
    ca_file: Path,
    certs: dict[str, dict[str, bytes]],
) -> Running:
    deployment = deployments.get(c.deployment)
    if deployment is None:
        raise ControllerError(f"{install.app}: the release manifests have no Deployment {c.deployment}")
    pod_spec = deployment["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    home = work / c.binary
    home.mkdir(parents=True, exist_ok=True)
    # the token volume, as the kubelet projects it
    sa_dir = home / "serviceaccount"
    sa_dir.mkdir(exist_ok=True)
    sa = pod_spec.get("serviceAccountName") or "default"
    # the token and the keys readable by their owner alone, written as pki.py writes keys
    write_private(sa_dir / "token", _token(kube, install.namespace, sa).encode())
    write_private(sa_dir / "namespace", install.namespace.encode(), 0o644)
    write_private(sa_dir / "ca.crt", ca_file.read_bytes(), 0o644)
    cert_dir = home / "certs"
    cert_dir.mkdir(mode=0o700, exist_ok=True)
    for name, data in certs[c.secret].items():
        write_private(cert_dir / name, data, 0o600 if name.endswith(".key") else 0o644)
    args = list(container.get("args") or [])
    config: dict = {}
    configs = {m["mountPath"]: m for m in container.get("volumeMounts") or []}
    for i, arg in enumerate(args):
        if arg.startswith("--config="):
            mount = configs[arg.split("=", 1)[1]]
            volume = next(v for v in pod_spec["volumes"] if v["name"] == mount["name"])
            cm = next(
                d for d in docs
                if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]
            )  # fmt: skip
            config = yaml.safe_load(cm["data"][mount.get("subPath") or next(iter(cm["data"]))])
            args[i] = f"--config={home / 'config.yaml'}"
    extra = c.ports(config, ports)
    if config:
        (home / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    pod = f"{c.deployment}-local"
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    host, port = server.removeprefix("https://").rsplit(":", 1)
    env.update(_container_env(container, install.namespace, pod))
    env.update({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "POD_NAME": pod})
    argv = [str(bins / c.binary), *args, *extra]
    mounts = {CERT_DIR: cert_dir, SA_DIR: sa_dir}
    if c.api_cert_dir:
        mounts[c.api_cert_dir] = home / "api-certs"
        mounts[c.api_cert_dir].mkdir(mode=0o700, exist_ok=True)
    log = work.parent.parent / "logs" / f"{c.binary}.log"
    daemon = spawn(
        c.binary,
        _mount_wrapper(mounts, argv),
        log,
        ports=tuple(ports.values()),
        env=env,
        plays=f"{install.namespace}/{c.deployment}",
        probe_port=_probe_port(install, c, container, ports),
    )
    return Running(c, daemon, ports, f"https://127.0.0.1:{ports['webhook']}", certs[c.secret]["ca.crt"])


HEALTH_PORT = 8081  # controller-runtime's health-probe listener in each release's Deployment


def _probe_port(install: Install, c: Controller, container: dict, ports: dict[str, int]) -> int:
    """Where the sandbox's kubelet sends the Deployment's readiness probe: the health listener,
    moved to a free port. Each release probes controller-runtime's /readyz there; a probe elsewhere
    would test something this process does not answer, so it is refused by name."""
    probe = (container.get("readinessProbe") or {}).get("httpGet") or {}
    port = probe.get("port")
    named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    if named.get(port, port) != HEALTH_PORT:
        raise ControllerError(
            f"{install.app}: Deployment {c.deployment}'s readiness probe ({probe or 'none'}) is not an HTTP GET "
            f"on the health listener (port {HEALTH_PORT}), which a local controller answers"
        )
    return ports["health"]


def _injected(kube: Kube, webhooks: list[tuple[str, str]]) -> bool:
    """Every webhook of these configurations has a caBundle (the rotator's injection)."""
    for kind, name in webhooks:
        live = kube.get(f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{name}")
        if not all((h.get("clientConfig") or {}).get("caBundle") for h in live.get("webhooks") or []):
            return False
    return True


def wait_ready(running: Running, kube: Kube, timeout: float = 60.0) -> None:
    """Until the controller's /readyz answers, its webhook server completes a TLS handshake and
    its rotator has put its CA into every webhook configuration of its Service."""
    from trainyard.cluster.controlplane import wait_ready as wait_daemon

    health = f"http://127.0.0.1:{running.ports['health']}/readyz"
    context = ssl.create_default_context(cadata=running.ca.decode())

    def ready() -> bool:
        if RESTARTING in running.daemon.log_tail(20000):  # it exited before it was ready: say why now
            tail = running.daemon.log_tail(3000).strip()
            raise ControllerError(f"{running.controller.binary} exited while starting; the end of its log:\n{tail}")
        if httpx.get(health, timeout=1).status_code != 200:
            return False
        with httpx.Client(verify=context, timeout=1) as client:
            client.get(running.webhook_url + "/")  # any answer: the handshake is what counts
        return _injected(kube, running.webhooks)

    what = f"{running.controller.binary} ready, serving webhooks, its CA injected"
    wait_daemon(running.daemon, ready, what, timeout=timeout)
