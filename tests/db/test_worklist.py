"""The shared work list on SQLite and on a real PostgreSQL server: concurrent claimers never take the
same shape twice and together finish the list; a dead claimer's shapes come free again."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotuner.tune.parallel import SharedWorkList
from db import make_engine, queries, worklist
from db.models import SweepRun, WorkListEntry
from db.retry import in_transaction

SHAPES = [(m, n, dtype) for dtype in ("fp32", "bf16") for m in (1, 4, 32, 128, 1024) for n in (1024, 4096, 32000)]
KEY = "test-list"


def fill(engine, shapes=SHAPES, key=KEY) -> None:
    in_transaction(engine, lambda s: worklist.add_entries(s, key, shapes))


def wait_for_each_other(ready_dir: Path, name: str, parties: int = 2, timeout_s: float = 60.0) -> None:
    """A barrier across processes: claimers start together, so each must get part of the work."""
    (ready_dir / name).touch()
    deadline = time.monotonic() + timeout_s
    while len(list(ready_dir.iterdir())) < parties and time.monotonic() < deadline:
        time.sleep(0.01)


def claim_until_empty(url: str, slot: int, pause_s: float, ready_dir: Path | None = None) -> list[tuple[int, int, str]]:
    """A claimer as a sweeper runs it: claim, 'measure', finish; until the list has nothing free."""
    engine = make_engine(url)
    work = SharedWorkList(engine, KEY, run_id=None, lease_s=60)
    taken = []
    if ready_dir is not None:
        wait_for_each_other(ready_dir, f"{os.getpid()}-{slot}")
    try:
        while (shape := work.claim(slot, planned=lambda _shape: True)) is not None:
            time.sleep(pause_s)
            assert work.renew(slot, shape)
            work.finish(slot, shape)
            taken.append(shape)
    finally:
        engine.dispose()
    return taken


def assert_each_taken_once(results: list[list[tuple]], engine) -> None:
    taken = [shape for result in results for shape in result]
    assert sorted(taken) == sorted(SHAPES), "a shape was taken twice or never"
    assert all(results), f"every claimer should get work: {[len(r) for r in results]}"
    with Session(engine) as session:
        assert worklist.entry_counts(session, KEY) == {"done": len(SHAPES)}


def test_two_claimer_threads_never_take_the_same_shape(engine, database_url, tmp_path):
    fill(engine)
    (tmp_path / "ready").mkdir()
    results: list[list[tuple]] = [[], []]

    def claimer(slot: int) -> None:
        results[slot] = claim_until_empty(database_url, slot, 0.01, tmp_path / "ready")

    threads = [threading.Thread(target=claimer, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert_each_taken_once(results, engine)


def test_two_claimer_processes_never_take_the_same_shape(engine, database_url, tmp_path):
    fill(engine)
    (tmp_path / "ready").mkdir()
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(claim_until_empty, database_url, 0, 0.02, tmp_path / "ready") for _ in range(2)]
        results = [future.result(timeout=120) for future in futures]
    assert_each_taken_once(results, engine)


def test_claims_follow_position_order_and_skip_unplanned_shapes(engine):
    fill(engine)
    work = SharedWorkList(engine, KEY, run_id=None)
    first = work.claim(0, planned=lambda shape: shape != SHAPES[1])
    second = work.claim(0, planned=lambda shape: shape != SHAPES[1])
    assert (first, second) == (SHAPES[0], SHAPES[2])
    with Session(engine) as session:
        skipped = session.scalars(select(WorkListEntry).where(WorkListEntry.m == SHAPES[1][0],
                                                              WorkListEntry.n == SHAPES[1][1],
                                                              WorkListEntry.dtype == SHAPES[1][2])).one()
        assert skipped.status == "pending", "a shape this sweeper cannot measure stays for others"


def test_an_expired_lease_is_taken_over_and_the_old_holder_loses_it(engine):
    fill(engine, SHAPES[:1])
    slow = SharedWorkList(engine, KEY, run_id=None, lease_s=0.5, host="host-a")
    other = SharedWorkList(engine, KEY, run_id=None, lease_s=60, host="host-b")
    assert slow.claim(0, planned=lambda _s: True) == SHAPES[0]
    assert other.claim(0, planned=lambda _s: True) is None, "a live lease is respected"
    time.sleep(1.2)
    assert other.claim(0, planned=lambda _s: True) == SHAPES[0]
    assert slow.renew(0, SHAPES[0]) is False
    with Session(engine) as session:
        entry = session.scalars(select(WorkListEntry)).one()
        assert entry.attempts == 2 and entry.claim_host == "host-b"


def test_a_killed_local_claimer_is_released_at_once_and_its_run_marked(engine):
    fill(engine, SHAPES[:2])
    with Session(engine) as session, session.begin():
        gpu = queries.get_or_create_gpu(session, "h100", "H100")
        env = queries.get_or_create_environment(session, "fp")
        run_id = queries.create_run(session, gpu, env, "cold").id
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    with worklist.claiming(engine) as session:
        claimer = worklist.Claimer(host, dead.pid, run_id, 0)
        assert worklist.claim_next(session, KEY, claimer, lease_s=3600) is not None
    with worklist.claiming(engine) as session:  # a live process of this host keeps its claim
        worklist.claim_next(session, KEY, worklist.Claimer(host, os.getpid(), None, 0), lease_s=3600)
    assert SharedWorkList(engine, KEY, run_id=None).fill(SHAPES[:2]) == [run_id]
    with Session(engine) as session:
        statuses = sorted((e.status, e.claim_pid) for e in session.scalars(select(WorkListEntry)))
        assert statuses == [("claimed", os.getpid()), ("pending", None)]
        assert session.get(SweepRun, run_id).status == "interrupted"


def test_refilling_reopens_done_shapes_but_keeps_live_claims(engine):
    fill(engine, SHAPES[:2])
    work = SharedWorkList(engine, KEY, run_id=None)
    done = work.claim(0, planned=lambda _s: True)
    work.finish(0, done)
    held = work.claim(1, planned=lambda _s: True)
    fill(engine, SHAPES[:2])
    with Session(engine) as session:
        status = {(e.m, e.n, e.dtype): e.status for e in session.scalars(select(WorkListEntry))}
    assert status == {done: "pending", held: "claimed"}


def test_on_sqlite_a_claim_holds_the_write_lock_from_its_first_read(tmp_path):
    """Two claimers' transactions cannot overlap, so neither can read an entry the other is taking."""
    import pytest
    from sqlalchemy.exc import OperationalError

    from tests.db.test_retry import short_busy_timeout

    path = str(tmp_path / "t.sqlite")
    engine = make_engine(path)
    fill(engine, SHAPES[:2])
    impatient = short_busy_timeout(make_engine(path), ms=50)
    with worklist.claiming(engine) as session:
        with pytest.raises(OperationalError, match="locked"):
            with worklist.claiming(impatient) as other:
                worklist.claim_next(other, KEY, worklist.Claimer("b", 2), lease_s=60)
        first = worklist.claim_next(session, KEY, worklist.Claimer("a", 1), lease_s=60)
    assert (first.m, first.n, first.dtype) == SHAPES[0]
    with worklist.claiming(impatient) as other:  # free again once the first claim committed
        second = worklist.claim_next(other, KEY, worklist.Claimer("b", 2), lease_s=60)
    assert (second.m, second.n, second.dtype) == SHAPES[1]


def test_a_killed_local_run_without_claims_is_marked_interrupted(engine):
    with Session(engine) as session, session.begin():
        gpu = queries.get_or_create_gpu(session, "h100", "H100")
        env = queries.get_or_create_environment(session, "fp")
        killed, alive, elsewhere = (queries.create_run(session, gpu, env, "cold").id for _ in range(3))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    with Session(engine) as session, session.begin():
        worklist.register_process(session, killed, host, dead.pid)
        worklist.register_process(session, alive, host, os.getpid())
        worklist.register_process(session, elsewhere, "another-host", dead.pid)  # not ours to judge
    assert SharedWorkList(engine, KEY, run_id=None).fill([]) == [killed]
    with Session(engine) as session:
        assert [session.get(SweepRun, r).status for r in (killed, alive, elsewhere)] == ["interrupted", "running", "running"]


def test_a_new_plan_can_claim_the_entries_an_earlier_plan_passed_over(engine):
    """A resumed domain sweep replays its finished rounds first: claiming for round 0's plan passes over
    the pending shapes of round 2, left by the stopped run. Round 2's fill must make them claimable for
    this run again (they were skipped, and the run ended "finished" with 10,068 items unmeasured)."""
    round_2 = SHAPES[4:8]
    fill(engine, round_2)  # left pending by the run that was stopped
    work = SharedWorkList(engine, KEY, run_id=None)
    work.fill([])  # round 0 of the resumed run: everything measured, nothing to list
    assert work.claim(0, planned=lambda shape: False) is None  # passes over round 2's entries
    work.fill(round_2)  # round 2 of the resumed run
    taken = []
    while (shape := work.claim(0, planned=round_2.__contains__)) is not None:
        work.finish(0, shape)
        taken.append(shape)
    assert sorted(taken) == sorted(round_2)
