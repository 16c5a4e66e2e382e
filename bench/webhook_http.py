"""HTTPS benchmark: the webhook against its floor, driven by real load generators.

Both servers are pinned to CPU 0 (one core each, never loaded at the same time); the load
generator runs on CPU 1. For each fixed concurrency level, wrk (keep-alive connections, as
kube-apiserver uses) measures throughput and latency percentiles of the floor, then of the
webhook; at a fixed request rate hey does the same. RSS of each server is read from /proc at
rest and sampled under load.

    .venv/bin/python bench/webhook_http.py [--seconds 10] [--rate-seconds 30] [--repeat 3] [--no-streams]
        [--concurrency 1,8,32,64] [--out bench/results/webhook_http.md]

With --repeat N each load runs N times per server, floor and webhook alternating, and the table
gives each figure's median: on a shared machine one run's throughput can be off by a quarter.

Needs wrk and hey (Debian: apt-get install wrk hey).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import publish  # noqa: E402

from trainyard.contract.names import JOB_LABELS  # noqa: E402
from trainyard.sandbox.webhook_process import LocalWebhook, rss_bytes  # noqa: E402
from webhook.certs import generate  # noqa: E402
from webhook.policy import load_policies  # noqa: E402
from webhook.review import admission_review, review  # noqa: E402

SERVER_CPU, LOAD_CPU = 0, 1
# Each request is a pod of its own, as kube-apiserver sends them: a new uid and pod name, and the
# job label of the job it belongs to; a job has {pods} pods (so {pods} consecutive requests share
# a job, and a shape; in the row with a shape of each job's own, the first container's name has
# the job's number too; in the row with a rank per pod, the RANK env of a v1 PyTorchJob's pod is the
# pod's index, as the Training Operator sets it, else 1). Fixed-width fields keep every body of a row
# the same size.
WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{template}", "rb"); local template = f:read("*a"); f:close()
local n = 0
request = function()
  local job = math.floor(n / {pods})
  local body = template:gsub("@UID@", string.format("%08x-0000-4000-8000-%012x", job, n))
    :gsub("@JOB@", string.format("%08x", job)):gsub("@POD@", string.format("%04x", n % {pods}))
    :gsub("@SHAPE@", {shape} and string.format("-%08x", job) or "")
    :gsub("@RANK@", {rank} and string.format("%d", n % {pods} % 10) or "1")
  n = n + 1
  return wrk.format(nil, nil, nil, body)
end
"""
UID, JOB, POD, SHAPE, RANK = "@UID@", "@JOB@", "@POD@", "@SHAPE@", "@RANK@"


def template(pod: dict) -> bytes:
    """The AdmissionReview of ``pod`` with placeholders for the uid, the job and the pod's index."""
    pod = dict(pod, metadata=dict(pod["metadata"]))
    labels = dict(pod["metadata"].get("labels") or {})
    label = next(k for k in JOB_LABELS if k in labels)
    labels[label] = f"bench-{JOB}"
    pod["metadata"].update(name=f"bench-{JOB}-worker-{POD}", labels=labels)
    first = dict(pod["spec"]["containers"][0])
    first["name"] += SHAPE  # a container name of the job's own in the row where no two jobs share a shape
    first["env"] = [dict(e, value=RANK) if e.get("name") == "RANK" else e for e in first.get("env") or []]
    pod["spec"] = dict(pod["spec"], containers=[first, *pod["spec"]["containers"][1:]])
    review_ = admission_review(pod, pod["metadata"].get("namespace", "default"))
    review_["request"].update(uid=UID, name=pod["metadata"]["name"])
    return orjson.dumps(review_)


def one(template_: bytes, job: int = 0, pod: int = 0) -> bytes:
    """The body the Lua script sends as request number ``pod`` of job ``job``."""
    uid = f"{job:08x}-0000-4000-8000-{pod:012x}".encode()
    body = template_.replace(UID.encode(), uid).replace(JOB.encode(), b"%08x" % job)
    return body.replace(POD.encode(), b"%04x" % pod).replace(SHAPE.encode(), b"").replace(RANK.encode(), b"1")


def wrk_script(folder: Path, template_file: Path, pods: int, own_shape: bool, rank: bool = False) -> Path:
    """The wrk script of one request stream: ``pods`` pods per job, a shape of each job's own or
    not, the RANK env the pod's index or not."""
    script = folder / f"post-{pods}-{own_shape}-{rank}.lua"
    script.write_text(
        WRK_LUA.replace("{template}", str(template_file))
        .replace("{pods}", str(pods))
        .replace("{shape}", str(own_shape).lower())
        .replace("{rank}", str(rank).lower())
    )
    return script


def canned_response(template_: bytes) -> bytes:
    """The floor's answer: the webhook's own response to the stream's first request."""
    status, canned, _ = review(one(template_), load_policies(ROOT / "policies"), "roce")
    assert status == 200
    return canned


@dataclass
class Run:
    server: str
    load: str
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    rss_peak_mib: float
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


def parse_hey(out: str) -> tuple[float, float, float, int]:
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = dict(re.findall(r"^\s+(50|99)% in ([\d.]+) secs$", out, re.M))
    statuses = re.findall(r"^\s+\[(\d+)\]\s+(\d+) responses$", out, re.M)
    errors = sum(int(n) for code, n in statuses if code != "200")
    if "Error distribution:" in out:
        tail = out.split("Error distribution:", 1)[1]
        errors += sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]\s+\S", tail, re.M))
    return rps, float(pct["50"]) * 1e3, float(pct["99"]) * 1e3, errors


class RssSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop, self.interval = pid, 0, threading.Event(), interval

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.peak = max(self.peak, rss_bytes(self.pid))


def load(server: LocalWebhook, name: str, label: str, command: list[str], parse) -> Run:
    sampler = RssSampler(server.proc.pid)
    sampler.start()
    out = subprocess.run(
        command, capture_output=True, text=True, check=True, preexec_fn=lambda: os.sched_setaffinity(0, {LOAD_CPU})
    ).stdout
    sampler.stop.set()
    sampler.join()
    rps, p50, p99, errors = parse(out)
    return Run(name, label, rps, p50, p99, errors, sampler.peak / 2**20, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10, help="duration of each run (default 10)")
    parser.add_argument("--concurrency", default="1,8,32,64", help="wrk connection counts (default 1,8,32,64)")
    parser.add_argument("--rate", type=int, default=500, help="fixed request rate for hey (default 500/s)")
    parser.add_argument(
        "--rate-seconds", type=int, help="duration of each fixed-rate run (default: --seconds); longer steadies the p99"
    )
    parser.add_argument(
        "--streams",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the rows of other request streams (default: on)",
    )
    parser.add_argument("--pod", default="pytorchjob-worker.yaml", help="example pod to send (examples/pods/)")
    parser.add_argument("--pods-per-job", type=int, default=8, help="pods of one job in a row (default 8)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each server per load, alternating; medians reported (default 1)"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "webhook_http.md"))
    args = parser.parse_args()
    missing = [tool for tool in ("wrk", "hey") if shutil.which(tool) is None]
    if missing:
        print(f"error: {' and '.join(missing)} not found; on Debian: apt-get install wrk hey", file=sys.stderr)
        return 2
    if len(os.sched_getaffinity(0)) < 2:
        print("error: needs 2 CPUs (one for the servers, one for the load generator)", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        tmpdir = Path(tmp)
        generate(tmpdir / "tls")
        pod = yaml.safe_load((ROOT / "examples" / "pods" / args.pod).read_text())
        (tmpdir / "template.json").write_bytes(template_ := template(pod))
        body = one(template_)
        (tmpdir / "body.json").write_bytes(body)
        (tmpdir / "response.json").write_bytes(canned := canned_response(template_))
        # (pods per job, a shape of each job's own, RANK per pod): the rows' request streams
        variants = {
            (args.pods_per_job, False, False): "",
            (args.pods_per_job, False, True): ", RANK per pod",
            (1, False, False): ", a new job per pod",
            (1, True, False): ", a new shape per pod",
        }
        scripts = {variant: wrk_script(tmpdir, tmpdir / "template.json", *variant) for variant in variants}
        common = dict(policies=ROOT / "policies", tls=tmpdir / "tls", ca=tmpdir / "tls" / "ca.crt", profile="roce")
        floor = LocalWebhook(
            **common,
            cpus={SERVER_CPU},
            command=[sys.executable, str(ROOT / "bench" / "floor.py"), "--response", str(tmpdir / "response.json")],
        )
        webhook = LocalWebhook(**common, cpus={SERVER_CPU}, log=tmpdir / "webhook.log", reload_interval=2.0)
        servers = {"floor": floor, "webhook": webhook}
        rest = {name: rss_bytes(s.proc.pid) / 2**20 for name, s in servers.items()}
        runs: list[Run] = []
        try:
            wrk_loads = [(int(x), (args.pods_per_job, False, False)) for x in args.concurrency.split(",")]
            wrk_loads += [(8, variant) for variant in list(variants)[1:]] if args.streams else []
            for c, variant in wrk_loads:
                for name, server in [*servers.items()] * args.repeat:
                    cmd = ["wrk", "-t1", f"-c{c}", f"-d{args.seconds}s", "--latency", "-s", str(scripts[variant])]
                    label = f"{c} connections{variants[variant]}"
                    run = load(server, name, label, [*cmd, f"{server.base}/mutate"], parse_wrk)
                    runs.append(run)
                    print(
                        f"{run.server:8} {run.load:16} {run.rps:8.0f} req/s  p50 {run.p50_ms:6.2f} ms  "
                        f"p99 {run.p99_ms:6.2f} ms  errors {run.errors}",
                        flush=True,
                    )
            # a fixed rate from 2 connections (spread) and from 10 (hey's workers tick together:
            # bursts of 10 requests, the shape of a job creating its pods at once)
            for workers in (2, 10):
                for name, server in [*servers.items()] * args.repeat:
                    seconds = args.rate_seconds or args.seconds
                    cmd = ["hey", "-z", f"{seconds}s", "-c", str(workers), "-q", str(args.rate // workers)]
                    cmd += ["-m", "POST", "-T", "application/json", "-D", str(tmpdir / "body.json")]
                    label = f"{args.rate} req/s, {workers} conns"
                    run = load(server, name, label, [*cmd, f"{server.base}/mutate"], parse_hey)
                    runs.append(run)
                    print(
                        f"{run.server:8} {run.load:16} {run.rps:8.0f} req/s  p50 {run.p50_ms:6.2f} ms  "
                        f"p99 {run.p99_ms:6.2f} ms  errors {run.errors}",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()

    table = render(runs, rest, args, len(body), len(canned))
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
    )


def render(runs: list[Run], rest: dict[str, float], args: argparse.Namespace, request: int, response: int) -> str:
    by = {key: median_run([r for r in runs if (r.server, r.load) == key]) for key in {(r.server, r.load) for r in runs}}
    loads = list(dict.fromkeys(r.load for r in runs))
    repeat = f", median of {args.repeat} alternating runs" if args.repeat > 1 else ""
    rate_seconds = f" ({args.rate_seconds} s at a fixed rate)" if args.rate_seconds else ""
    lines = [
        f"Webhook vs floor over HTTPS (TLS 1.3, keep-alive), each server on one core, "
        f"{args.seconds} s per run{rate_seconds}{repeat}, request {request} B ({args.pod}), response {response} B. "
        f"wrk sends each request as a pod of its own (new uid and name), {args.pods_per_job} pods per job "
        "(the next rows: the RANK env of each pod its index, as the v1 Training Operator sets it; every pod of "
        "a new job; every pod of a new job whose first container has a name of its own, so no two pods share a "
        "shape); hey sends one body at a fixed rate.",
        "",
        "| load | floor req/s | webhook req/s | ratio | floor p50 / p99 ms | webhook p50 / p99 ms | p99 ratio "
        "| webhook peak RSS MiB | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for load_ in loads:
        f, w = by[("floor", load_)], by[("webhook", load_)]
        lines.append(
            f"| {load_} | {f.rps:.0f} | {w.rps:.0f} | {w.rps / f.rps:.2f} | {f.p50_ms:.2f} / {f.p99_ms:.2f} "
            f"| {w.p50_ms:.2f} / {w.p99_ms:.2f} | {w.p99_ms / f.p99_ms:.2f} | {w.rss_peak_mib:.0f} "
            f"| {f.errors + w.errors} |"
        )
    lines += ["", f"RSS at rest: webhook {rest['webhook']:.0f} MiB, floor {rest['floor']:.0f} MiB.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
