"""Throughput and checkpoint stall of `trainer train`, synchronous vs asynchronous checkpoints.

Runs the real train loop twice under torchrun (one process; NCCL on one GPU, or gloo on CPU)
with the same settings, once with synchronous and once with --async-checkpoint saves, and reads
each run's metrics.jsonl:

- tokens/s: median over the steps after warm-up (step time excludes the checkpoint stall);
- tokens/s with stalls: tokens of those steps / (their step time + checkpoint stalls);
- stall: how long each save blocked the training loop (median), and for async saves how long
  the background write took until the checkpoint was committed.

On a GPU (the figures the README should quote):

    python bench/trainer_gpu.py

On CPU (the README's CPU figures: the largest model of the trainer, at a short sequence):

    python bench/trainer_gpu.py --device cpu --model gpt-125m --steps 16 --batch-size 2 --seq-len 64 \
        --checkpoint-every 4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results import publish  # noqa: E402

WARMUP = 5


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--model", help="default: gpt-125m on cuda, tiny on cpu")
    p.add_argument("--steps", type=int, help="steps per run (default: 60 on cuda, 40 on cpu)")
    p.add_argument("--batch-size", type=int, help="global batch (default: 16 on cuda, 16 on cpu)")
    p.add_argument("--seq-len", type=int, help="tokens per sample (default: the model's context)")
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--out", help="keep the runs here (default: a temporary directory)")
    p.add_argument("--json", action="store_true", help="print the results as JSON too")
    p.add_argument("--table", help="where the table goes (default: bench/results/trainer_<device>.md)")
    return p.parse_args()


def run_mode(args: argparse.Namespace, root: Path, mode: str) -> dict:
    ckpt = root / mode
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
        "-m", "trainer", "train",
        "--device", args.device,
        "--model", args.model,
        "--max-steps", str(args.steps),
        "--batch-size", str(args.batch_size),
        "--checkpoint-dir", str(ckpt),
        "--checkpoint-every", str(args.checkpoint_every),
        "--keep", "2",
        "--log-every", str(args.steps),
    ]  # fmt: skip
    if args.seq_len:
        cmd += ["--seq-len", str(args.seq_len)]
    if mode == "async":
        cmd.append("--async-checkpoint")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    print(f"$ {shlex.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"the {mode} run failed (exit {done.returncode})")
    records = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "event" not in r and r["step"] > WARMUP]
    committed = [r for r in records if r.get("event") == "committed"]
    if not steps or not committed:
        raise SystemExit(f"the {mode} run has too few steps or no checkpoint; raise --steps")
    stalls = [r["checkpoint_ms"] for r in steps if r["checkpoint_ms"] is not None]
    tokens = sum(r["tokens_per_s"] * r["step_ms"] / 1000 for r in steps)
    busy_s = (sum(r["step_ms"] for r in steps) + sum(stalls)) / 1000
    return {
        "mode": mode,
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in steps),
        "tokens_per_s_with_stalls": tokens / busy_s,
        "step_ms_median": statistics.median(r["step_ms"] for r in steps),
        "stall_ms_median": statistics.median(stalls) if stalls else None,
        "save_total_ms_median": statistics.median(c["total_ms"] for c in committed),
        "checkpoints": len(committed),
        "checkpoint_bytes": sum(f.stat().st_size for f in (ckpt / f"step-{committed[-1]['step']}").iterdir()),
    }


def describe_device(device: str) -> str:
    import torch

    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run on a GPU machine, or pass --device cpu to check the script")
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}"


def main() -> None:
    args = parse_args()
    gpu = args.device == "cuda"
    args.model = args.model or ("gpt-125m" if gpu else "tiny")
    args.steps = args.steps or (60 if gpu else 40)
    args.batch_size = args.batch_size or 16
    device = describe_device(args.device)
    if args.out:
        root = Path(args.out)
        root.mkdir(parents=True, exist_ok=True)
        results = [run_mode(args, root, m) for m in ("sync", "async")]
    else:
        with tempfile.TemporaryDirectory(prefix="trainer-bench-") as tmp:
            results = [run_mode(args, Path(tmp), m) for m in ("sync", "async")]

    rows = [
        f"device: {device}",
        f"model {args.model}, global batch {args.batch_size}"
        + (f", {args.seq_len} tokens per sample" if args.seq_len else "")
        + f", {args.steps} steps (first {WARMUP} not counted), checkpoint every {args.checkpoint_every} steps "
        f"({results[0]['checkpoint_bytes'] / 2**20:.0f} MiB each, model and AdamW state)",
        "",
        f"`python bench/trainer_gpu.py {shlex.join(sys.argv[1:])}`".replace(" `", "`"),
        "",
        "| checkpoints | tokens/s (median step) | tokens/s incl. stalls | step ms | stall ms (median) "
        "| save total ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['mode']} | {r['tokens_per_s_median']:,.0f} | {r['tokens_per_s_with_stalls']:,.0f} | "
            f"{r['step_ms_median']:.1f} | {r['stall_ms_median']:.0f} | {r['save_total_ms_median']:.0f} |"
        )
    publish("\n".join(rows), args.table or REPO / "bench" / "results" / f"trainer_{args.device}.md")
    if args.json:
        print(json.dumps({"device": device, "model": args.model, "results": results}, indent=2))


if __name__ == "__main__":
    main()
