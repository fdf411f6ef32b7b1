"""Test-wide set-up. GPU tests carry ``@pytest.mark.gpu`` and are skipped here, in one place, when
no CUDA device is visible (CI has none). Every test gets its own empty database directory."""
from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def gpu_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# The test files that took longest (pytest --durations on the CPU machine), run first: pytest-xdist hands
# a worker a whole file at a time in collection order, and a long file started last kept one worker
# busy alone at the end while the other had nothing left (a fifth of the suite's wall time on 2 cores).
LONGEST_FIRST = (
    "tests/kernels/test_native.py", "tests/autotuner/test_strategy.py", "tests/autotuner/test_predict.py",
    "tests/kernels/test_triton_interpret.py", "tests/autotuner/test_predicted_tables.py",
    "tests/autotuner/test_cli_sweep.py", "tests/autotuner/test_replay_recorded.py",
    "tests/autotuner/test_portable_picks.py",
)


def _file_rank(item) -> int:
    path = item.nodeid.partition("::")[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_file_rank)  # stable: within a file, and among the other files, the order is kept
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine (gpu tests run on the lent device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_database(tmp_path, monkeypatch):
    """Never touch the user's default database from a test."""
    monkeypatch.setenv("AUTOTUNER_DB", f"sqlite:///{tmp_path / 'tuning.sqlite'}")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="session")
def recording_template(tmp_path_factory):
    """``template(name)``: an SQLite database holding ``tests/data/<name>.json.gz`` imported, built on its
    first use and once per test process (an import of a recorded sweep costs several seconds); copy it
    with :func:`copy_database` before writing to it."""
    from pathlib import Path

    from sqlalchemy.orm import Session

    from autotuner.records.exchange import import_runs
    from db.engine import make_engine

    built: dict[str, Path] = {}

    def template(name: str) -> Path:
        if name not in built:
            import gzip

            path = tmp_path_factory.mktemp(f"recording-{name}") / "tuning.sqlite"
            engine = make_engine(str(path))
            with gzip.open(Path(__file__).parent / "data" / f"{name}.json.gz", "rt") as handle, \
                    Session(engine) as session, session.begin():
                import_runs(session, handle.read())
            with engine.connect() as connection:  # fold the WAL into the file so that a copy is complete
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            engine.dispose()
            built[name] = path
        return built[name]

    return template


def copy_database(source, target):
    """A copy of the SQLite file ``source`` at ``target``, with its folder of current tables (db/location.py)."""
    import shutil

    from db.location import tables_folder

    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    if tables_folder(source).is_dir():
        shutil.copytree(tables_folder(source), tables_folder(target))
    return target
