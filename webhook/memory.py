"""Giving memory back to the system after a burst of connections (glibc's malloc).

A TLS connection's memory, most of it OpenSSL's, is allocated and freed through malloc. Once a
burst of connections is over, glibc keeps the freed memory for reuse, so RSS stays near the
burst's peak (bench/README.md, the webhook under attack), and a pod would carry that to its
memory limit after the next burst. :class:`Trimmer` asks glibc to give
free memory back (``malloc_trim(0)``, which returns free pages inside the heap too) once the
number of open connections has fallen well below its peak since the last trim, at most every few
seconds. :func:`configure` caps glibc's arenas at two (``M_ARENA_MAX``; the webhook runs one event
loop thread and a few small helper threads), so the freed memory gathers where a trim finds it,
and fixes the size from which an allocation gets pages of its own at 1 MiB
(``M_MMAP_THRESHOLD``; glibc otherwise raises it each time such a block is freed, up to 32 MiB,
after which 3 MiB request bodies are carved from the heap and stay there when freed).

Elsewhere than on glibc (musl, macOS) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time

M_ARENA_MAX = -8  # glibc malloc.h
M_MMAP_THRESHOLD = -3
# uvloop's TLS layer reads each record with SSLObject.read(SSL_READ_MAX_SIZE), 256 KiB
# (uvloop/sslproto.pyx SSLProtocol._do_read__copied, uvloop/includes/consts.pxi), and CPython's
# _ssl allocates that many bytes before it shrinks them to what was read (Modules/_ssl.c,
# _ssl__SSLSocket_read_impl). Under a 256 KiB threshold every read of every request would be an
# mmap, an mremap and a munmap, and the pages faulted in anew: a large share of the webhook's
# throughput (under glibc's own moving threshold it depends on the process's history). 1 MiB
# keeps those reads in the heap and still gives a body of a few MiB pages of its own.
MMAP_THRESHOLD = 1024 * 1024


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _libc()


def configure() -> bool:
    """Set glibc's malloc options for the webhook; False where there is no glibc."""
    if _LIBC is None:
        return False
    return bool(_LIBC.mallopt(M_ARENA_MAX, 2)) and bool(_LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def trim() -> bool:
    """Give free heap memory back to the system now; False where there is no glibc."""
    return _LIBC is not None and bool(_LIBC.malloc_trim(0))


class Trimmer:
    """Decides when to trim, from the number of open connections seen at each tick."""

    def __init__(self, drop: int = 64, every: float = 5.0, clock=time.monotonic) -> None:
        self.drop, self.every, self.clock = drop, every, clock
        self.peak = 0
        self.last = clock()
        self.trims = 0

    def tick(self, connections: int) -> bool:
        self.peak = max(self.peak, connections)
        if self.peak - connections < self.drop or self.clock() - self.last < self.every:
            return False
        trim()
        self.trims += 1
        self.peak, self.last = connections, self.clock()
        return True
