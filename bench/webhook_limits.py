"""Limits benchmark: ``trainyard serve`` on loopback against hostile clients and hostile pods.

Each connection scenario starts a fresh server, warms it with 200 reviews, reads its resting
RSS, runs the attack while a prober opens a new TLS connection every 0.25 s for ``/healthz``,
``/readyz`` and a ``POST /mutate`` (and the plain-HTTP probe port's ``/healthz`` and
``/readyz`` when the server has one), samples RSS every 50 ms, then closes every attacking
connection and reads RSS again 10 s later, once it has settled.

- idle: 10,000 TCP connections that connect and never send a byte, held 15 s;
- header flood: 8 clients at once, each sending one request with 100,000 headers (2.2 MB),
  3 rounds, then 8 requests with one 4 MiB header;
- clients: 2,000 concurrent keep-alive clients (4 processes x 500 connections) posting reviews
  for 10 s;
- bodies: 32 clients at once, each posting a 3 MiB review (a pod with a large annotation), 3 rounds.

The reviews of the warm-up, the prober and the clients are pods of the repository's jobs as
kube-apiserver sends them (bench/cluster_pods.py), each with a uid and a token volume of its own;
the 3 MiB bodies are one of them with a large annotation.

The hostile pods go through one review each (``webhook.review.review``, in a fresh process so a
stall or a crash is measured, not suffered): an image reference built to make a backtracking
parser explode, absurd quantities, huge annotations, 10,000 trainer containers. Each reports
its outcome and wall time (a run past 60 s is stopped and reported as such).

    .venv/bin/python bench/webhook_limits.py [--out bench/results/webhook_limits.md]

Figures, not pass/fail. Needs a file-descriptor limit above 2 x 10,000 (raised to the hard limit
when it is lower).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import select
import socket
import ssl
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import httpx
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cluster_pods  # noqa: E402
from results import publish  # noqa: E402
from webhook_http import RssSampler  # noqa: E402

from trainyard.sandbox.webhook_process import LocalWebhook, rss_bytes  # noqa: E402
from webhook.certs import generate  # noqa: E402
from webhook.review import admission_review  # noqa: E402

MiB = 2**20
TRAINER = "registry.example.com/ml/trainer:0.1.0"


@cache
def job_pods() -> tuple[dict, ...]:
    return tuple(cluster_pods.job_pods())


def cluster_bodies(count: int, seed: int = 0) -> list[bytes]:
    """``count`` reviews of the repository's jobs' pods, as kube-apiserver sends them."""
    return cluster_pods.bodies([cluster_pods.template(pod) for pod in job_pods()], count, seed)


# --- the server, its prober and its memory ------------------------------------------------------


@dataclass
class Probe:
    """What the prober saw for one endpoint while the attack ran."""

    sent: int = 0
    failed: int = 0
    worst_ms: float = 0.0
    errors: list[str] = field(default_factory=list)


class Prober(threading.Thread):
    """A new connection per probe, as the kubelet makes one per probe."""

    def __init__(self, server: LocalWebhook, probe_port: int | None) -> None:
        super().__init__(daemon=True)
        self.server, self.probe_port = server, probe_port
        self.stopped = threading.Event()
        self.results: dict[str, Probe] = {}
        self.bodies = iter(cluster_bodies(10_000, seed=1))

    def _one(self, name: str, fn) -> None:
        probe = self.results.setdefault(name, Probe())
        probe.sent += 1
        start = time.perf_counter()
        try:
            status = fn()
        except Exception as exc:  # every failure is a figure
            status = type(exc).__name__
        probe.worst_ms = max(probe.worst_ms, (time.perf_counter() - start) * 1000)
        if status != 200:
            probe.failed += 1
            if len(probe.errors) < 3:
                probe.errors.append(str(status))

    def run(self) -> None:
        ctx = self.server.ssl_context()
        headers = {"content-type": "application/json"}
        while not self.stopped.wait(0.25):
            with httpx.Client(base_url=self.server.base, verify=ctx, timeout=10) as c:
                self._one("/healthz", lambda c=c: c.get("/healthz").status_code)
            with httpx.Client(base_url=self.server.base, verify=ctx, timeout=10) as c:
                self._one("/readyz", lambda c=c: c.get("/readyz").status_code)
            with httpx.Client(base_url=self.server.base, verify=ctx, timeout=10) as c:
                body = next(self.bodies)
                self._one("/mutate", lambda c=c, b=body: c.post("/mutate", content=b, headers=headers).status_code)
            if self.probe_port:
                for path in ("/healthz", "/readyz"):
                    url = f"http://127.0.0.1:{self.probe_port}{path}"
                    self._one(f"probe {path}", lambda url=url: httpx.get(url, timeout=10).status_code)


def settle(pid: int, wait: float = 10.0, seconds: float = 20.0) -> int:
    """RSS ``wait`` seconds after an attack (the server gives memory back within 5 s of its
    connections falling) and once it stops falling (or after ``seconds`` more)."""
    time.sleep(wait)
    last, deadline = rss_bytes(pid), time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = rss_bytes(pid)
        if abs(now - last) < MiB // 4:
            return now
        last = now
    return last


@dataclass
class Scenario:
    name: str
    rest: int = 0
    peak: int = 0
    after: int = 0
    attack: str = ""
    probes: dict[str, Probe] = field(default_factory=dict)


def run_scenario(name: str, tmp: Path, attack, extra: tuple[str, ...] = ()) -> Scenario:
    server = LocalWebhook(
        ROOT / "policies",
        tmp / "tls",
        tmp / "tls" / "ca.crt",
        "roce",
        log=tmp / f"{name}.log",
        extra_args=("--log-level", "warning", *extra),
    )
    out = Scenario(name)
    try:
        warm(server)
        out.rest = settle(server.proc.pid, wait=2.0)
        probe_port = getattr(server, "probe_port", None)  # a server from before the probe listener has none
        rss, prober = RssSampler(server.proc.pid, interval=0.05), Prober(server, probe_port)
        rss.start()
        prober.start()
        try:
            out.attack = attack(server)
        finally:
            prober.stopped.set()
            prober.join()
            rss.stop.set()
            rss.join()
        out.peak, out.probes = rss.peak, prober.results
        out.after = settle(server.proc.pid)
    finally:
        server.stop()
    return out


def warm(server: LocalWebhook) -> None:
    with server.client() as c:
        for body in cluster_bodies(200, seed=2):
            c.post("/mutate", content=body, headers={"content-type": "application/json"})


# --- attacks -------------------------------------------------------------------------------------


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))


def _idle_client(port: int, count: int, hold: float, report) -> None:
    _raise_nofile(count + 100)
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    time.sleep(1.0)
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN)
    start, cut_times = time.monotonic(), []
    by_fd = {s.fileno(): s for s in socks}
    while time.monotonic() - start < hold:
        for fd, _ in poller.poll(200):
            try:
                data = by_fd[fd].recv(1)
            except OSError:
                data = b""
            if not data:
                poller.unregister(fd)
                cut_times.append(time.monotonic() - start)
    for s in socks:
        s.close()
    report.send((len(socks), len(cut_times), max(cut_times) if cut_times else None))


def idle_attack(count: int, hold: float):
    def attack(server: LocalWebhook) -> str:
        parent, child = multiprocessing.Pipe()
        proc = multiprocessing.Process(target=_idle_client, args=(server.port, count, hold, child))
        proc.start()
        if not parent.poll(hold + 120):
            proc.kill()
            raise RuntimeError("the idle client did not report")
        opened, cut, last = parent.recv()
        proc.join()
        when = f", the last after {last:.1f} s" if last is not None else ""
        return f"{opened} connections opened; {cut} cut by the server within {hold:.0f} s{when}"

    return attack


def _flood_one(server: LocalWebhook, headers: int, header_bytes: int) -> str:
    ctx = server.ssl_context()
    try:
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as s,
        ):
            head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            if header_bytes:
                lines = b"X-Big: " + b"a" * header_bytes + b"\r\n"
            else:
                lines = b"".join(b"X-F%d: v\r\n" % i for i in range(headers))
            try:
                s.sendall(head + lines + b"Content-Length: 2\r\n\r\n{}")
            except OSError as exc:
                return f"send cut ({type(exc).__name__})"
            reply = s.recv(200)
            return reply.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"
    except OSError as exc:
        return type(exc).__name__


def flood_attack(clients: int, headers: int, rounds: int):
    def attack(server: LocalWebhook) -> str:
        outcomes: dict[str, int] = {}
        lock = threading.Lock()

        def one(h: int, big: int) -> None:
            status = _flood_one(server, h, big)
            with lock:
                outcomes[status] = outcomes.get(status, 0) + 1

        for h, big in [*[(headers, 0)] * rounds, (0, 4 * MiB)]:
            threads = [threading.Thread(target=one, args=(h, big)) for _ in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return "; ".join(f"{n} x {s}" for s, n in sorted(outcomes.items()))

    return attack


async def _clients(base: str, ca: str, connections: int, seconds: float, bodies: list[bytes]) -> dict[str, int]:
    import aiohttp

    ctx = ssl.create_default_context(cafile=ca)
    counts: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(ssl=ctx, limit=connections)
    async with aiohttp.ClientSession(base, connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def worker(i: int) -> None:
            while time.monotonic() < deadline:
                body = bodies[i % len(bodies)]
                i += connections
                try:
                    async with session.post("/mutate", data=body, headers={"content-type": "application/json"}) as r:
                        await r.read()
                    key = str(r.status)
                except Exception as exc:  # counted
                    key = type(exc).__name__
                counts[key] = counts.get(key, 0) + 1

        await asyncio.gather(*(worker(i) for i in range(connections)))
    return counts


def _clients_process(args: tuple) -> dict[str, int]:
    _raise_nofile(4096)
    return asyncio.run(_clients(*args))


def _big_body() -> bytes:
    pod = orjson.loads(orjson.dumps(job_pods()[0]))
    pod["metadata"].setdefault("annotations", {})["filler"] = "x" * (3 * MiB - 32 * 1024)
    return cluster_pods.bodies([cluster_pods.template(pod)], 1)[0]


def bodies_attack(clients: int, rounds: int):
    def attack(server: LocalWebhook) -> str:
        body = _big_body()
        outcomes: dict[str, int] = {}
        lock = threading.Lock()

        def one() -> None:
            try:
                with httpx.Client(base_url=server.base, verify=server.ssl_context(), timeout=60) as c:
                    key = str(c.post("/mutate", content=body, headers={"content-type": "application/json"}).status_code)
            except Exception as exc:  # counted
                key = type(exc).__name__
            with lock:
                outcomes[key] = outcomes.get(key, 0) + 1

        for _ in range(rounds):
            threads = [threading.Thread(target=one) for _ in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        size = f"{len(body) / MiB:.1f} MiB"
        return f"{size} bodies: " + ", ".join(f"{n} x HTTP {k}" for k, n in sorted(outcomes.items()))

    return attack


def clients_attack(total: int, processes: int, seconds: float):
    def attack(server: LocalWebhook) -> str:
        share = total // processes
        counts: dict[str, int] = {}
        with ProcessPoolExecutor(processes) as pool:
            jobs = [
                (server.base, str(server.ca), share, seconds, cluster_bodies(4096, seed=10 + i))
                for i in range(processes)
            ]
            for part in pool.map(_clients_process, jobs):
                for k, v in part.items():
                    counts[k] = counts.get(k, 0) + v
        return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))

    return attack


# --- hostile pods --------------------------------------------------------------------------------


def _trainer(**extra) -> dict:
    return {"name": "trainer", "image": TRAINER, **extra}


def hostile_pods() -> dict[str, dict]:
    def pod(*containers: dict, annotations: dict | None = None, **spec) -> dict:
        meta: dict = {"name": "hostile", "namespace": "ml"}
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": list(containers), **spec}}

    def side(image: str) -> dict:
        return {"name": "side", "image": image}

    gpu = {"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}}
    shm_mount = [{"name": "shm", "mountPath": "/dev/shm"}]
    return {
        "image 'A'+26 x 'a'+'!/x:1' in a 2nd container": pod(_trainer(), side("A" + "a" * 26 + "!/x:1")),
        "image 'A'+40 x 'a'+'!/x:1'": pod(_trainer(), side("A" + "a" * 40 + "!/x:1")),
        "image of 1 MiB ('a.' repeated)": pod(_trainer(), side("a." * (MiB // 2) + "/x")),
        "memory limit 1e999999": pod(_trainer(resources={"limits": {"memory": "1e999999"}})),
        "memory limit 1e1000000": pod(_trainer(resources={"limits": {"memory": "1e1000000"}})),
        "GPU count 1e999999": pod(_trainer(resources={"limits": {"nvidia.com/gpu": "1e999999"}})),
        "shm sizeLimit 1e4400": pod(
            _trainer(resources=gpu, volumeMounts=shm_mount),
            volumes=[{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1e4400"}}],
        ),
        "quantity of 1 MiB of digits": pod(_trainer(resources={"limits": {"memory": "9" * MiB}})),
        "networks annotation, 100,000 attachments": pod(
            _trainer(), annotations={"k8s.v1.cni.cncf.io/networks": ",".join(f"n{i}" for i in range(100_000))}
        ),
        "networks annotation, JSON nested 100,000 deep": pod(
            _trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "[" * 100_000 + "]" * 100_000}
        ),
        "networks annotation of 300 KiB (one name)": pod(
            _trainer(), annotations={"k8s.v1.cni.cncf.io/networks": "n" * (300 * 1024)}
        ),
        "digest algorithm of 1 MiB ('a+' repeated)": pod(_trainer(), side("x@" + "a+" * (MiB // 2) + "a:" + "0" * 64)),
        "10,000 trainer containers": pod(*[{"name": f"t{i}", "image": TRAINER} for i in range(10_000)]),
        "250 trainer containers (the most a pod may have is 256)": pod(
            *[{"name": f"t{i}", "image": TRAINER} for i in range(250)]
        ),
        "3 MiB of empty lists in an annotation": pod(_trainer(), annotations={"x": "[" + "[]," * (MiB - 1) + "[]]"}),
    }


def _review_child(body: bytes, conn) -> None:
    from webhook.policy import load_policies
    from webhook.review import review

    policies = load_policies(ROOT / "policies")
    start = time.perf_counter()
    try:
        status, payload, record = review(body, policies, "roce")
        elapsed = time.perf_counter() - start
        response = orjson.loads(payload).get("response", {})
        patch = len(response.get("patch", ""))
        what = f"HTTP {status}, {record.outcome}"
        if record.outcome in ("denied", "invalid"):
            what += f": {record.reason[:110]}"
        if patch:
            what += f", patch {patch / 1000:,.0f} kB (base64)"
        conn.send((elapsed, what))
    except BaseException as exc:
        conn.send((time.perf_counter() - start, f"raised {type(exc).__name__}"))


def hostile_pod_table(timeout: float) -> list[tuple[str, str, str]]:
    rows = []
    for name, pod in hostile_pods().items():
        body = orjson.dumps(admission_review(pod, "ml"))
        parent, child = multiprocessing.Pipe()
        proc = multiprocessing.Process(target=_review_child, args=(body, child))
        proc.start()
        if parent.poll(timeout + 10):  # the child loads the policies first
            elapsed, what = parent.recv()
            took = f"{elapsed * 1000:.1f} ms" if elapsed < 1 else f"{elapsed:.2f} s"
        else:
            proc.kill()
            took, what = f"> {timeout:.0f} s", "stopped (still running)"
        proc.join()
        rows.append((name, took, what))
        print(f"{name:48} {took:>10}  {what}", flush=True)
    return rows


# --- report --------------------------------------------------------------------------------------


def render(label: str, scenarios: list[Scenario], pods: list[tuple[str, str, str]], limit: str) -> str:
    lines = [
        f"Limits of `trainyard serve` ({label}), loopback, TLS 1.3, 2-core VM. The Deployment's memory limit: {limit}.",
        "",
        "| attack | what the attackers saw | RSS rest / peak / after (MiB) | probes during the attack |",
        "|---|---|---:|---|",
    ]
    for s in scenarios:
        probes = "; ".join(
            f"{k} {p.sent - p.failed}/{p.sent} ok, worst {p.worst_ms:.0f} ms"
            + (f" ({', '.join(p.errors)})" if p.errors else "")
            for k, p in s.probes.items()
        )
        lines.append(
            f"| {s.name} | {s.attack} | {s.rest / MiB:.0f} / {s.peak / MiB:.0f} / {s.after / MiB:.0f} | {probes} |"
        )
    lines += ["", "| hostile pod (one review) | time | outcome |", "|---|---:|---|"]
    lines += [f"| {name} | {took} | {what.replace('|', '/')} |" for name, took, what in pods]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="this revision", help="what the table is of (e.g. before, after)")
    parser.add_argument("--idle", type=int, default=10_000, help="idle connections (default 10000)")
    parser.add_argument("--hold", type=float, default=15.0, help="seconds the idle connections are held (default 15)")
    parser.add_argument("--headers", type=int, default=100_000, help="headers per flooding request (default 100000)")
    parser.add_argument("--clients", type=int, default=2000, help="concurrent keep-alive clients (default 2000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="duration of the clients run (default 10)")
    parser.add_argument("--pod-timeout", type=float, default=60.0, help="limit per hostile pod (default 60 s)")
    parser.add_argument("--only", choices=["connections", "pods"], help="run one half only")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "webhook_limits.md"))
    args = parser.parse_args()
    _raise_nofile(2 * args.idle + 1000)
    deployment = yaml.safe_load((ROOT / "base" / "webhook" / "deployment.yaml").read_text())
    limit = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    scenarios: list[Scenario] = []
    pods: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="trainyard-limits-") as tmp:
        tmpdir = Path(tmp)
        generate(tmpdir / "tls")
        if args.only != "pods":
            attacks = [
                (f"{args.idle:,} idle TCP connections, {args.hold:.0f} s", idle_attack(args.idle, args.hold)),
                (
                    f"header flood: 8 clients x {args.headers:,} headers, 3 rounds; 8 x one 4 MiB header",
                    flood_attack(8, args.headers, 3),
                ),
                (
                    f"{args.clients:,} concurrent keep-alive clients, {args.seconds:.0f} s",
                    clients_attack(args.clients, 4, args.seconds),
                ),
                ("32 clients at once, each posting a review of 3 MiB, 3 rounds", bodies_attack(32, 3)),
            ]
            for i, (name, attack) in enumerate(attacks):
                s = run_scenario(f"s{i}", tmpdir, attack)
                s.name = name
                scenarios.append(s)
                rss = f"{s.rest / MiB:.0f}/{s.peak / MiB:.0f}/{s.after / MiB:.0f}"
                print(f"{name}: {s.attack}; RSS {rss} MiB", flush=True)
                for k, p in s.probes.items():
                    print(f"    {k}: {p.sent - p.failed}/{p.sent} ok, worst {p.worst_ms:.0f} ms {p.errors}", flush=True)
        if args.only != "connections":
            pods = hostile_pod_table(args.pod_timeout)
    publish(render(args.label, scenarios, pods, limit), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
