"""Kubernetes-style volume updates and certificates for server tests.

``AtomicDir`` writes files the way the kubelet updates Secret and ConfigMap volumes: into a new
timestamped directory, then an atomic rename of the ``..data`` symlink, with each visible file
a symlink through ``..data`` (pkg/volume/util/atomic_writer.go).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trainyard.cluster.processes import wait_for
from trainyard.sandbox.webhook_process import LocalWebhook as Server

__all__ = ["AtomicDir", "Server", "tls_pair", "wait_for"]


class AtomicDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.generation = 0

    def write(self, files: dict[str, bytes]) -> None:
        self.generation += 1
        target = self.path / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        target.mkdir()
        for name, data in files.items():
            (target / name).write_bytes(data)
        tmp = self.path / "..data_tmp"
        os.symlink(target.name, tmp)
        os.replace(tmp, self.path / "..data")
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        for old in self.path.glob("..20*"):
            if old != target:
                for f in old.iterdir():
                    f.unlink()
                old.rmdir()


def tls_pair(
    ca: tuple,
    dns: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = ("127.0.0.1",),
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> dict[str, bytes]:
    """tls.crt and tls.key signed by ``ca`` (what ``webhook.certs.generate`` returns), with the
    names and validity given (default: localhost and 127.0.0.1, valid from a minute ago for a day)."""
    now = dt.datetime.now(dt.UTC)
    not_after = not_after or now + dt.timedelta(days=1)
    not_before = not_before or min(now, not_after) - dt.timedelta(minutes=1)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])]))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
            ),
            critical=False,
        )
        .sign(ca[1], hashes.SHA256())
    )
    return {
        "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
        "tls.key": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    }
