"""Services that route on a local cluster (trainyard/cluster/services.py): kube-apiserver reaches
a process on loopback through a Service, by a name only it resolves."""

from __future__ import annotations

import socket

import pytest

from trainyard.cluster import services
from trainyard.cluster.client import ApiError
from trainyard.contract.errors import UserError

NAMESPACE = "trainyard-system"


def test_the_routed_host_name_resolves_nowhere_but_in_kube_apiservers_namespace():
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(services.HOST, 443)


@pytest.mark.cluster
def test_kube_apiserver_refuses_a_loopback_endpoint_and_takes_the_named_host(clusters):
    """Why the slices name a host: an endpoint at 127.0.0.1 is refused by the API server's own
    validation; the FQDN slice ``route`` writes is accepted."""
    loopback = services.endpoint_slice(NAMESPACE, "probe", "https", 8443)
    loopback["addressType"] = "IPv4"
    loopback["endpoints"][0]["addresses"] = ["127.0.0.1"]
    with clusters.kube("dev") as kube:
        with pytest.raises(ApiError, match="may not be in the loopback range"):
            kube.create(loopback, dry_run=True)
        assert kube.create(services.endpoint_slice(NAMESPACE, "probe", "https", 8443), dry_run=True)


@pytest.mark.cluster
def test_a_service_without_the_port_is_refused_by_name(clusters):
    with (
        clusters.kube("dev") as kube,
        pytest.raises(UserError, match="trainyard-system/trainyard-webhook has no port 444"),
    ):
        services.route(kube, NAMESPACE, "trainyard-webhook", 1, service_port=444)
