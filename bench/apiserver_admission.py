"""What trainyard's admission adds to a pod create, measured through a real kube-apiserver.

Two local clusters of the repository (``trainyard cluster up``): dev, whose fabric comes from the
webhook, and prod-ib, whose fabric comes from MutatingAdmissionPolicies. In each, the pods of the
cluster's jobs (as their controllers create them, owner references dropped so that the garbage
collector leaves them be) are created, not dry-run, at a steady rate:

- ``bench-plain``, a namespace no trainyard admission selects: the baseline (the API server,
  etcd, defaulting, the service-account plugin);
- ``bench-fabric``, labelled ``trainyard.dev/injection=enabled``: the fabric admission, the webhook
  or the MutatingAdmissionPolicies, and the fail-closed ValidatingAdmissionPolicy;
- the job namespace ``ml-training``: that and the job pod-security policy. Its ResourceQuota is
  removed for the run: it would refuse most of these pods.

Beside the latencies seen by the client, kube-apiserver's own metrics say how long each admission
plugin took per create (``apiserver_admission_controller_admission_duration_seconds``, sum over
count during the run).

Each create is timed from the moment it was due (an open-loop schedule: a slow answer delays no
later request) to its response; the table gives p50 and p99 per pod and what the job namespace
adds to the baseline. Pods are deleted between runs.

    .venv/bin/python bench/apiserver_admission.py [--rates 1,10,50] [--seconds 30,15,8]
        [--out bench/results/apiserver_admission.md]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import re
import ssl
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cluster_pods  # noqa: E402
from results import publish, table  # noqa: E402

from trainyard.cluster import components, controlplane  # noqa: E402
from trainyard.cluster.up import up  # noqa: E402
from trainyard.repo.model.repository import load  # noqa: E402

JOBS = "ml-training"
PLAIN = "bench-plain"
FABRIC = "bench-fabric"
NAMESPACES = (PLAIN, FABRIC, JOBS)
PLUGINS = ("MutatingAdmissionWebhook", "MutatingAdmissionPolicy", "ValidatingAdmissionPolicy")
METRIC = re.compile(
    r'^apiserver_admission_controller_admission_duration_seconds_(sum|count)\{name="([^"]+)",operation="CREATE",'
    r'rejected="false",type="(?:admit|validate)"\} (\S+)$',
    re.M,
)
CONNECTIONS = 32  # client-go keeps many requests in flight over HTTP/2; over HTTP/1.1, connections


def job_pods(cluster: str) -> list[dict]:
    """The cluster's job pods, owner references dropped and named by generateName."""
    pods = []
    for pod in cluster_pods.job_pods(ROOT, cluster):
        body = copy.deepcopy(pod)
        meta = body["metadata"]
        meta.pop("ownerReferences", None)
        meta.pop("name", None)
        meta["generateName"] = (meta.get("generateName") or "bench") + "-"
        body.pop("status", None)
        pods.append(body)
    return pods


def plugin_seconds(kube) -> dict[str, tuple[float, float]]:
    """plugin -> (seconds, calls) of pod and other CREATEs so far, from kube-apiserver's /metrics."""
    text = kube.http.get("/metrics").text
    out: dict[str, list[float]] = {}
    for what, name, value in METRIC.findall(text):
        pair = out.setdefault(name, [0.0, 0.0])
        pair[0 if what == "sum" else 1] += float(value)
    return {k: (v[0], v[1]) for k, v in out.items()}


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
        kube = started.client()
        labels = {FABRIC: {"trainyard.dev/injection": "enabled"}}
        for ns in (PLAIN, FABRIC):
            kube.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels.get(ns, {})}}
            )
        kube.request("DELETE", f"/api/v1/namespaces/{JOBS}/resourcequotas")
        pods = job_pods(cluster)
        accounts = {p["spec"].get("serviceAccountName") for p in pods} - {None, "default"}
        for ns in NAMESPACES:  # the ServiceAccounts the jobs' pods name (their controllers make some)
            for name in accounts:
                meta = {"name": name, "namespace": ns}
                kube.create_if_absent({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
            kube.wait_service_account(ns)  # and its default one, from kube-controller-manager
        context = started.paths.pki.client_context()
        out = {}
        for rate, secs in zip(rates, seconds, strict=True):
            for namespace in NAMESPACES:
                before = plugin_seconds(kube)
                lat = asyncio.run(run(started.state.server, context, pods, namespace, rate, secs))
                after = plugin_seconds(kube)
                per_pod = {}  # every pod create passes through every plugin, matched or not
                for name in PLUGINS:
                    was, now = before.get(name, (0.0, 0.0)), after.get(name, (0.0, 0.0))
                    seconds_, calls = now[0] - was[0], now[1] - was[1]
                    if calls:
                        per_pod[name] = seconds_ / calls * 1e3
                out[(rate, namespace)] = (lat, per_pod)
                print(f"  {rate:>3}/s {namespace:<12} n={len(lat):<5} p50 {percentile(lat, 0.5) * 1e3:6.2f} ms  "
                      f"p99 {percentile(lat, 0.99) * 1e3:6.2f} ms  plugins {per_pod}", flush=True)  # fmt: skip
        kube.close()
        return out
    finally:
        controlplane.down(started.folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1,10,50", help="creates per second, comma-separated")
    ap.add_argument("--seconds", default="30,15,8", help="seconds at each rate, comma-separated")
    ap.add_argument("--out", default=str(ROOT / "bench/results/apiserver_admission.md"))
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    seconds = [int(s) for s in args.seconds.split(",")]
    rows, plugin_rows = [], []
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        for cluster, admission in (("dev", "webhook"), ("prod-ib", "policies")):
            results = measure(cluster, rates, seconds, Path(tmp))
            for rate in rates:
                base = results[(rate, PLAIN)][0]
                b50, b99 = percentile(base, 0.5) * 1e3, percentile(base, 0.99) * 1e3
                cells = []
                for namespace in (FABRIC, JOBS):
                    lat, per_pod = results[(rate, namespace)]
                    j50, j99 = percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3
                    cells.append(f"{j50:.2f} / {j99:.2f} | {j50 - b50:+.2f} / {j99 - b99:+.2f}")
                    plugins = ", ".join(f"{name} {ms:.2f}" for name, ms in per_pod.items() if ms >= 0.005)
                    plugin_rows.append(f"| {cluster} | {rate}/s | {namespace} | {plugins or '-'} |")
                rows.append(f"| {cluster} | {admission} | {rate}/s | {len(base)} | {b50:.2f} / {b99:.2f} | "
                            + " | ".join(cells) + " |")  # fmt: skip
    load1 = os.getloadavg()[0]
    caption = (
        f"Pod creates through kube-apiserver {components.KUBERNETES_VERSION} (bench/apiserver_admission.py, "
        f"{datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} cores, load average {load1:.1f}); ms per pod, "
        "from when the create was due to its answer"
    )
    header = ("| cluster | fabric admission | rate | pods per namespace | baseline p50 / p99 | fabric namespace "
              "p50 / p99 | added p50 / p99 | job namespace p50 / p99 | added p50 / p99 |")  # fmt: skip
    main_table = table(caption, header, "|---|---|--:|--:|--:|--:|--:|--:|--:|", rows)
    plugins = table(
        "kube-apiserver's own time per pod in each admission plugin during those runs (ms, mean)",
        "| cluster | rate | namespace | plugin: ms per pod |",
        "|---|--:|---|---|",
        plugin_rows,
    )
    publish(main_table + "\n" + plugins, args.out)


if __name__ == "__main__":
    main()
