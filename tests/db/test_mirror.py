"""An SQLite database's current tables as files beside it (db/location.py, db/mirror.py): what the
embedded lookup reads without SQLAlchemy. The folder, where marked complete, holds exactly the
database's current tables, whatever happened to the database."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from db import DispatchTableRow, make_engine
from db.location import COMPLETE_MARK, mirrored_table_files, tables_folder
from db.queries import get_or_create_gpu, save_table

TABLE = Path(__file__).parents[1] / "data" / "classic_tables" / "h100_bf16_cold.json"


def _document(gpu: str = "h100", dtype: str = "bf16") -> dict:
    return {**json.loads(TABLE.read_text()), "gpu": gpu, "dtype": dtype}


def _store(engine, document: dict) -> None:
    with Session(engine) as session, session.begin():
        gpu = get_or_create_gpu(session, document["gpu"], document["gpu"].upper())
        save_table(session, gpu, document["dtype"], "cold", document, source_runs=[], candidate_count=1)


def _mirrored(path: Path) -> dict[str, dict] | None:
    files = mirrored_table_files(f"sqlite:///{path}")
    return None if files is None else {file.name: json.loads(file.read_text()) for file in files}


def test_a_new_database_says_it_holds_no_table(tmp_path):
    path = tmp_path / "tuning.sqlite"
    make_engine(str(path)).dispose()
    assert _mirrored(path) == {}


def test_a_stored_table_is_written_at_its_commit_and_replaces_the_older_one(tmp_path):
    path = tmp_path / "tuning.sqlite"
    engine = make_engine(str(path))
    _store(engine, _document())
    older = _document()
    newer = {**older, "created_at": "2030-01-01T00:00:00+00:00"}
    _store(engine, newer)
    _store(engine, _document(gpu="a100", dtype="fp16"))
    assert _mirrored(path) == {"h100_bf16_cold.json": newer, "a100_fp16_cold.json": _document("a100", "fp16")}


def test_a_table_whose_transaction_rolls_back_is_not_written(tmp_path):
    path = tmp_path / "tuning.sqlite"
    engine = make_engine(str(path))
    with pytest.raises(RuntimeError), Session(engine) as session, session.begin():
        gpu = get_or_create_gpu(session, "h100", "H100")
        save_table(session, gpu, "bf16", "cold", _document(), source_runs=[], candidate_count=1)
        raise RuntimeError("the fit fails after storing")
    with Session(engine) as session, session.begin():  # the same session class commits something else later
        get_or_create_gpu(session, "h200", "H200")
    assert _mirrored(path) == {}


def test_a_database_without_a_complete_folder_is_read_then_completed_by_the_next_writer(tmp_path):
    """A database made before the folder existed (or whose folder was lost): readers cannot trust the
    folder, so the lookup reads the database; the next writer to open it writes every current table
    and removes a file of a table no longer current."""
    path = tmp_path / "tuning.sqlite"
    engine = make_engine(str(path))
    _store(engine, _document())
    _store(engine, _document(dtype="fp16"))
    with Session(engine) as session, session.begin():  # the fp16 table retired behind the folder's back
        session.execute(update(DispatchTableRow).where(DispatchTableRow.dtype == "fp16").values(is_current=False))
    engine.dispose()
    (tables_folder(path) / COMPLETE_MARK).unlink()
    assert _mirrored(path) is None
    make_engine(str(path), create=False).dispose()  # a reader writes nothing
    assert _mirrored(path) is None
    make_engine(str(path)).dispose()
    assert _mirrored(path) == {"h100_bf16_cold.json": _document()}


def test_a_database_made_again_at_the_same_path_drops_the_old_files(tmp_path):
    path = tmp_path / "tuning.sqlite"
    engine = make_engine(str(path))
    _store(engine, _document())
    engine.dispose()
    for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        leftover.unlink(missing_ok=True)
    make_engine(str(path)).dispose()
    assert _mirrored(path) == {}


def test_a_server_database_has_no_folder(postgres_url):
    assert mirrored_table_files(postgres_url) is None
    make_engine(postgres_url).dispose()
    assert mirrored_table_files(postgres_url) is None
