"""The PKI of a local control plane, written into ``DIR/pki``.

One CA signs the API server's serving certificate and the client certificates of the admin, the
controllers and kube-apiserver itself (when it calls the webhook); a separate key pair signs
service-account tokens. The layout and subjects follow envtest
(controller-runtime@v0.24.1:pkg/internal/testing/controlplane/auth.go: the admin is a member of
``system:masters``) and kubeadm's names for the controllers' identities
(``system:kube-controller-manager``, ``system:kube-scheduler``, bound by the bootstrap RBAC
policy of k8s.io/kubernetes@v1.36.3:plugin/pkg/auth/authorizer/rbac/bootstrappolicy).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs import _pem_key, _write

DAYS = 30  # a local cluster lives for a test run or a working day

# identity -> (common name, organisation); each is written as DIR/pki/<identity>.{crt,key}
CLIENTS = {
    "admin": ("trainyard-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    # kube-apiserver's identity when it calls an admission webhook that asks for a client certificate
    "kube-apiserver-webhook-client": ("kube-apiserver", None),
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

    @property
    def service_account_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.folder / "sa.pub"


def _name(cn: str, org: str | None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _issue(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _new_ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("trainyard local cluster CA", "trainyard")
    usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _write_pair(pki: Pki, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    _write(pki.key(name), _pem_key(key), 0o600)
    _write(pki.cert(name), cert.public_bytes(serialization.Encoding.PEM), 0o644)


def create(folder: Path) -> Pki:
    """A new CA, the API server's serving certificate (for 127.0.0.1, localhost and the in-cluster
    names of the ``kubernetes`` Service), the client certificates of :data:`CLIENTS` and the
    service-account signing key."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(folder)
    ca = _new_ca()
    _write(pki.ca, ca[0].public_bytes(serialization.Encoding.PEM), 0o644)
    _write(folder / "ca.key", _pem_key(ca[1]), 0o600)
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    _write_pair(pki, "apiserver", *_issue(ca, _name("kube-apiserver", None), ExtendedKeyUsageOID.SERVER_AUTH, sans))
    for identity, (cn, org) in CLIENTS.items():
        _write_pair(pki, identity, *_issue(ca, _name(cn, org), ExtendedKeyUsageOID.CLIENT_AUTH))
    # ES256 service-account tokens: kube-apiserver accepts an ECDSA signing key
    # (k8s.io/kubernetes@v1.36.3:pkg/serviceaccount/jwt.go signerFromECDSAPrivateKey).
    sa = ec.generate_private_key(ec.SECP256R1())
    _write(pki.service_account_key, _pem_key(sa), 0o600)
    pub = sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write(pki.service_account_pub, pub, 0o644)
    return pki
