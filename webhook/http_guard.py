"""What stands between a TCP connection and the app: a connection cap, TLS with a handshake
deadline, and uvicorn's httptools protocol with caps on request headers and a deadline for them.

Without them (bench/webhook_limits.py, figures in bench/README.md) connections that never send a
byte hold memory for as long as they stay open: uvicorn has no handshake deadline of its own
(asyncio's default is 60 s), httptools no header limits, and every connection costs memory before
its TLS handshake even starts.

- :class:`ConnectionGate` counts every accepted connection, from ``accept`` to close. At
  ``max_connections`` it makes room by closing the oldest connection that has not yet completed a
  request (a client that connected and stalls), else the one idle longest between requests (a
  kept-alive connection); a connection whose request is being answered is never closed. When
  every connection is busy, the new one is refused at once. A flood of new connections thus
  costs memory for at most ``max_connections``, and kube-apiserver's kept-alive connections,
  which have completed requests, are the last to go.
- :class:`TlsGateProtocol` is what the listener creates per connection: it asks the gate, then
  runs the TLS handshake itself (``loop.start_tls`` with ``handshake_timeout``; uvicorn passes no
  handshake timeout to ``create_server``), and hands the TLS transport to a
  :class:`GuardedHttpToolsProtocol`. Each new handshake uses the certificate store's newest
  context (rotation without restart, see webhook.tls). A handshake that fails is reported to
  ``on_handshake_failed`` (the server counts clients refused for want of a client certificate).
- :class:`GuardedHttpToolsProtocol` gives each request's headers ``header_timeout`` seconds from
  the connection (after the handshake) or from the request's first byte, and at most
  ``max_headers`` headers in ``max_header_bytes`` bytes (request line included), counted as the
  bytes arrive while the headers are incomplete and as the parser hands each header over: past
  either, the client gets 431 and the connection is closed. The body has its own deadline and cap in the app.
  A stalled client never delays anyone else: the event loop serves other connections meanwhile.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from webhook.defaults import Limits


class ConnectionGate:
    """Every connection of one listener, from accept to close, in eviction order."""

    def __init__(self, limit: int, on_refused: Callable[[str], None] | None = None) -> None:
        self.limit = limit
        self.on_refused = on_refused or (lambda _why: None)
        self.fresh: OrderedDict[int, asyncio.BaseTransport] = OrderedDict()  # no request completed yet
        self.kept: OrderedDict[int, asyncio.BaseTransport] = OrderedDict()  # idle between requests
        self.busy: dict[int, asyncio.BaseTransport] = {}  # a request is being answered

    def __len__(self) -> int:
        return len(self.fresh) + len(self.kept) + len(self.busy)

    def admit(self, key: int, transport: asyncio.BaseTransport) -> bool:
        """Room for a new connection: True (it is counted) or False (refuse it)."""
        if len(self) >= self.limit:
            for queue, why in ((self.fresh, "evicted_fresh"), (self.kept, "evicted_idle")):
                if queue:
                    _, victim = queue.popitem(last=False)
                    victim.abort()
                    self.on_refused(why)
                    break
            else:
                self.on_refused("refused")
                return False
        self.fresh[key] = transport
        return True

    def working(self, key: int) -> None:
        transport = self.fresh.pop(key, None) or self.kept.pop(key, None)
        if transport is not None:
            self.busy[key] = transport

    def idle(self, key: int) -> None:
        transport = self.busy.pop(key, None) or self.fresh.pop(key, None) or self.kept.pop(key, None)
        if transport is not None:
            self.kept[key] = transport  # the newest idle, last to be closed

    def release(self, key: int) -> None:
        for queue in (self.fresh, self.kept, self.busy):
            queue.pop(key, None)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    limits: Limits = Limits()
    gate: ConnectionGate | None = None
    gate_key: int = 0
    _header_timer: asyncio.TimerHandle | None = None
    _header_bytes: int = 0  # bytes received while the headers were incomplete
    _parsed_bytes: int = 0  # bytes of the request line and headers parsed so far
    _in_headers: bool = True
    _refusal: str | None = None  # why the headers were refused (431)
    _message_done = False  # the current request's body was read to its end

    accepting: Callable[[], bool] = staticmethod(lambda: True)  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.accepting():  # draining: a handshake that completed after the listener closed
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the first bytes of the next request on a kept-alive connection
        if self._in_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        # httptools joins the pieces of one header before calling on_header: count the bytes here,
        # after the parser took what belongs to the headers (a body in the same read is not counted)
        if self._in_headers and self._header_bytes > self.limits.max_header_bytes:
            self._too_large(f"request headers over {self.limits.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        self._in_headers, self._parsed_bytes, self._message_done = True, 0, False
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self.headers) >= self.limits.max_headers:
            self._refuse(f"more than {self.limits.max_headers} request headers")
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count(self, n: int) -> None:
        # headers that arrive whole in one read are checked here, as the parser hands them over
        self._parsed_bytes += n
        if self._parsed_bytes > self.limits.max_header_bytes:
            self._refuse(f"request headers over {self.limits.max_header_bytes} bytes")

    def _refuse(self, why: str) -> None:
        self._refusal = why
        raise ValueError(why)  # httptools stops parsing; data_received answers (send_400_response)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._in_headers = False
        self._header_bytes = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._message_done = True
        super().on_message_complete()
        if self.gate is not None:
            self.gate.working(self.gate_key)

    def on_response_complete(self) -> None:
        # the next bytes start the next request, unless the app answered before the body ended
        # (then they are the rest of it, and the response closes the connection)
        if self._message_done:
            self._in_headers, self._header_bytes = True, 0
        super().on_response_complete()
        if self.gate is not None and not self.transport.is_closing():
            self.gate.idle(self.gate_key)

    def send_400_response(self, msg: str) -> None:
        if self._refusal is not None:
            self._too_large(self._refusal)
            return
        super().send_400_response(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.gate is not None:
            self.gate.release(self.gate_key)
        super().connection_lost(exc)

    def _too_large(self, why: str) -> None:
        if self.transport.is_closing():
            return
        body = f"{why}\n".encode()
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body
        )
        self.transport.close()

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def _ssl_protocol_class(loop: asyncio.AbstractEventLoop) -> type:
    """The loop's own TLS protocol: uvloop's on uvloop (the server's loop), asyncio's otherwise.
    Both take (loop, app_protocol, sslcontext, waiter, server_side, server_hostname,
    call_connection_made, ssl_handshake_timeout), as ``loop.start_tls`` builds them."""
    if type(loop).__module__.startswith("uvloop"):
        from uvloop.loop import SSLProtocol

        return SSLProtocol
    from asyncio.sslproto import SSLProtocol as AsyncioSSLProtocol

    return AsyncioSSLProtocol


class TlsGateProtocol(asyncio.Protocol):
    """The listener's protocol: gate, TLS handshake, then HTTP (see the module docstring).

    ``bind`` makes the subclass uvicorn instantiates per connection (uvicorn's ``http`` setting
    takes a protocol class; its listener is created without TLS, this class adds it). The TLS
    layer is put under the connection at once, in ``connection_made``, as ``loop.start_tls`` does
    it (uvloop loop.pyx start_tls) but without start_tls's deferral to a later loop iteration:
    uvloop starts reading as soon as ``connection_made`` returns, and a ClientHello read by then
    would be lost."""

    gate: ConnectionGate
    limits: Limits
    context: Callable[[], ssl.SSLContext]
    http_class: type[GuardedHttpToolsProtocol]
    accepting: Callable[[], bool]
    on_handshake_failed: Callable[[BaseException], None] | None

    @classmethod
    def bind(
        cls,
        gate: ConnectionGate,
        limits: Limits,
        context: Callable[[], ssl.SSLContext],
        accepting: Callable[[], bool] = lambda: True,
        on_handshake_failed: Callable[[BaseException], None] | None = None,
    ) -> type[TlsGateProtocol]:
        http = type(
            "GuardedHttpToolsProtocol",
            (GuardedHttpToolsProtocol,),
            {"limits": limits, "gate": gate, "accepting": staticmethod(accepting)},
        )
        attrs = {
            "gate": gate,
            "limits": limits,
            "context": staticmethod(context),
            "http_class": http,
            "accepting": staticmethod(accepting),
            "on_handshake_failed": staticmethod(on_handshake_failed) if on_handshake_failed else None,
        }
        return type(cls.__name__, (cls,), attrs)

    def __init__(self, config: Any, server_state: Any, app_state: dict, _loop: Any = None) -> None:
        self.args = (config, server_state, app_state, _loop)
        self.loop = _loop or asyncio.get_event_loop()
        self.key = id(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        if not self.accepting() or not self.gate.admit(self.key, transport):
            transport.abort()
            return
        http = self.http_class(*self.args)
        http.gate_key = self.key
        waiter = self.loop.create_future()
        waiter.add_done_callback(self._handshake_done)
        tls = _ssl_protocol_class(self.loop)(
            self.loop,
            http,
            self.context(),
            waiter,
            server_side=True,
            call_connection_made=True,  # http.connection_made once the handshake is done
            ssl_handshake_timeout=self.limits.handshake_timeout,
        )
        transport.set_protocol(tls)  # type: ignore[attr-defined]
        tls.connection_made(transport)

    def _handshake_done(self, waiter: asyncio.Future) -> None:
        if waiter.cancelled():
            self.gate.release(self.key)  # the TLS layer closed the connection
            return
        exc = waiter.exception()
        if exc is not None:
            self.gate.release(self.key)
            if self.on_handshake_failed is not None:
                self.on_handshake_failed(exc)

    def connection_lost(self, exc: Exception | None) -> None:  # pragma: no cover - TLS took over
        self.gate.release(self.key)
