"""The PKI of a local control plane, written into ``DIR/pki``.

One CA (made by ``webhook.certs``, the code of ``trainyard certs``) signs the API server's serving
certificate and the client certificates of the admin, the controllers and kube-apiserver itself
(when it calls the webhook); a separate key pair signs service-account tokens. The layout and subjects follow envtest
(controller-runtime@v0.24.1:pkg/internal/testing/controlplane/auth.go: the admin is a member of
``system:masters``) and kubeadm's names for the controllers' identities
(``system:kube-controller-manager``, ``system:kube-scheduler``, bound by the bootstrap RBAC
policy of k8s.io/kubernetes@v1.36.5:plugin/pkg/auth/authorizer/rbac/bootstrappolicy).

etcd has a CA of its own, as kubeadm gives it (``etcd/ca``,
k8s.io/kubernetes@v1.36.5:cmd/kubeadm/app/constants/constants.go): it issues etcd's serving and
peer certificate and kube-apiserver's etcd client certificate only, so that no other client of
the cluster's CA (the admin, the controllers) can talk to etcd directly and bypass
kube-apiserver's authorization. etcd requires a client certificate from it.

The front proxy has a CA of its own too, with kubeadm's names (``front-proxy-ca``,
``front-proxy-client``, constants.go): kube-apiserver presents that client certificate when it
proxies a request to an aggregated API server (Kueue's visibility API), which trusts the user and
groups it names in headers only from a client of that CA, never from the cluster's other clients.

Every file is written with :func:`trainyard.contract.files.write_private`: keys readable by their
owner only, created exclusively under a temporary name, never through a link.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from trainyard.contract.files import write_private
from webhook import certs
from webhook.certs import _pem_key

DAYS = 30  # a local cluster lives for a test run or a working day

# identity -> (user, group): the certificate's common name and organisation, written as
# DIR/pki/<identity>.{crt,key}; only the admin's group means anything to kube-apiserver
CLIENTS = {
    "admin": ("trainyard-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", "trainyard"),
    "kube-scheduler": ("system:kube-scheduler", "trainyard"),
    # kube-apiserver's identity when it calls an admission webhook that asks for a client certificate
    "kube-apiserver-webhook-client": ("kube-apiserver", "trainyard"),
}


ETCD_SERVER = "etcd-server"  # etcd's serving certificate, also its peer certificate (both purposes)
ETCD_CLIENT = "apiserver-etcd-client"  # kube-apiserver's client certificate to etcd (kubeadm's name)
FRONT_PROXY_CLIENT = "front-proxy-client"  # the name and common name kubeadm gives it


@dataclass(frozen=True)
class Pki:
    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.folder / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def client_context(self, identity: str = "admin") -> ssl.SSLContext:
        """TLS to the API server as ``identity`` (one of :data:`CLIENTS`), trusting only this CA."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert(identity)), str(self.key(identity)))
        return context

    @property
    def etcd_ca(self) -> Path:
        return self.folder / "etcd-ca.crt"

    def etcd_client_context(self, identity: str = ETCD_CLIENT) -> ssl.SSLContext:
        """TLS to etcd as ``identity`` (its client certificate from etcd's CA), trusting only that CA."""
        context = ssl.create_default_context(cafile=str(self.etcd_ca))
        context.load_cert_chain(str(self.cert(identity)), str(self.key(identity)))
        return context

    @property
    def front_proxy_ca(self) -> Path:
        return self.folder / "front-proxy-ca.crt"

    @property
    def service_account_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.folder / "sa.pub"


def write_pair(pki: Pki, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    write_private(pki.key(name), _pem_key(key), 0o600)
    write_private(pki.cert(name), cert.public_bytes(serialization.Encoding.PEM), 0o644)


def create(folder: Path) -> Pki:
    """A new CA, the API server's serving certificate (for 127.0.0.1, localhost and the in-cluster
    names of the ``kubernetes`` Service), the client certificates of :data:`CLIENTS`, etcd's CA
    with etcd's certificate and kube-apiserver's client certificate to it, and the
    service-account signing key."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    pki = Pki(folder)
    ca = certs.new_ca(DAYS)
    pem = serialization.Encoding.PEM
    write_private(pki.ca, ca[0].public_bytes(pem), 0o644)
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    loopback = [ipaddress.ip_address("127.0.0.1")]
    write_pair(pki, "apiserver", *certs.serving_certificate(ca, dns, loopback, DAYS))
    for identity, (user, group) in CLIENTS.items():
        write_pair(pki, identity, *certs.client_certificate(ca, user, DAYS, organization=group))
    etcd_ca = certs.new_ca(DAYS)
    write_private(pki.etcd_ca, etcd_ca[0].public_bytes(pem), 0o644)
    server = certs.serving_certificate(etcd_ca, ["localhost"], loopback, DAYS, also_client=True)
    write_pair(pki, ETCD_SERVER, *server)
    write_pair(pki, ETCD_CLIENT, *certs.client_certificate(etcd_ca, "kube-apiserver-etcd-client", DAYS))
    proxy_ca = certs.new_ca(DAYS)
    write_private(pki.front_proxy_ca, proxy_ca[0].public_bytes(pem), 0o644)
    write_pair(pki, FRONT_PROXY_CLIENT, *certs.client_certificate(proxy_ca, FRONT_PROXY_CLIENT, DAYS))
    # ES256 service-account tokens: kube-apiserver accepts an ECDSA signing key
    # (k8s.io/kubernetes@v1.36.5:pkg/serviceaccount/jwt.go signerFromECDSAPrivateKey).
    sa = ec.generate_private_key(ec.SECP256R1())
    write_private(pki.service_account_key, _pem_key(sa), 0o600)
    pub = sa.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    write_private(pki.service_account_pub, pub, 0o644)
    return pki
