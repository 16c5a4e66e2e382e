"""Services that route on a local cluster: kube-apiserver calls a webhook, a CRD conversion webhook
or an aggregated API through its Service, as in a cluster, and the Service leads to a process on
loopback.

- kube-apiserver runs with ``--enable-aggregator-routing=true``, so it resolves a Service to an
  endpoint of the Service's EndpointSlices instead of its cluster IP, which nothing routes here
  (k8s.io/kubernetes@v1.36.5: cmd/kube-apiserver/app/server.go buildServiceResolver;
  k8s.io/apiserver@v0.36.5: pkg/util/proxy/proxy.go ResolveEndpoint takes a ready endpoint's
  ``addresses[0]`` and the port of the slice whose name is the Service port's).
- An EndpointSlice may not hold a loopback address (k8s.io/kubernetes@v1.36.5:
  pkg/apis/core/validation ValidateEndpointIP) but an ``FQDN`` slice may name a host
  (pkg/apis/discovery/validation, IsFullyQualifiedDomainName): :data:`HOST`, which kube-apiserver
  alone resolves to 127.0.0.1, through an ``/etc/hosts`` of its own in a mount namespace of its own
  (:func:`own_hosts`). Nothing else on the machine learns the name.
- The TLS server name stays ``<service>.<namespace>.svc`` (k8s.io/apiserver@v0.36.5:
  pkg/util/webhook/client.go), so each process serves a certificate for its Service, as in a cluster.

The slices are labelled for their Service and managed by :data:`MANAGER`: kube-controller-manager's
EndpointSlice controller keeps only the slices it manages, and leaves these alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from trainyard.cluster.client import Kube
from trainyard.contract.errors import UserError

HOST = "loopback.trainyard.internal"  # .internal: reserved for private use (ICANN, 2024)
MANAGER = "local-cluster.trainyard.dev"  # a label value: no slash
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # k8s.io/api@v0.36.5 discovery/v1 LabelServiceName
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"  # discovery/v1 LabelManagedBy
WEBHOOK_PORT = 443  # a webhook's clientConfig.service.port when not given (admissionregistration/v1)


def write_hosts(path: Path, names: dict[str, str]) -> Path:
    """An ``/etc/hosts`` for one process's mount namespace: localhost and ``names`` (name: address)."""
    lines = ["127.0.0.1 localhost", "::1 localhost"]
    lines += [f"{address} {name}" for name, address in sorted(names.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def own_hosts(hosts: Path) -> list[str]:
    """The argv prefix that runs a command with ``hosts`` as its ``/etc/hosts``: a mount namespace
    of its own, in a user namespace of its own so that no root is needed (the command keeps the
    caller's uid on files and ports)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise UserError("the 'unshare' command is missing: install Debian's util-linux package")
    return [unshare, "--user", "--map-root-user", "--mount", "--propagation", "private",
            "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]  # fmt: skip


def endpoint_slice(namespace: str, service: str, port_name: str, port: int) -> dict:
    """The EndpointSlice that sends ``service``'s port ``port_name`` to ``HOST:port``."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-local",
            "namespace": namespace,
            "labels": {SERVICE_NAME_LABEL: service, MANAGED_BY_LABEL: MANAGER},
        },
        "addressType": "FQDN",
        "endpoints": [{"addresses": [HOST], "conditions": {"ready": True}}],
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
    }


def route(kube: Kube, namespace: str, service: str, port: int, service_port: int = WEBHOOK_PORT) -> str:
    """Send ``service``'s port ``service_port`` to the process on ``127.0.0.1:port``; the Service
    must exist (its port's name goes into the slice). Returns what was done, to say."""
    live = kube.get(f"/api/v1/namespaces/{namespace}/services/{service}")
    names = [p.get("name") or "" for p in live["spec"].get("ports") or [] if p.get("port") == service_port]
    if not names:
        raise UserError(f"Service {namespace}/{service} has no port {service_port} to route")
    kube.apply(endpoint_slice(namespace, service, names[0], port), manager=MANAGER)
    return f"Service {namespace}/{service}:{service_port} -> 127.0.0.1:{port} (EndpointSlice {service}-local)"
