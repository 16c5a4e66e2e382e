"""The cluster's fabric webhook, run on loopback for a local cluster, and its registration.

In a cluster the webhook is the Deployment ``trainyard-webhook`` behind a Service, and
kube-apiserver reaches it through ``clientConfig.service``. Here it is ``trainyard serve`` with the
arguments of that rendered Deployment (its profile, the policy files of its ConfigMap), on
127.0.0.1 with a certificate for its Service's name, as cert-manager issues it in a cluster
(base/webhook/certificates.yaml). The rendered MutatingWebhookConfiguration is applied as it is;
its Service leads to the process through an EndpointSlice (services.py), and its caBundle is the
local CA, put there as cert-manager's cainjector would (nothing runs cert-manager here), by a
field manager of its own so that Argo CD's diff does not count it. kube-apiserver presents a
client certificate (from the cluster's CA) named for the Service in its AdmissionConfiguration
(the webhook admission plugin's ``kubeConfigFile``), and the webhook refuses any client without one.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import httpx
import yaml

from trainyard.cluster import services
from trainyard.cluster.client import Kube
from trainyard.cluster.controlplane import wait_ready
from trainyard.cluster.pki import Pki
from trainyard.cluster.processes import Daemon, free_port, spawn
from trainyard.contract.errors import UserError
from trainyard.contract.files import write_private
from trainyard.repo.model.rendered import Resource
from trainyard.repo.upstream.applications import ClusterRender
from webhook import certs
from webhook.defaults import SERVICE_DNS_NAME

NAME_LABEL = "app.kubernetes.io/name"
WEBHOOK_NAME = "trainyard-webhook"
CA_INJECTOR = "trainyard-local-cainjector"  # the field manager that plays cert-manager's cainjector
CLIENT_IDENTITY = "kube-apiserver-webhook-client"


def _find(render: ClusterRender, kind: str, name: str) -> Resource | None:
    return next((r for r in render.resources() if r.kind == kind and r.name == name), None)


def runs_webhook(render: ClusterRender) -> bool:
    return _find(render, "Deployment", WEBHOOK_NAME) is not None


def _container_env(deployment: dict, name: str) -> str | None:
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        for e in c.get("env") or []:
            if e.get("name") == name:
                return str(e.get("value", ""))
    return None


def admission_config(folder: Path, p: Pki) -> Path:
    """kube-apiserver's AdmissionConfiguration: the webhook plugins present the client certificate
    to the webhook's Service (k8s.io/apiserver@v0.36.5:pkg/admission/plugin/webhook/config/apis/
    webhookadmission/v1 WebhookAdmission; a Service's user is named ``<name>.<namespace>.svc:<port>``,
    pkg/util/webhook/authentication.go ClientConfigForService)."""
    clients = folder / "webhook-clients.kubeconfig"
    write_private(
        clients,
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "users": [
                    {
                        "name": f"{SERVICE_DNS_NAME}:{services.WEBHOOK_PORT}",
                        "user": {
                            "client-certificate": str(p.cert(CLIENT_IDENTITY)),
                            "client-key": str(p.key(CLIENT_IDENTITY)),
                        },
                    }
                ],
            },
            sort_keys=False,
        ).encode(),
    )
    plugin = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(clients),
    }
    config = folder / "admission.yaml"
    write_private(
        config,
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {"name": "MutatingAdmissionWebhook", "configuration": plugin},
                    {"name": "ValidatingAdmissionWebhook", "configuration": plugin},
                ],
            },
            sort_keys=False,
        ).encode(),
    )
    return config


class LocalFabricWebhook:
    """Runs the rendered webhook of a cluster on ``port`` and routes its registration there."""

    def __init__(self, render: ClusterRender, folder: Path, port: int, client_ca: Path | None) -> None:
        self.render = render
        self.folder = folder / "webhook"
        self.port = port
        self.client_ca = client_ca
        self.url = f"https://127.0.0.1:{port}"
        deployment = _find(render, "Deployment", WEBHOOK_NAME)
        if deployment is None:
            raise UserError(f"cluster {render.cluster} renders no Deployment {WEBHOOK_NAME}")
        self.profile = _container_env(deployment.doc, "TRAINYARD_PROFILE") or ""
        # the ConfigMap the Deployment mounts as its policies (kustomize suffixed its name with a hash)
        volumes = {v.get("name"): v for v in deployment.doc["spec"]["template"]["spec"].get("volumes") or []}
        self.policies_configmap = str(((volumes.get("policies") or {}).get("configMap") or {}).get("name", ""))
        if not self.profile:
            raise UserError(f"{deployment.where()}: the webhook's TRAINYARD_PROFILE is empty in the render")

    def spawn(self) -> Daemon:
        """Start the server (it loads in the background while the control plane starts)."""
        tls = self.folder / "tls"
        certs.generate(tls, dns=[SERVICE_DNS_NAME], ips=[])
        policies = self.folder / "policies"
        policies.mkdir(parents=True, exist_ok=True)
        configmap = _find(self.render, "ConfigMap", self.policies_configmap)
        if configmap is None:
            raise UserError(f"cluster {self.render.cluster} renders no ConfigMap {self.policies_configmap}")
        for name, text in (configmap.doc.get("data") or {}).items():
            (policies / name).write_text(text)
        probes = free_port()
        argv = [sys.executable, "-m", "trainyard.cli", "serve", "--policies", str(policies),
                "--profile", self.profile, "--tls-dir", str(tls), "--host", "127.0.0.1",
                "--port", str(self.port), "--probe-port", str(probes)]  # fmt: skip
        if self.client_ca:
            argv += ["--client-ca", str(self.client_ca)]
        self.probes = probes
        deployment = _find(self.render, "Deployment", WEBHOOK_NAME)
        plays = f"{deployment.namespace}/{WEBHOOK_NAME}" if deployment is not None else ""
        log = self.folder.parent / "logs" / "webhook.log"
        return spawn(WEBHOOK_NAME, argv, log, (self.port, probes), plays=plays, probe_port=probes)

    def wait(self, daemon: Daemon) -> None:
        probe = f"http://127.0.0.1:{self.probes}/readyz"
        wait_ready(daemon, lambda: httpx.get(probe, timeout=1).status_code == 200, "the webhook's /readyz")

    def answers(self, doc: dict) -> bool:
        """``doc`` is the trainyard MutatingWebhookConfiguration, which this process answers."""
        labels = (doc.get("metadata") or {}).get("labels") or {}
        return doc.get("kind") == "MutatingWebhookConfiguration" and labels.get(NAME_LABEL) == WEBHOOK_NAME

    def serve(self, kube: Kube, doc: dict) -> str:
        """Once ``doc`` is applied: its Service routed to this process, its CA injected."""
        said = []
        ca = base64.b64encode((self.folder / "tls" / "ca.crt").read_bytes()).decode()
        routed = set()
        for hook in doc.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service") or {}
            key = (
                service.get("namespace", ""),
                service.get("name", ""),
                int(service.get("port", services.WEBHOOK_PORT)),
            )
            if key not in routed:
                said.append(services.route(kube, key[0], key[1], self.port, key[2]))
                routed.add(key)
        injected = {
            "apiVersion": doc["apiVersion"],
            "kind": doc["kind"],
            "metadata": {"name": doc["metadata"]["name"]},
            "webhooks": [{"name": h["name"], "clientConfig": {"caBundle": ca}} for h in doc.get("webhooks") or []],
        }
        kube.apply(injected, manager=CA_INJECTOR)
        said.append(f"{doc['kind']} {doc['metadata']['name']}: caBundle the local webhook CA (as {CA_INJECTOR})")
        return "; ".join(said)
