"""Instructions per review: the webhook against its floor, counted by valgrind, free of noise.

bench/webhook_http.py measures time, and on a shared machine one run's throughput can be off by a
quarter. This script counts what each server executes per request instead: both run under
callgrind (instrumentation switched on only once the server is up and warm), wrk sends the same
request streams as webhook_http.py's (8 connections; 8 pods per job, the same with the RANK env of
each pod its index, a new job per pod, a new shape per pod), and the instructions executed while
wrk ran, divided by the requests it got answered, give a figure that repeats to within a percent
whatever else the machine does. The floor's count over the webhook's is the throughput ratio the
two would have if time followed instructions; the difference is trainyard's own cost per review.

    .venv/bin/python bench/webhook_instructions.py [--seconds 15] [--stream LABEL ...] [--out FILE]

Needs valgrind (callgrind_control) and wrk. Under callgrind a server runs about 40 times slower.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results  # noqa: E402
from webhook_http import canned_response, template, wrk_script  # noqa: E402

from trainyard.sandbox.webhook_process import LocalWebhook  # noqa: E402
from webhook.certs import generate  # noqa: E402

SERVER_CPU, LOAD_CPU = 0, 1
STREAMS = {
    "8 pods per job": (8, False, False),
    "8 pods per job, RANK per pod": (8, False, True),
    "a new job per pod": (1, False, False),
    "a new shape per pod": (1, True, False),
}


def wrk(base: str, script: Path, seconds: int) -> int:
    """Requests answered by one wrk run of 8 connections (an error fails the benchmark)."""
    out = subprocess.run(
        ["wrk", "-t1", "-c8", f"-d{seconds}s", "-s", str(script), f"{base}/mutate"],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {LOAD_CPU}),
    ).stdout
    if "Non-2xx" in out or re.search(r"Socket errors", out):
        raise SystemExit(f"wrk saw errors:\n{out}")
    return int(re.search(r"(\d+) requests in", out).group(1))


def counted(server: LocalWebhook, dump_prefix: Path, script: Path, seconds: int) -> tuple[int, int]:
    """(instructions, requests) of one wrk run with callgrind's instrumentation on."""
    pid = str(server.proc.pid)
    warm = script.with_suffix(".warm.lua")  # the same stream from another start: no pod, job or shape of it
    warm.write_text(script.read_text().replace("local n = 0", "local n = 100000000"))
    wrk(server.base, warm, 2)  # warm: connections, caches
    subprocess.run(["callgrind_control", "--instr=on", pid], check=True, capture_output=True)
    requests = wrk(server.base, script, seconds)
    before = set(dump_prefix.parent.glob(dump_prefix.name + ".*"))
    subprocess.run(["callgrind_control", "--dump", pid], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "--instr=off", pid], check=True, capture_output=True)
    for _ in range(100):
        new = set(dump_prefix.parent.glob(dump_prefix.name + ".*")) - before
        if new:
            break
        time.sleep(0.1)
    (dump,) = new
    for _ in range(100):  # written by the server's own process: complete once its totals line is there
        text = dump.read_text(errors="replace")
        summary, totals = (re.search(rf"^{key}: (\d+)$", text, re.M) for key in ("summary", "totals"))
        if summary and totals:
            return int(summary.group(1)), requests
        time.sleep(0.1)
    raise SystemExit(f"no summary in {dump}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=15, help="counted wrk run per stream (default 15)")
    parser.add_argument("--pod", default="pytorchjob-worker.yaml", help="example pod to send (examples/pods/)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "webhook_instructions.md"))
    parser.add_argument(
        "--stream", action="append", choices=list(STREAMS), help="count only these streams (default all)"
    )
    args = parser.parse_args()
    streams = {label: STREAMS[label] for label in args.stream or STREAMS}
    missing = [tool for tool in ("valgrind", "callgrind_control", "wrk") if shutil.which(tool) is None]
    if missing:
        print(f"error: {', '.join(missing)} not found; on Debian: apt-get install valgrind wrk", file=sys.stderr)
        return 2

    rows = []
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        tmpdir = Path(tmp)
        generate(tmpdir / "tls")
        pod = yaml.safe_load((ROOT / "examples" / "pods" / args.pod).read_text())
        (tmpdir / "template.json").write_bytes(template_ := template(pod))
        (tmpdir / "response.json").write_bytes(canned_response(template_))
        scripts = {label: wrk_script(tmpdir, tmpdir / "template.json", *stream) for label, stream in streams.items()}
        tls = tmpdir / "tls"
        common = dict(policies=ROOT / "policies", tls=tls, ca=tls / "ca.crt", profile="roce", cpus={SERVER_CPU})
        commands = {
            "floor": [sys.executable, str(ROOT / "bench" / "floor.py"), "--response", str(tmpdir / "response.json")],
            "webhook": [sys.executable, "-m", "trainyard.cli", "serve"],
        }
        counts: dict[tuple[str, str], float] = {}
        for label, script in scripts.items():  # a fresh server per count: callgrind counts one run cleanly
            for name, command in commands.items():
                prefix = tmpdir / f"callgrind-{name}-{len(counts)}"
                valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={prefix}"]
                server = LocalWebhook(
                    **common,
                    command=valgrind + command,
                    startup_timeout=600,
                    log=tmpdir / f"{name}.log",
                    reload_interval=2.0,
                )
                try:
                    instructions, requests = counted(server, prefix, script, args.seconds)
                finally:
                    server.stop()
                counts[name, label] = instructions / requests
                print(f"{name:8} {label:20} {instructions / requests / 1000:8.1f} k instructions per request "
                      f"({requests} requests)", flush=True)  # fmt: skip
        for label in streams:
            floor, hook = counts["floor", label], counts["webhook", label]
            rows.append(f"| {label} | {floor / 1000:.0f} k | {hook / 1000:.0f} k | {(hook - floor) / 1000:.0f} k "
                        f"| {floor / hook:.2f} |")  # fmt: skip
    caption = (
        f"Instructions per request under callgrind (`valgrind --tool=callgrind`), wrk with 8 keep-alive "
        f"connections over TLS for {args.seconds} s per stream, request from {args.pod}; counted only while wrk "
        "ran, after a warm-up."
    )
    header = "| requests | floor | webhook | trainyard's own | floor / webhook |"
    table = results.table(caption, header, "|---|---:|---:|---:|---:|", rows)
    results.publish(table, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
