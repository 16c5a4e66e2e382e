"""``trainyard serve``: the webhook over TLS, reloading certificates and policies in place.

- Certificates: cert-manager rotates the Secret; the kubelet swaps the mounted files. The
  reloader notices and the next TLS handshake uses the new pair (see webhook.tls).
- Policies: a ConfigMap mount swaps a symlink when the ConfigMap changes. The reloader loads
  the new set; a bad set is logged and counted, and the last good one keeps serving.
- SIGTERM: uvicorn stops accepting, finishes the requests in flight, then exits (a rolling
  update loses no review); readiness turns false first.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import orjson
import uvicorn

from trainyard.contract.errors import UserError
from webhook.app import State, create_app
from webhook.http_guard import GuardedHttpToolsProtocol
from webhook.policy import PolicyError, PolicySet, load_policies
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
    """Polls the TLS files and the policy directory; swaps what changed into ``state``."""

    def __init__(self, state: State, policies_dir: Path, interval: float) -> None:
        super().__init__(name="trainyard-reloader", daemon=True)
        self.state, self.dir, self.interval = state, policies_dir, interval
        self.stopped = threading.Event()
        self.signature = policy_signature(policies_dir)

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the reloader must never die: log and keep polling
                log.exception("reload check failed")

    def tick(self) -> None:
        metrics = self.state.metrics
        certs = self.state.certs
        if certs is not None:
            result = certs.reload_if_changed()
            if result is True:
                metrics.cert_reloads.labels("success").inc()
                log.info("TLS certificate reloaded from %s", certs.cert)
            elif result is False:
                metrics.cert_reloads.labels("failure").inc()
                log.error("TLS certificate changed but cannot be loaded; still serving the previous one")
        signature = policy_signature(self.dir)
        if signature == self.signature:
            return
        self.signature = signature
        try:
            policies = load_checked(self.dir, self.state.default)
        except PolicyError as exc:
            metrics.policy_reloads.labels("failure").inc()
            log.error("policy reload failed, keeping the last good set: %s", exc)
            return
        self.state.policies = policies
        metrics.policy_reloads.labels("success").inc()
        metrics.profiles.set(len(policies.profiles))
        log.info("policies reloaded: %s", ", ".join(policies.names))


def build(policies_dir: str | Path, profile: str, tls_dir: str | Path) -> State:
    """Load everything ``serve`` needs, or raise UserError saying what is wrong."""
    directory = Path(policies_dir)
    policies = load_checked(directory, profile)
    state = State(policies=policies, default=profile, certs=CertStore(tls_dir))
    state.metrics.profiles.set(len(policies.profiles))
    return state


def uvicorn_server(
    app: object,
    certs: CertStore,
    host: str,
    port: int,
    request_timeout: float = 10.0,
    drain_seconds: float = 20.0,
) -> uvicorn.Server:
    """The HTTP server both the webhook and the benchmark's floor server run on: uvicorn with
    uvloop and httptools, our TLS context (rotation), and a deadline for request headers."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        loop="uvloop",
        http=GuardedHttpToolsProtocol.with_timeout(request_timeout),
        ssl_context_factory=lambda _config, _default: certs.server_context,
        timeout_keep_alive=30,  # kube-apiserver reuses connections; don't make it re-handshake
        timeout_graceful_shutdown=drain_seconds,
    )
    return uvicorn.Server(config)


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
) -> None:
    configure_logging(log_level)
    state = build(policies_dir, profile, tls_dir)
    assert state.certs is not None
    if logging.getLogger(LOGGER).isEnabledFor(logging.INFO):
        state.review_log = ReviewLog()
    server = uvicorn_server(create_app(state, request_timeout), state.certs, host, port, request_timeout, drain_seconds)
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
        "serving on https://%s:%d, default profile %s, profiles %s",
        host,
        port,
        profile,
        ", ".join(state.policies.names if state.policies else []),
    )
    try:
        server.run()
    finally:
        reloader.stopped.set()
        if state.review_log is not None:
            state.review_log.close()
    if not server.started:
        raise UserError(f"could not listen on {host}:{port} (in use, or not permitted)")
