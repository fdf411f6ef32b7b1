"""``autotuner confirm`` (autotuner/fit/confirm.py): what it measures, how its results are stored (a run of
this host marked as a confirmation, a source of its own), and how it judges each changed answer, on the
CPU with replayed measurements; then the real command on a GPU (``gpu`` marker)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from autotuner.fit import confirm
from autotuner.fit.evidence import CurrentCode, Source, readings_of_rows, reconcile
from autotuner.fit.guard import Change
from autotuner.lookup.gpu import GpuInfo
from autotuner.tune.measure import WorkItem
from db import queries
from db.engine import make_engine
from db.models import Measurement, SweepRun
from tests.autotuner.fakes import ReplayMeasurer

TODAY, NEW = ("torch_softmax", ""), ("cuda_warp_row", "block=128,lanes=32,elems=32")
ENVIRONMENT = {"fingerprint": "fp-confirm", "torch": "2.11"}


def pending(*changes: tuple[int, int], unreproduced=()) -> confirm.Pending:
    return confirm.Pending("bf16", [Change(m, n, TODAY, NEW, None) for m, n in changes], list(unreproduced), "today's")


def test_the_plan_times_both_picks_of_each_change_once_and_rechecks_lone_failures():
    failure = SimpleNamespace(m=8, n=1024, variant="cuda_block_online", config_key="block=256,items=4")
    items, skipped = confirm.plan([pending((1, 1024), (4, 1024)), pending((1, 1024), unreproduced=[failure])])
    assert [(i.m, i.n, i.variant) for i in items] == [(1, 1024, "torch_softmax"), (1, 1024, "cuda_warp_row"),
                                                      (4, 1024, "torch_softmax"), (4, 1024, "cuda_warp_row"),
                                                      (8, 1024, "cuda_block_online")]
    assert not skipped
    items, skipped = confirm.plan([pending((1, 1024))], runnable=lambda name: name != "cuda_warp_row")
    assert [i.variant for i in items] == ["torch_softmax"] and skipped == ["cuda_warp_row at 1x1024 bf16"]


def result(median: float | None, status: str = "ok") -> dict:
    return {"status": status, "median_us": median, "p20_us": median and median * 0.98,
            "p80_us": median and median * 1.02, "repetitions": 20}


def test_a_change_is_confirmed_only_where_the_new_pick_is_not_slower_beyond_the_repeatability():
    entry = pending((1, 1024), (4, 1024), (16, 1024))
    results = {("candidate", 1, 1024, "bf16", *TODAY): result(10.0), ("candidate", 1, 1024, "bf16", *NEW): result(8.0),
               ("candidate", 4, 1024, "bf16", *TODAY): result(10.0), ("candidate", 4, 1024, "bf16", *NEW): result(13.0),
               ("candidate", 16, 1024, "bf16", *TODAY): result(10.0),
               ("candidate", 16, 1024, "bf16", *NEW): result(None, "wrong")}
    found = confirm.verdicts([entry], results)
    assert [(v.change.m, v.ratio, v.confirmed) for v in found] == [(1, 0.8, True), (4, 1.3, False), (16, None, False)]


def test_results_are_stored_as_a_confirmation_run_of_this_host(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    items = [WorkItem("candidate", 1, 1024, "bf16", *TODAY), WorkItem("candidate", 1, 1024, "bf16", *NEW)]
    runner = ReplayMeasurer({items[0].identity: result(10.0), items[1].identity: result(8.0)})
    seen = []
    run_id, results = confirm.record(engine, GpuInfo("h100", "NVIDIA H100 80GB HBM3"), ENVIRONMENT, "cold", items,
                                     runner, command="autotuner confirm", progress=lambda item, r: seen.append(item))
    assert seen == items and results[items[1].identity]["median_us"] == 8.0
    with Session(engine) as session:
        run = session.get(SweepRun, run_id)
        assert (run.grid["purpose"], run.uploader, run.status, run.command) == ("confirm", None, "finished", "autotuner confirm")
        rows = queries.measurements_for(session, "h100", "bf16", "cold")
        evidence = reconcile(readings_of_rows(rows, CurrentCode()))
    assert set(evidence.runs) == {Source("confirmation", f"run {run_id}")}
    price = evidence.price_change(1, 1024, TODAY, NEW)
    assert price.evidenced and price.ratio == pytest.approx(0.8)  # a confirmation alone moves an answer
    engine.dispose()


def test_a_confirmation_cut_short_keeps_what_it_measured(tmp_path):
    engine = make_engine(str(tmp_path / "t.sqlite"))
    items = [WorkItem("candidate", 1, 1024, "bf16", *TODAY), WorkItem("candidate", 1, 1024, "bf16", *NEW)]

    class Dying(ReplayMeasurer):
        def measure(self, item):  # noqa: ANN001, ANN201
            if self.calls:
                raise KeyboardInterrupt
            return super().measure(item)

    with pytest.raises(KeyboardInterrupt):
        confirm.record(engine, GpuInfo("h100", "NVIDIA H100 80GB HBM3"), ENVIRONMENT, "cold", items,
                       Dying({items[0].identity: result(10.0)}))
    with Session(engine) as session:
        assert session.scalars(select(SweepRun.status)).all() == ["interrupted"]
        assert session.scalars(select(Measurement.median_us)).all() == [10.0]
    engine.dispose()


@pytest.mark.gpu
def test_confirm_on_the_gpu_retimes_the_changes_a_refused_fit_would_make(tmp_path):
    """On a GPU: torch alone is swept and fitted; a second sweep of this host adds `cuda_warp_row`, whose
    gains the fit will not take on one source's word; `autotuner confirm` re-times both picks side by
    side, and the fit that follows reads that run as evidence of its own."""
    database = str(tmp_path / "t.sqlite")

    def autotuner(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "autotuner", *args, "--db", database], capture_output=True,
                              text=True, timeout=900, cwd=Path(__file__).resolve().parents[2])

    grid = ["--gpu", "auto", "--m", "1,64,4096", "--n", "256,1024", "--dtype", "bf16", "--time-cap", "0.05"]
    assert autotuner("sweep", *grid, "--variant", "torch_softmax").returncode == 0
    engine = make_engine(database)
    with Session(engine) as session:
        gpu = session.scalars(select(SweepRun)).first().gpu_model.key
    engine.dispose()
    assert autotuner("fit", "--gpu", gpu, "--dtype", "bf16", "--replace-worse").returncode == 0
    assert autotuner("sweep", *grid, "--variant", "cuda_warp_row").returncode == 0
    refused = autotuner("fit", "--gpu", gpu, "--dtype", "bf16")
    if refused.returncode == 0:
        pytest.skip(f"cuda_warp_row won nothing here by more than the repeatability: {refused.stdout}")
    assert "would move on one source's evidence" in " ".join((refused.stdout + refused.stderr).split())
    confirmed = autotuner("confirm", "--gpu", gpu, "--dtype", "bf16")
    assert confirmed.returncode == 0, confirmed.stdout + confirmed.stderr
    engine = make_engine(database)
    with Session(engine) as session:
        run = session.scalars(select(SweepRun).order_by(SweepRun.id.desc())).first()
        rows = session.scalars(select(Measurement).where(Measurement.run_id == run.id)).all()
        variants = {row.candidate.variant for row in rows}
    engine.dispose()
    assert run.grid["purpose"] == "confirm" and rows and all(row.status == "ok" and row.median_us for row in rows)
    assert variants == {"torch_softmax", "cuda_warp_row"}
    refit = autotuner("fit", "--gpu", gpu, "--dtype", "bf16")
    text = " ".join((refit.stdout + refit.stderr).split())
    assert refit.returncode == 0 or "would move on one source's evidence" not in text, text
    print(json.dumps({"confirm": confirmed.stdout[-2000:], "refit": text[-2000:]}))
