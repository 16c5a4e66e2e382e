"""Engine benchmark: pods mutated per second on one core.

The corpus is the example pods (PyTorchJob master and worker, MPIJob worker, TFJob chief, a pod
with an init container and a sidecar) plus a pod the webhook leaves alone (no trainer image) and
one asking to opt out (which reaches the engine only when its creator may not opt out: mutated,
with a warning). For each shape, ``engine.admit`` (decision + mutation, the pod already parsed) and
the whole review (orjson parse of the AdmissionReview, engine, patch serialised to base64, the
response serialised) are timed, and the whole review when an earlier pod of the same shape was
answered already (webhook/plans.py: the other pods of a job), its shape projected from the parsed
pod, its keys read from the body (webhook/quick.py), and, as the server does, a stencil of an
earlier body (webhook/stencil.py); each figure is the median of 5 rounds.

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
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import publish  # noqa: E402

from webhook.engine import admit  # noqa: E402
from webhook.plans import Plans  # noqa: E402
from webhook.policy import load_policies  # noqa: E402
from webhook.review import admission_review, review  # noqa: E402

NON_TRAINER = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-7d4b9c", "namespace": "ml", "labels": {"app": "web"}},
    "spec": {
        "containers": [
            {
                "name": "nginx",
                "image": "nginx:1.27",
                "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
                "env": [{"name": f"VAR_{i}", "value": str(i)} for i in range(10)],
            }
        ]
    },
}


def corpus() -> dict[str, dict]:
    shapes = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "examples" / "pods").glob("*.yaml"))}
    shapes["non-trainer"] = NON_TRAINER
    opted_out = yaml.safe_load((ROOT / "examples" / "pods" / "pytorchjob-master.yaml").read_text())
    opted_out["metadata"]["annotations"]["trainyard.dev/inject"] = "false"
    shapes["opt-out ignored"] = opted_out
    return shapes


def rate(fn, seconds: float, rounds: int = 5) -> float:
    """Calls per second: the median of ``rounds`` rounds of about ``seconds`` each."""
    fn()
    results = []
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            for _ in range(100):
                fn()
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
        body = orjson.dumps(admission_review(pod, pod["metadata"].get("namespace", "default")))
        decision = admit(pod, policies, "roce", "ml")
        ops = len(decision.mutation.ops) if decision.mutation else 0
        engine = rate(lambda pod=pod: admit(pod, policies, "roce", "ml"), args.seconds)
        whole = rate(lambda body=body: review(body, policies, "roce"), args.seconds)
        plans = Plans(policies, "roce")
        kept = rate(lambda body=body, plans=plans: review(body, policies, "roce", plans), args.seconds)
        keys = Plans(policies, "roce", stencils=0)
        quick = rate(lambda body=body, plans=keys: plans.review(body), args.seconds)
        fitted = rate(lambda body=body, plans=plans: plans.review(body), args.seconds)
        rows.append((name, decision.action, ops, len(body), engine, whole, kept, quick, fitted))
        print(
            f"{name:20} {decision.action:7} {ops:3} ops  engine {engine:8.0f}/s  review {whole:8.0f}/s  "
            f"shape kept {kept:8.0f}/s  body's keys {quick:8.0f}/s  stencil {fitted:8.0f}/s",
            flush=True,
        )
    trainers = [r for r in rows if r[1] == "mutate"]
    mix_engine, mix_review, mix_kept, mix_quick, mix_fitted = (
        len(trainers) / sum(1 / r[column] for r in trainers) for column in range(4, 9)
    )  # the rate of an equal mix of the trainer pods: the harmonic mean of theirs
    lines = [
        f"Engine on one core, Python {sys.version.split()[0]}, median of 5 rounds of {args.seconds:g} s.",
        "",
        "| pod | action | ops | review bytes | engine pods/s | µs/pod | whole review/s | µs/review "
        "| shape kept: review/s | µs/review | body's keys: review/s | µs/review | stencil: review/s | µs/review |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, action, ops, size, engine, whole, kept, quick, fitted in rows:
        lines.append(
            f"| {name} | {action} | {ops} | {size} | {engine:,.0f} | {1e6 / engine:.1f} "
            f"| {whole:,.0f} | {1e6 / whole:.1f} | {kept:,.0f} | {1e6 / kept:.1f} | {quick:,.0f} | {1e6 / quick:.1f} "
            f"| {fitted:,.0f} | {1e6 / fitted:.1f} |"
        )
    lines.append(
        f"| **trainer pods, equal mix** | mutate | | | **{mix_engine:,.0f}** | {1e6 / mix_engine:.1f} "
        f"| **{mix_review:,.0f}** | {1e6 / mix_review:.1f} | **{mix_kept:,.0f}** | {1e6 / mix_kept:.1f} "
        f"| **{mix_quick:,.0f}** | {1e6 / mix_quick:.1f} | **{mix_fitted:,.0f}** | {1e6 / mix_fitted:.1f} |"
    )
    table = "\n".join(lines) + "\n"
    publish(table, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
