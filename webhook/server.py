"""``trainyard serve``: the webhook over TLS, reloading certificates and policies in place.

- Connections: capped, with a TLS handshake deadline and header caps (webhook.http_guard); the
  probes and metrics have a listener of their own (webhook.probes).
- Certificates: cert-manager rotates the Secret; the kubelet swaps the mounted files. The
  reloader notices and the next TLS handshake uses the new pair, if it is valid now and names the
  Service (webhook.tls); otherwise the refusal is logged, counted and shown by /readyz, and the
  previous pair keeps serving.
- Client certificates (``--client-ca``, off by default): every handshake on the webhook port then
  requires a certificate that chains to that CA, kube-apiserver's; the bundle is reloaded with the
  serving pair. Refused handshakes are counted and logged (at most once a minute), since the
  client only sees the connection close. The probe port asks for none: the kubelet has none.
- Policies: a ConfigMap mount swaps a symlink when the ConfigMap changes. The reloader loads
  the new set once the files have stopped changing, and takes it only if it means something: it
  parses and validates (webhook.policy), keeps the default profile and every profile the serving
  set has (policy.reload_problems). A refused set is logged, counted and shown by /readyz, and
  the last good one keeps serving.
- SIGTERM: uvicorn stops accepting, finishes the requests in flight, then exits (a rolling
  update loses no review); readiness turns false first.
"""

from __future__ import annotations

import gc
import logging
import signal
import ssl
import sys
import threading
import time
from pathlib import Path

import orjson
import uvicorn

from trainyard.contract.errors import UserError
from webhook import memory, policy, tls
from webhook.app import State, create_app
from webhook.defaults import SERVICE_DNS_NAME, Limits
from webhook.http_guard import ConnectionGate, TlsGateProtocol
from webhook.metrics import Metrics
from webhook.policy import PolicyError, PolicySet, load_policies, reload_problems
from webhook.probes import ProbeServer
from webhook.reviewlog import LOGGER, ReviewLog
from webhook.tls import CertStore

log = logging.getLogger("trainyard.webhook")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; a dict message is merged into the object as is."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if isinstance(record.msg, dict):
            line.update(record.msg)
        else:
            line["msg"] = record.getMessage()
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def policy_signature(directory: Path) -> tuple:
    """Changes whenever a policy file is added, removed or rewritten (symlinks followed)."""
    out = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return ("unreadable",)
    for p in entries:
        if p.suffix in (".yaml", ".yml"):
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((p.name, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def load_checked(directory: Path, default: str) -> PolicySet:
    policies = load_policies(directory)
    if policies.get(default) is None:
        raise PolicyError(
            f"{directory}: the default profile {default!r} is not defined; known profiles: {', '.join(policies.names)}"
        )
    for warning in policies.warnings:
        log.warning("policy lint: %s", warning)
    return policies


class Reloader(threading.Thread):
    """Polls the TLS files and the policy directory; swaps what changed into ``state``, or refuses
    it (logged, counted by what and why, listed by /readyz) and keeps what serves."""

    def __init__(self, state: State, policies_dir: Path, interval: float) -> None:
        super().__init__(name="trainyard-reloader", daemon=True)
        self.state, self.dir, self.interval = state, policies_dir, interval
        self.stopped = threading.Event()
        self.signature = policy_signature(policies_dir)
        self.seen = self.signature  # the directory as last polled: a set is loaded once it holds still

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the reloader must never die: log and keep polling
                log.exception("reload check failed")

    def tick(self) -> None:
        self.check_certificates()
        self.check_policies()

    def refuse(self, what: str, reason: str, message: str) -> None:
        metrics = self.state.metrics
        metrics.refusals.labels(what, reason).inc()
        metrics.refused.labels(what).set(1)
        self.state.refused[what] = message
        log.error("%s refused (%s), keeping the ones serving: %s", what, reason, message)

    def accept(self, what: str) -> None:
        self.state.metrics.refused.labels(what).set(0)
        self.state.refused.pop(what, None)

    def check_certificates(self) -> None:
        certs = self.state.certs
        if certs is None:
            return
        result = certs.reload_if_changed()
        if result is None:
            return
        if result.loaded:
            self.state.metrics.cert_reloads.labels("success").inc()
            self.accept("certificate")
            log.info(
                "TLS certificate reloaded from %s (%s)%s",
                certs.cert,
                certs.serving.subject,
                f", client CA from {certs.client_ca}" if certs.client_ca is not None else "",
            )
        else:
            self.state.metrics.cert_reloads.labels("failure").inc()
            self.refuse("certificate", result.reason, result.message)

    def check_policies(self) -> None:
        signature = policy_signature(self.dir)
        if signature != self.seen:  # still changing (a writer at work): look again next tick
            self.seen = signature
            return
        if signature == self.signature:
            return
        self.signature = signature
        metrics = self.state.metrics
        try:
            policies = load_policies(self.dir)
        except PolicyError as exc:
            metrics.policy_reloads.labels("failure").inc()
            self.refuse("policies", exc.reason, str(exc))
            return
        problems = reload_problems(self.state.policies, policies, self.state.default) if self.state.policies else []
        if problems:
            metrics.policy_reloads.labels("failure").inc()
            for reason, message in problems:
                self.refuse("policies", reason, message)
            return
        for warning in policies.warnings:
            log.warning("policy lint: %s", warning)
        self.state.policies = policies
        metrics.policy_reloads.labels("success").inc()
        metrics.profiles.set(len(policies.profiles))
        self.accept("policies")
        log.info("policies reloaded: %s", ", ".join(policies.names))


def build(
    policies_dir: str | Path,
    profile: str,
    tls_dir: str | Path,
    server_name: str | None = SERVICE_DNS_NAME,
    client_ca: str | Path | None = None,
) -> State:
    """Load everything ``serve`` needs, or raise UserError saying what is wrong."""
    directory = Path(policies_dir)
    policies = load_checked(directory, profile)
    state = State(policies=policies, default=profile, certs=CertStore(tls_dir, server_name, client_ca))
    state.metrics.profiles.set(len(policies.profiles))
    for what, reasons in (("policies", policy.REFUSAL_REASONS), ("certificate", tls.REFUSAL_REASONS)):
        for reason in reasons:
            state.metrics.refusals.labels(what, reason)  # exported as 0 from the start
    return state


# OpenSSL's reasons (ssl.SSLError.reason) for a client refused by verify_mode CERT_REQUIRED
CLIENT_CERT_REFUSALS = {"PEER_DID_NOT_RETURN_A_CERTIFICATE": "missing", "CERTIFICATE_VERIFY_FAILED": "untrusted"}


class ClientRefusals:
    """Counts the handshakes refused for want of a trusted client certificate and says so in the
    log, once and then at most every ``every`` seconds: kube-apiserver sees only a closed
    connection (the TLS layer sends no alert), so the webhook's log is where a missing
    AdmissionConfiguration shows."""

    def __init__(self, metrics: Metrics, client_ca: Path, every: float = 60.0) -> None:
        self.metrics, self.client_ca, self.every = metrics, client_ca, every
        self.unlogged = 0
        self.logged_at: float | None = None

    def __call__(self, exc: BaseException) -> None:
        why = CLIENT_CERT_REFUSALS.get(getattr(exc, "reason", None) or "") if isinstance(exc, ssl.SSLError) else None
        if why is None:  # a scanner, a timeout, an old TLS version: not a client-certificate matter
            return
        self.metrics.client_certificates_refused.labels(why).inc()
        self.unlogged += 1
        now = time.monotonic()
        if self.logged_at is not None and now - self.logged_at < self.every:
            return
        log.warning(
            "refused %d TLS client(s) without a trusted client certificate (the last: %s, %s); only clients "
            "with a certificate from %s are served: kube-apiserver presents one when its AdmissionConfiguration "
            "names this webhook (docs/security.md)",
            self.unlogged,
            why,
            getattr(exc, "verify_message", None) or exc,
            self.client_ca,
        )
        self.unlogged, self.logged_at = 0, now


class WebhookServer(uvicorn.Server):
    """uvicorn's server, ticking the state's heartbeat (webhook.probes) and giving memory back
    after connection floods (webhook.memory) from its own 0.1 s tick."""

    def __init__(self, config: uvicorn.Config, state: State | None, gate: ConnectionGate) -> None:
        super().__init__(config)
        self.state, self.gate = state, gate
        self.trimmer = memory.Trimmer()

    async def on_tick(self, counter: int) -> bool:
        if self.state is not None:
            self.state.heartbeat = time.monotonic()
        self.trimmer.tick(len(self.gate))
        return await super().on_tick(counter)


def uvicorn_server(
    app: object,
    certs: CertStore,
    host: str,
    port: int,
    limits: Limits | None = None,
    drain_seconds: float = 20.0,
    state: State | None = None,
) -> WebhookServer:
    """The HTTP server both the webhook and the benchmark's floor server run on: uvicorn with
    uvloop and httptools behind the connection gate, TLS from ``certs`` (rotation), and the
    deadlines and caps of ``limits``."""
    limits = limits or Limits()
    metrics = state.metrics if state is not None else None
    gate = ConnectionGate(
        limits.max_connections, (lambda why: metrics.connections_closed.labels(why).inc()) if metrics else None
    )
    if metrics is not None:
        metrics.connections.set_function(lambda: len(gate))
    accepting = (lambda: not state.draining) if state is not None else (lambda: True)
    refusals = None if metrics is None or certs.client_ca is None else ClientRefusals(metrics, certs.client_ca)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        loop="uvloop",
        http=TlsGateProtocol.bind(gate, limits, lambda: certs.current, accepting, refusals),
        ws="none",
        timeout_keep_alive=30,  # kube-apiserver reuses connections; don't make it re-handshake
        timeout_graceful_shutdown=drain_seconds,
    )
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # it would announce http://: TLS is ours
    server = WebhookServer(config, state, gate)
    # What start-up made (the modules, the app, the policies: tens of thousands of objects) stays
    # out of every later collection: a full one walks only what serving made since, and every
    # reply waiting behind it waits that much less.
    gc.freeze()
    return server


def serve(
    policies_dir: str | Path,
    profile: str,
    tls_dir: str | Path,
    host: str = "0.0.0.0",
    port: int = 8443,
    reload_interval: float = 2.0,
    log_level: str = "info",
    request_timeout: float = 10.0,
    drain_seconds: float = 20.0,
    server_name: str | None = SERVICE_DNS_NAME,
    probe_port: int | None = None,
    limits: Limits | None = None,
    client_ca: str | Path | None = None,
) -> None:
    """Serve until SIGTERM. ``client_ca``: a PEM bundle; every TLS client must then present a
    certificate that chains to it (kube-apiserver's, see docs/security.md)."""
    configure_logging(log_level)
    memory.configure()
    state = build(policies_dir, profile, tls_dir, server_name, client_ca)
    assert state.certs is not None
    if logging.getLogger(LOGGER).isEnabledFor(logging.INFO):
        state.review_log = ReviewLog()
    limits = limits or Limits(header_timeout=request_timeout)
    server = uvicorn_server(create_app(state, request_timeout), state.certs, host, port, limits, drain_seconds, state)
    if client_ca is not None and probe_port is None:
        log.warning(
            "--client-ca without --probe-port: /healthz and /readyz answer only clients with a client "
            "certificate, and the kubelet's probes present none; add --probe-port and probe it"
        )
    probes = None
    if probe_port is not None:
        try:
            probes = ProbeServer(host, probe_port, state, stall_after=max(10.0, 2 * request_timeout)).start()
        except OSError as exc:
            raise UserError(f"could not listen on {host}:{probe_port} for probes: {exc}") from None
    reloader = Reloader(state, Path(policies_dir), reload_interval)
    reloader.start()

    default_handler = server.handle_exit

    def on_signal(sig: int, frame: object) -> None:
        state.draining = True  # /readyz fails at once; in-flight and new reviews still answered
        default_handler(sig, frame)

    server.handle_exit = on_signal  # type: ignore[method-assign]
    # After draining, uvicorn re-raises the signal to the handler it found: make that one a
    # no-op so the process ends with status 0 (a clean stop) instead of dying of the signal.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    log.info(
        "serving on https://%s:%d%s%s, default profile %s, profiles %s, at most %d connections",
        host,
        port,
        f" (probes and metrics on http://{host}:{probe_port})" if probe_port is not None else "",
        f", client certificates from {client_ca} required" if client_ca is not None else "",
        profile,
        ", ".join(state.policies.names if state.policies else []),
        limits.max_connections,
    )
    try:
        server.run()
    finally:
        reloader.stopped.set()
        if probes is not None:
            probes.stop()
        if state.review_log is not None:
            state.review_log.close()
    if not server.started:
        raise UserError(f"could not listen on {host}:{port} (in use, or not permitted)")
