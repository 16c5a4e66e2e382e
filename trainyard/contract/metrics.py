"""What the trainer exports to Prometheus, defined once for the exporter, the monitors, the alert
rules, the dashboards and the demo's report.

The trainer's worker of local rank 0 in each pod serves these on ``METRICS_PORT_NAME`` (the pod
port the runtimes and the v1 job bases declare, ``DEFAULT_METRICS_PORT``, given to the trainer as
``ENV_METRICS_PORT``). One endpoint per pod: every value below is the same on each local rank of a
pod (the loss is the all-reduced mean, steps are taken in lock step), so the other local ranks
export nothing.

Labels:

- set by the trainer on every series: ``node_rank`` (torchrun's ``GROUP_RANK``: which pod of the
  job) and ``fabric`` (``TRAINYARD_FABRIC``, which the webhook injects; ``none`` when absent);
- set by the scrape (the PodMonitor's relabelings, the demo's scrape config): ``job_name`` (the
  TrainJob's or v1 job's name, from the pod's ``JOB_LABELS``), ``namespace``, ``pod`` and
  ``cluster`` (the cluster's name). ``job`` is Prometheus's own target label (the scrape job), so
  the training job is ``job_name``.

No label carries a value that grows (a step, a loss): each series lives as long as its pod.

The job-wide series (the step, tokens, samples, loss, learning rate, world size) are the same on
every pod of a job: aggregate them with ``max by (job_name)``, never ``sum``. Step time and
checkpoint stalls are each pod's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# --- the port ---------------------------------------------------------------------------------
METRICS_PORT_NAME = "metrics"  # a container port name (IANA_SVC_NAME: at most 15 characters)
DEFAULT_METRICS_PORT = 9404
ENV_METRICS_PORT = "TRAINYARD_METRICS_PORT"  # the port to serve on; "0" or "off": export nothing
METRICS_PATH = "/metrics"
# Prometheus names its scrape timeout in every scrape and gives up on an answer that ends after it
# (prometheus v2.42.0, the Debian package the demo runs; module v0.42.0 scrape/scrape.go:
# targetScraper.scrape sets the field, scrapeLoop.scrapeAndReport the deadline).
SCRAPE_TIMEOUT_FIELD = "x-prometheus-scrape-timeout-seconds"

# --- labels -----------------------------------------------------------------------------------
LABEL_NODE_RANK = "node_rank"
LABEL_FABRIC = "fabric"
NO_FABRIC = "none"  # the fabric label of a trainer the webhook never saw
TRAINER_LABELS = (LABEL_NODE_RANK, LABEL_FABRIC)
LABEL_JOB = "job_name"
LABEL_CLUSTER = "cluster"
LABEL_NAMESPACE = "namespace"
SCRAPE_LABELS = (LABEL_JOB, LABEL_NAMESPACE, "pod", LABEL_CLUSTER)

# The webhook's series (webhook/metrics.py defines them; the rules and dashboards read them).
WEBHOOK_REVIEWS = "trainyard_webhook_reviews_total"
WEBHOOK_REVIEW_SECONDS = "trainyard_webhook_review_duration_seconds"


Kind = Literal["gauge", "counter", "histogram"]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # as exposed (a counter's name ends in _total)
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()  # beyond TRAINER_LABELS
    buckets: tuple[float, ...] = ()  # histograms: upper bounds in the metric's unit


# Step times from a few ms (tiny CPU models) to minutes (a large model's step on many nodes).
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# How long a save blocks the loop: an async save's staging (ms) to a sync save of a large model.
CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

STEP = Metric("trainyard_trainer_step", "gauge", "The optimizer step the job has reached (survives resumes)")
STEPS = Metric("trainyard_trainer_steps_total", "counter", "Optimizer steps this process has taken")
STEP_SECONDS = Metric(
    "trainyard_trainer_step_duration_seconds", "histogram", "Time of one optimizer step", buckets=STEP_BUCKETS
)
TOKENS = Metric(
    "trainyard_trainer_tokens_total", "counter", "Tokens (for a non-text model: samples) trained on, all ranks"
)
SAMPLES = Metric("trainyard_trainer_samples_total", "counter", "Samples trained on, all ranks")
LOSS = Metric("trainyard_trainer_loss", "gauge", "Mean training loss of the last step over all ranks")
LEARNING_RATE = Metric("trainyard_trainer_learning_rate", "gauge", "Learning rate of the last step")
WORLD_SIZE = Metric("trainyard_trainer_world_size", "gauge", "Processes in the job")
CHECKPOINT_STEP = Metric("trainyard_trainer_checkpoint_step", "gauge", "Step of the newest committed checkpoint")
CHECKPOINT_TIME = Metric(
    "trainyard_trainer_checkpoint_timestamp_seconds",
    "gauge",
    "When the newest committed checkpoint was committed (Unix seconds)",
)
CHECKPOINT_EVERY = Metric(
    "trainyard_trainer_checkpoint_interval_steps", "gauge", "Steps between checkpoints (--checkpoint-every)"
)
CHECKPOINT_BLOCKING = Metric(
    "trainyard_trainer_checkpoint_blocking_seconds",
    "histogram",
    "Time a checkpoint save blocked the training loop",
    buckets=CHECKPOINT_BUCKETS,
)
RESTARTS = Metric("trainyard_trainer_restarts", "gauge", "torchrun restarts of this pod's worker group")
RESUMES = Metric("trainyard_trainer_resumes_total", "counter", "Starts of this process that resumed a checkpoint")
RESUMED_FROM = Metric("trainyard_trainer_resumed_from_step", "gauge", "The checkpoint step this process resumed")
PREFLIGHT = Metric(
    "trainyard_trainer_preflight_check",
    "gauge",
    "1 for the status each preflight check had when the pod started",
    labels=("check", "status"),
)
TRANSPORT = Metric(
    "trainyard_trainer_nccl_transport_mismatch",
    "gauge",
    "1 when NCCL uses another transport than the fabric promises, 0 when it uses that one",
    labels=("used", "expected"),
)
INFO = Metric(
    "trainyard_trainer_info",
    "gauge",
    "Always 1: what this trainer runs",
    labels=("model", "strategy", "backend", "device"),
)

METRICS = (
    STEP, STEPS, STEP_SECONDS, TOKENS, SAMPLES, LOSS, LEARNING_RATE, WORLD_SIZE, CHECKPOINT_STEP,
    CHECKPOINT_TIME, CHECKPOINT_EVERY, CHECKPOINT_BLOCKING, RESTARTS, RESUMES, RESUMED_FROM, PREFLIGHT,
    TRANSPORT, INFO,
)  # fmt: skip
BY_NAME = {m.name: m for m in METRICS}

# Preflight results reach the workers through the env launch passes to torchrun:
# "name=status,name=status" (check names and statuses are fixed words: trainer/preflight.py).
ENV_PREFLIGHT = "TRAINYARD_PREFLIGHT"


_SECONDS = re.compile(r"[0-9]{1,6}(\.[0-9]{1,9})?")


def scrape_timeout(values: list[str]) -> float | None:
    """The seconds a scrape's ``SCRAPE_TIMEOUT_FIELD`` values (one field, as Prometheus sends it)
    name; None when the field is absent, repeated or not a plain decimal (no exponent, no sign)."""
    if len(values) != 1 or not _SECONDS.fullmatch(values[0]):
        return None
    return float(values[0]) or None


def metrics_port(value: str | None) -> int | None:
    """The port ``ENV_METRICS_PORT`` asks for: None when it says to export nothing. A value that is
    neither raises ValueError naming it (the trainer warns and trains on without metrics)."""
    if value is None or value.strip() == "":
        return DEFAULT_METRICS_PORT
    text = value.strip()
    if text.lower() in ("0", "off", "false", "no"):
        return None
    # isascii: str.isdigit also accepts other scripts' digits and superscripts, which int() reads or refuses
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535):
        raise ValueError(f"{ENV_METRICS_PORT}={value[:40]!r} is not a port (1-65535, or 0/off to export nothing)")
    return int(text)
