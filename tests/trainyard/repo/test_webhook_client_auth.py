"""base/webhook-client-auth, the opt-in component that makes the webhook require kube-apiserver's
client certificate: off in every cluster, and when a cluster's webhook overlay adds it, the
Deployment trusts exactly the CA that issues kube-apiserver's certificate, mounted without the
client's key."""

from __future__ import annotations

import pytest

from tests.trainyard.repo.conftest import edit
from trainyard.repo.model import kustomize

OVERLAY = "overlays/dev/platform/webhook"


def objects(repo, folder: str) -> dict[tuple[str, str], dict]:
    return {(r.kind, r.name): r.doc for r in kustomize.build(repo, folder, cache=False)}


@pytest.mark.parametrize("cluster", ["dev", "prod-roce"])
def test_client_certificates_are_off_by_default(repo, cluster):
    found = objects(repo, f"overlays/{cluster}/platform/webhook")
    args = found[("Deployment", "trainyard-webhook")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--client-ca" not in args
    assert ("Certificate", "trainyard-webhook-apiserver-client") not in found


def with_component(repo, component: str) -> dict[tuple[str, str], dict]:
    edit(repo, f"{OVERLAY}/kustomization.yaml", "patches:\n", f"components:\n  - ../../../../{component}\npatches:\n")
    return objects(repo, OVERLAY)


def test_step_one_issues_the_certificate_and_requires_none(repo_copy):
    """kube-apiserver can be given its certificate while the webhook still serves every client."""
    found = with_component(repo_copy, "base/webhook-client-auth/certificate")
    assert ("Certificate", "trainyard-webhook-apiserver-client") in found
    args = found[("Deployment", "trainyard-webhook")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--client-ca" not in args


def test_the_component_trusts_the_ca_of_kube_apiservers_certificate(repo_copy):
    found = with_component(repo_copy, "base/webhook-client-auth")
    spec = found[("Deployment", "trainyard-webhook")]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    client_ca = args[args.index("--client-ca") + 1]
    mount = next(m for m in container["volumeMounts"] if client_ca.startswith(m["mountPath"] + "/"))
    assert mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    # only the CA is mounted, never the client's private key
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": client_ca.rsplit("/", 1)[1]}]
    client = found[("Certificate", "trainyard-webhook-apiserver-client")]["spec"]
    serving = found[("Certificate", "trainyard-webhook")]["spec"]
    assert volume["secret"]["secretName"] == client["secretName"]
    assert client["usages"] == ["client auth", "digital signature"] and client["commonName"] == "kube-apiserver"
    assert client["issuerRef"] == serving["issuerRef"]  # the CA Issuer whose ca.crt both Secrets carry
    # the probes stay on the plain-HTTP probe port, which asks for no certificate
    for probe in (container["readinessProbe"], container["livenessProbe"]):
        assert probe["httpGet"]["port"] == "probes"
