"""A local CA, a serving certificate for the webhook and, on request, a client certificate for
kube-apiserver from the same CA (``trainyard certs``).

In a cluster, cert-manager issues them (base/webhook, base/webhook-client-auth); this is for
running the webhook on a workstation, a local control plane and tests. ECDSA P-256 keys: small,
and fast TLS handshakes. The CA's key is never written: every certificate it is to sign is
signed in the same call (or by a caller that keeps the tuple :func:`generate` returns).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainyard.contract.errors import UserError
from trainyard.contract.files import write_private
from webhook.defaults import CLIENT_NAME

CLIENT_CERT_FILE = "client.crt"
CLIENT_KEY_FILE = "client.key"


def _name(common_name: str, organization: str = "trainyard") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write atomically, so a watcher never reads half a file, through a temporary file created
    exclusively with ``mode`` and never through a link (trainyard.contract.files.write_private)."""
    write_private(path, data, mode)


def new_ca(days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA that signs end-entity certificates only (path length 0): the webhook's
    serving certificate and kube-apiserver's client certificate."""
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = _key_usage(digital_signature=False, key_cert_sign=True, crl_sign=True)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("trainyard local CA"))
        .issuer_name(_name("trainyard local CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=max(days, 1) * 2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    """KeyUsage with only the named bits set."""
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    subject: x509.Name,
    days: int,
    purpose: x509.ObjectIdentifier | list[x509.ObjectIdentifier],
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for ``purpose`` (serverAuth, clientAuth, or both) signed by ``ca``, valid from five
    minutes ago (clock skew) for ``days``; ``extensions`` (extension, critical) come first."""
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
        .not_valid_after(now + dt.timedelta(days=days))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    purposes = purpose if isinstance(purpose, list) else [purpose]
    cert = (
        builder.add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def serving_certificate(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    dns: list[str],
    addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address],
    days: int,
    *,
    also_client: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A server certificate for ``dns`` and ``addresses``, signed by ``ca``; with
    ``also_client`` it authenticates a client too (an etcd peer is both)."""
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(a) for a in addresses]
    subject = _name(dns[0] if dns else str(addresses[0]))
    leaf = [(x509.SubjectAlternativeName(sans), False), (x509.BasicConstraints(ca=False, path_length=None), True)]
    purposes = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if also_client else [])
    return _leaf(ca, subject, days, purposes, leaf)


def client_certificate(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    name: str = CLIENT_NAME,
    days: int = 365,
    organization: str = "trainyard",
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A client certificate (ExtendedKeyUsage clientAuth only, so it cannot serve) with common
    name ``name``, signed by ``ca``: what kube-apiserver presents to ``serve --client-ca``. To
    kube-apiserver itself the common name is a user and the organisation a group."""
    _check_days(days)
    _check_client_name(name)
    leaf = [(x509.BasicConstraints(ca=False, path_length=None), True), (_key_usage(digital_signature=True), True)]
    return _leaf(ca, _name(name, organization), days, ExtendedKeyUsageOID.CLIENT_AUTH, leaf)


def write_client_certificate(
    out: str | Path,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    name: str = CLIENT_NAME,
    days: int = 365,
) -> tuple[Path, Path]:
    """Write client.crt and client.key (the key readable by its owner only) into ``out``, signed
    by ``ca`` (what :func:`generate` returns); return their paths, for the ``client-certificate``
    and ``client-key`` of kube-apiserver's webhook kubeconfig."""
    cert, key = client_certificate(ca, name, days)
    target = Path(out)
    crt_path, key_path = target / CLIENT_CERT_FILE, target / CLIENT_KEY_FILE
    try:
        target.mkdir(parents=True, exist_ok=True)
        _write(key_path, _pem_key(key), 0o600)  # key first, as for the serving pair
        _write(crt_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    except OSError as exc:
        raise UserError(f"{target}: cannot write the client certificate: {exc}") from None
    return crt_path, key_path


def _check_days(days: int) -> None:
    if not 1 <= days <= 36500:
        raise UserError(f"--days {days}: a certificate must be valid for 1 to 36500 days")


def _check_client_name(name: str) -> None:
    if not 1 <= len(name) <= 64 or not name.isprintable():  # RFC 5280 ub-common-name
        raise UserError(
            f"--client {name!r}: the client's name (its certificate's common name) must be 1 to 64 printable "
            f"characters, e.g. {CLIENT_NAME}"
        )


def generate(
    out: str | Path,
    dns: list[str] | None = None,
    ips: list[str] | None = None,
    days: int = 365,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    client: str | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Write ca.crt, tls.crt and tls.key into ``out``; return the CA (to sign a rotation with).

    ``dns`` and ``ips`` are the serving certificate's subject alternative names (default:
    localhost and 127.0.0.1). Pass ``ca`` to sign with an existing CA instead of a new one.
    With ``client``, also client.crt and client.key: a client certificate of that common name
    from the same CA (:func:`write_client_certificate`), for ``serve --client-ca ca.crt``.
    """
    _check_days(days)
    if client is not None:
        _check_client_name(client)  # before anything is written
    dns = list(dns or [])
    try:
        addresses = [ipaddress.ip_address(ip) for ip in (ips or [])]
    except ValueError as exc:
        raise UserError(f"--ip: {exc}") from None
    if not dns and not addresses:
        dns, addresses = ["localhost"], [ipaddress.ip_address("127.0.0.1")]
    ca = ca or new_ca(days)
    cert, key = serving_certificate(ca, dns, addresses, days)
    target = Path(out)
    try:
        target.mkdir(parents=True, exist_ok=True)
        _write(target / "ca.crt", ca[0].public_bytes(serialization.Encoding.PEM), 0o644)
        # key first: a watcher that sees the new certificate finds its key already there
        _write(target / "tls.key", _pem_key(key), 0o600)
        _write(target / "tls.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    except OSError as exc:
        raise UserError(f"{target}: cannot write certificates: {exc}") from None
    if client is not None:
        write_client_certificate(target, ca, client, days)
    return ca
