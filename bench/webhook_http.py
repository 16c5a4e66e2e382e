"""HTTPS benchmark: the webhook as a cluster loads it, against its floor and, optionally, another checkout.

Every request is a pod as kube-apiserver sends it (bench/cluster_pods.py: the pods of the
repository's jobs, each with a token volume and a review uid of its own, the jobs' pods in turn).
The servers run one at a time, each pinned to CPU 0; wrk runs on CPU 1 with keep-alive
connections, as kube-apiserver keeps them. The loads:

- a fixed rate (--rate, 500 reviews/s) spread evenly over 4 connections: what a cluster creating
  pods steadily feels; the webhook's target is a p99 of at most 2 ms here;
- the same rate in bursts of 10 requests at once over 10 connections: the pods of a job created
  together;
- as fast as --concurrency connections go: throughput.

The floor (bench/floor.py) is the same HTTP stack answering a canned response: what trainyard's own
code adds is the difference. With --before CHECKOUT a webhook run from that checkout's sources
(with this checkout's Python environment) is measured in the same rounds. Each load runs every
server --repeat times, servers alternating, so the machine's other load falls on all alike; the
table gives medians, each run's p99, and the machine's load average while they ran.

    .venv/bin/python bench/webhook_http.py [--rate 500] [--rate-seconds 20] [--seconds 5] [--concurrency 8]
        [--repeat 3] [--before CHECKOUT] [--out bench/results/webhook_http.md]

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
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cluster_pods  # noqa: E402
from results import publish  # noqa: E402

from trainyard.sandbox.webhook_process import LocalWebhook, rss_bytes  # noqa: E402
from webhook.certs import generate  # noqa: E402
from webhook.policy import load_policies  # noqa: E402
from webhook.review import review  # noqa: E402

SERVER_CPU, LOAD_CPU = 0, 1
RATE_CONNECTIONS = 4
BURST = 10


def canned_response(first: bytes) -> bytes:
    """The floor's answer: the webhook's own response to the stream's first request."""
    status, canned, _ = review(first, load_policies(ROOT / "policies"), "roce")
    assert status == 200
    return canned


def before_command(checkout: Path) -> list[str]:
    """``trainyard serve`` from another checkout's sources."""
    if not (checkout / "webhook" / "engine.py").is_file():
        raise SystemExit(f"error: {checkout} is not a checkout of this repository (no webhook/engine.py)")
    path = str(checkout.resolve())
    own = f"import sys; sys.path.insert(0, {path!r}); from trainyard.cli import main; sys.exit(main())"
    return [sys.executable, "-c", own, "serve"]


def machine() -> str:
    """The CPU model and the number of cores, as lscpu names them."""
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "unknown CPU",
    )  # fmt: skip
    return f"{model}, {os.cpu_count()} cores"


@dataclass
class Run:
    server: str
    load: str
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    rss_peak_mib: float
    load_average: float  # the machine's, over the last minute, when the run began
    raw: str = field(repr=False, default="")


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip()).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def parse_wrk(out: str) -> tuple[float, float, float, int]:
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))
    errors += sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    return rps, _ms(pct["50"]), _ms(pct["99"]), errors


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop, self.interval = pid, 0, threading.Event(), interval

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.peak = max(self.peak, rss_bytes(self.pid))


def load(server: LocalWebhook, name: str, label: str, command: list[str]) -> Run:
    sampler = RssSampler(server.proc.pid)
    load_average = os.getloadavg()[0]
    sampler.start()
    out = subprocess.run(
        command, capture_output=True, text=True, check=True, preexec_fn=lambda: os.sched_setaffinity(0, {LOAD_CPU})
    ).stdout
    sampler.stop.set()
    sampler.join()
    rps, p50, p99, errors = parse_wrk(out)
    return Run(name, label, rps, p50, p99, errors, sampler.peak / 2**20, load_average, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=500, help="reviews a second of the fixed-rate loads (default 500)")
    parser.add_argument("--rate-seconds", type=int, default=20, help="length of a fixed-rate run (default 20)")
    parser.add_argument("--seconds", type=int, default=5, help="length of a run as fast as it goes (default 5)")
    parser.add_argument("--concurrency", default="8", help="connections of the runs as fast as they go (default 8)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each server per load, alternating; medians reported (default 3)"
    )
    parser.add_argument("--before", type=Path, help="a checkout of another commit whose webhook runs alongside")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "webhook_http.md"))
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("error: wrk not found; on Debian: apt-get install wrk", file=sys.stderr)
        return 2
    if len(os.sched_getaffinity(0)) < 2:
        print("error: needs 2 CPUs (one for the servers, one for the load generator)", file=sys.stderr)
        return 2
    before = before_command(args.before) if args.before is not None else None
    started = datetime.now(UTC)
    templates = [cluster_pods.template(pod) for pod in cluster_pods.job_pods()]
    first = cluster_pods.bodies(templates, 1)[0]

    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        tmpdir = Path(tmp)
        generate(tmpdir / "tls")
        (tmpdir / "response.json").write_bytes(canned_response(first))
        common = dict(policies=ROOT / "policies", tls=tmpdir / "tls", ca=tmpdir / "tls" / "ca.crt", profile="roce")
        floor = [sys.executable, str(ROOT / "bench" / "floor.py"), "--response", str(tmpdir / "response.json")]
        servers = {"floor": LocalWebhook(**common, cpus={SERVER_CPU}, command=floor)}
        if before is not None:
            servers["webhook before"] = LocalWebhook(
                **common, cpus={SERVER_CPU}, command=before, log=tmpdir / "before.log", reload_interval=2.0
            )
        servers["webhook"] = LocalWebhook(**common, cpus={SERVER_CPU}, log=tmpdir / "webhook.log", reload_interval=2.0)
        rest = {name: rss_bytes(s.proc.pid) / 2**20 for name, s in servers.items()}
        loads = [
            (f"{args.rate}/s, spread over {RATE_CONNECTIONS} conns", RATE_CONNECTIONS, args.rate_seconds,
             cluster_pods.wrk_script(tmpdir, templates, args.rate, 1)),
            (f"{args.rate}/s, bursts of {BURST}", BURST, args.rate_seconds,
             cluster_pods.wrk_script(tmpdir, templates, args.rate, BURST)),
        ]  # fmt: skip
        loads += [
            (f"{c} conns, as fast as they go", c, args.seconds, cluster_pods.wrk_script(tmpdir, templates))
            for c in (int(x) for x in args.concurrency.split(","))
        ]
        runs: list[Run] = []
        try:
            for label, connections, seconds, script in loads:
                for name, server in [*servers.items()] * args.repeat:
                    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script)]
                    run = load(server, name, label, [*cmd, f"{server.base}/mutate"])
                    runs.append(run)
                    print(
                        f"{run.server:15} {run.load:28} {run.rps:7.0f} req/s  p50 {run.p50_ms:6.2f} ms  "
                        f"p99 {run.p99_ms:6.2f} ms  errors {run.errors}  load average {run.load_average:.2f}",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()

    command = shlex.join([".venv/bin/python", "bench/webhook_http.py", *sys.argv[1:]])
    table = render(runs, rest, args, command, started, sizes=(min(map(len, templates)), max(map(len, templates))))
    publish(table, args.out)
    return 0


def median_run(runs: list[Run]) -> Run:
    """Each figure's median over the repeated runs of one server at one load."""
    first = runs[0]
    return Run(
        first.server,
        first.load,
        *(statistics.median(getattr(r, f) for r in runs) for f in ("rps", "p50_ms", "p99_ms")),
        sum(r.errors for r in runs),
        max(r.rss_peak_mib for r in runs),
        statistics.median(r.load_average for r in runs),
    )


def render(
    runs: list[Run],
    rest: dict[str, float],
    args: argparse.Namespace,
    command: str,
    started: datetime,
    sizes: tuple[int, int],
) -> str:
    keys = list(dict.fromkeys((r.load, r.server) for r in runs))
    averages = [r.load_average for r in runs]
    lines = [
        f"`{command}` on {machine()}, {started:%Y-%m-%d %H:%M} UTC; the machine's load average (1 min) "
        f"{min(averages):.2f} to {max(averages):.2f} over the runs. Each server on one core (TLS 1.3, keep-alive), "
        f"wrk on the other; {args.rate_seconds} s per fixed-rate run, {args.seconds} s per run as fast as it goes, "
        f"medians of {args.repeat} runs, servers alternating. Each request is a pod of the repository's jobs as "
        f"kube-apiserver sends it (bench/cluster_pods.py), {sizes[0]:,} to {sizes[1]:,} bytes, "
        f"with a token volume and a review uid of its own.",
        "",
        "| load | server | req/s | p50 ms | p99 ms | p99 of each run, ms | peak RSS MiB | errors |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for key in keys:
        same = [r for r in runs if (r.load, r.server) == key]
        m = median_run(same)
        each = ", ".join(f"{r.p99_ms:.2f}" for r in same)
        lines.append(
            f"| {m.load} | {m.server} | {m.rps:.0f} | {m.p50_ms:.2f} | {m.p99_ms:.2f} | {each} "
            f"| {m.rss_peak_mib:.0f} | {m.errors} |"
        )
    lines += ["", "RSS at rest: " + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in rest.items()) + ".", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
