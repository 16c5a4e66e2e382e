"""TLS for the webhook server: certificates checked for meaning, rotated without a restart.

Every new connection's handshake takes the most recently loaded context (webhook.http_guard runs
the handshake itself), so a rotation reaches new connections at once. A pair is loaded only when
it would serve kube-apiserver: it loads and the key matches the certificate (OpenSSL checks it in
``load_cert_chain``), the certificate is valid now (not expired, not yet to come), and it names
the Service the webhook is called through (a DNS subject alternative name, RFC 6125 wildcards in
the left-most label accepted; an IP address name when an address is expected). Otherwise it is
refused, with a reason, and the previous pair keeps serving; a pair refused as not yet valid is
tried again until its time comes. :meth:`CertStore.serving_problem` says when the pair being
served has itself stopped being valid.

With a client CA (``serve --client-ca``) every handshake requires a client certificate that
chains to it (kube-apiserver's, from its AdmissionConfiguration): a client without one is refused
by the TLS layer before a byte of HTTP is read. The CA bundle is part of the same context as the
pair, reloaded with it when either changes, and refused (reason ``client_ca``) when it holds no
CA certificate valid now; the previous context keeps serving.

Each of the three files is read once, with the size bound of every configuration file
(:data:`trainyard.contract.files.MAX_CONFIG_BYTES`, what a Secret can hold): a larger one is
refused from its size, before it is read, and the previous context keeps serving.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from trainyard.contract.errors import UserError
from trainyard.contract.files import FileTooLarge, read_bounded
from webhook.defaults import SERVICE_DNS_NAME

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CLOCK_SKEW = dt.timedelta(minutes=1)  # a pair issued "now" by a clock a little ahead still loads


# why a certificate/key pair is refused (the reload metric's reasons)
REFUSAL_REASONS = ("unreadable", "key_mismatch", "expired", "not_yet_valid", "wrong_name", "client_ca")


class CertificateRefused(UserError):
    """A certificate/key pair that must not serve; ``reason`` is a metric label."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Loaded:
    context: ssl.SSLContext
    not_before: dt.datetime
    not_after: dt.datetime
    subject: str
    client_ca_until: dt.datetime | None = None  # when the last CA of the client CA bundle expires


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def require_client_certificates(ctx: ssl.SSLContext, client_ca: Path, now: dt.datetime) -> dt.datetime:
    """Make ``ctx`` require a client certificate that chains to the CAs in ``client_ca`` (PEM);
    return when the last of them expires, or CertificateRefused saying why the bundle cannot
    verify anyone."""
    where = f"{client_ca} (--client-ca)"
    try:
        cas = x509.load_pem_x509_certificates(read_bounded(client_ca, what="the client CA bundle"))
    except FileTooLarge as exc:
        raise CertificateRefused(f"{exc} (--client-ca)", "client_ca") from None
    except (OSError, ValueError) as exc:
        raise CertificateRefused(
            f"{where}: cannot read a PEM bundle of CA certificates: {exc}; give the CA that signs "
            "kube-apiserver's client certificate",
            "client_ca",
        ) from None
    for cert in cas:
        if not _is_ca(cert):  # OpenSSL would never verify a chain through it: say so now
            raise CertificateRefused(
                f"{where}: {cert.subject.rfc4514_string()} is not a CA certificate (no basicConstraints "
                "CA:TRUE); give the CA that signs kube-apiserver's client certificate, not a certificate it signed",
                "client_ca",
            )
    valid = [c for c in cas if c.not_valid_before_utc <= now + CLOCK_SKEW and now < c.not_valid_after_utc]
    if not valid:
        until = ", ".join(f"{c.not_valid_before_utc.isoformat()} to {c.not_valid_after_utc.isoformat()}" for c in cas)
        raise CertificateRefused(
            f"{where}: no CA certificate in it is valid now ({now:%Y-%m-%dT%H:%M:%SZ}; valid {until})", "client_ca"
        )
    # the certificates as parsed above (DER), not the file again: a swap in between cannot mix two bundles
    ctx.load_verify_locations(cadata=b"".join(c.public_bytes(serialization.Encoding.DER) for c in cas))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return max(c.not_valid_after_utc for c in valid)


def _names(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return san.get_values_for_type(x509.DNSName), [str(a) for a in san.get_values_for_type(x509.IPAddress)]


def _dns_matches(pattern: str, name: str) -> bool:
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def names_server(cert: x509.Certificate, server_name: str) -> bool:
    dns, ips = _names(cert)
    try:
        address = ipaddress.ip_address(server_name)
    except ValueError:
        return any(_dns_matches(d, server_name) for d in dns)
    return any(ipaddress.ip_address(ip) == address for ip in ips)


def _load_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """``load_cert_chain`` from the bytes already read (and bounded): OpenSSL reads only paths,
    so each goes through an anonymous in-memory file, never the file on disk a second time (which
    could have grown or changed since)."""
    fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("tls.crt", "tls.key")]
    try:
        for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)


def load_pair(
    cert: Path, key: Path, server_name: str | None, now: dt.datetime | None = None, client_ca: Path | None = None
) -> Loaded:
    """The pair as a server context (requiring client certificates from ``client_ca`` when one is
    given), or CertificateRefused saying why it must not serve."""
    now = now or dt.datetime.now(dt.UTC)
    try:
        pem = read_bounded(cert, what="the certificate")
        leaf = x509.load_pem_x509_certificates(pem)[0]
    except FileTooLarge as exc:
        raise CertificateRefused(str(exc), "unreadable") from None
    except (OSError, ValueError) as exc:
        raise CertificateRefused(f"{cert}: cannot read a PEM certificate: {exc}", "unreadable") from None
    try:
        key_pem = read_bounded(key, what="the key")
    except FileTooLarge as exc:
        raise CertificateRefused(str(exc), "unreadable") from None
    except OSError as exc:
        raise CertificateRefused(f"{key}: cannot read the key: {exc}", "unreadable") from None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        _load_chain(ctx, pem, key_pem)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            raise CertificateRefused(f"{key} is not the key of {cert}", "key_mismatch") from None
        raise CertificateRefused(f"{cert}, {key}: cannot load: {exc}", "unreadable") from None
    except OSError as exc:
        raise CertificateRefused(f"{cert}, {key}: cannot load: {exc}", "unreadable") from None
    before, after = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    if now + CLOCK_SKEW < before:
        raise CertificateRefused(
            f"{cert}: not valid before {before.isoformat()} (now {now:%Y-%m-%dT%H:%M:%SZ})", "not_yet_valid"
        )
    if now >= after:
        raise CertificateRefused(f"{cert}: expired at {after.isoformat()}", "expired")
    if server_name and not names_server(leaf, server_name):
        dns, ips = _names(leaf)
        raise CertificateRefused(
            f"{cert}: does not name {server_name} (its names: {', '.join(dns + ips) or 'none'}); "
            "kube-apiserver would refuse it",
            "wrong_name",
        )
    client_ca_until = require_client_certificates(ctx, client_ca, now) if client_ca is not None else None
    return Loaded(ctx, before, after, leaf.subject.rfc4514_string(), client_ca_until)


@dataclass(frozen=True)
class Reload:
    """A change to the certificate files: loaded, or refused (``reason``, ``message``)."""

    loaded: bool
    reason: str = ""
    message: str = ""


class CertStore:
    def __init__(
        self, tls_dir: str | Path, server_name: str | None = SERVICE_DNS_NAME, client_ca: str | Path | None = None
    ) -> None:
        root = Path(tls_dir)
        self.cert, self.key = root / CERT_FILE, root / KEY_FILE
        self.server_name = server_name
        self.client_ca = Path(client_ca) if client_ca is not None else None
        missing = [p.name for p in (self.cert, self.key) if not p.is_file()]
        if missing:
            raise UserError(
                f"{root}: missing {' and '.join(missing)} (a kubernetes.io/tls Secret mount, "
                "or run 'trainyard certs --out DIR')"
            )
        self.serving = load_pair(self.cert, self.key, server_name, client_ca=self.client_ca)
        self.signature = self.stat()
        self._refused: tuple[tuple, str] | None = None

    @property
    def current(self) -> ssl.SSLContext:
        """The context for the next handshake."""
        return self.serving.context

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.cert, self.key) if self.client_ca is None else (self.cert, self.key, self.client_ca)

    def stat(self) -> tuple:
        """What changes when any of the files changes (stat follows the Secret mount's symlinks)."""
        out = []
        for p in self.files:
            try:
                st = p.stat()
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def reload_if_changed(self) -> Reload | None:
        """None: nothing new to report; else the pair (and client CA) on disk was loaded or refused
        (a refusal is reported once per change of the files; a not-yet-valid pair is retried
        quietly)."""
        signature = self.stat()
        if signature == self.signature:
            return None
        retry = self._refused is not None and self._refused[0] == signature
        if retry and self._refused[1] != "not_yet_valid":  # type: ignore[index]
            return None
        try:
            loaded = load_pair(self.cert, self.key, self.server_name, client_ca=self.client_ca)
        except CertificateRefused as exc:
            self._refused = (signature, exc.reason)
            return None if retry else Reload(False, exc.reason, str(exc))
        self.serving, self.signature, self._refused = loaded, signature, None
        return Reload(True)

    def serving_problem(self, now: dt.datetime | None = None) -> str | None:
        """Why the pair being served no longer serves (expired, or not yet valid), or None."""
        now = now or dt.datetime.now(dt.UTC)
        if now >= self.serving.not_after:
            return f"the serving certificate expired at {self.serving.not_after.isoformat()}"
        if now + CLOCK_SKEW < self.serving.not_before:
            return f"the serving certificate is not valid before {self.serving.not_before.isoformat()}"
        until = self.serving.client_ca_until
        if until is not None and now >= until:  # no client certificate can be verified any more
            return f"the client CA ({self.client_ca}) expired at {until.isoformat()}"
        return None
