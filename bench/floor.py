"""The floor for the HTTPS benchmark: the webhook's own HTTP stack, minus the webhook.

Same server (uvicorn, uvloop, httptools, the connection gate and the guarded protocol, the same
malloc settings), same TLS context and settings, same FastAPI app shape, the same content-type
check and body read; then it answers a canned AdmissionReview response of the same size instead of parsing, mutating and
logging. The difference between the two is what trainyard's own code costs per request.

Takes ``trainyard serve``'s flags (so the benchmark starts both the same way) plus
``--response FILE``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fastapi import FastAPI, Request, Response

from webhook import memory
from webhook.app import read_body, unsupported_media
from webhook.defaults import Limits
from webhook.server import configure_logging, uvicorn_server
from webhook.tls import CertStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--policies", "--profile", "--reload-interval", "--log-level", "--tls-server-name", "--probe-port"):
        parser.add_argument(flag)  # accepted for symmetry with trainyard serve, unused
    parser.add_argument("--tls-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--request-timeout", type=float, default=10.0)
    parser.add_argument("--response", required=True, help="file holding the canned response body")
    args = parser.parse_args()
    canned = Path(args.response).read_bytes()
    configure_logging("warning")
    memory.configure()  # the same malloc settings as trainyard serve
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        refused = unsupported_media(request)
        if refused is not None:
            return refused
        body = await read_body(request, args.request_timeout)
        if isinstance(body, Response):
            return body
        return Response(canned, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status": "ok"}', media_type="application/json")

    limits = Limits(header_timeout=args.request_timeout)
    uvicorn_server(app, CertStore(args.tls_dir, server_name=None), args.host, args.port, limits).run()


if __name__ == "__main__":
    main()
