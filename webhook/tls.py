"""TLS for the webhook server, with certificate rotation and no restart.

The listening socket keeps one SSLContext for its lifetime; its SNI callback (which OpenSSL
runs on every ClientHello, with or without a server name) hands each new connection the most
recently loaded context. A rotation builds a complete new context first and swaps it in only
when the certificate and key load and match, so a half-written pair never serves.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from trainyard.contract.errors import UserError

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


def _context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


class CertStore:
    def __init__(self, tls_dir: str | Path) -> None:
        root = Path(tls_dir)
        self.cert, self.key = root / CERT_FILE, root / KEY_FILE
        missing = [p.name for p in (self.cert, self.key) if not p.is_file()]
        if missing:
            raise UserError(
                f"{root}: missing {' and '.join(missing)} (a kubernetes.io/tls Secret mount, "
                "or run 'trainyard certs --out DIR')"
            )
        try:
            self.current = _context(self.cert, self.key)
            self.server_context = _context(self.cert, self.key)
        except (ssl.SSLError, OSError) as exc:
            raise UserError(f"{root}: cannot load {CERT_FILE}/{KEY_FILE}: {exc}") from None
        self.server_context.sni_callback = self._select
        self.signature = self.stat()
        self._failed: tuple | None = None

    def _select(self, sslobj: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        sslobj.context = self.current

    def stat(self) -> tuple:
        """What changes when either file changes (stat follows the Secret mount's symlinks)."""
        out = []
        for p in (self.cert, self.key):
            try:
                st = p.stat()
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def reload_if_changed(self) -> bool | None:
        """None: unchanged; True: reloaded; False: changed but unloadable (old one kept)."""
        signature = self.stat()
        if signature in (self.signature, self._failed):
            return None
        try:
            ctx = _context(self.cert, self.key)
        except (ssl.SSLError, OSError):
            self._failed = signature  # counted once; retried when the files change again
            return False
        self.current, self.signature = ctx, signature
        return True
