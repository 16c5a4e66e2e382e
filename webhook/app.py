"""The webhook's HTTP application (FastAPI): /mutate, /healthz, /readyz, /metrics.

The hot path reads the raw body and answers raw bytes: no request or response models, one
orjson parse, one orjson dump. Everything the handler needs lives in :class:`State`, which the
server's reloader swaps atomically (policies, TLS) while requests are in flight.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import orjson
from fastapi import FastAPI, Request, Response

from webhook.metrics import Metrics
from webhook.policy import PolicySet
from webhook.review import review
from webhook.reviewlog import ReviewLog
from webhook.tls import CertStore

MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's own request limit is 3 MiB


@dataclass
class State:
    policies: PolicySet | None
    default: str
    certs: CertStore | None = None
    metrics: Metrics = field(default_factory=Metrics)
    review_log: ReviewLog | None = None  # None: reviews are not logged (log level above info)
    draining: bool = False

    @property
    def ready(self) -> bool:
        return self.policies is not None and self.policies.get(self.default) is not None and not self.draining


def _error(status: int, message: str) -> Response:
    return Response(orjson.dumps({"error": message}), status_code=status, media_type="application/json")


def unsupported_media(request: Request) -> Response | None:
    """A 415 response unless the request says it carries JSON."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        return _error(415, f"Content-Type must be application/json, not {media or 'missing'!r}")
    return None


async def read_body(request: Request, timeout: float) -> bytes | Response:
    """The request body, or the error response (413 over MAX_BODY, 408 past ``timeout``)."""
    length = request.headers.get("content-length")
    if length is not None:
        try:
            if int(length) > MAX_BODY:
                return _error(413, f"body of {length} bytes is over the {MAX_BODY} byte limit")
        except ValueError:
            return _error(400, "Content-Length is not a number")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_BODY:
                    return _error(413, f"body is over the {MAX_BODY} byte limit")
    except TimeoutError:
        return _error(408, f"body not received within {timeout:g} s")
    return bytes(body)


def create_app(state: State, request_timeout: float = 10.0) -> FastAPI:
    """The webhook app; a request body must arrive within ``request_timeout`` seconds (kube-apiserver
    itself waits at most the webhook configuration's timeoutSeconds, 5 s in base/webhook)."""
    app = FastAPI(
        title="trainyard fabric webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    metrics = state.metrics

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        start = time.perf_counter()
        refused = unsupported_media(request)
        if refused is not None:
            metrics.outcome["unsupported_media"].inc()
            return refused
        with metrics.in_flight.track_inprogress():
            body = await read_body(request, request_timeout)
            if isinstance(body, Response):
                metrics.outcome["too_large" if body.status_code == 413 else "invalid"].inc()
                return body
            policies = state.policies
            if policies is None:
                return _error(503, "no policies loaded")
            status, payload, record = review(body, policies, state.default)
        elapsed = time.perf_counter() - start
        metrics.outcome[record.outcome].inc()
        metrics.latency.observe(elapsed)
        if state.review_log is not None:
            state.review_log.write(record, elapsed)
        return Response(payload, status_code=status, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status": "ok"}', media_type="application/json")

    @app.get("/readyz")
    async def readyz() -> Response:
        if state.ready:
            return Response(b'{"status": "ready"}', media_type="application/json")
        return _error(503, "not ready: draining or policies not loaded")

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    return app
