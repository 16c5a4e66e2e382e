"""Server CPU time per review: the webhook against its floor, and against another checkout.

wrk's throughput on a shared machine moves by a quarter between runs of the same code. This
measures what throughput at saturation is made of, the server's own CPU time (user and system,
from /proc) per request answered, with the servers interleaved round by round so that each
round's load from others falls on all of them alike. The servers are started once, pinned to
CPU 0, and loaded one at a time by wrk on CPU 1 (8 keep-alive connections; each request a pod of
the repository's jobs as kube-apiserver sends it, bench/cluster_pods.py). The table gives each
server's median over the rounds, and the floor's median over each webhook's: the throughput
ratio the two have when the server's core is the limit.

    .venv/bin/python bench/webhook_cpu.py [--rounds 8] [--seconds 4] [--before CHECKOUT]
        [--out bench/results/webhook_cpu.md]

``--before`` names a checkout of another commit (its webhook runs from its own sources, with
this checkout's Python environment): both webhooks are measured in the same rounds.

Needs wrk (Debian: apt-get install wrk).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cluster_pods  # noqa: E402
from results import publish, table  # noqa: E402
from webhook_http import LOAD_CPU, SERVER_CPU, before_command, canned_response, machine  # noqa: E402

from trainyard.sandbox.webhook_process import LocalWebhook  # noqa: E402
from webhook.certs import generate  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system time of process ``pid`` so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="rounds, each server loaded once a round (default 8)")
    parser.add_argument("--seconds", type=int, default=4, help="wrk run per server and round (default 4)")
    parser.add_argument("--before", type=Path, help="a checkout of another commit whose webhook runs alongside")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "webhook_cpu.md"))
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("error: wrk not found; on Debian: apt-get install wrk", file=sys.stderr)
        return 2
    before = before_command(args.before) if args.before is not None else None
    started = datetime.now(UTC)
    templates = [cluster_pods.template(pod) for pod in cluster_pods.job_pods()]
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        tmpdir = Path(tmp)
        generate(tmpdir / "tls")
        (tmpdir / "response.json").write_bytes(canned_response(cluster_pods.bodies(templates, 1)[0]))
        script = cluster_pods.wrk_script(tmpdir, templates)
        common = dict(
            policies=ROOT / "policies",
            tls=tmpdir / "tls",
            ca=tmpdir / "tls" / "ca.crt",
            profile="roce",
            cpus={SERVER_CPU},
        )
        floor = [sys.executable, str(ROOT / "bench" / "floor.py"), "--response", str(tmpdir / "response.json")]
        servers = {"floor": LocalWebhook(**common, command=floor), "webhook": LocalWebhook(**common)}
        if before is not None:
            servers["webhook before"] = LocalWebhook(**common, command=before)
        per_request: dict[str, list[float]] = {name: [] for name in servers}
        try:
            for round_ in range(args.rounds):
                for name, server in servers.items():
                    start = cpu_seconds(server.proc.pid)
                    requests = wrk(server.base, script, args.seconds)
                    per_request[name].append((cpu_seconds(server.proc.pid) - start) / requests * 1e6)
                print(
                    f"round {round_ + 1}: " + "  ".join(f"{n} {v[-1]:.0f} us" for n, v in per_request.items()),
                    flush=True,
                )
        finally:
            for server in servers.values():
                server.stop()
    floor_us = statistics.median(per_request["floor"])
    medians = {name: statistics.median(v) for name, v in per_request.items()}
    rows = [
        f"| {name} | {medians[name]:.0f} | {min(v):.0f} to {max(v):.0f} | {floor_us / medians[name]:.2f} |"
        for name, v in per_request.items()
    ]
    command = shlex.join([".venv/bin/python", "bench/webhook_cpu.py", *sys.argv[1:]])
    caption = (
        f"`{command}` on {machine()}, {started:%Y-%m-%d %H:%M} UTC. Server CPU time (user and system) per "
        f"request, {args.rounds} rounds of {args.seconds} s per server, the servers interleaved; wrk, 8 keep-alive "
        "connections over TLS, each request a pod of the repository's jobs as kube-apiserver sends it "
        "(bench/cluster_pods.py)."
    )
    header = "| server | median µs per request | range | floor / server |"
    publish(table(caption, header, "|---|---:|---:|---:|", rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
