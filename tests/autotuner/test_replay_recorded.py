"""Fit, lookup and sweep logic replayed on a real sweep recorded on a GPU (tests/data/*_sweep.json.gz,
written by `autotuner export` on the lent H100/H200; docs/RESULTS_<GPU>.md lists its runs)."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from autotuner.report.evaluate import ODD_M_SET_M, ODD_M_SET_N
from autotuner.records.exchange import import_runs
from autotuner.fit.fit import fit_table
from autotuner.tune.measure import WorkItem
from autotuner.lookup.select import TableStore
from autotuner.tune.sweep import Candidate, Sweep
from autotuner.lookup.table import DispatchTable
from db import CandidateRow, GpuModel, Measurement, make_engine
from kernels import KernelConfig, get_variant
from tests.autotuner.fakes import ReplayMeasurer

DATA = sorted((Path(__file__).parents[1] / "data").glob("*_sweep.json.gz"))
pytestmark = pytest.mark.skipif(not DATA, reason="no recorded sweep under tests/data")
UNMEASURED = [(3, 5000), (77, 50000), (2000, 100000), (6000, 1500), (1, 200000), (500, 12345)]
BELOW_MEASURED_N = [(6000, 1000), (16384, 64)]  # shorter rows than any measured: torch_softmax


@pytest.fixture(scope="module", params=DATA, ids=lambda path: path.name.split("_")[0])
def recorded(request, tmp_path_factory):
    """(engine, gpu, dtypes) of one recording (each test runs once per recorded GPU); the held-out
    recording of the same GPU, if any, is tests/data/<gpu>_heldout.json.gz."""
    engine = make_engine(str(tmp_path_factory.mktemp("replay") / "recorded.sqlite"))
    engine.held_out_path = request.param.with_name(request.param.name.replace("_sweep", "_heldout"))
    with gzip.open(request.param, "rt") as handle, Session(engine) as session, session.begin():
        import_runs(session, handle.read())
    with Session(engine) as session:
        gpu = session.scalars(select(GpuModel.key)).first()
        dtypes = sorted(set(session.scalars(select(Measurement.dtype))))
    return engine, gpu, dtypes


@pytest.fixture(scope="module")
def fitted(recorded):
    engine, gpu, dtypes = recorded
    with Session(engine) as session, session.begin():
        return {dtype: fit_table(session, gpu, dtype) for dtype in dtypes}


@pytest.fixture(scope="module")
def default_rule_regret(recorded):
    """Leave-one-out regret of fit's default rule per dtype, on the recording as recorded (``any_source``:
    the kernels' sources may have moved on since): what the rule comparisons below hold against."""
    engine, gpu, dtypes = recorded
    with Session(engine) as session:
        return {dtype: fit_table(session, gpu, dtype, any_source=True, save=False, with_index=False)["regret"]
                for dtype in dtypes}


def test_every_dtype_gets_a_table_with_cross_validated_regret(fitted):
    for dtype, document in fitted.items():
        regret = document["regret"]
        assert regret["shapes"] == len(document["points"]) >= 24, dtype
        assert 1.0 <= regret["geomean"] <= regret["p95"] <= regret["max"]
        assert document["candidates"], dtype


def test_fit_writes_each_table_beside_the_database_for_the_lookup(fitted, recorded):
    """The lookup reads these files without SQLAlchemy (autotuner/__init__.py); the database stays
    the source of truth, and the files hold its current tables, the folder marked complete."""
    from autotuner.lookup.select import load_table_files
    from db.location import mirrored_table_files, tables_folder

    engine, gpu, _ = recorded
    files = mirrored_table_files(engine.url.render_as_string())
    assert files is not None, "the folder of a database made by make_engine is marked complete"
    tables = load_table_files(files)
    assert {t.key for t in tables} == {(gpu, dtype, "cold") for dtype in fitted}
    assert tables_folder(Path(engine.url.database)).parent == Path(engine.url.database).parent
    for table in tables:
        assert table.document == fitted[table.dtype]


def test_tables_choose_runnable_kernels_for_shapes_never_measured(fitted, recorded):
    _, gpu, _ = recorded
    store = TableStore(DispatchTable(doc) for doc in fitted.values())
    for dtype, document in fitted.items():
        measured = {(p["m"], p["n"]) for p in document["points"]}
        for m, n in UNMEASURED:
            assert (m, n) not in measured
            choice = store.select(m, n, dtype, gpu, allow_fallback=False)
            assert choice.source == "table" and choice.predicted_us and choice.predicted_us > 0
            variant = get_variant(choice.variant)
            assert variant.supports(m, n, dtype, KernelConfig.from_dict(choice.config)), (choice, m, n)
        for m, n in BELOW_MEASURED_N:
            choice = store.select(m, n, dtype, gpu, allow_fallback=False)
            assert (choice.variant, choice.source) == ("torch_softmax", "fallback") and "outside" in choice.reason


def test_local_regret_beats_interpolated_times_out_of_sample(recorded, default_rule_regret):
    """Leave-one-out regret of fit's default rule and of interp-log on the recording as recorded
    (``any_source``: the kernels' sources may have moved on since); measured when the rule was
    chosen (local-regret-clamped geomean 1.021-1.049, p95 1.08-1.12; interp-log 1.04-1.10 and
    1.17-1.40)."""
    engine, gpu, dtypes = recorded
    with Session(engine) as session:
        for dtype in dtypes:
            new = default_rule_regret[dtype]
            old = fit_table(session, gpu, dtype, rule="interp-log", any_source=True, save=False, with_index=False)["regret"]
            assert new["geomean"] < old["geomean"] and new["p95"] < old["p95"], (dtype, new, old)
            # loose; test_clamped_rule_beats_the_previous_one_out_of_sample bounds the geomean closer
            assert new["geomean"] <= 1.08 and new["p95"] <= 1.13, (dtype, new)


def test_clamped_rule_beats_the_previous_one_out_of_sample(recorded, default_rule_regret):
    """Leave-one-out regret of fit's default rule (local-regret-clamped) against the previous one
    (local-regret), both with the default 3 % prune margin, on the recording as recorded: a max no
    higher on every dtype of both GPUs, a geomean never higher by more than 0.1 % per dtype nor over
    the dtypes together (on the recordings the rule was chosen on:
    in the sixth session's H100 fp16 tied at 1.0101 against 1.0097 while its max fell from 1.16 to
    1.07; in the seventh's, with rows M = 2 and 8 and six more cluster configs, the H100's dtypes tie
    together, +0.02 %, while bf16's max falls from 1.100 to 1.081; with every row, stale sources
    included, as here). The H100 bound is issue 5's leave-one-out target."""
    engine, gpu, dtypes = recorded
    log_ratio = 0.0
    with Session(engine) as session:
        for dtype in dtypes:
            new = default_rule_regret[dtype]
            old = fit_table(session, gpu, dtype, rule="local-regret", any_source=True, save=False, with_index=False)["regret"]
            assert new["max"] <= old["max"] and new["geomean"] <= old["geomean"] * 1.001, (dtype, new, old)
            assert new["geomean"] <= (1.02 if gpu == "h100" else 1.05), (dtype, new)
            log_ratio += math.log(new["geomean"] / old["geomean"])
    assert log_ratio < math.log(1.001), log_ratio


def test_measured_shapes_answer_with_their_measured_winner(fitted):
    for document in fitted.values():
        table = DispatchTable(document)
        for point in document["points"][:20]:
            pick = table.lookup(point["m"], point["n"])
            best = min(t for t in point["times"] if t is not None)
            assert pick.exact and point["times"][pick.candidate] == best


SPECIAL_SHAPE_STRIDE = 6  # of the shapes with a failed row, and of those with a re-timed row: one in 6
ORDINARY_SHAPE_STRIDE = 12  # of the other shapes: one in 12


def replay_sample(rows: list) -> list:
    """The rows of the shapes the replay covers, whole shapes (a sweep treats a shape's candidates
    together), taken in sorted order: one in SPECIAL_SHAPE_STRIDE of the shapes with a row that is not
    ok and of those with a re-timed (candidate, shape), one in ORDINARY_SHAPE_STRIDE of the rest.
    About an eighth of a recording's rows, 40-50 shapes; replaying all 25,000 rows had cost 190-240 s
    of the CPU suite per recording."""
    identities: dict[tuple, int] = {}
    failed, retimed = set(), set()
    for measurement, candidate in rows:
        shape = (measurement.m, measurement.n, measurement.dtype)
        identity = (candidate.id, *shape)
        identities[identity] = identities.get(identity, 0) + 1
        if measurement.status != "ok":
            failed.add(shape)
        if identities[identity] > 1:
            retimed.add(shape)
    ordinary = sorted({(m.m, m.n, m.dtype) for m, _ in rows} - failed - retimed)
    chosen = (set(sorted(failed)[::SPECIAL_SHAPE_STRIDE]) | set(sorted(retimed - failed)[::SPECIAL_SHAPE_STRIDE])
              | set(ordinary[::ORDINARY_SHAPE_STRIDE]))
    return [(m, c) for m, c in rows if (m.m, m.n, m.dtype) in chosen]


def test_replaying_the_recording_through_a_sweep_reproduces_its_rows(recorded, tmp_path):
    """Every (candidate, shape) of the shapes sampled from the recording (``replay_sample``: every
    failure and every re-timed row among them), replayed through a fresh sweep, gives the same row;
    where a later run re-timed a disturbed row (sweep --retime-unstable), the newest row counts."""
    engine, gpu_key, _ = recorded
    with Session(engine) as session:
        every_row = session.execute(select(Measurement, CandidateRow).join(CandidateRow)
                                    .order_by(Measurement.run_id, Measurement.id)).all()
        gpu = session.scalars(select(GpuModel)).first()
    rows = replay_sample(every_row)
    assert {m.status for m, _ in rows} == {m.status for m, _ in every_row}  # failures replayed too
    identities = [(c.id, m.m, m.n, m.dtype) for m, c in rows]
    assert len(set(identities)) < len(identities)  # and re-timed rows, whose newest must win
    assert len({(m.m, m.n, m.dtype) for m, _ in rows}) >= 30
    recording, items, candidates = {}, [], {}
    for measurement, candidate in rows:
        item = WorkItem("candidate", measurement.m, measurement.n, measurement.dtype, candidate.variant, candidate.config_key)
        fields = {k: getattr(measurement, k) for k in ("status", "median_us", "p20_us", "p80_us", "repetitions", "error")}
        recording[item.identity] = fields  # rows in run order: the newest stays
        items.append(item)
        candidates[(candidate.variant, candidate.config_key)] = Candidate(candidate.variant, candidate.config_key,
                                                                         dict(candidate.config), candidate.source_hash)
    from autotuner.lookup.gpu import GpuInfo

    items = list({item.identity: item for item in items}.values())
    replay_engine = make_engine(str(tmp_path / "replay.sqlite"))
    sweep = Sweep(replay_engine, GpuInfo(gpu_key, gpu.name), {"fingerprint": "replay"}, "cold", list(candidates.values()))
    summary = sweep.run(ReplayMeasurer(recording), items)
    assert summary.measured == len(items)
    with Session(replay_engine) as session:
        replayed = {(c.variant, c.config_key, m.m, m.n, m.dtype): (m.status, m.median_us)
                    for m, c in session.execute(select(Measurement, CandidateRow).join(CandidateRow))}
    original = {(c.variant, c.config_key, m.m, m.n, m.dtype): (m.status, m.median_us) for m, c in rows}
    assert replayed == original


def test_quick_drop_never_dropped_a_shapes_winner(recorded):
    """The winner of every shape got a full timing (more repetitions than the quick estimate)."""
    from autotuner.tune.measure import QUICK_REPS

    engine, _, _ = recorded
    best: dict[tuple, Measurement] = {}
    with Session(engine) as session:
        for measurement in session.scalars(select(Measurement).where(Measurement.status == "ok")):
            key = (measurement.m, measurement.n, measurement.dtype)
            if key not in best or measurement.median_us < best[key].median_us:
                best[key] = measurement
    assert best and all(m.repetitions > QUICK_REPS for m in best.values())
    assert all(math.isfinite(m.median_us) for m in best.values())


def test_held_out_shapes_recorded_on_the_gpu_score_the_fitted_tables(recorded, fitted, tmp_path):
    """Held-out runs (off-grid M and N, tests/data/<gpu>_heldout.json.gz) never feed the fit and
    score it: every dtype is answered on every held-out shape with modest regret (12 shapes per
    dtype on both GPUs; the H100's recording adds 28 odd-M shapes, M 6-600 x N 16384-151936)."""
    from autotuner.report.evaluate import held_out_scores

    engine, _, _ = recorded
    held_out = engine.held_out_path
    if not held_out.exists():
        pytest.skip(f"no held-out recording {held_out.name}")
    with gzip.open(held_out, "rt") as handle, Session(engine) as session, session.begin():
        import_runs(session, handle.read())
    with Session(engine) as session, session.begin():  # the rule's inputs alone: the index is fitted's
        refit = {dtype: fit_table(session, recorded[1], dtype, save=False, with_index=False) for dtype in fitted}
    for dtype, inputs in refit.items():
        assert [p for p in inputs["points"] if (p["m"], p["n"]) == (2000, 12000)] == []  # not fitted on
        document = fitted[dtype]  # and the held-out rows changed nothing the fit reads
        assert (inputs["points"], inputs["candidates"]) == (document["points"], document["candidates"]), dtype
        with Session(engine) as session:
            scores = held_out_scores(session, DispatchTable(document))
        assert scores["shapes"] in (12, 40) and scores["misses"] == 0, (dtype, scores["shapes"])
        # worst recorded: H100 fp32 2000x2500, 1.36 (2026-11-25)
        assert scores["geomean"] < 1.08 and scores["max"] < 1.4, (dtype, scores["geomean"], scores["max"])
        odd_m = [d["regret"] for d in scores["shapes_detail"] if d["m"] in ODD_M_SET_M]
        if odd_m:  # batch sizes off the grid: 1.008-1.011 geomean, max 1.07 recorded (2026-11-25)
            assert math.exp(sum(map(math.log, odd_m)) / len(odd_m)) < 1.03 and max(odd_m) < 1.15, (dtype, odd_m)
            with Session(engine) as session:  # one set alone (evaluate --set): only its shapes are scored
                only = held_out_scores(session, DispatchTable(document),
                                       only={(m, n) for m in ODD_M_SET_M for n in ODD_M_SET_N})
            assert only["shapes"] == len(odd_m) and {d["m"] for d in only["shapes_detail"]} <= set(ODD_M_SET_M)
