"""``trainyard certs | serve | mutate``: the webhook's commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainyard.contract.argv import AddParser, bounded_int
from trainyard.contract.errors import UserError
from webhook.defaults import CLIENT_NAME, HANDSHAKE_TIMEOUT, MAX_CONNECTIONS, REQUEST_TIMEOUT, SERVICE_DNS_NAME, Limits

MAX_DAYS = 36500  # the CA lives twice as long; both stay far below X.509's year 9999


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "certs",
        help="write a local CA and a serving certificate (ca.crt, tls.crt, tls.key)",
        description="Write ca.crt, tls.crt and tls.key for running the webhook locally; with --client, also "
        "client.crt and client.key, a client certificate from the same CA for kube-apiserver to present to "
        "'serve --client-ca DIR/ca.crt'. In a cluster, cert-manager issues them (base/webhook, "
        "base/webhook-client-auth).",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write into (created)")
    p.add_argument("--dns", action="append", default=[], metavar="NAME", help="DNS subject alternative name")
    p.add_argument("--ip", action="append", default=[], metavar="ADDR", help="IP subject alternative name")
    p.add_argument(
        "--days",
        type=bounded_int(1, MAX_DAYS, "a number of days"),
        default=365,
        help="validity of the serving (and client) certificate in days, 1 to 36500 (default 365)",
    )
    p.add_argument(
        "--client",
        metavar="NAME",
        help=f"also write client.crt and client.key: a client certificate (ExtendedKeyUsage clientAuth) with "
        f"common name NAME, e.g. {CLIENT_NAME}, signed by the same CA",
    )
    p.set_defaults(func=_certs)

    p = add_parser(
        "serve",
        help="serve the mutating webhook over TLS",
        description="Serve POST /mutate (AdmissionReview v1), /healthz, /readyz and /metrics over TLS 1.2+. "
        "Certificates (and the client CA) and policies are reloaded when their files change, if they are "
        "valid: a refused reload is logged, counted and listed by /readyz, and the last good one keeps serving.",
    )
    p.add_argument("--policies", required=True, metavar="DIR", help="directory of FabricProfile YAML files")
    p.add_argument("--profile", required=True, metavar="NAME", help="default profile for unlabelled pods")
    p.add_argument("--tls-dir", required=True, metavar="DIR", help="directory holding tls.crt and tls.key")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=bounded_int(1, 65535, "a port number"), default=8443, help="port (default 8443)")
    p.add_argument(
        "--reload-interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often to check certificates and policies for changes (default 2)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT,
        metavar="SECONDS",
        help=f"deadline for a request's headers and for its body; a stalled client is cut off "
        f"(default {REQUEST_TIMEOUT:g})",
    )
    p.add_argument(
        "--tls-server-name",
        default=SERVICE_DNS_NAME,
        metavar="NAME",
        help="the name kube-apiserver calls the webhook by: a certificate that does not name it is refused "
        f"(default {SERVICE_DNS_NAME}, the Service of base/webhook; '' to skip the check)",
    )
    p.add_argument(
        "--client-ca",
        metavar="FILE",
        help="PEM bundle of the CA that signs kube-apiserver's client certificate: every TLS client must then "
        "present a certificate that chains to it, or the handshake is refused (mutual TLS; off by default, "
        "since managed control planes present none). Reloaded with tls.crt when the file changes. The probe "
        "port asks for no certificate (docs/security.md)",
    )
    p.add_argument(
        "--probe-port",
        type=bounded_int(1, 65535, "a port number"),
        metavar="PORT",
        help="also serve /healthz, /readyz and /metrics over plain HTTP on this port, from a thread of "
        "their own (base/webhook points the kubelet's probes and Prometheus at it)",
    )
    p.add_argument(
        "--max-connections",
        type=bounded_int(1, 1_000_000, "a number of connections"),
        default=MAX_CONNECTIONS,
        metavar="N",
        help="connections kept open at once; past it the oldest that has not completed a request is closed "
        f"(default {MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--tls-handshake-timeout",
        type=float,
        default=HANDSHAKE_TIMEOUT,
        metavar="SECONDS",
        help=f"deadline for a connection's TLS handshake (default {HANDSHAKE_TIMEOUT:g})",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight requests may take before they are cancelled (default 20)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=_serve)

    p = add_parser(
        "mutate",
        help="run the webhook on a file: AdmissionReview -> response, Pod -> mutated Pod",
        description="An AdmissionReview in gives the response the server would give; a Pod (YAML or JSON) "
        "in gives the Pod as admitted, patch applied. Warnings go to stderr. Exit 1 if the pod is denied.",
    )
    p.add_argument("--policies", required=True, metavar="DIR", help="directory of FabricProfile YAML files")
    p.add_argument("--profile", required=True, metavar="NAME", help="default profile for unlabelled pods")
    p.add_argument("--namespace", default="default", help="namespace of a Pod that names none (default: default)")
    p.add_argument("file", metavar="FILE", help="a Pod or an AdmissionReview, YAML or JSON; - for stdin")
    p.set_defaults(func=_mutate)


def _certs(args: argparse.Namespace) -> int:
    from webhook.certs import generate

    generate(args.out, dns=args.dns, ips=args.ip, days=args.days, client=args.client)
    written = ["ca.crt", "tls.crt", "tls.key"] + (["client.crt", "client.key"] if args.client is not None else [])
    print("wrote " + ", ".join(f"{args.out}/{name}" for name in written))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from webhook.server import serve

    if args.tls_handshake_timeout <= 0:
        raise UserError("--tls-handshake-timeout must be above 0")
    if args.client_ca == "":  # an unset variable in a manifest must not turn client authentication off
        raise UserError("--client-ca is empty: give the CA bundle's file, or leave the option out")
    limits = Limits(
        max_connections=args.max_connections,
        handshake_timeout=args.tls_handshake_timeout,
        header_timeout=args.request_timeout,
    )
    serve(
        args.policies,
        args.profile,
        args.tls_dir,
        host=args.host,
        port=args.port,
        reload_interval=args.reload_interval,
        log_level=args.log_level,
        request_timeout=args.request_timeout,
        drain_seconds=args.drain_seconds,
        server_name=args.tls_server_name or None,
        probe_port=args.probe_port,
        limits=limits,
        client_ca=args.client_ca,
    )
    return 0


def _mutate(args: argparse.Namespace) -> int:
    from webhook.mutate_file import mutate_document, read_document
    from webhook.server import load_checked

    policies = load_checked(Path(args.policies), args.profile)
    doc, is_json = read_document(args.file)
    result = mutate_document(doc, is_json, policies, args.profile, args.namespace)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if result.note:
        print(f"# {result.note}", file=sys.stderr)
    sys.stdout.write(result.text if result.text.endswith("\n") else result.text + "\n")
    return 0
