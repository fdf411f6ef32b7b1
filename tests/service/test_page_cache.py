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


def test_free_text_filters_never_evict_or_re_render_a_page(client):
    """One client cycling random /?gpu= values had re-rendered the page each time (every render is about a
    second of CPU): a filter no table matches gets the short page on the spot, and the pages kept (one
    per filter a table matches) stay."""
    pages = client.app.state.pages
    everything, h100 = client.get("/"), client.get("/", params={"gpu": "h100"})
    assert pages.renders == 2
    for round_ in range(3):
        for index in range(16):
            filters = {"gpu": f"gpu-{round_}-{index}", **({"dtype": "bf16"} if index % 2 else {})}
            stray = client.get("/", params=filters)
            assert stray.status_code == 200 and "No dispatch tables match" in stray.text
        client.get("/", params={"gpu": "h100", "dtype": "fp32"})  # a known GPU, a dtype it has no table of
    assert client.get("/").text == everything.text and client.get("/", params={"gpu": "h100"}).text == h100.text
    assert pages.renders == 2
    dtypes = {table.dtype for table in client.app.state.tables.store.tables()}
    gpus = {table.gpu for table in client.app.state.tables.store.tables()}
    for gpu in [*gpus, None]:
        for dtype in [*dtypes, None]:
            client.get("/", params={key: value for key, value in (("gpu", gpu), ("dtype", dtype)) if value})
    assert pages.renders == (len(gpus) + 1) * (len(dtypes) + 1)  # the most it can hold: one per filter
