"""Server CPU time per review: the webhook against its floor, and against another checkout.

wrk's throughput on a shared machine moves by a quarter between runs of the same code. This
measures what throughput at saturation is made of, the server's own CPU time (user and system,
from /proc) per request answered, with the servers interleaved round by round so that each
round's load from others falls on all of them alike. The servers are started once, pinned to
CPU 0, and loaded one at a time by wrk on CPU 1 (8 keep-alive connections, bench/webhook_http.py's
main request stream: each request a pod of its own, 8 pods per job). The table gives each
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
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import publish, table  # noqa: E402
from webhook_http import SERVER_CPU, canned_response, template, wrk_script  # noqa: E402
from webhook_instructions import wrk  # noqa: E402

from trainyard.sandbox.webhook_process import LocalWebhook  # noqa: E402
from webhook.certs import generate  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system time of process ``pid`` so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


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
    if args.before is not None and not (args.before / "webhook" / "plans.py").is_file():
        print(f"error: {args.before} is not a checkout of this repository", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        tmpdir = Path(tmp)
        generate(tmpdir / "tls")
        pod = yaml.safe_load((ROOT / "examples" / "pods" / "pytorchjob-worker.yaml").read_text())
        (tmpdir / "template.json").write_bytes(template_ := template(pod))
        (tmpdir / "response.json").write_bytes(canned_response(template_))
        script = wrk_script(tmpdir, tmpdir / "template.json", 8, False)
        common = dict(
            policies=ROOT / "policies",
            tls=tmpdir / "tls",
            ca=tmpdir / "tls" / "ca.crt",
            profile="roce",
            cpus={SERVER_CPU},
        )
        floor = [sys.executable, str(ROOT / "bench" / "floor.py"), "--response", str(tmpdir / "response.json")]
        servers = {"floor": LocalWebhook(**common, command=floor), "webhook": LocalWebhook(**common)}
        if args.before is not None:
            before = str(args.before.resolve())
            own = f"import sys; sys.path.insert(0, {before!r}); from trainyard.cli import main; sys.exit(main())"
            servers["webhook before"] = LocalWebhook(**common, command=[sys.executable, "-c", own, "serve"])
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
    caption = (
        f"Server CPU time (user and system) per request, {args.rounds} rounds of {args.seconds} s per server, the "
        "servers interleaved; wrk, 8 keep-alive connections over TLS, each request a pod of its own, 8 pods per job "
        "(pytorchjob-worker.yaml)."
    )
    header = "| server | median µs per request | range | floor / server |"
    publish(table(caption, header, "|---|---:|---:|---:|", rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
