"""The supervised upload process (service/upload_worker.py) of a real server process: replaced when
killed, each replacement watched as the first was, gone when the server is killed, a retried upload
stores nothing twice, and an upload whose client has gone stores nothing."""
from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import sqlite3
import threading
import time

import pytest
from scripts.load_dispatch import start_server
from scripts.load_serve import upload_document
from service.app import create_app
from service.config import Settings
from tests.service.conftest import ThreadedServer, free_port
from tests.service.fixture_data import UPLOAD_TOKEN

pytestmark = pytest.mark.slow


def alive(pid: int) -> bool:
    """Running (a zombie has ended: it only waits for its new parent to reap it)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in status)
    except FileNotFoundError:
        return False


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                for child in map(int, children.read().split()):
                    found += [child, *descendants(child)]
    except FileNotFoundError:
        pass
    return found


class Server:
    def __init__(self, database: str, monkeypatch):
        monkeypatch.setenv("AUTOTUNER_UPLOAD_TOKEN", UPLOAD_TOKEN)
        self.process, self.port = start_server(f"sqlite:///{database}", 1, "h100")

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        connection.request(method, path, body=body, headers={"Authorization": f"Bearer {UPLOAD_TOKEN}"})
        response = connection.getresponse()
        answer = response.status, json.loads(response.read() or b"null")
        connection.close()
        return answer

    def upload_process(self) -> dict:
        return self.request("GET", "/healthz")[1]["upload_process"]

    def wait_for_state(self, state: str, timeout_s: float = 30) -> dict:
        deadline = time.monotonic() + timeout_s
        while (found := self.upload_process())["state"] != state:
            assert time.monotonic() < deadline, f"upload process never {state}: {found}"
            time.sleep(0.02)
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture
def database(tmp_path) -> str:
    return str(tmp_path / "uploads.sqlite")


def stored_rows(database: str) -> int:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT count(*) FROM measurements").fetchone()[0]


def test_a_killed_upload_process_is_replaced_and_the_next_upload_lands_within_10_s(database, monkeypatch):
    server = Server(database, monkeypatch)
    try:
        assert server.request("POST", "/runs", upload_document(1, 500))[0] == 201
        first = server.upload_process()
        os.kill(first["pid"], signal.SIGKILL)
        started = time.monotonic()
        status, summary = server.request("POST", "/runs", upload_document(2, 500))
        assert status == 201 and summary["measurements"] == 500
        assert time.monotonic() - started < 10
        now = server.upload_process()
        assert now["pid"] != first["pid"] and now["restarts"] == 1 and now["last_exit"] == "killed by signal 9"
    finally:
        server.stop()


def test_an_upload_whose_process_is_killed_is_retried_by_a_new_one(database, monkeypatch):
    server = Server(database, monkeypatch)
    try:
        assert server.request("POST", "/runs", upload_document(1, 10))[0] == 201  # the process is up
        answers: list = []
        uploading = threading.Thread(target=lambda: answers.append(server.request("POST", "/runs", upload_document(2, 30_000))))
        uploading.start()
        busy = server.wait_for_state("busy")
        os.kill(busy["pid"], signal.SIGKILL)
        uploading.join(timeout=120)
        status, summary = answers[0]
        assert status == 201 and summary["measurements"] == 30_000
        assert stored_rows(database) == 30_010  # acknowledged = stored, nothing twice
        assert server.upload_process()["restarts"] == 1
    finally:
        server.stop()


def test_every_replacement_is_watched_and_replaced_when_it_dies_idle(database, monkeypatch):
    """After a mid-upload kill the replacement used to go unwatched (4 of 5 tries): killed while idle, it
    stayed dead until an upload found it. Each replacement, killed idle, is replaced by itself now."""
    server = Server(database, monkeypatch)
    try:
        assert server.request("POST", "/runs", upload_document(1, 10))[0] == 201
        answers: list = []
        uploading = threading.Thread(target=lambda: answers.append(server.request("POST", "/runs", upload_document(2, 20_000))))
        uploading.start()
        os.kill(server.wait_for_state("busy")["pid"], signal.SIGKILL)
        uploading.join(timeout=120)
        assert answers[0][0] == 201
        for round_ in range(4):
            idle = server.wait_for_state("idle")
            time.sleep(1.2)  # lived past the restart backoff: replaced at once
            os.kill(idle["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 20
            while (now := server.upload_process())["pid"] in (idle["pid"], None) or now["state"] != "idle":
                assert time.monotonic() < deadline, f"round {round_}: not replaced: {now}"
                time.sleep(0.05)
            assert now["restarts"] == 2 + round_ and now["last_exit"] == "killed by signal 9"
        assert server.request("POST", "/runs", upload_document(3, 10))[0] == 201
    finally:
        server.stop()


def test_an_upload_whose_client_has_gone_before_the_commit_stores_nothing(database, monkeypatch):
    server = Server(database, monkeypatch)
    try:
        assert server.request("POST", "/runs", upload_document(1, 10))[0] == 201
        body = upload_document(4, 60_000)
        head = (f"POST /runs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nAuthorization: Bearer "
                f"{UPLOAD_TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as connection:
            connection.sendall(head + body)
            server.wait_for_state("busy")
        deadline = time.monotonic() + 120  # the client has gone: the upload is checked and written, never committed
        while (state := server.upload_process())["pending"] or state["state"] == "busy":
            assert time.monotonic() < deadline, state
            time.sleep(0.1)
        assert stored_rows(database) == 10
        assert server.request("POST", "/runs", upload_document(5, 10))[0] == 201
        assert stored_rows(database) == 20 and server.upload_process()["restarts"] == 0
    finally:
        server.stop()


def test_killing_the_server_mid_upload_leaves_no_process_and_the_retry_stores_nothing_twice(database, monkeypatch):
    body = upload_document(7, 30_000)
    server = Server(database, monkeypatch)
    try:
        assert server.request("POST", "/runs", upload_document(1, 10))[0] == 201
        threading.Thread(target=lambda: _ignore_errors(server.request, "POST", "/runs", body), daemon=True).start()
        server.wait_for_state("busy")
        server.request("GET", "/measurements")  # the read process too
        children = descendants(server.process.pid)
        assert len(children) >= 2
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=10)
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in children):
            assert time.monotonic() < deadline, f"processes outlived the server: {[p for p in children if alive(p)]}"
            time.sleep(0.05)
    finally:
        server.stop()
    assert stored_rows(database) in (10, 30_010)  # never half an upload
    again = Server(database, monkeypatch)
    try:
        status, summary = again.request("POST", "/runs", body)
        assert status == 201 and summary["runs_created"] + summary["runs_reused"] == 1
        assert stored_rows(database) == 30_010
        status, replay = again.request("POST", "/runs", body)  # a client retrying an upload it saw no answer to
        assert status == 201 and replay["run_ids"] == summary["run_ids"] and replay["runs_reused"] == 1
        assert stored_rows(database) == 30_010
    finally:
        again.stop()


def test_sigterm_mid_upload_stops_the_server_promptly_and_commits_nothing(database, monkeypatch):
    server = Server(database, monkeypatch)
    try:
        assert server.request("POST", "/runs", upload_document(1, 10))[0] == 201
        answers: list = []
        uploading = threading.Thread(target=lambda: answers.append(
            _ignore_errors(server.request, "POST", "/runs", upload_document(8, 800_000))), daemon=True)
        uploading.start()
        children = descendants(server.process.pid)
        server.wait_for_state("busy")
        server.process.terminate()
        server.process.wait(timeout=40)  # uvicorn's graceful shutdown gives running requests 10 s
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in children):
            assert time.monotonic() < deadline, "processes outlived the server"
            time.sleep(0.05)
        uploading.join(timeout=10)
    finally:
        server.stop()
    assert stored_rows(database) == 10
    # the upload cut off by the shutdown is told to retry (503, JSON), never a 500; or its connection drops
    assert len(answers) == 1, "the upload's client got no answer it could read (a 500's plain text?)"
    assert answers[0] is None or (answers[0][0] == 503 and "retry" in answers[0][1]["message"]), answers


def _ignore_errors(function, *args):  # noqa: ANN001, ANN202 - the server may die under this request
    try:
        return function(*args)
    except OSError:
        return None


def test_a_chunked_body_is_refused_once_it_passes_the_limit(tmp_path):
    """No Content-Length: the limit applies to the bytes counted while the body streams in."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'x.sqlite'}", upload_token=UPLOAD_TOKEN,
                        max_upload_bytes=100_000, shipped_tables=False)
    server = ThreadedServer(create_app(settings), free_port()).start()
    sent, answer = 0, b""
    try:
        with socket.create_connection(("127.0.0.1", int(server.base_url.rsplit(":", 1)[1])), timeout=10) as connection:
            connection.sendall(b"POST /runs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                               b"Authorization: Bearer " + UPLOAD_TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (10_000, b" " * 10_000)
            while sent < 50_000_000 and not select.select([connection], [], [], 0)[0]:
                try:
                    connection.sendall(chunk)
                except OSError:
                    break
                sent += 10_000
            answer = connection.recv(65536)
    finally:
        server.stop()
    assert answer.startswith(b"HTTP/1.1 413") and b"100000 bytes" in answer
    assert sent < 10_000_000  # refused while streaming (what was sent lies mostly in the sockets' buffers)
