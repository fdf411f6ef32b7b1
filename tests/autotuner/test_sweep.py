"""Sweep logic on the CPU: planning, recording, idempotent resume, failure rows, budgets."""
from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotuner.lookup.gpu import GpuInfo
from autotuner.tune.measure import WorkItem, failure
from autotuner.tune.sweep import Sweep, plan
from db import CopyReference, Measurement, SweepRun, make_engine
from kernels.base import Build, KernelConfig, Variant
from tests.autotuner.fakes import ReplayMeasurer

GPU = GpuInfo("h100", "NVIDIA H100 80GB HBM3", 132, 50 * 2**20, 80 * 2**30, "9.0")
ENV = {"fingerprint": "env-1", "torch": "2.11", "triton": "3.6", "cupy": "14.2", "cuda": "13.0", "driver": "580", "python": "3.12"}


class SmallRows(Variant):
    name, backend, seed = "small_rows", "test", "test"

    def all_configs(self):
        return [KernelConfig.of(block=128), KernelConfig.of(block=256)]

    def constraints(self, config, dtype):
        return {"n_max": 4096}

    def build(self, config, dtype, n):  # never built: the replaying runner answers
        raise AssertionError("not built in CPU tests")


class AnyRows(SmallRows):
    name = "any_rows"

    def all_configs(self):
        return [KernelConfig.of(split=4)]

    def constraints(self, config, dtype):
        return {}


SHAPES = [(1, 1024, "fp32"), (64, 8192, "fp32"), (64, 1024, "bf16")]


def recorded_for(items):
    """A deterministic 'recording': time grows with n, block=256 fastest; one config fails."""
    table = {}
    for item in items:
        if item.kind == "copy":
            table[item.identity] = {"status": "ok", "median_us": item.n / 1000, "repetitions": 10}
        elif item.config_key == "split=4" and item.dtype == "bf16":
            table[item.identity] = failure("wrong", "2 element(s) outside tolerance")
        else:
            speed = {"block=128": 1.3, "block=256": 1.0, "split=4": 1.6}[item.config_key]
            table[item.identity] = {"status": "ok", "median_us": speed * item.n / 1000 * item.m ** 0.5,
                                    "p20_us": 1.0, "p80_us": 2.0, "repetitions": 20, "registers": 32}
    return table


def new_sweep(engine, candidates, method="cold"):
    return Sweep(engine, GPU, ENV, method, candidates, command="test")


def test_plan_skips_configs_that_cannot_apply_before_building():
    candidates, items = plan([SmallRows(), AnyRows()], SHAPES)
    kinds = [(i.kind, i.n, i.variant) for i in items]
    assert ("candidate", 8192, "small_rows") not in kinds  # n_max 4096
    assert ("candidate", 8192, "any_rows") in kinds
    assert sum(1 for i in items if i.kind == "copy") == len(SHAPES)
    assert {(c.variant, c.config_key) for c in candidates} == {
        ("small_rows", "block=128"), ("small_rows", "block=256"), ("any_rows", "split=4")}


def test_sweep_records_every_result_and_a_rerun_measures_nothing_again(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows(), AnyRows()], SHAPES)
    runner = ReplayMeasurer(recorded_for(items))
    first = new_sweep(engine, candidates).run(runner, items)
    assert first.measured == len(items) and first.by_status == {"ok": 9, "wrong": 1}  # 3 copies + 6 candidates
    calls = len(runner.calls)
    second = new_sweep(engine, candidates).run(runner, items)
    assert second.measured == 0 and second.skipped_existing == len(items)
    assert len(runner.calls) == calls
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Measurement)) == len(items) - len(SHAPES)
        assert session.scalar(select(func.count()).select_from(CopyReference)) == len(SHAPES)
        wrong = session.scalars(select(Measurement).where(Measurement.status == "wrong")).one()
        assert wrong.median_us is None and "outside tolerance" in wrong.error
        assert [r.status for r in session.scalars(select(SweepRun))] == ["finished", "finished"]


def test_interrupted_sweep_resumes_without_loss_or_duplicates(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows(), AnyRows()], SHAPES)
    runner = ReplayMeasurer(recorded_for(items))
    calls = iter(range(1000))
    cut = new_sweep(engine, candidates).run(runner, items, should_stop=lambda: next(calls) >= 4)
    assert cut.measured == 4
    resumed = new_sweep(engine, candidates).run(runner, items)
    assert resumed.skipped_existing == 4 and resumed.measured == len(items) - 4
    with Session(engine) as session:
        rows = session.execute(select(Measurement.candidate_id, Measurement.m, Measurement.n, Measurement.dtype)).all()
        assert len(rows) == len(set(rows)) == len(items) - len(SHAPES)
        assert session.scalars(select(SweepRun.status).order_by(SweepRun.id)).all() == ["interrupted", "finished"]


def test_another_timing_method_or_environment_is_measured_afresh(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows()], SHAPES[:1])
    runner = ReplayMeasurer(recorded_for(items))
    new_sweep(engine, candidates).run(runner, items)
    assert new_sweep(engine, candidates, method="warm").run(runner, items).measured == len(items)
    other_env = Sweep(engine, GPU, dict(ENV, fingerprint="env-2", torch="2.12"), "cold", candidates)
    assert other_env.run(runner, items).measured == len(items)


def test_the_best_time_so_far_is_passed_on_for_the_quick_drop(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows()], SHAPES[:1])
    runner = ReplayMeasurer(recorded_for(items))
    new_sweep(engine, candidates).run(runner, items)
    hints = [c.best_us for c in runner.calls if c.kind == "candidate"]
    assert hints[0] is None and hints[1] is not None


def test_budget_stops_the_run_and_marks_it_interrupted(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows(), AnyRows()], SHAPES)
    summary = new_sweep(engine, candidates).run(ReplayMeasurer(recorded_for(items)), items, budget_s=0.0)
    assert summary.measured == 0
    with Session(engine) as session:
        assert session.scalars(select(SweepRun.status)).one() == "interrupted"


def test_work_items_round_trip_through_the_worker_protocol():
    item = WorkItem("candidate", 4, 1000, "bf16", "v", "block=256", best_us=3.5)
    assert WorkItem(**item.as_dict()) == item


def test_retime_unstable_measures_only_disturbed_rows_again_and_keeps_both_rows(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows()], SHAPES[:1])
    recorded = recorded_for(items)
    disturbed = next(i for i in items if i.kind == "candidate" and i.config_key == "block=256")
    recorded[disturbed.identity] = dict(recorded[disturbed.identity], median_us=50.0, p20_us=1.0, p80_us=60.0)
    new_sweep(engine, candidates).run(ReplayMeasurer(recorded), items)
    # a plain rerun keeps the disturbed row; --retime-unstable 2 measures that one item again
    assert new_sweep(engine, candidates).run(ReplayMeasurer(recorded), items).measured == 0
    steady = {**recorded, disturbed.identity: recorded_for([disturbed])[disturbed.identity]}
    runner = ReplayMeasurer(steady)
    retimed = Sweep(engine, GPU, ENV, "cold", candidates, command="test", retime_spread=2.0).run(runner, items)
    assert [i.identity for i in runner.calls] == [disturbed.identity] and retimed.measured == 1
    # done now: a second retime run finds nothing disturbed
    again = Sweep(engine, GPU, ENV, "cold", candidates, command="test", retime_spread=2.0)
    assert again.run(ReplayMeasurer(steady), items).measured == 0
    with Session(engine) as session:  # fits read a host's newest row (evidence.reconcile)
        rows = session.execute(select(Measurement.run_id, Measurement.median_us)
                               .where(Measurement.m == 1, Measurement.median_us.is_not(None))
                               .order_by(Measurement.run_id)).all()
    retimed_rows = [median for run_id, median in rows if run_id == retimed.run_id]
    assert retimed_rows == [steady[disturbed.identity]["median_us"]] and 50.0 in [median for _, median in rows]


def test_retime_unstable_also_measures_a_steady_row_far_slower_than_a_larger_shape(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows()], [(1, 1024, "fp32"), (64, 4096, "fp32")])
    recorded = recorded_for(items)
    small = next(i for i in items if i.kind == "candidate" and i.config_key == "block=128" and i.m == 1)
    recorded[small.identity] = dict(recorded[small.identity], median_us=900.0, p20_us=880.0, p80_us=920.0)
    new_sweep(engine, candidates).run(ReplayMeasurer(recorded), items)
    runner = ReplayMeasurer({**recorded, small.identity: recorded_for([small])[small.identity]})
    Sweep(engine, GPU, ENV, "cold", candidates, command="test", retime_spread=2.0).run(runner, items)
    assert [i.identity for i in runner.calls] == [small.identity]


def test_recopy_measures_only_the_copy_references_again_and_reports_read_the_newest(tmp_path):
    from autotuner.report.bench import shape_reports

    engine = make_engine(str(tmp_path / "t.sqlite"))
    candidates, items = plan([SmallRows()], SHAPES[:2])
    recorded = recorded_for(items)
    new_sweep(engine, candidates).run(ReplayMeasurer(recorded), items)
    faster = {k: (dict(v, median_us=v["median_us"] / 2) if k[0] == "copy" else v) for k, v in recorded.items()}
    runner = ReplayMeasurer(faster)
    summary = Sweep(engine, GPU, ENV, "cold", candidates, command="test", recopy=True).run(runner, items)
    assert sorted(i.identity for i in runner.calls) == sorted(i.identity for i in items if i.kind == "copy")
    assert summary.measured == 2
    # a plain rerun afterwards measures nothing; the reports divide by the new copy times
    assert new_sweep(engine, candidates).run(ReplayMeasurer(faster), items).measured == 0
    with Session(engine) as session:
        copies = {(r.m, r.n): r.copy_us for r in shape_reports(session, "h100")}  # shapes with a kernel
        assert session.scalar(select(func.count()).select_from(CopyReference)) == 4
    assert copies == {(1, 1024): 1024 / 1000 / 2}
