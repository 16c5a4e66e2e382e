"""The PKI of a local control plane, written into ``DIR/pki``.

One CA (made by ``webhook.certs``, the code of ``trainyard certs``) signs the API server's serving
certificate and the client certificates of the admin, the controllers and kube-apiserver itself
(when it calls the webhook); a separate key pair signs service-account tokens. The layout and subjects follow envtest
(controller-runtime@v0.24.1:pkg/internal/testing/controlplane/auth.go: the admin is a member of
``system:masters``) and kubeadm's names for the controllers' identities
(``system:kube-controller-manager``, ``system:kube-scheduler``, bound by the bootstrap RBAC
policy of k8s.io/kubernetes@v1.36.3:plugin/pkg/auth/authorizer/rbac/bootstrappolicy).
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from webhook import certs
from webhook.certs import _pem_key, _write

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
    def service_account_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.folder / "sa.pub"


def _write_pair(pki: Pki, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    _write(pki.key(name), _pem_key(key), 0o600)
    _write(pki.cert(name), cert.public_bytes(serialization.Encoding.PEM), 0o644)


def create(folder: Path) -> Pki:
    """A new CA, the API server's serving certificate (for 127.0.0.1, localhost and the in-cluster
    names of the ``kubernetes`` Service), the client certificates of :data:`CLIENTS` and the
    service-account signing key."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder)
    ca = certs.new_ca(DAYS)
    _write(pki.ca, ca[0].public_bytes(serialization.Encoding.PEM), 0o644)
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    loopback = [ipaddress.ip_address("127.0.0.1")]
    _write_pair(pki, "apiserver", *certs.serving_certificate(ca, dns, loopback, DAYS))
    for identity, (user, group) in CLIENTS.items():
        _write_pair(pki, identity, *certs.client_certificate(ca, user, DAYS, organization=group))
    # ES256 service-account tokens: kube-apiserver accepts an ECDSA signing key
    # (k8s.io/kubernetes@v1.36.3:pkg/serviceaccount/jwt.go signerFromECDSAPrivateKey).
    sa = ec.generate_private_key(ec.SECP256R1())
    _write(pki.service_account_key, _pem_key(sa), 0o600)
    pub = sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write(pki.service_account_pub, pub, 0o644)
    return pki
