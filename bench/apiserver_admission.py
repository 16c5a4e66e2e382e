"""What trainyard's admission adds to a pod create, measured through a real kube-apiserver.

Two local clusters of the repository (``trainyard cluster up``): dev, whose fabric comes from the
webhook, and prod-ib, whose fabric comes from MutatingAdmissionPolicies. In each, the pods of the
cluster's jobs (as their controllers create them, owner references dropped so that the garbage
collector leaves them be) are created, not dry-run, at a steady rate:

- in a namespace no trainyard admission selects (the baseline: the API server, etcd, defaulting,
  the service-account plugin);
- in the job namespace ``ml-training``: the webhook or the policies, the fail-closed
  ValidatingAdmissionPolicy and the job pod-security policy. Its ResourceQuota is removed for the
  run: it would refuse most of these pods.

Each create is timed from the moment it was due (an open-loop schedule: a slow answer delays no
later request) to its response; the table gives p50 and p99 per pod and what the job namespace
adds to the baseline. Pods are deleted between runs.

    .venv/bin/python bench/apiserver_admission.py [--rates 1,10,50] [--seconds 60,30,20]
        [--out bench/results/apiserver_admission.md]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import ssl
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results import publish, table  # noqa: E402

from trainyard.cluster import controlplane  # noqa: E402
from trainyard.cluster.up import up  # noqa: E402
from trainyard.repo.jobs.preview import preview_path  # noqa: E402
from trainyard.repo.model.repository import load  # noqa: E402

JOBS = "ml-training"
PLAIN = "bench-plain"
CONNECTIONS = 32  # client-go keeps many requests in flight over HTTP/2; over HTTP/1.1, connections


def job_pods(cluster: str) -> list[dict]:
    repo = load(ROOT)
    folders = sorted(p for p in (ROOT / "overlays" / cluster / "jobs").iterdir() if p.is_dir())
    pods = []
    for folder in folders:
        for job in preview_path(repo, folder):
            for pod in job.pods:
                body = copy.deepcopy(pod.before)
                meta = body["metadata"]
                meta.pop("ownerReferences", None)
                meta.pop("name", None)
                meta["generateName"] = (meta.get("generateName") or "bench") + "-"
                body.pop("status", None)
                pods.append(body)
    return pods


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(server: str, context: ssl.SSLContext, pods: list[dict], namespace: str, rate: int, seconds: int):
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    async with httpx.AsyncClient(base_url=server, verify=context, limits=limits, timeout=30) as http:
        # warm the connections and the server's caches (first use of each policy and its params)
        for pod in pods[:5]:
            body = pod | {"metadata": pod["metadata"] | {"namespace": namespace}}
            await http.post(f"/api/v1/namespaces/{namespace}/pods", json=body)
        latencies: list[float] = []
        failures: list[str] = []
        start = time.perf_counter() + 0.1

        async def one(i: int) -> None:
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            pod = pods[i % len(pods)]
            body = pod | {"metadata": pod["metadata"] | {"namespace": namespace}}
            response = await http.post(f"/api/v1/namespaces/{namespace}/pods", json=body)
            latencies.append(time.perf_counter() - due)
            if response.status_code != 201:
                failures.append(f"{response.status_code}: {response.text[:200]}")

        await asyncio.gather(*(one(i) for i in range(rate * seconds)))
        await http.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", params={"gracePeriodSeconds": "0"})
    if failures:
        raise SystemExit(f"{len(failures)} creates failed in {namespace}, e.g. {failures[0]}")
    return latencies


def measure(cluster: str, rates: list[int], seconds: list[int], folder: Path) -> dict:
    print(f"{cluster}: starting the cluster", flush=True)
    started = up(load(ROOT), cluster, folder / cluster, progress=lambda s: print(f"  {s}", flush=True))
    try:
        with started.client() as kube:
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PLAIN}})
            kube.request("DELETE", f"/api/v1/namespaces/{JOBS}/resourcequotas")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    kube.get(f"/api/v1/namespaces/{PLAIN}/serviceaccounts/default")
                    break
                except Exception:
                    time.sleep(0.1)
        p = started.paths.pki
        context = ssl.create_default_context(cafile=str(p.ca))
        context.load_cert_chain(str(p.cert("admin")), str(p.key("admin")))
        pods = job_pods(cluster)
        out = {}
        for rate, secs in zip(rates, seconds, strict=True):
            for namespace in (PLAIN, JOBS):
                lat = asyncio.run(run(started.state.server, context, pods, namespace, rate, secs))
                out[(rate, namespace)] = lat
                print(f"  {rate:>3}/s {namespace:<12} n={len(lat):<5} p50 {percentile(lat, 0.5) * 1e3:6.2f} ms  "
                      f"p99 {percentile(lat, 0.99) * 1e3:6.2f} ms", flush=True)  # fmt: skip
        return out
    finally:
        controlplane.down(started.folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1,10,50", help="creates per second, comma-separated")
    ap.add_argument("--seconds", default="60,30,20", help="seconds at each rate, comma-separated")
    ap.add_argument("--out", default=str(ROOT / "bench/results/apiserver_admission.md"))
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    seconds = [int(s) for s in args.seconds.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        for cluster, admission in (("dev", "webhook"), ("prod-ib", "policies")):
            results = measure(cluster, rates, seconds, Path(tmp))
            for rate in rates:
                base, jobs = results[(rate, PLAIN)], results[(rate, JOBS)]
                b50, b99 = percentile(base, 0.5) * 1e3, percentile(base, 0.99) * 1e3
                j50, j99 = percentile(jobs, 0.5) * 1e3, percentile(jobs, 0.99) * 1e3
                rows.append(
                    f"| {cluster} | {admission} | {rate}/s | {len(jobs)} | {b50:.2f} | {b99:.2f} | {j50:.2f} "
                    f"| {j99:.2f} | {j50 - b50:+.2f} | {j99 - b99:+.2f} |"
                )
    load1 = os.getloadavg()[0]
    caption = (
        f"Pod creates through kube-apiserver v1.36.3 (bench/apiserver_admission.py, "
        f"{datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} cores, load average {load1:.1f}); ms per pod, "
        "from when the create was due to its answer"
    )
    header = ("| cluster | trainyard admission | rate | pods | baseline p50 | baseline p99 | job namespace p50 "
              "| job namespace p99 | added p50 | added p99 |")  # fmt: skip
    publish(table(caption, header, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|", rows), args.out)


if __name__ == "__main__":
    main()
