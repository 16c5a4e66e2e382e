"""Recovery time of `trainer train` under torchrun after kill -9 of a worker, split into its phases.

Each run starts `torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m trainer train` (gloo
on CPU), waits until a checkpoint is committed, kills rank 1 with SIGKILL and lets torchrun restart
the group, which resumes from that checkpoint. The phases, from the kill to the end of the first
step after it:

- detection: until torchrun's agent reacts (its first log line after the kill: "Sending process N
  closing signal SIGTERM" to the survivors, or "failed (exitcode: -9)"; time stamps of torch's
  log format, torch/_logging/_internal.py TorchLogsFormatter: ``W1123 20:36:05.537000 PID ...``);
- restart: until a new worker process runs (the agent stops the survivors, its rendezvous runs
  a new round, it spawns the workers; the run log's start event has ``process_started``);
- start-up: the interpreter and ``import torch`` in the new worker;
- rendezvous: the process group (the round's store namespace, gloo's full mesh; ``setup_ms``);
- model build and checkpoint load (the resume event's ``load_ms``);
- first step: the first optimizer step after the resume (its ``step_ms``).

    python bench/recovery.py                       # tiny model, 5 runs
    python bench/recovery.py --model gpt-125m --seq-len 64 --batch-size 2 --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results import publish  # noqa: E402
from trainyard.cluster.processes import wait_for  # noqa: E402
from trainyard.contract import reports  # noqa: E402
from trainyard.sandbox.processes import descendants, training_workers  # noqa: E402

AGENT_LINE = re.compile(
    r"^[IWE](?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<us>\d{6}) \d+ \S+\] "
    r"(?P<msg>Sending process \d+ closing signal|failed \(exitcode)"
)
PHASES = ("detection", "restart", "start-up", "rendezvous", "model build", "checkpoint load", "first step")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--model", default="tiny")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--steps", type=int, default=60, help="max steps of each run (the kill comes after the first save)")
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "recovery.md"), help="where the table goes")
    return p.parse_args()


def agent_time(line: re.Match[str], year: int) -> float:
    """torch's log time stamps are local time without a year."""
    stamp = dt.datetime.strptime(f"{year}{line['md']} {line['hms']}", "%Y%m%d %H:%M:%S")
    return stamp.timestamp() + int(line["us"]) / 1e6


def one_run(args: argparse.Namespace, root: Path, index: int) -> dict[str, float]:
    ckpt = root / f"run{index}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "1", "-m", "trainer", "train", "--model", args.model, "--max-steps", str(args.steps),
           "--batch-size", str(args.batch_size), "--checkpoint-every", str(args.checkpoint_every),
           "--checkpoint-dir", str(ckpt), "--log-every", "1000"]  # fmt: skip
    if args.seq_len:
        cmd += ["--seq-len", str(args.seq_len)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DISABLE_SHARE", "TORCHELASTIC_"))}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    log = (root / f"run{index}.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    metrics = ckpt / "metrics.jsonl"
    try:
        wait_for(lambda: any(ckpt.glob("step-*/.metadata")), 600, "a committed checkpoint", proc)
        victim = wait_for(lambda: training_workers(descendants([proc.pid])).get(1), 60, "rank 1", proc)
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        if proc.wait(timeout=1200) != 0:
            raise SystemExit(f"run {index} failed; see {root / f'run{index}.log'}")
    finally:
        for pid in descendants([proc.pid]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()
    year = dt.datetime.now().year
    reacted = [
        agent_time(m, year)
        for line in (root / f"run{index}.log").read_text().splitlines()
        if (m := AGENT_LINE.match(line))
    ]
    detected = min(t for t in reacted if t >= killed - 0.01)
    records = [reports.decode(line, str(metrics)) for line in metrics.read_text().splitlines()]
    starts = [r for r in records if isinstance(r, reports.Timed) and isinstance(r.record, reports.Start)]
    resumed = next(r.record for r in records if isinstance(r, reports.Timed) and isinstance(r.record, reports.Resume))
    start, began = starts[1].record, starts[1].time
    first = next(r for r in records if isinstance(r, reports.Step) and r.step == resumed.step + 1)
    group_begun = start.group_ready - start.setup_ms / 1000
    load = (resumed.load_ms or 0) / 1000
    return {
        "detection": detected - killed,
        "restart": start.process_started - detected,
        "start-up": group_begun - start.process_started,
        "rendezvous": start.setup_ms / 1000,
        "model build": began - start.group_ready - load,
        "checkpoint load": load,
        "first step": first.step_ms / 1000,
        "total": began + first.step_ms / 1000 - killed,
        "checkpoint MiB": sum(f.stat().st_size for f in max(ckpt.glob("step-*")).iterdir()) / 2**20,
    }


def main() -> None:
    args = parse_args()
    import torch

    with tempfile.TemporaryDirectory(prefix="recovery-bench-") as tmp:
        runs = []
        for i in range(args.runs):
            runs.append(one_run(args, Path(tmp), i))
            print(f"run {i + 1}/{args.runs}: {runs[-1]['total']:.2f} s", file=sys.stderr, flush=True)
    what = f"--model {args.model} --batch-size {args.batch_size}" + (
        f" --seq-len {args.seq_len}" if args.seq_len else ""
    )
    rows = [
        f"kill -9 of rank 1 to the end of the first step after the resume: torchrun --standalone, 2 workers, gloo "
        f"on CPU ({platform.machine()}, {os.cpu_count()} cores), torch {torch.__version__}, {what}, "
        f"checkpoint {runs[0]['checkpoint MiB']:.1f} MiB; {args.runs} runs",
        "",
        f"`python bench/recovery.py {' '.join(sys.argv[1:])}`".replace(" `", "`"),
        "",
        "| phase | median s | min s | max s |",
        "|---|---:|---:|---:|",
    ]
    for phase in (*PHASES, "total"):
        values = [r[phase] for r in runs]
        rows.append(f"| {phase} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")
    publish("\n".join(rows), args.out)


if __name__ == "__main__":
    main()
