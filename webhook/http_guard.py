"""uvicorn's httptools protocol with a deadline for request headers.

uvicorn closes idle keep-alive connections, but a client that connects and then sends nothing,
or sends its headers a byte at a time, holds its connection (and a file descriptor) forever.
Here each request's headers must arrive within ``header_timeout`` seconds of the connection
(after the TLS handshake) or of the request's first byte; the body has its own deadline in the
app (408). A stalled client never delays anyone else: the event loop serves other connections
while it waits.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    header_timeout: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    @classmethod
    def with_timeout(cls, seconds: float) -> type[GuardedHttpToolsProtocol]:
        return type(cls.__name__, (cls,), {"header_timeout": seconds})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()
