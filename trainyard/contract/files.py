"""Reading configuration files with a size bound, and writing private files safely.

Every file a program of this repository reads as configuration or reloads (certificates, keys,
client CA bundles, FabricProfiles, a cluster's facts, a local cluster's state) is read with
:func:`read_bounded`: a file over its bound is refused from its size alone, before a byte is
read, and a file that grows while it is read (or a pipe, which has no size) is cut off one byte
past the bound and refused too. So a 50 MB CA bundle dropped into a Secret mount neither stalls a
handshake nor stays in memory.

The bound is a Secret's or a ConfigMap's whole data: at most 1 MiB
(k8s.io/api@v0.36.5:core/v1/types.go ``MaxSecretSize``; ConfigMaps share it,
k8s.io/kubernetes@v1.36.5:pkg/apis/core/validation/validation.go ``ValidateConfigMap``), so no
file mounted from either can be larger, and a hand-written file that is means a mistake.

:func:`write_private` writes a file through a temporary file of an unpredictable name, created
exclusively (``O_CREAT|O_EXCL``) without following a link (``O_NOFOLLOW``) with its final mode
from the start, then renamed over the target (a rename replaces a link, never follows it). Nobody
can plant a link at the temporary name to make the writer clobber another file, nor read a key
through a file left with a wider mode.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from trainyard.contract.errors import UserError

MAX_CONFIG_BYTES = 1024 * 1024  # a Secret's or ConfigMap's data (module docstring)


class FileTooLarge(UserError):
    """A configuration file over its bound; ``size`` is what was seen (at least bound + 1)."""

    def __init__(self, message: str, path: Path, size: int, limit: int) -> None:
        super().__init__(message)
        self.path, self.size, self.limit = path, size, limit


def _too_large(path: Path, size: int, limit: int, what: str, exact: bool) -> FileTooLarge:
    seen = f"{size} bytes" if exact else f"more than {limit} bytes"
    return FileTooLarge(
        f"{path}: {what} is {seen}, over the bound of {limit} bytes, so it was refused unread; "
        "check that this is the file meant (configuration this large is a mistake)",
        path,
        size,
        limit,
    )


def read_bounded(path: str | Path, limit: int = MAX_CONFIG_BYTES, what: str = "the file") -> bytes:
    """The bytes of ``path``, or FileTooLarge naming the file, its size and ``limit`` without
    reading more than ``limit`` + 1 bytes. OSError passes through (the caller says what the file
    is for), and anything but a regular file (a folder, a pipe, a device) is one: a pipe has no
    size to judge, and its writer could stall the reader."""
    path = Path(path)
    # O_NONBLOCK: opening a pipe waits for no writer; a regular file ignores the flag
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > limit:
            raise _too_large(path, info.st_size, limit, what, exact=True)
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(limit + 1 - got, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:  # it grew while it was read
            raise _too_large(path, got, limit, what, exact=False)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text_bounded(path: str | Path, limit: int = MAX_CONFIG_BYTES, what: str = "the file") -> str:
    """:func:`read_bounded` decoded as UTF-8 (UnicodeDecodeError passes through)."""
    return read_bounded(path, limit, what).decode("utf-8")


def write_private(path: str | Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` with ``mode`` (default: the owner's alone), atomically: a
    reader sees the old file or the new one, never half of one (module docstring)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)  # FileExistsError: the name is someone else's; left alone
    try:
        os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
        with os.fdopen(fd, "wb") as f:
            fd = -1  # closed by the file object from here
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
