"""Trainer exporter benchmark: what exporting one step to Prometheus costs, next to a step.

The exporter (trainer/metrics.py) serves on a free port of 127.0.0.1 while it is timed, as in a
pod. ``observe(Step)`` is timed in rounds of 1,000 calls; each figure is the median of the rounds'
per-call times. The step it is compared with is a real one: the tiny model trained in this process
by the train loop itself (one process, gloo, CPU) with the same exporter attached, its median
``step_ms`` from the run log. A scrape (rendering the exposition) runs in the server's thread,
once per scrape interval, not per step; it is shown for scale.

What a user would feel is the step itself: the same training is also run without an exporter and
with one scraped every second (the demo's interval; 30 times Prometheus Operator's default of 30 s), in
alternating pairs, and the medians of the pairs' step times are compared.

    .venv/bin/python bench/trainer_metrics.py [--steps 60] [--rounds 200] [--out bench/results/trainer_metrics.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import publish, table  # noqa: E402

CALLS = 1000  # observe() calls per round


def per_call_us(fn, rounds: int) -> float:
    """Median over ``rounds`` rounds of the microseconds one call of ``fn()`` takes."""
    for _ in range(CALLS):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        times.append((time.perf_counter() - t0) / CALLS * 1e6)
    return statistics.median(times)


def tiny_step_ms(steps: int, exporter) -> float:
    """Median step time of the tiny model trained by the train loop, with ``exporter`` attached."""
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK"):  # one process, no launcher
        os.environ.pop(var, None)
    from trainer import loop, options
    from trainyard.contract import reports

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "metrics.jsonl"
        cfg = options.parse(
            ["--model", "tiny", "--device", "cpu", "--max-steps", str(steps), "--metrics", str(log),
             "--log-every", str(steps)]
        )  # fmt: skip
        assert loop.run(cfg, exporter=exporter) == 0
        records = [reports.decode(line) for line in log.read_text().splitlines()]
    step_ms = [r.step_ms for r in records if isinstance(r, reports.Step)]
    return statistics.median(step_ms[5:])  # the first steps warm up


def scraped_every(port: int, seconds: float):
    """A thread that scrapes ``port`` every ``seconds`` until the returned event is set."""
    import threading
    import urllib.request

    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(seconds):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()

    threading.Thread(target=scrape, daemon=True).start()
    return stop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="steps of the tiny model (default 60)")
    parser.add_argument("--rounds", type=int, default=200, help="rounds of 1,000 observe() calls (default 200)")
    parser.add_argument("--pairs", type=int, default=3, help="runs without and with a scraped exporter (default 3)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "trainer_metrics.md"))
    args = parser.parse_args()

    import torch
    from prometheus_client import generate_latest

    from trainer import metrics
    from trainyard.contract import reports

    exporter = metrics.Exporter(samples_per_step=16, tokens_per_step=16 * 64, checkpoint_every=100)
    exporter.serve(0, "127.0.0.1")
    try:
        step_ms = tiny_step_ms(args.steps, exporter)
        plain = reports.Step(
            step=7, loss=2.5, lr=3e-3, tokens_per_s=1e5, step_ms=12.5, checkpoint_ms=None, world_size=8
        )
        saving = reports.Step(
            step=8, loss=2.4, lr=3e-3, tokens_per_s=1e5, step_ms=12.5, checkpoint_ms=40.0, world_size=8
        )
        null = metrics.NullExporter()
        rows_us = {
            "observe(Step)": per_call_us(lambda: exporter.observe(plain), args.rounds),
            "observe(Step) that saved a checkpoint": per_call_us(lambda: exporter.observe(saving), args.rounds),
            "observe(Step), local rank > 0 (no-op)": per_call_us(lambda: null.observe(plain), args.rounds),
        }
        t0 = time.perf_counter()
        for _ in range(200):
            generate_latest(exporter.registry)
        scrape_us = (time.perf_counter() - t0) / 200 * 1e6
        without, scraped = [], []
        for _ in range(args.pairs):
            without.append(tiny_step_ms(args.steps, metrics.NullExporter()))
            stop = scraped_every(exporter.port, 1.0)
            scraped.append(tiny_step_ms(args.steps, exporter))
            stop.set()
    finally:
        exporter.close()

    step_us = step_ms * 1000
    rows = [f"| {name} | {us:.2f} | {us / step_us * 100:.4f}% |" for name, us in rows_us.items()]
    rows.append(f"| tiny model, one training step (CPU, 1 process, batch 16 x 64 tokens) | {step_us:.0f} | 100% |")
    rows.append(f"| one scrape: render every series (server thread, per scrape, not per step) | {scrape_us:.0f} | - |")
    off, on = statistics.median(without) * 1000, statistics.median(scraped) * 1000
    rows.append(f"| a step, no exporter (median of {args.pairs} runs) | {off:.0f} | 100% |")
    rows.append(f"| a step, exporter scraped every second (median of {args.pairs} runs) | {on:.0f} | "
                f"{on / off * 100:.1f}% |")  # fmt: skip
    spread = ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(without, scraped, strict=True))
    caption = (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}\n"
        f"observe: median of {args.rounds} rounds of {CALLS} calls; step: median step_ms of {args.steps} steps "
        f"(first 5 not counted) of `trainer.loop.run` with the exporter attached; the pairs' step medians "
        f"(ms, without/with): {spread}\n\n"
        f"`python bench/trainer_metrics.py --steps {args.steps} --rounds {args.rounds} --pairs {args.pairs}`"
    )
    publish(table(caption, "| what | µs | share of a tiny CPU step |", "|---|---:|---:|", rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
