"""The trainer's Prometheus endpoint: the series of :mod:`trainyard.contract.metrics`, fed from the
run log's records (:mod:`trainyard.contract.reports`).

One endpoint per pod: the worker of local rank 0 serves on ``ENV_METRICS_PORT`` (all addresses, a
daemon thread, a registry of its own; bounded connections and timeouts: :mod:`trainer.metrics_http`);
the other local ranks get a :class:`NullExporter`. The
run log hands every record to :meth:`Exporter.observe` on every rank, so what a pod exports is what
its local rank 0 records: checkpoints are committed (and :class:`~trainyard.contract.reports.Committed`
recorded) by global rank 0 alone, so only the pod of node rank 0 has the checkpoint step and time.

Per step the exporter only sets values on label children resolved once, here. Nothing it meets
stops training: a bad port, a port in use, a bad preflight value or a failing observe is one line
on stderr and the run goes on.
"""

from __future__ import annotations

import errno
import json
import math
import re
import sys
import time
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from trainer.metrics_http import MetricsServer
from trainyard.contract import metrics as m
from trainyard.contract import reports
from trainyard.contract.names import ENV_FABRIC

ALL_ADDRESSES = "0.0.0.0"
UNKNOWN = "unknown"  # a label value the env gave in a form that is not one
# A node rank and a fabric profile name as they can be: a number; a DNS label (the profile's name).
_NODE_RANK = re.compile(r"^[0-9]{1,6}$")
_FABRIC = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
# Preflight check names (trainer/preflight.py: webhook, nccl-env, shm, ipc-lock, ...) and statuses.
_CHECK = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
STATUSES = frozenset(typing.get_args(reports.Status))
MAX_PREFLIGHT_CHARS = 4096
MAX_PREFLIGHT_CHECKS = 32
# NCCL transports are short words (IB, Socket); the expected one comes from the pod's env.
_TRANSPORT = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
INFO_MAX_BYTES = 64 * 1024  # a checkpoint's info file is a few hundred bytes
# A finished run waits for one more scrape so that its last step and checkpoint reach Prometheus,
# where one has been scraping it: at most 1.5 scrape intervals (as measured), and never longer.
MAX_LINGER_S = 60.0


def parse_preflight(value: str | None) -> tuple[list[tuple[str, str]], list[str]]:
    """``ENV_PREFLIGHT`` ("name=status,...") as (check, status) pairs, and what was refused in it."""
    if not value:
        return [], []
    if len(value) > MAX_PREFLIGHT_CHARS:
        return [], [f"{m.ENV_PREFLIGHT} is {len(value)} characters long (at most {MAX_PREFLIGHT_CHARS})"]
    pairs: list[tuple[str, str]] = []
    refused: list[str] = []
    seen: set[str] = set()
    for item in value.split(","):
        name, sep, status = item.strip().partition("=")
        if not sep or not _CHECK.match(name) or status not in STATUSES:
            refused.append(f"{item[:40]!r} is not check=status (status one of {', '.join(sorted(STATUSES))})")
        elif name in seen:
            refused.append(f"{name!r} is given twice")
        elif len(pairs) == MAX_PREFLIGHT_CHECKS:
            refused.append(f"more than {MAX_PREFLIGHT_CHECKS} checks")
            break
        else:
            seen.add(name)
            pairs.append((name, status))
    return pairs, refused


def trainer_labels(env: Mapping[str, str], warn: Callable[[str], None]) -> tuple[str, str]:
    """(node_rank, fabric): torchrun's GROUP_RANK (else PET_NODE_RANK, else 0) and the fabric the
    webhook injected (NO_FABRIC when it did not)."""
    source = "GROUP_RANK" if "GROUP_RANK" in env else "PET_NODE_RANK"
    node_rank = (env.get(source) or "0").strip() or "0"
    if not _NODE_RANK.match(node_rank):
        warn(f"{source}={node_rank[:40]!r} is not a node rank; metrics carry {m.LABEL_NODE_RANK}={UNKNOWN!r}")
        node_rank = UNKNOWN
    else:
        node_rank = str(int(node_rank))
    fabric = (env.get(ENV_FABRIC) or "").strip() or m.NO_FABRIC
    if not _FABRIC.match(fabric):
        warn(f"{ENV_FABRIC}={fabric[:40]!r} is not a fabric profile name; metrics carry {m.LABEL_FABRIC}={UNKNOWN!r}")
        fabric = UNKNOWN
    return node_rank, fabric


def _build(metric: m.Metric, registry: CollectorRegistry) -> Gauge | Counter | Histogram:
    labels = (*m.TRAINER_LABELS, *metric.labels)
    if metric.kind == "gauge":
        return Gauge(metric.name, metric.help, labels, registry=registry)
    if metric.kind == "counter":  # prometheus_client adds the _total itself
        return Counter(metric.name.removesuffix("_total"), metric.help, labels, registry=registry)
    return Histogram(metric.name, metric.help, labels, buckets=metric.buckets, registry=registry)


class NullExporter:
    """What the ranks that do not serve get: every call does nothing."""

    serving = False
    port: int | None = None

    def observe(self, record: reports.Record) -> None:
        pass

    def transport(self, used: str | None, expected: str | None) -> None:
        pass

    def linger(self, most: float = MAX_LINGER_S) -> float:
        return 0.0

    def close(self) -> None:
        pass


class Exporter:
    """The series of one pod, set from the run log's records.

    ``samples_per_step`` (the global batch) and ``tokens_per_step`` (batch x tokens per sample) turn
    each Step into the samples and tokens counters; ``checkpoint_every`` (None: no checkpoints) is
    the interval gauge; ``commits``: this process commits checkpoints (global rank 0), so a resume
    also sets the checkpoint step and time.
    """

    serving = False

    def __init__(
        self,
        *,
        samples_per_step: int,
        tokens_per_step: int,
        node_rank: str = "0",
        fabric: str = m.NO_FABRIC,
        checkpoint_every: int | None = None,
        commits: bool = True,
        preflight: list[tuple[str, str]] | tuple[()] = (),
        err: TextIO | None = None,
    ) -> None:
        self.samples_per_step = samples_per_step
        self.tokens_per_step = tokens_per_step
        self.commits = commits
        self.err = err
        self.registry = CollectorRegistry(auto_describe=True)
        self.metrics = {metric.name: _build(metric, self.registry) for metric in m.METRICS}
        self._base = (node_rank, fabric)
        child = self._child
        # Counters and histograms count from 0 at once; a gauge appears when it is first set (a 0
        # checkpoint time or loss would be a value nobody reported). Per step only resolved children.
        self._steps, self._step_seconds = child(m.STEPS), child(m.STEP_SECONDS)
        self._tokens, self._samples = child(m.TOKENS), child(m.SAMPLES)
        self._blocking, self._resumes = child(m.CHECKPOINT_BLOCKING), child(m.RESUMES)
        self._loss = None
        if checkpoint_every is not None:
            child(m.CHECKPOINT_EVERY).set(checkpoint_every)
        for check, status in preflight:
            child(m.PREFLIGHT, check, status).set(1)
        self._handlers: dict[type, Callable] = {
            reports.Step: self._on_first_step,
            reports.Start: self._on_start,
            reports.Resume: self._on_resume,
            reports.Committed: self._on_committed,
        }
        self._server: MetricsServer | None = None
        self._failed = False
        self.port: int | None = None

    def _child(self, metric: m.Metric, *extra: str):
        return self.metrics[metric.name].labels(*self._base, *extra)

    # ------------------------------------------------------------------------------ serving

    def serve(self, port: int, addr: str = ALL_ADDRESSES) -> int:
        """Serve ``METRICS_PATH`` on ``addr:port`` in a daemon thread (port 0: any free one), bounded
        as :mod:`trainer.metrics_http` says; the port bound. OSError when it cannot be bound."""
        self._server = MetricsServer(self.registry, addr, port)
        self.serving = True
        self.port = self._server.port
        return self.port

    def linger(self, most: float = MAX_LINGER_S) -> float:
        """Wait for the next scrape, when something scrapes this endpoint, until its answer is
        written (closing sooner would cut it): it must begin within 1.5 of its intervals (one scrape
        seen: ``most``), never more than ``most``. Seconds waited; none when nothing has scraped."""
        server = self._server
        if server is None or not server.scraped():
            return 0.0
        t0 = time.monotonic()
        interval = server.scrape_interval()
        begin_within = most if interval is None else min(most, 1.5 * interval + 0.5)
        server.wait_scrape(t0, begin_within, answer_within=server.write_timeout + 5)
        return time.monotonic() - t0

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            self.serving = False

    # ------------------------------------------------------------------------------ records

    def observe(self, record: reports.Record) -> None:
        """Set the series ``record`` informs; never raises (the first failure is reported once)."""
        try:
            handler = self._handlers.get(type(record))
            if handler is not None:
                handler(record)
        except Exception as exc:  # exporting must never stop training
            self._fail(f"exporting a {type(record).__name__} record failed", exc)

    def transport(self, used: str | None, expected: str | None) -> None:
        """The NCCL transport check's outcome: 1 when ``used`` is not ``expected``, 0 when it is;
        nothing when either is unknown."""
        try:
            if used and expected and _TRANSPORT.match(used) and _TRANSPORT.match(expected):
                self._child(m.TRANSPORT, used, expected).set(0 if used == expected else 1)
        except Exception as exc:
            self._fail("exporting the NCCL transport failed", exc)

    def _fail(self, what: str, exc: Exception) -> None:
        if not self._failed:
            self._failed = True
            print(
                f"warning: metrics: {what} ({type(exc).__name__}: {str(exc)[:200]}); training goes on, "
                "further failures are not reported",
                file=self.err or sys.stderr,
                flush=True,
            )

    def _on_first_step(self, r: reports.Step) -> None:
        self._step, self._lr, self._world = self._child(m.STEP), self._child(m.LEARNING_RATE), self._child(m.WORLD_SIZE)
        self._handlers[reports.Step] = self._on_step
        self._on_step(r)

    def _on_step(self, r: reports.Step) -> None:
        self._step.set(r.step)
        self._steps.inc()
        self._step_seconds.observe(r.step_ms / 1000)
        self._tokens.inc(self.tokens_per_step)
        self._samples.inc(self.samples_per_step)
        if r.loss is not None and math.isfinite(r.loss):
            if self._loss is None:
                self._loss = self._child(m.LOSS)
            self._loss.set(r.loss)
        self._lr.set(r.lr)
        self._world.set(r.world_size)
        if r.checkpoint_ms is not None:
            self._blocking.observe(r.checkpoint_ms / 1000)

    def _on_start(self, r: reports.Start) -> None:
        self._child(m.INFO, r.model, r.strategy, r.backend, r.device).set(1)
        self._child(m.RESTARTS).set(r.restart)
        self._child(m.WORLD_SIZE).set(r.world_size)

    def _on_resume(self, r: reports.Resume) -> None:
        self._resumes.inc()
        self._child(m.RESUMED_FROM).set(r.step)
        if self.commits:
            self._child(m.CHECKPOINT_STEP).set(r.step)
            committed = commit_time(Path(r.path))
            if committed is not None:
                self._child(m.CHECKPOINT_TIME).set(committed)

    def _on_committed(self, r: reports.Committed) -> None:
        self._child(m.CHECKPOINT_STEP).set(r.step)
        self._child(m.CHECKPOINT_TIME).set(time.time())


def commit_time(step_dir: Path) -> float | None:
    """When the checkpoint in ``step_dir`` was committed: the ``time`` of its info file, None when
    that file is missing or does not say."""
    from trainer.checkpoint import INFO  # torch is imported by then; this module does not need it

    try:
        with (step_dir / INFO).open("rb") as fh:
            data = json.loads(fh.read(INFO_MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    stamp = data.get("time") if isinstance(data, dict) else None
    if isinstance(stamp, int | float) and not isinstance(stamp, bool) and math.isfinite(stamp) and stamp > 0:
        return float(stamp)
    return None


def start(
    env: Mapping[str, str],
    *,
    rank: int,
    samples_per_step: int,
    tokens_per_step: int,
    checkpoint_every: int | None,
    addr: str = ALL_ADDRESSES,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> Exporter | NullExporter:
    """The exporter of this worker: serving when its LOCAL_RANK is 0 (or unset) and the port can be
    bound, else a NullExporter (after one line saying why, where there is a reason to say)."""
    out, err = out or sys.stdout, err or sys.stderr

    def warn(message: str) -> None:
        print(f"warning: metrics: {message}", file=err, flush=True)

    if (env.get("LOCAL_RANK") or "0").strip() not in ("0", ""):
        return NullExporter()  # one endpoint per pod: local rank 0 exports for all of them
    raw = env.get(m.ENV_METRICS_PORT)
    try:
        port = m.metrics_port(raw)
    except ValueError as exc:
        warn(f"{exc}; training goes on without metrics")
        return NullExporter()
    if port is None:
        print(f"metrics not exported ({m.ENV_METRICS_PORT}={(raw or '').strip()[:40]!r})", file=out, flush=True)
        return NullExporter()
    node_rank, fabric = trainer_labels(env, warn)
    preflight, refused = parse_preflight(env.get(m.ENV_PREFLIGHT))
    if refused:
        warn(f"{m.ENV_PREFLIGHT}: ignored {len(refused)} item(s): {refused[0]}")
    exporter = Exporter(
        samples_per_step=samples_per_step,
        tokens_per_step=tokens_per_step,
        node_rank=node_rank,
        fabric=fabric,
        checkpoint_every=checkpoint_every,
        commits=rank == 0,
        preflight=preflight,
        err=err,
    )
    try:
        exporter.serve(port, addr)
    except OSError as exc:
        in_use = exc.errno == errno.EADDRINUSE
        reason = "is already in use on this pod" if in_use else f"cannot be bound ({exc.strerror or exc})"
        warn(
            f"port {port} {reason}; training goes on without metrics. Set {m.ENV_METRICS_PORT} to a free port "
            f"(and declare it as the container's {m.METRICS_PORT_NAME!r} port), or to off"
        )
        return NullExporter()
    print(f"metrics: serving http://{addr}:{exporter.port}{m.METRICS_PATH}", file=out, flush=True)
    return exporter


class LaunchExporter:
    """What ``trainyard launch --run`` serves for a loop that is not trainyard's: the preflight
    checks and the NCCL transport, nothing else. The step, loss and checkpoint series stay absent
    rather than 0: TrainyardJobStalled reads a step counter that stays 0 as a hung job."""

    def __init__(self, *, node_rank: str, fabric: str, preflight: list[tuple[str, str]] | tuple[()] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._base = (node_rank, fabric)
        self.metrics = {metric.name: _build(metric, self.registry) for metric in (m.PREFLIGHT, m.TRANSPORT)}
        for check, status in preflight:
            self.metrics[m.PREFLIGHT.name].labels(*self._base, check, status).set(1)
        self._server: MetricsServer | None = None
        self.port: int | None = None

    def serve(self, port: int, addr: str = ALL_ADDRESSES) -> int:
        self._server = MetricsServer(self.registry, addr, port)
        self.port = self._server.port
        return self.port

    def transport(self, used: str | None, expected: str | None) -> None:
        if used and expected and _TRANSPORT.match(used) and _TRANSPORT.match(expected):
            self.metrics[m.TRANSPORT.name].labels(*self._base, used, expected).set(0 if used == expected else 1)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def start_launch(
    env: Mapping[str, str], *, addr: str = ALL_ADDRESSES, err: TextIO | None = None
) -> LaunchExporter | None:
    """The endpoint of ``launch --run`` on ``ENV_METRICS_PORT`` (one per pod: launch runs once per
    pod), or None after one line saying why not."""
    err = err or sys.stderr

    def warn(message: str) -> None:
        print(f"warning: metrics: {message}", file=err, flush=True)

    try:
        port = m.metrics_port(env.get(m.ENV_METRICS_PORT))
    except ValueError as exc:
        warn(f"{exc}; the job runs without metrics")
        return None
    if port is None:
        return None
    node_rank, fabric = trainer_labels(env, warn)
    preflight, refused = parse_preflight(env.get(m.ENV_PREFLIGHT))
    if refused:
        warn(f"{m.ENV_PREFLIGHT}: ignored {len(refused)} item(s): {refused[0]}")
    exporter = LaunchExporter(node_rank=node_rank, fabric=fabric, preflight=preflight)
    try:
        exporter.serve(port, addr)
    except OSError as exc:
        warn(f"port {port} cannot be bound ({exc.strerror or exc}); the job runs without launch's metrics")
        return None
    return exporter
