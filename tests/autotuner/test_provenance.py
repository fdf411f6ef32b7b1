"""A stored run is immutable and remembers its uploader (autotuner/records/provenance.py): the same
uploader re-sending it adds only what it lacks, anyone else is refused, a changed row is refused, and two
writers storing the same run at once store it once, on SQLite and on PostgreSQL."""
from __future__ import annotations

import copy
import threading

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotuner.records.exchange import export_runs, import_runs
from autotuner.records.provenance import StoredRunConflict
from db.engine import make_engine, transaction
from db.models import CopyReference, Measurement, SweepRun
from db.retry import in_transaction
from tests.autotuner.test_exchange import fill
from tests.db.conftest import database_url, postgres_url  # noqa: F401 - fixtures


@pytest.fixture
def document(tmp_path) -> dict:
    """One genuine-looking H100 run as an export carries it (plausible rows of every status)."""
    source = make_engine(f"sqlite:///{tmp_path / 'source.sqlite'}")
    with transaction(source) as session:
        fill(session)
    with Session(source) as session:
        exported = export_runs(session)
    source.dispose()
    return exported


@pytest.fixture
def engine(database_url):  # noqa: F811 - the fixture imported above
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def stored(engine) -> tuple[int, int, int, list]:  # noqa: ANN001
    with Session(engine) as session:
        return (session.scalar(select(func.count()).select_from(SweepRun)),
                session.scalar(select(func.count()).select_from(Measurement)),
                session.scalar(select(func.count()).select_from(CopyReference)),
                sorted(session.scalars(select(Measurement.median_us)), key=str))


def upload(engine, document: dict, uploader: str | None):  # noqa: ANN001, ANN201
    with transaction(engine) as session:
        return import_runs(session, copy.deepcopy(document), uploader=uploader)


def test_the_uploader_is_recorded_and_the_same_uploader_resending_adds_nothing(engine, document):
    first = upload(engine, document, "lab-a")
    before = stored(engine)
    again = upload(engine, document, "lab-a")
    assert (first.runs_created, again.runs_created, again.runs_reused) == (1, 0, 1)
    assert (again.run_ids, again.measurements, again.copy_references) == (first.run_ids, 0, 0)
    assert stored(engine) == before
    with Session(engine) as session:
        assert session.scalars(select(SweepRun.uploader)).all() == ["lab-a"]


def test_another_uploader_sending_a_stored_run_is_refused_and_nothing_changes(engine, document):
    upload(engine, document, "lab-a")
    before = stored(engine)
    forged = copy.deepcopy(document)  # slower times: plausible (faster ones meet the floors first)
    for row in forged["runs"][0]["measurements"]:
        if row["median_us"]:
            row.update(median_us=row["median_us"] * 1.25, p20_us=row["p20_us"] * 1.25, p80_us=row["p80_us"] * 1.25, gbps=None)
    for sender, sent in (("lab-b", forged), ("lab-b", document), (None, document)):
        with pytest.raises(StoredRunConflict, match="rule run-identity") as refused:
            upload(engine, sent, sender)
        assert refused.value.status == 409 and "nothing stored" in str(refused.value)
    assert stored(engine) == before


def test_a_resent_run_with_a_changed_row_is_refused_even_from_its_uploader(engine, document):
    upload(engine, document, "lab-a")
    before = stored(engine)
    changed = copy.deepcopy(document)
    changed["runs"][0]["measurements"][0].update(median_us=102.0, gbps=None)
    with pytest.raises(StoredRunConflict, match=r"rule run-immutable.*runs\[0\]\.measurements\[0\]: 4096x16000 bf16"):
        upload(engine, changed, "lab-a")
    regridded = copy.deepcopy(document)
    regridded["runs"][0]["grid"] = {"purpose": "held-out"}  # would take it out of every fit
    with pytest.raises(StoredRunConflict, match="another grid"):
        upload(engine, regridded, "lab-a")
    assert stored(engine) == before


def test_a_run_sent_while_running_is_completed_by_its_uploader(engine, document):
    partial = copy.deepcopy(document)
    run = partial["runs"][0]
    run.update(status="running", finished_at=None)
    run["measurements"], run["copy_references"] = run["measurements"][:1], run["copy_references"][:1]
    upload(engine, partial, "lab-a")
    completed = upload(engine, document, "lab-a")
    assert (completed.runs_reused, completed.measurements, completed.copy_references) == (1, 2, 1)
    with Session(engine) as session:
        assert session.scalars(select(SweepRun.status)).all() == ["finished"]
    assert stored(engine)[:3] == (1, 3, 2)
    with pytest.raises(StoredRunConflict, match="another status"):  # and it never goes back
        upload(engine, partial, "lab-a")


@pytest.mark.parametrize("uploaders", [("lab-a", "lab-a"), ("lab-a", "lab-b")])
def test_the_same_run_stored_at_once_by_two_writers_is_stored_once(engine, document, uploaders):
    """Two servers of one database receiving the same run at the same moment (issue 45: PostgreSQL
    stored it twice in 5 of 6 races): one stores it; the other finds it, and adds nothing (same
    uploader) or is refused (another uploader)."""
    start = threading.Barrier(2)
    outcomes: list = [None, None]
    waited = [False, False]

    def send(slot: int) -> None:
        def work(session):  # noqa: ANN001, ANN202 - retried whole on a transient conflict: waits once
            if not waited[slot]:
                waited[slot] = True
                start.wait(timeout=30)
            return import_runs(session, copy.deepcopy(document), uploader=uploaders[slot])
        try:
            outcomes[slot] = in_transaction(engine, work, what="test upload")
        except StoredRunConflict as exc:
            outcomes[slot] = exc

    threads = [threading.Thread(target=send, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    run = document["runs"][0]
    assert stored(engine)[:3] == (1, len(run["measurements"]), len(run["copy_references"]))
    created = [o for o in outcomes if not isinstance(o, Exception) and o.runs_created == 1]
    assert len(created) == 1, outcomes
    other = next(o for o in outcomes if o is not created[0])
    if uploaders[0] == uploaders[1]:
        assert other.runs_reused == 1 and other.measurements == 0
    else:
        assert isinstance(other, StoredRunConflict) and other.status == 409
