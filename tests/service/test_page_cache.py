"""GET /: rendered once per table generation and filter, served from the cache (gzip, ETag)."""
from __future__ import annotations

import gzip


def test_the_page_is_rendered_once_per_generation(client):
    pages = client.app.state.pages
    first = client.get("/")
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/html")
    assert client.get("/").text == first.text and pages.renders == 1
    client.get("/", params={"gpu": "h100"})
    client.get("/", params={"gpu": "H100"})  # the same filter, spelt otherwise
    assert pages.renders == 2
    client.app.state.tables.refresh(force=True)  # a reload: a new generation
    assert client.get("/").text == first.text and pages.renders == 3


def test_gzip_to_who_accepts_it_and_304_for_a_current_copy(client):
    plain = client.get("/", headers={"Accept-Encoding": "identity"})
    with client.stream("GET", "/", headers={"Accept-Encoding": "gzip, deflate"}) as packed:
        compressed = b"".join(packed.iter_raw())
    assert "content-encoding" not in plain.headers and packed.headers["content-encoding"] == "gzip"
    assert gzip.decompress(compressed) == plain.content and len(compressed) < len(plain.content) / 3
    assert packed.headers["vary"] == "Accept-Encoding" and packed.headers["etag"] == plain.headers["etag"]
    assert client.get("/", headers={"If-None-Match": plain.headers["etag"]}).status_code == 304
