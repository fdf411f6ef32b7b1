"""What an unauthenticated caller can see and pull: no database path, bounded pages, security
headers, docs pages that need no network, and a 500 that does not drop a keep-alive connection."""
from __future__ import annotations

import http.client
import re

from sqlalchemy import update

from db.engine import make_engine, transaction
from db.models import Measurement
from service.app import create_app
from service.middleware import API_CSP, PAGE_CSP
from service.routes import health
from service.routes.measurements import ERROR_CHARS, PAGE_BYTES
from tests.service.conftest import ThreadedServer, free_port


def test_healthz_shows_no_path_without_the_token(client, database_url):
    text = client.get("/healthz").text
    assert database_url.removeprefix("sqlite:///") not in text and "sqlite:///" not in text


def test_measurements_cut_long_errors_and_cap_the_page_bytes(settings, database_url):
    engine = make_engine(database_url)
    with transaction(engine) as session:  # every row carries a 64 KB compiler log
        session.execute(update(Measurement).values(error="x" * 65536))
    engine.dispose()
    from fastapi.testclient import TestClient

    with TestClient(create_app(settings)) as client:
        seen, offset, pages = set(), 0, 0
        while offset is not None:
            response = client.get("/measurements", params={"limit": 1000, "offset": offset})
            assert response.status_code == 200 and len(response.content) <= PAGE_BYTES + 8192
            body = response.json()
            assert all(len(item["error"]) == ERROR_CHARS and item["error_chars"] == 65536 for item in body["items"])
            seen.update(item["id"] for item in body["items"])
            offset, pages = body["next_offset"], pages + 1
    assert len(seen) == body["total"] and pages > 1  # every row reachable by next_offset, over several pages


def test_security_headers_on_every_kind_of_answer(client):
    query = {"m": 8, "n": 1024, "dtype": "bf16", "gpu": "h100"}
    for response, csp in ((client.get("/dispatch", params=query), API_CSP),  # the fast path
                          (client.get("/dispatch", params={**query, "m": 0}), API_CSP),  # an error
                          (client.get("/healthz"), API_CSP), (client.get("/"), PAGE_CSP)):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["content-security-policy"] == csp


def test_docs_and_redoc_load_only_their_own_assets(client):
    for path in ("/docs", "/redoc"):
        page = client.get(path)
        assert page.status_code == 200
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: ?'([^']+)'", page.text)
        assert sources and not [s for s in sources if "//" in s], sources  # nothing from another host
        for source in sources:
            if source.startswith("/docs-assets/"):
                asset = client.get(source)
                assert asset.status_code == 200 and len(asset.content) > 1000, source
    assert "SwaggerUIBundle" in client.get("/docs-assets/swagger-ui-bundle.js").text
    assert client.get("/docs-assets/redoc.standalone.js").status_code == 200


def test_an_unexpected_error_keeps_the_keep_alive_connection(settings, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(health, "bearer_matches", broken)
    server = ThreadedServer(create_app(settings), free_port()).start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", int(server.base_url.rsplit(":", 1)[1]), timeout=10)
        connection.request("GET", "/healthz")
        failed = connection.getresponse()
        body = failed.read()
        assert failed.status == 500 and b"internal error (RuntimeError)" in body and b"boom" not in body
        assert failed.getheader("connection") != "close"
        connection.request("GET", "/kernels")  # the same connection: no ECONNRESET
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        server.stop()


def test_healthz_with_the_database_down_shows_no_host_port_or_sql_without_the_token(settings, auth):
    """A PostgreSQL server that is down: the driver's text names its host and port (and SQLAlchemy's
    the SQL); only a caller with an upload token sees it."""
    from fastapi.testclient import TestClient
    from sqlalchemy import create_engine

    app = create_app(settings)
    with TestClient(app) as client:
        app.state.engine = create_engine("postgresql+psycopg://tuner:secret@127.0.0.1:9/tuning",
                                         connect_args={"connect_timeout": 2})
        app.state.tables.engine = app.state.engine
        app.state.tables.refresh(force=True)
        public = client.get("/healthz")
        private = client.get("/healthz", headers=auth).json()
    body = public.json()
    assert body["status"] == "degraded" and body["database"]["reachable"] is False
    assert body["database"]["error"].startswith("OperationalError") and body["tables"]["last_error"].startswith("OperationalError")
    for hidden in ("127.0.0.1", "port", "SQL", "SELECT", "tuner", "secret", "connection"):
        assert hidden not in public.text, hidden
    assert "127.0.0.1" in private["database"]["error"] and "127.0.0.1" in private["tables"]["last_error"]
