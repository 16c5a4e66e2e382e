"""The review counts (webhook/metrics.py Reviews) as Prometheus reads them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from webhook.metrics import LATENCY_BUCKETS, OUTCOMES, Metrics


def families(metrics: Metrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def test_reviews_are_counted_by_outcome_and_timed_into_cumulative_buckets():
    metrics = Metrics()
    for outcome, elapsed in [("patched", 0.0002), ("patched", 0.00021), ("denied", 2.0), ("too_large", None)]:
        metrics.reviews.count(outcome, elapsed)
    found = families(metrics)
    counted = found["trainyard_webhook_reviews"].samples
    reviews = {s.labels["outcome"]: s.value for s in counted if s.name.endswith("_total")}
    assert reviews == {**dict.fromkeys(OUTCOMES, 0.0), "patched": 2.0, "denied": 1.0, "too_large": 1.0}
    samples = found["trainyard_webhook_review_duration_seconds"].samples
    buckets = {s.labels["le"]: s.value for s in samples if s.name.endswith("_bucket")}
    assert buckets["0.0002"] == 1 and buckets["0.0005"] == 2 and buckets["1.0"] == 2 and buckets["+Inf"] == 3
    assert len(buckets) == len(LATENCY_BUCKETS) + 1
    values = [buckets[str(b)] for b in LATENCY_BUCKETS] + [buckets["+Inf"]]
    assert values == sorted(values)  # cumulative
    count = next(s.value for s in samples if s.name.endswith("_count"))
    total = next(s.value for s in samples if s.name.endswith("_sum"))
    assert count == buckets["+Inf"] == 3 and abs(total - 2.00041) < 1e-9
