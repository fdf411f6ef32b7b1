"""A damaged, read-only or full database is reported, never an opaque 500: start refused, /healthz
503 naming the damage (deep, and plain once the server has seen it), every read 503 naming it,
uploads refused with the reason."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from fastapi.testclient import TestClient

from db.engine import DatabaseError
from scripts.load_serve import upload_document
from service.app import create_app
from service.config import Settings
from tests.db.test_integrity import damage
from tests.service.fixture_data import UPLOAD_TOKEN


def test_a_damaged_database_is_refused_at_start(settings, database_url):
    damage(database_url.removeprefix("sqlite:///"))
    with pytest.raises(DatabaseError, match="refusing to serve .*damaged.*quick_check"):
        create_app(settings)


def test_damage_while_serving_shows_in_deep_healthz_and_refuses_uploads(client, database_url, auth):
    assert client.get("/healthz", params={"deep": 1}, headers=auth).status_code == 200
    damage(database_url.removeprefix("sqlite:///"))
    assert client.get("/healthz", params={"deep": 1}).status_code == 401  # the deep check needs the token
    deep = client.get("/healthz", params={"deep": 1}, headers=auth)
    assert deep.status_code == 503
    body = deep.json()
    assert body["status"] == "failing" and "damaged" in body["database"]["problem"]
    assert "quick_check" in body["database"]["problem"] and body["database"]["checked_at"]
    assert client.get("/healthz").status_code == 503  # damage stays reported until a deep check passes
    upload = client.post("/runs", content=upload_document(1, 10), headers={**auth, "Content-Type": "application/json"})
    assert upload.status_code == 503 and "damaged" in upload.json()["message"]


def test_an_upload_finds_damage_itself(tmp_path, settings, database_url, auth):
    """Without any deep check, the upload process looks before it writes."""
    with TestClient(create_app(settings)) as client:
        damage(database_url.removeprefix("sqlite:///"))
        upload = client.post("/runs", content=upload_document(1, 10), headers={**auth, "Content-Type": "application/json"})
        assert upload.status_code == 503 and "damaged" in upload.json()["message"], upload.text
        assert client.get("/healthz").status_code == 503


def test_a_read_only_database_is_refused_where_uploads_are_enabled(database_url):
    read_only = f"sqlite:///file:{database_url.removeprefix('sqlite:///')}?mode=ro&uri=true"
    with pytest.raises(DatabaseError, match="read-only"):
        create_app(Settings(database_url=read_only, upload_token=UPLOAD_TOKEN, shipped_tables=False))
    with TestClient(create_app(Settings(database_url=read_only, shipped_tables=False))) as client:  # serving only
        assert client.get("/healthz").json()["status"] == "ok"
        assert client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16", "gpu": "h100"}).status_code == 200


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root only; skipped elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_answers_507_with_the_reason(small_disk, template_database, auth):
    shutil.copyfile(template_database, small_disk / "tuning.sqlite")
    settings = Settings(database_url=f"sqlite:///{small_disk / 'tuning.sqlite'}", upload_token=UPLOAD_TOKEN,
                        shipped_tables=False)
    with TestClient(create_app(settings)) as client:
        upload = client.post("/runs", content=upload_document(1, 20_000), headers={**auth, "Content-Type": "application/json"})
        assert upload.status_code == 507, upload.text
        assert "disk is full" in upload.json()["message"]
        assert client.get("/healthz").status_code == 200  # a full disk is not damage: it can be mended live


def zero_the_header(path: str) -> None:
    with open(path, "r+b") as handle:
        handle.write(bytes(100))


def truncate_to_half(path: str) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def garbage_past_the_first_page(path: str) -> None:
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.seek(4096)
        handle.write(os.urandom(size - 4096))


@pytest.mark.parametrize("harm", [zero_the_header, truncate_to_half, garbage_past_the_first_page])
def test_damage_while_serving_answers_503_naming_it_on_every_read_and_plain_healthz_tells(client, database_url, harm):
    path = database_url.removeprefix("sqlite:///")
    assert client.get("/measurements", params={"limit": 5}).status_code == 200  # the read process is up
    assert client.get("/healthz").json()["status"] == "ok"
    harm(path)
    reads = [client.get("/measurements", params={"limit": 1000, "after": after}) for after in (0, 0, 50, 0, 900)]
    assert [r.status_code for r in reads] == [503] * 5, [r.text for r in reads]
    assert all("damaged" in r.json()["message"] for r in reads)
    health = client.get("/healthz")
    assert health.status_code == 503 and health.json()["status"] == "failing"
    assert "damaged" in health.json()["database"]["problem"]
    answer = client.get("/dispatch", params={"m": 8, "n": 1024, "dtype": "bf16", "gpu": "h100"})
    assert answer.status_code == 200  # the tables loaded before keep answering


@pytest.mark.parametrize("harm", [zero_the_header, truncate_to_half])
def test_plain_healthz_sees_a_header_or_size_that_says_damage_before_any_read(client, database_url, harm):
    harm(database_url.removeprefix("sqlite:///"))
    health = client.get("/healthz")
    assert health.status_code == 503 and "damaged" in health.json()["database"]["problem"], health.text
    assert client.get("/measurements").status_code == 503  # known damage: not read again


def test_a_whole_file_passes_the_header_probe_after_many_writes(client, auth):
    for index in range(3):  # the WAL checkpoints as it grows: the header stays in step with the file
        upload = client.post("/runs", content=upload_document(50 + index, 3000),
                             headers={**auth, "Content-Type": "application/json"})
        assert upload.status_code == 201, upload.text
        assert client.get("/healthz").json()["status"] == "ok"


def test_a_read_only_database_is_refused_where_only_scoped_tokens_are_set(database_url):
    read_only = f"sqlite:///file:{database_url.removeprefix('sqlite:///')}?mode=ro&uri=true"
    with pytest.raises(DatabaseError, match="read-only"):
        create_app(Settings(database_url=read_only, upload_tokens=f"h100:{UPLOAD_TOKEN}", shipped_tables=False))
