"""Fixtures of the service tests: a tuning database filled by ``fixture_data.populate``, the app over
it (test client, and a real uvicorn on 127.0.0.1), and the upload token."""
from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import uvicorn
from fastapi.testclient import TestClient

from db.engine import make_engine, transaction
from tests.service.fixture_data import UPLOAD_TOKEN, populate
from service.app import create_app
from service.config import Settings


@pytest.fixture(scope="session")
def template_database(tmp_path_factory) -> Path:
    """The populated database, written once per session (a thousand rows through db.queries)."""
    path = tmp_path_factory.mktemp("template") / "service.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    with transaction(engine) as session:
        populate(session)
    with engine.connect() as connection:  # fold the WAL into the file so that a copy is complete
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


@pytest.fixture
def database_url(template_database, tmp_path) -> str:
    """A private copy of the populated database for one test."""
    path = tmp_path / "service.sqlite"
    shutil.copyfile(template_database, path)
    return f"sqlite:///{path}"


@pytest.fixture
def settings(database_url) -> Settings:
    # shipped tables off: the tests assert on exactly the fixture database's tables
    return Settings(database_url=database_url, upload_token=UPLOAD_TOKEN, reload_interval_s=0, shipped_tables=False)


@pytest.fixture
def client(settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {UPLOAD_TOKEN}"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ThreadedServer:
    """uvicorn on 127.0.0.1 in a daemon thread, up until ``stop``."""

    def __init__(self, app, port: int):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    access_log=False, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)
        self.base_url = f"http://127.0.0.1:{port}"

    def start(self, timeout_s: float = 15.0) -> "ThreadedServer":
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture
def live_server(settings) -> Iterator[ThreadedServer]:
    server = ThreadedServer(create_app(settings), free_port()).start()
    try:
        yield server
    finally:
        server.stop()
