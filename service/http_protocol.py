"""The HTTP protocol the service runs under uvicorn: uvicorn's httptools protocol with one write to the
socket per event-loop pass instead of one per ASGI message.

Why: uvicorn writes a response's status line and headers on ``http.response.start`` and its body on
``http.response.body``, each straight to the socket, so every ``/dispatch`` answer cost two sends. On
loopback (a load test, a sidecar) the receiver's TCP path runs inside the sender's system call, and
the first of the two sends was the largest single item of the server's profile under load. The
transport below keeps what the protocol writes and sends it once the current pass of the event loop
is done (``loop.call_soon``): a head and its body, and answers to pipelined requests, go out in one
write. Everything else is the socket transport's own, and ``close`` sends what is kept first.

``uvicorn --http service.http_protocol:HttpProtocol`` (what ``service.main.run`` and the load tools
pass; :func:`uvicorn_http` falls back to uvicorn's choice where httptools is not installed).
"""
from __future__ import annotations

import asyncio
from typing import Any

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # no httptools: uvicorn's own choice (h11) serves
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

IMPORT_PATH = "service.http_protocol:HttpProtocol"


class CoalescingTransport:
    """A socket transport whose writes within one event-loop pass go out as one."""

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self._flush)
        else:
            self._pending.append(data)

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else: the socket transport's own
        return getattr(self._transport, name)


if HttpToolsProtocol is not None:
    class HttpProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]


def uvicorn_http() -> str:
    """The ``http`` setting to give uvicorn: this protocol, or ``auto`` without httptools."""
    return IMPORT_PATH if HttpToolsProtocol is not None else "auto"
