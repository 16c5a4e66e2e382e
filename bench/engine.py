"""Engine benchmark: pods mutated per second on one core.

The corpus is the pods of the repository's jobs as kube-apiserver sends them to the webhook
(bench/cluster_pods.py: each with a token volume and a review uid of its own), and one of them
asking to opt out (which reaches the engine only when its creator may not opt out: mutated, with a
warning). For each pod, ``engine.admit`` (decision + mutation, the pod already parsed) and the
whole review (orjson parse of the AdmissionReview, engine, patch serialised to base64, the
response serialised) are timed over 64 reviews of that pod taken in turn; each figure is the
median of 5 rounds.

    .venv/bin/python bench/engine.py [--seconds 1] [--out bench/results/engine.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cluster_pods  # noqa: E402
from results import publish  # noqa: E402

from trainyard.contract.names import OPT_OUT_ANNOTATION, OPT_OUT_VALUE  # noqa: E402
from webhook.engine import admit  # noqa: E402
from webhook.policy import load_policies  # noqa: E402
from webhook.review import review  # noqa: E402

RING = 64  # reviews of one pod, each with its own uid and token volume


def corpus() -> dict[str, dict]:
    """The pods by name (a generated name's prefix where the pod has no name yet)."""
    pods = {}
    for pod in cluster_pods.job_pods():
        meta = pod["metadata"]
        pods[meta.get("name") or meta["generateName"] + "*"] = pod
    first = next(iter(pods.values()))
    opted_out = orjson.loads(orjson.dumps(first))
    opted_out["metadata"].setdefault("annotations", {})[OPT_OUT_ANNOTATION] = OPT_OUT_VALUE
    pods["opt-out ignored"] = opted_out
    return pods


def rate(fn, seconds: float, rounds: int = 5) -> float:
    """Calls per second of ``fn(i)`` for i = 0, 1, ...: the median of ``rounds`` rounds of about ``seconds`` each."""
    fn(0)
    results = []
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            for i in range(100):
                fn(i)
            n += 100
        results.append(n / elapsed)
    return statistics.median(results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one round (default 1)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "engine.md"))
    args = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    policies = load_policies(ROOT / "policies")
    rows = []
    for name, pod in corpus().items():
        bodies = cluster_pods.bodies([cluster_pods.template(pod)], RING)
        pods = [orjson.loads(body)["request"]["object"] for body in bodies]
        namespace = pods[0]["metadata"].get("namespace", "default")
        decision = admit(pods[0], policies, "roce", namespace)
        ops = len(decision.mutation.ops) if decision.mutation else 0
        engine = rate(lambda i, pods=pods, ns=namespace: admit(pods[i % RING], policies, "roce", ns), args.seconds)
        whole = rate(lambda i, bodies=bodies: review(bodies[i % RING], policies, "roce"), args.seconds)
        size = round(statistics.mean(map(len, bodies)))
        rows.append((name, decision.action, ops, size, engine, whole))
        print(f"{name:28} {decision.action:7} {ops:3} ops  engine {engine:8.0f}/s  review {whole:8.0f}/s", flush=True)
    trainers = [r for r in rows if r[1] == "mutate"]
    mix_engine, mix_review = (
        len(trainers) / sum(1 / r[column] for r in trainers) for column in (4, 5)
    )  # the rate of an equal mix of the trainer pods: the harmonic mean of theirs
    lines = [
        f"Engine on one core, Python {sys.version.split()[0]}, median of 5 rounds of {args.seconds:g} s; the pods of "
        "the repository's jobs as kube-apiserver sends them (bench/cluster_pods.py), the roce profile by default.",
        "",
        "| pod | action | ops | review bytes | engine pods/s | µs/pod | whole review/s | µs/review |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, action, ops, size, engine, whole in rows:
        lines.append(
            f"| {name} | {action} | {ops} | {size} | {engine:,.0f} | {1e6 / engine:.1f} "
            f"| {whole:,.0f} | {1e6 / whole:.1f} |"
        )
    lines.append(
        f"| **trainer pods, equal mix** | mutate | | | **{mix_engine:,.0f}** | {1e6 / mix_engine:.1f} "
        f"| **{mix_review:,.0f}** | {1e6 / mix_review:.1f} |"
    )
    publish("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
