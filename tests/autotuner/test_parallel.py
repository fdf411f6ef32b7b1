"""Several runners (one per GPU) over one work list, and sweepers sharing a database: every item once,
whole shape groups per worker, the quick-drop hint per shape, faults isolated per worker."""
from __future__ import annotations

import os
import threading

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotuner.tune.sweep import Sweep, plan
from autotuner.tune.worker import WorkerRunner, visible_device
from db import CopyReference, Measurement, SweepRun, make_engine
from tests.autotuner.fakes import ITEM_PAUSE_ENV, FakeRows, FakeSplit, ReplayMeasurer, deterministic_result
from tests.autotuner.test_sweep import ENV, GPU

SHAPES = [(m, n, dtype) for dtype in ("fp32", "bf16") for m in (1, 32, 1024) for n in (1024, 8192)]


def planned():
    return plan([FakeRows(), FakeSplit()], SHAPES)


class Recorder(ReplayMeasurer):
    """In-process runner answering deterministically and noting which runner measured what."""

    def __init__(self, barrier: threading.Barrier | None = None):
        super().__init__()
        self.barrier = barrier

    def measure(self, item):
        if self.barrier is not None:  # both runners start before either may finish the list
            self.barrier.wait(10)
            self.barrier = None
        self.calls.append(item)
        return deterministic_result(item)


def rows(engine):
    with Session(engine) as session:
        return session.execute(select(Measurement.candidate_id, Measurement.m, Measurement.n, Measurement.dtype,
                                      Measurement.status, Measurement.median_us)).all()


def test_two_runners_share_the_groups_and_measure_every_item_once(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = planned()
    barrier = threading.Barrier(2)
    runners = [Recorder(barrier), Recorder(barrier)]
    summary = Sweep(engine, GPU, ENV, "cold", candidates).run(runners, items)
    assert summary.measured == len(items) and summary.skipped_existing == 0
    assert all(r.calls for r in runners), "both runners should have taken groups"
    measured = [c.identity for r in runners for c in r.calls]
    assert sorted(measured) == sorted(i.identity for i in items)
    for shape in SHAPES:  # a shape group stays on one runner: its input is allocated once
        owners = {index for index, r in enumerate(runners) for c in r.calls if c.shape_key == shape}
        assert len(owners) == 1, f"{shape} was split between runners"
    found = rows(engine)
    assert len(found) == len(set(r[:4] for r in found)) == len(items) - len(SHAPES)


def test_the_hint_is_the_best_time_so_far_on_the_shape_also_after_a_resume(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = planned()
    calls = iter(range(1000))
    Sweep(engine, GPU, ENV, "cold", candidates).run(Recorder(), items, should_stop=lambda: next(calls) >= 3)
    resumed = Recorder()
    Sweep(engine, GPU, ENV, "cold", candidates).run([resumed], items)
    first_shape = items[0].shape_key
    before = [deterministic_result(i)["median_us"] for i in items[1:3]]  # measured before the stop
    resumed_first = next(c for c in resumed.calls if c.shape_key == first_shape)
    assert resumed_first.best_us == pytest.approx(min(before)), "the hint comes from the rows already stored"
    for call in resumed.calls:
        if call.kind != "candidate" or call.shape_key == first_shape:
            continue
        earlier = [deterministic_result(c)["median_us"] for c in resumed.calls
                   if c.shape_key == call.shape_key and c.kind == "candidate" and c is not call
                   and resumed.calls.index(c) < resumed.calls.index(call)
                   and deterministic_result(c)["status"] == "ok"]
        assert call.best_us == (min(earlier) if earlier else None)


def test_progress_counts_items_already_done_first(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = planned()
    calls = iter(range(1000))
    Sweep(engine, GPU, ENV, "cold", candidates).run(Recorder(), items, should_stop=lambda: next(calls) >= 5)
    seen = []
    summary = Sweep(engine, GPU, ENV, "cold", candidates).run(
        [Recorder(), Recorder()], items, progress=lambda item, result: seen.append(result is None))
    assert seen[:5] == [True] * 5 and seen.count(True) == 5 == summary.skipped_existing
    assert len(seen) == len(items)


def test_a_worker_fault_on_one_gpu_leaves_the_other_gpu_and_the_sweep_going(tmp_path, monkeypatch):
    monkeypatch.setenv(ITEM_PAUSE_ENV, "0.02")  # read by the worker processes: both get groups
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = planned()
    faulting = {items[2].identity}  # one candidate of the first shape kills its worker

    class Faulty(WorkerRunner):
        def measure(self, item):
            if item.identity in faulting:
                item = type(item)(**{**item.as_dict(), "variant": "segfault"})
            return super().measure(item)

    runners = [Faulty(index, "cold", item_timeout_s=30, measurer_factory="tests.autotuner.fakes:FaultyMeasurer")
               for index in (0, 1)]
    try:
        summary = Sweep(engine, GPU, ENV, "cold", candidates).run(runners, items)
    finally:
        for runner in runners:
            runner.close()
    assert summary.measured == len(items) and summary.by_status.get("fault") == 1
    assert sum(r.restarts for r in runners) == 1
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Measurement)) == len(items) - len(SHAPES)
        assert session.scalar(select(func.count()).select_from(CopyReference)) == len(SHAPES)
        pids = {e for e in session.scalars(select(Measurement.error).where(Measurement.status == "ok"))}
        assert len(pids) >= 3, "two workers, one of them replaced"
        assert session.scalars(select(SweepRun.status)).one() == "finished"


def test_two_sweeps_on_one_database_split_the_work_without_duplicates(tmp_path):
    """Two sweeper objects (as two processes or hosts would be) running at once on one file."""
    run_two_sweeps_at_once(str(tmp_path / "t.sqlite"), GPU)


def run_two_sweeps_at_once(url: str, gpu) -> list:  # noqa: ANN001
    """Two Sweep objects on one database, started together in threads: both measure, every item is
    measured once, no row is duplicated. Returns the sweeps (their engines are the caller's to dispose)."""
    candidates, items = planned()
    barrier = threading.Barrier(2)
    runners = [Recorder(barrier), Recorder(barrier)]
    sweeps = [Sweep(make_engine(url), gpu, ENV, "cold", candidates) for _ in range(2)]
    threads = [threading.Thread(target=s.run, args=(r, items)) for s, r in zip(sweeps, runners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(r.calls for r in runners)
    assert sorted(c.identity for r in runners for c in r.calls) == sorted(i.identity for i in items)
    found = rows(sweeps[0].engine)
    assert len(found) == len(set(r[:4] for r in found)) == len(items) - len(SHAPES)
    return sweeps


def test_child_device_indices_follow_the_parents_visible_devices():
    assert visible_device(1, None) == "1"
    assert visible_device(1, "2,3") == "3"
    assert visible_device(0, "GPU-abc,GPU-def") == "GPU-abc"
    with pytest.raises(ValueError, match="not visible"):
        visible_device(2, "2,3")


@pytest.mark.skipif(not os.environ.get("AUTOTUNER_TEST_POSTGRES_URL"),
                    reason="no PostgreSQL server: AUTOTUNER_TEST_POSTGRES_URL is unset (scripts/test.sh starts one)")
def test_two_sweeps_on_postgresql_split_the_work_without_duplicates():
    import uuid

    from sqlalchemy import create_engine, text

    url = os.environ["AUTOTUNER_TEST_POSTGRES_URL"]
    schema = f"t_{uuid.uuid4().hex[:10]}"
    raw = create_engine(url)
    with raw.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        scoped = f"{url}?options=-csearch_path%3D{schema}"
        # memory_bytes left out: gpu_models.memory_bytes is a 32-bit column on PostgreSQL (see
        # tests/db/test_postgres_limits.py), which this test is not about.
        sweeps = run_two_sweeps_at_once(scoped, GPU._replace(memory_bytes=None))
        for sweep in sweeps:
            sweep.engine.dispose()
    finally:
        with raw.begin() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        raw.dispose()


def open_at(path: str, start: float) -> str:
    """Open (and so create) the database at a given moment, as sweeps started together do."""
    import time

    from autotuner.tune.parallel import open_shared_database

    while time.time() < start:
        pass
    open_shared_database(path).dispose()
    return "ok"


def test_sweeps_started_together_on_a_new_file_all_open_it(tmp_path):
    import multiprocessing as mp
    import time
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(4, mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(abs, range(4)))  # workers up before the race starts
        for attempt in range(4):
            path, start = str(tmp_path / f"new-{attempt}.sqlite"), time.time() + 0.5
            assert [f.result(60) for f in [pool.submit(open_at, path, start) for _ in range(4)]] == ["ok"] * 4
