"""HEAD wherever GET is: the same status and headers, no body; through the /dispatch fast path, the
routes and a real uvicorn server."""
from __future__ import annotations

import http.client
from urllib.parse import urlparse

import pytest
from fastapi.testclient import TestClient

from service.app import create_app

DISPATCH = "/dispatch?m=4096&n=32000&dtype=bf16&gpu=h100"
GET_PATHS = ("/", "/?gpu=h100", DISPATCH, "/healthz", "/kernels", "/gpus", "/docs", "/openapi.json")


@pytest.mark.parametrize("path", GET_PATHS)
def test_head_answers_as_get_without_the_body(client, path):
    got = client.get(path)
    head = client.head(path)
    assert got.status_code == head.status_code == 200, (path, head.status_code)
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    if "content-length" in head.headers:
        assert int(head.headers["content-length"]) == len(got.content)


def test_head_of_dispatch_uses_the_fast_path_and_keeps_its_errors(settings):
    # the fast path answers between reload checks (the fixture's settings check on every request)
    with TestClient(create_app(settings.model_copy(update={"reload_interval_s": 3600}))) as client:
        client.get("/healthz")
        fast = client.app.fast_dispatch
        head, got = client.head(DISPATCH), client.get(DISPATCH)
        assert (fast.fast_answers, fast.hits) == (1, 1)
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(got.content)
        _check_errors(client)


def _check_errors(client: TestClient) -> None:
    missing = client.head("/dispatch?m=1&n=64&dtype=bf16&gpu=b300")
    assert missing.status_code == client.get("/dispatch?m=1&n=64&dtype=bf16&gpu=b300").status_code == 404
    assert missing.content == b""
    assert client.head("/runs").status_code == 405  # HEAD follows GET: POST-only stays 405


def test_head_over_real_http(live_server):
    address = urlparse(live_server.base_url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        for path in ("/", DISPATCH):
            connection.request("HEAD", path)
            response = connection.getresponse()
            assert response.status == 200 and response.read() == b""
            assert int(response.getheader("content-length")) > 0
    finally:
        connection.close()
