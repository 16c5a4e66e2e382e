"""The webhook's HTTP application (FastAPI): /mutate, /healthz, /readyz, /metrics.

The hot path reads the raw body and answers raw bytes: no request or response models, one
orjson parse, one orjson dump. Everything the handler needs lives in :class:`State`, which the
server's reloader swaps atomically (policies, TLS) while requests are in flight.

Request bodies are bounded one by one (:data:`MAX_BODY`, kube-apiserver's own request limit) and
all together (:class:`BodyBudget`): the bytes of the bodies being read or reviewed at one time
stay under ``BODY_BUDGET``, so many clients sending large bodies at once cannot exhaust memory;
a body that would go over waits for no one and gets 503.
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

MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's own request limit is 3 MiB (apiserver config.go MaxRequestBodyBytes)
BODY_BUDGET = 24 * 1024 * 1024


class BodyBudget:
    """Bytes of request bodies held at once, all requests together (the event loop is one thread)."""

    def __init__(self, limit: int = BODY_BUDGET) -> None:
        self.limit, self.used = limit, 0

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n


@dataclass
class State:
    policies: PolicySet | None
    default: str
    certs: CertStore | None = None
    metrics: Metrics = field(default_factory=Metrics)
    review_log: ReviewLog | None = None  # None: reviews are not logged (log level above info)
    draining: bool = False
    refused: dict[str, str] = field(default_factory=dict)  # what -> why the files on disk are refused
    heartbeat: float = field(default_factory=time.monotonic)  # the event loop's last tick
    bodies: BodyBudget = field(default_factory=BodyBudget)

    def problems(self) -> list[str]:
        """Why the webhook cannot answer reviews correctly now (empty: it can)."""
        out = []
        if self.draining:
            out.append("draining (shutting down)")
        if self.policies is None or self.policies.get(self.default) is None:
            out.append(f"no policy set with the default profile {self.default!r} is loaded")
        problem = self.certs.serving_problem() if self.certs is not None else None
        if problem:
            out.append(problem)
        return out

    @property
    def ready(self) -> bool:
        return not self.problems()


def readiness(state: State) -> tuple[int, bytes]:
    """/readyz: 503 when the webhook cannot answer correctly; 200 otherwise, listing any files on
    disk that were refused while the last good ones keep serving (every replica reads the same
    ConfigMap and Secret: failing readiness for a refused edit would take them all out at once)."""
    problems = state.problems()
    body: dict = {"status": "ready"} if not problems else {"error": "not ready: " + "; ".join(problems)}
    if state.refused:
        body["refused"] = dict(state.refused)
    return (503 if problems else 200), orjson.dumps(body)


def _error(status: int, message: str, *, close: bool = False) -> Response:
    # close: answered before the body was read to its end, so the connection cannot carry another
    # request (the rest of the body would be read as one); uvicorn closes it after the response
    headers = {"Connection": "close"} if close else None
    return Response(
        orjson.dumps({"error": message}), status_code=status, media_type="application/json", headers=headers
    )


def unsupported_media(request: Request) -> Response | None:
    """A 415 response unless the request says it carries JSON."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        return _error(415, f"Content-Type must be application/json, not {media or 'missing'!r}")
    return None


async def read_body(request: Request, timeout: float, budget: BodyBudget | None = None) -> bytes | Response:
    """The request body, or the error response (413 over MAX_BODY, 408 past ``timeout``, 503 when
    the bodies in flight would go over ``budget``). The caller gives a body's bytes back to
    ``budget`` when done with it; an error response has given them back already."""
    length = request.headers.get("content-length")
    if length is not None:
        try:
            if int(length) > MAX_BODY:
                return _error(413, f"body of {length} bytes is over the {MAX_BODY} byte limit", close=True)
        except ValueError:
            return _error(400, "Content-Length is not a number")
    body, taken, complete = bytearray(), 0, False
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                if budget is not None:
                    if not budget.take(len(chunk)):
                        return _error(503, "too many request bodies in flight; retry", close=True)
                    taken += len(chunk)
                body += chunk
                if len(body) > MAX_BODY:
                    return _error(413, f"body is over the {MAX_BODY} byte limit", close=True)
        complete = True
        return bytes(body)
    except TimeoutError:
        return _error(408, f"body not received within {timeout:g} s", close=True)
    finally:
        if budget is not None and not complete:
            budget.give(taken)


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
            metrics.reviews.count("unsupported_media")
            return refused
        metrics.reviews_in_flight += 1
        try:
            body = await read_body(request, request_timeout, state.bodies)
            if isinstance(body, Response):
                outcome = {413: "too_large", 503: "busy"}.get(body.status_code, "invalid")
                metrics.reviews.count(outcome)
                return body
            try:
                policies = state.policies
                if policies is None:
                    return _error(503, "no policies loaded")
                status, payload, record = review(body, policies, state.default)
            finally:
                state.bodies.give(len(body))
        finally:
            metrics.reviews_in_flight -= 1
        elapsed = time.perf_counter() - start
        metrics.reviews.count(record.outcome, elapsed)
        if state.review_log is not None:
            state.review_log.write(record, elapsed)
        return Response(payload, status_code=status, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status": "ok"}', media_type="application/json")

    @app.get("/readyz")
    async def readyz() -> Response:
        status, body = readiness(state)
        return Response(body, status_code=status, media_type="application/json")

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    return app
