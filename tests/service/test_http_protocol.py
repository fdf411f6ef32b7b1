"""service/http_protocol.py: a response's head and body leave in one write, in order, and nothing is
lost on close; a real uvicorn with the protocol answers plain, pipelined, HEAD and closing requests."""
from __future__ import annotations

import asyncio
import socket

import pytest

from service.app import create_app
from service.http_protocol import IMPORT_PATH, CoalescingTransport, HttpProtocol, uvicorn_http
from tests.service.conftest import ThreadedServer, free_port


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_writes_of_one_loop_pass_leave_as_one_in_order():
    async def scenario() -> list[bytes]:
        inner = RecordingTransport()
        transport = CoalescingTransport(inner, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b"")
        transport.write(b'{"a":1}')
        assert inner.writes == []  # kept until the pass is done
        await asyncio.sleep(0)
        transport.write(b"second")
        await asyncio.sleep(0)
        assert transport.get_extra_info("peername") == "info:peername"
        transport.write(b"last words")
        transport.close()  # sends what is kept, then closes
        assert inner.closed
        return inner.writes

    assert asyncio.run(scenario()) == [b'HTTP/1.1 200 OK\r\n\r\n{"a":1}', b"second", b"last words"]


@pytest.fixture
def served(settings):
    port = free_port()
    server = ThreadedServer(create_app(settings), port)
    server.server.config.http = IMPORT_PATH
    server.start()
    assert server.server.config.http_protocol_class is HttpProtocol
    yield port
    server.stop()


def exchange(port: int, raw: bytes, expect: int) -> bytes:
    """Send ``raw``; read until ``expect`` responses have come (counted by their status lines)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(raw)
        received = b""
        while received.count(b"HTTP/1.1 ") < expect or not received.endswith((b"}", b"\r\n\r\n", b">")):
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
    return received


def test_uvicorn_with_the_protocol_answers_every_kind_of_request(served):
    assert uvicorn_http() == IMPORT_PATH
    query = b"GET /dispatch?m=8&n=1024&dtype=bf16&gpu=h100 HTTP/1.1\r\nHost: x\r\n\r\n"
    one = exchange(served, query, 1)
    assert one.startswith(b"HTTP/1.1 200") and b'"variant"' in one
    pipelined = exchange(served, query * 3 + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 4)
    assert pipelined.count(b"HTTP/1.1 200") == 4 and pipelined.count(b'"variant"') == 3
    head = exchange(served, b"HEAD /dispatch?m=8&n=1024&dtype=bf16&gpu=h100 HTTP/1.1\r\nHost: x\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
    closing = exchange(served, b"GET /gpus HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1)
    assert closing.startswith(b"HTTP/1.1 200") and closing.rstrip().endswith(b"]")
    refused = exchange(served, b"GET /dispatch?m=x HTTP/1.1\r\nHost: x\r\n\r\n", 1)
    assert refused.startswith(b"HTTP/1.1 422")
