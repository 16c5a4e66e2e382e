"""What ``trainyard serve`` defaults to, in one place the CLI can import without the server's
dependencies (its --help shows these)."""

from __future__ import annotations

from dataclasses import dataclass

# The Service of base/webhook (service.yaml; certificates.yaml dnsNames): the name kube-apiserver
# verifies when it calls the webhook through clientConfig.service. A certificate without it is refused.
SERVICE_DNS_NAME = "trainyard-webhook.trainyard-system.svc"

# The common name of the client certificate kube-apiserver presents to `serve --client-ca`
# (`trainyard certs --client`, base/webhook-client-auth); the webhook trusts the CA, not the name.
CLIENT_NAME = "kube-apiserver"

MAX_CONNECTIONS = 1024  # kube-apiserver keeps a few; the rest of the room is for floods
HANDSHAKE_TIMEOUT = 5.0
REQUEST_TIMEOUT = 10.0  # headers, then body, each
MAX_HEADERS = 64  # kube-apiserver sends about ten
MAX_HEADER_BYTES = 16 * 1024  # request line and headers; kube-apiserver's are a few hundred bytes


@dataclass(frozen=True)
class Limits:
    """The webhook port's limits (enforced by webhook.http_guard)."""

    max_connections: int = MAX_CONNECTIONS
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    header_timeout: float = REQUEST_TIMEOUT
    max_headers: int = MAX_HEADERS
    max_header_bytes: int = MAX_HEADER_BYTES
