"""Prometheus metrics of the webhook, on a registry of their own (no process-global state)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

OUTCOMES = (
    "patched",
    "unchanged",
    "skipped",
    "denied",
    "error",
    "invalid",
    "too_large",
    "unsupported_media",
    "busy",
)


LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Reviews(Collector):
    """AdmissionReviews answered by outcome, and how long each took: plain counts kept by the
    event loop's thread alone (no lock, no metric object per review: about a tenth of what
    prometheus_client's Counter and Histogram cost a review), exported at scrape time as
    ``trainyard_webhook_reviews_total{outcome}`` and the histogram
    ``trainyard_webhook_review_duration_seconds``. A scrape copies the counts first, so a
    histogram's count is always the sum of its buckets."""

    def __init__(self) -> None:
        self.by_outcome = dict.fromkeys(OUTCOMES, 0)
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # the last: over every bound
        self.seconds = 0.0

    def count(self, outcome: str, elapsed: float | None = None) -> None:
        """One review with ``outcome``; ``elapsed``: its seconds, when it was timed."""
        self.by_outcome[outcome] += 1
        if elapsed is not None:
            self.buckets[bisect_left(LATENCY_BUCKETS, elapsed)] += 1  # le: a value on a bound is in it
            self.seconds += elapsed

    def collect(self) -> Iterator[Metric]:
        outcomes, buckets, seconds = dict(self.by_outcome), list(self.buckets), self.seconds
        reviews = CounterMetricFamily(
            "trainyard_webhook_reviews", "AdmissionReviews answered, by outcome", labels=["outcome"]
        )
        for outcome, n in outcomes.items():
            reviews.add_metric([outcome], n)
        yield reviews
        cumulative, total = [], 0
        for bound, n in zip((*map(str, LATENCY_BUCKETS), "+Inf"), buckets, strict=True):
            total += n
            cumulative.append((bound, total))
        latency = HistogramMetricFamily(
            "trainyard_webhook_review_duration_seconds",
            "Time to answer one AdmissionReview, body read to response built",
        )
        latency.add_metric([], cumulative, seconds)
        yield latency


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reviews = Reviews()
        self.registry.register(self.reviews)
        self.policy_reloads = Counter(
            "trainyard_webhook_policy_reloads",
            "Policy directory reloads, by result (a failure keeps the last good set)",
            ["result"],
            registry=self.registry,
        )
        self.cert_reloads = Counter(
            "trainyard_webhook_certificate_reloads",
            "TLS certificate reloads, by result (a failure keeps the serving certificate)",
            ["result"],
            registry=self.registry,
        )
        for counter in (self.policy_reloads, self.cert_reloads):
            counter.labels("success")
            counter.labels("failure")
        self.refusals = Counter(
            "trainyard_webhook_reload_refusals",
            "Policy sets and certificates refused on reload, by what and why (the last good one keeps serving)",
            ["what", "reason"],
            registry=self.registry,
        )
        self.refused = Gauge(
            "trainyard_webhook_config_refused",
            "1 while the files on disk are refused and the last good ones serve",
            ["what"],
            registry=self.registry,
        )
        for what in ("policies", "certificate"):
            self.refused.labels(what).set(0)
        self.connections = Gauge(
            "trainyard_webhook_connections",
            "Open connections on the webhook port, TLS handshakes included",
            registry=self.registry,
        )
        self.connections_closed = Counter(
            "trainyard_webhook_connections_closed",
            "Connections closed to stay under the connection cap: evicted_fresh (no request completed), "
            "evicted_idle (idle between requests), refused (every connection busy)",
            ["why"],
            registry=self.registry,
        )
        for why in ("evicted_fresh", "evicted_idle", "refused"):
            self.connections_closed.labels(why)
        self.client_certificates_refused = Counter(
            "trainyard_webhook_client_certificates_refused",
            "TLS handshakes refused under --client-ca: missing (the client presented no certificate), "
            "untrusted (its certificate does not chain to the client CA, or is not valid now)",
            ["why"],
            registry=self.registry,
        )
        for why in ("missing", "untrusted"):
            self.client_certificates_refused.labels(why)
        self.in_flight = Gauge(
            "trainyard_webhook_reviews_in_flight",
            "POST /mutate requests received (headers read) and not yet answered",
            registry=self.registry,
        )
        # counted by the event loop's thread alone (a plain int: no lock per review), read at scrape
        self.reviews_in_flight = 0
        self.in_flight.set_function(lambda: self.reviews_in_flight)
        self.profiles = Gauge(
            "trainyard_webhook_profiles", "FabricProfiles in the active policy set", registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
