"""``GET /``: the dispatch-map page (drawn by ``service.page``), rendered once per table generation.

Rendering every table's maps takes about a second of CPU and gives megabytes of HTML; done per
request, eight readers of the page held ``/dispatch`` at a p99 of half a second. So a page is rendered
once per (table generation, GPU filter, dtype filter), in a worker thread through the app's bounded
reads, and served from :class:`PageCache` until the tables reload: as HTML, or gzip-compressed (once,
at render time) to a client that accepts it, with an ETag (``If-None-Match`` gives 304). Only a filter
that some table matches is rendered ahead of its reuse and kept, so the cache holds at most (GPU models
+ 1) x (dtypes + 1) pages, bounded by the tables, and free-text parameters cannot evict one; a filter
no table matches gets the short "no tables" page, rendered on the spot and not kept. Sending the
page is work of the event loop too (6 MB of HTML, 0.44 MB gzipped, for the shipped tables): one page
body is sent at a time (:class:`OneAtATime`), the other requests for it wait, costing nothing.
"""
from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from typing import Annotated, Optional

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import HTMLResponse

from service.deps import LiveTablesDep
from service.errors import JSON_ERROR_RESPONSES
from service.page import render_page
from service.params import DTYPE_HELP, DtypeName, canonical_dtype, gpu_key
from service.reads import BoundedReads
from service.routes.tables import etag_matches
from service.tables import LiveTables

router = APIRouter(tags=["page"])

@dataclass(frozen=True)
class RenderedPage:
    html: bytes
    gzipped: bytes
    etag: str


class OneAtATime(Response):
    """A response whose body goes out while it holds the app's page-sending limiter."""

    def __init__(self, limiter: anyio.CapacityLimiter, *args, **kwargs):  # noqa: ANN002, ANN003 - Response's
        super().__init__(*args, **kwargs)
        self.limiter = limiter

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001 - ASGI callables
        async with self.limiter:
            await super().__call__(scope, receive, send)


class PageCache:
    """Rendered pages of the current table generation, one per filter that matches a table; emptied
    when the generation changes. One render at a time: a request that waited for it finds the page it
    wanted already there."""

    def __init__(self, reads: BoundedReads):
        self.reads = reads
        self.renders = 0
        self._generation = -1
        self._pages: dict[tuple[str | None, str | None], RenderedPage] = {}
        self._lock: anyio.Lock | None = None
        self._sending: anyio.CapacityLimiter | None = None

    def sending(self) -> anyio.CapacityLimiter:
        if self._sending is None:
            self._sending = anyio.CapacityLimiter(1)
        return self._sending

    def _current(self, live: LiveTables, key: tuple[str | None, str | None]) -> RenderedPage | None:
        if live.generation != self._generation:
            self._pages, self._generation = {}, live.generation
        return self._pages.get(key)

    async def get(self, live: LiveTables, gpu: str | None, dtype: str | None) -> RenderedPage:
        if not any((gpu is None or table.gpu == gpu) and (dtype is None or table.dtype == dtype)
                   for table in live.store.tables()):
            return _render(live, gpu, dtype)  # no table: no map to draw, a few lines of HTML
        key = (gpu, dtype)
        found = self._current(live, key)
        if found is not None:
            return found
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            found = self._current(live, key)
            if found is None:
                generation = live.generation
                found = await self.reads.run(_render, live, gpu, dtype)
                self.renders += 1
                if generation == live.generation == self._generation:
                    self._pages[key] = found
        return found


def _render(live: LiveTables, gpu: str | None, dtype: str | None) -> RenderedPage:
    html = render_page(live, gpu, dtype).encode()
    return RenderedPage(html, gzip.compress(html, compresslevel=6, mtime=0),
                        f'"{hashlib.sha256(html).hexdigest()[:32]}"')


@router.get("/", response_class=HTMLResponse, responses={304: {"description": "If-None-Match matched"},
                                                         **JSON_ERROR_RESPONSES},
            summary="Dispatch maps of every table (HTML), optionally of one GPU and/or dtype")
async def page(
    request: Request,
    live: LiveTablesDep,
    gpu: Annotated[Optional[str], Query(max_length=128, description="only this GPU model")] = None,
    dtype: Annotated[Optional[DtypeName], Query(description="only this dtype: " + DTYPE_HELP)] = None,
    accept_encoding: Annotated[Optional[str], Header(max_length=1024, include_in_schema=False)] = None,
    if_none_match: Annotated[Optional[str], Header(max_length=4096, include_in_schema=False)] = None,
) -> Response:
    rendered = await request.app.state.pages.get(live, gpu_key(gpu), canonical_dtype(dtype) if dtype else None)
    headers = {"ETag": rendered.etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
    if if_none_match is not None and etag_matches(if_none_match, rendered.etag):
        return Response(status_code=304, headers=headers)
    pages: PageCache = request.app.state.pages
    if accept_encoding and "gzip" in accept_encoding.lower():
        return OneAtATime(pages.sending(), rendered.gzipped, media_type="text/html; charset=utf-8",
                          headers={**headers, "Content-Encoding": "gzip"})
    return OneAtATime(pages.sending(), rendered.html, media_type="text/html; charset=utf-8", headers=headers)
