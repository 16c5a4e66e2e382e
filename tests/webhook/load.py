"""A small load generator for the hardening tests: several processes, each an asyncio aiohttp
client with many keep-alive connections, posting AdmissionReviews over TLS and counting
failures. (The benchmarks use wrk; the tests need nothing beyond the Python
environment. aiohttp, not httpx, because its C parser keeps the client from being the
bottleneck.)"""

from __future__ import annotations

import asyncio
import multiprocessing
import ssl
from dataclasses import dataclass, field

import aiohttp
import orjson


@dataclass
class LoadResult:
    ok: int = 0
    errors: list[str] = field(default_factory=list)

    def merge(self, other: LoadResult) -> None:
        self.ok += other.ok
        self.errors += other.errors


async def _client(base: str, ca: str, bodies: list[bytes], total: int, concurrency: int) -> LoadResult:
    ctx = ssl.create_default_context(cafile=ca)
    result = LoadResult()
    uids = [orjson.loads(body)["request"]["uid"] for body in bodies]
    connector = aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(base, connector=connector, timeout=timeout) as session:
        counter = iter(range(total))

        async def worker() -> None:
            for i in counter:
                body = bodies[i % len(bodies)]
                try:
                    async with session.post("/mutate", data=body, headers={"content-type": "application/json"}) as r:
                        payload = await r.read()
                    if r.status != 200 or orjson.loads(payload)["response"]["uid"] != uids[i % len(bodies)]:
                        result.errors.append(f"HTTP {r.status}: {payload[:200]!r}")
                    else:
                        result.ok += 1
                except Exception as exc:  # every failure counts; the test reports them
                    result.errors.append(repr(exc))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return result


def _process(args: tuple) -> LoadResult:
    return asyncio.run(_client(*args))


def run_load(
    base: str,
    ca: str,
    bodies: list[bytes],
    total: int,
    processes: int = 3,
    concurrency: int = 16,
    deadline: float = 180,
) -> LoadResult:
    """Send ``total`` reviews split over ``processes`` client processes; wait for all of them, at
    most ``deadline`` seconds (then the clients are killed and the load fails, naming the deadline).

    The clients are spawned, not forked: the tests call this from a thread while others run, and a
    child forked while another thread holds a lock (logging, ssl) can hang before it sends anything."""
    share = [total // processes + (1 if i < total % processes else 0) for i in range(processes)]
    result = LoadResult()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:  # leaving it kills the clients
        parts = pool.map_async(_process, [(base, ca, bodies, n, concurrency) for n in share])
        try:
            for part in parts.get(deadline):
                result.merge(part)
        except multiprocessing.TimeoutError:
            raise AssertionError(f"{total} reviews did not finish within {deadline:.0f} s") from None
    return result
