"""The sweep's strategy seam on the CPU, replaying the recorded H100 sweep: the domain lattice's coverage,
refinement where neighbouring winners disagree (or a model errs), the budget, resume, and the cost
estimate the default domain sweep is built on."""
from __future__ import annotations

import datetime
import gzip
import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from autotuner.tune import sampling
from autotuner.lookup.gpu import GpuInfo
from autotuner.report.heldout import all_held_out_shapes
from autotuner.tune.measure import WorkItem
from autotuner.tune.strategy import (DomainStrategy, FixedGrid, is_ours, midpoint, observations, peer_lead,
                                     prediction_error, run_strategy, winner_or_peer_regret, winner_regret)
from autotuner.tune.sweep import Candidate, Sweep, plan
from db import make_engine
from kernels import all_variants
from kernels.base import DTYPE_BYTES, DTYPES
from tests.autotuner.fakes import ReplayMeasurer
from tests.autotuner.recording import load_recording

DATA = Path(__file__).resolve().parents[1] / "data"
H100_SWEEP = DATA / "h100_sweep.json.gz"
# the default domain sweep, recorded from an empty database (bench/data: not replayed by other tests)
DOMAIN_SWEEP = Path(__file__).resolve().parents[2] / "bench" / "data" / "domain_sweep_h100.json.gz"
GPU = GpuInfo("h100", "NVIDIA H100 80GB HBM3", 132, 50 * 2**20, 80 * 2**30, "9.0")
ENV = {"fingerprint": "env-replay", "torch": "2.11", "triton": "3.6", "cupy": "14.2", "cuda": "13.0", "driver": "580",
       "python": "3.12"}
# A coarse lattice inside the recorded grid whose midpoints (and theirs) are recorded shapes too.
REPLAY_M = (1, 16, 1024, 16384)
REPLAY_N = (1024, 16384, 262144)


@pytest.fixture(scope="module")
def recorded() -> dict[tuple, dict]:
    """Work item identity -> the newest recorded ok result, from the H100 recording (copies made up:
    the strategy never reads them)."""
    results: dict[tuple, dict] = {}
    for (_run, m, n, dtype), timings in sorted(load_recording(H100_SWEEP).items()):
        results[("copy", m, n, dtype, "", "")] = {"status": "ok", "median_us": 1.0, "p20_us": 1.0, "p80_us": 1.0}
        for timed in timings:
            variant, config_key = timed.candidate[:-1].split("[", 1)
            results[("candidate", m, n, dtype, variant, config_key)] = {
                "status": "ok", "median_us": timed.median_us, "p20_us": timed.p20_us, "p80_us": timed.p80_us,
                "repetitions": timed.repetitions}
    return results


def replay_plan(recorded: dict[tuple, dict]):  # noqa: ANN202 - (candidates, plan_items)
    """Candidates and a planner over what the recording holds: a shape's copy and its recorded candidates
    (a shape the recording lacks gets only its copy, which fails to replay, like an unsupported shape)."""
    by_shape: dict[tuple, list[tuple[str, str]]] = {}
    for kind, m, n, dtype, variant, config_key in recorded:
        if kind == "candidate":
            by_shape.setdefault((m, n, dtype), []).append((variant, config_key))
    names = sorted({pair for pairs in by_shape.values() for pair in pairs})
    candidates = [Candidate(variant, key, {"key": key}, "recorded") for variant, key in names]

    def plan_items(shapes: list[tuple]) -> list[WorkItem]:
        items = []
        for shape in shapes:
            items.append(WorkItem("copy", *shape))
            items += [WorkItem("candidate", *shape, v, k) for v, k in sorted(by_shape.get(shape, []))]
        return items

    return candidates, plan_items


def replay_strategy(dtypes=("fp32", "bf16")) -> DomainStrategy:  # noqa: ANN001
    return DomainStrategy(coarse=sampling.coarse_shapes(dtypes, REPLAY_M, REPLAY_N))


def new_sweep(db: Path, candidates) -> Sweep:  # noqa: ANN001
    return Sweep(make_engine(str(db)), GPU, ENV, "cold", candidates, grid={"strategy": "domain"})


class SlowReplay(ReplayMeasurer):
    def __init__(self, recorded: dict, pause_s: float):
        super().__init__(recorded)
        self.pause_s = pause_s

    def measure(self, item: WorkItem) -> dict:
        time.sleep(self.pause_s)
        return super().measure(item)


# --- the domain and its coarse lattice ------------------------------------------------------------

def test_coarse_lattice_reaches_every_corner_of_the_domain():
    lattice = sampling.coarse_shapes()
    for dtype in DTYPES:
        mine = {(m, n) for m, n, d in lattice if d == dtype}
        assert (1, 1) in mine and (1, sampling.DOMAIN_N_MAX) in mine and (sampling.DOMAIN_M_MAX, 1) in mine
        widest_at_max_m = max(n for m, n in mine if m == sampling.DOMAIN_M_MAX)
        next_n = min(n for n in sampling.COARSE_N if n > widest_at_max_m)
        assert sampling.DOMAIN_M_MAX * next_n * DTYPE_BYTES[dtype] > sampling.SWEEP_MAX_TENSOR_BYTES  # capped, not skipped
        tallest_at_max_n = max(m for m, n in mine if n == sampling.DOMAIN_N_MAX)
        next_m = min(m for m in sampling.COARSE_M if m > tallest_at_max_n)
        assert next_m * sampling.DOMAIN_N_MAX * DTYPE_BYTES[dtype] > sampling.SWEEP_MAX_TENSOR_BYTES
    assert all(m * n * DTYPE_BYTES[d] <= sampling.SWEEP_MAX_TENSOR_BYTES for m, n, d in lattice)
    assert sampling.DOMAIN_M_MAX >= 2**20 and sampling.DOMAIN_N_MAX >= 2**24


def test_coarse_lattice_holds_odd_sizes_and_is_log_spaced():
    def power_of_two(value: int) -> bool:
        return value & (value - 1) == 0

    assert [n for n in sampling.COARSE_N if n % 2 == 1 and n > 1] and [m for m in sampling.COARSE_M if m % 2 == 1 and m > 1]
    assert [n for n in sampling.COARSE_N if not power_of_two(n)] and [m for m in sampling.COARSE_M if not power_of_two(m)]
    for axis in (sampling.COARSE_M, sampling.COARSE_N):
        ratios = [b / a for a, b in zip(axis, axis[1:])]
        assert all(2 <= r <= 32 for r in ratios), ratios


@pytest.mark.parametrize("recording, fixed_s, per_gib_s", [
    (H100_SWEEP, sampling.ITEM_SECONDS, sampling.ITEM_SECONDS_PER_GIB),
    (DOMAIN_SWEEP, sampling.DOMAIN_ITEM_SECONDS, sampling.DOMAIN_ITEM_SECONDS_PER_GIB),
])
def test_item_cost_model_matches_the_recorded_h100_sweep(recording, fixed_s, per_gib_s):
    """The per-item wall time the estimate uses is what the recording's commit times give (the classic
    grid's sweeps; the default domain sweep's)."""
    document = json.load(gzip.open(recording, "rt"))
    sizes, gaps = [], []
    for run in document["runs"]:
        rows = sorted((r["created_at"], r["m"] * r["n"] * DTYPE_BYTES[r["dtype"]]) for r in run["measurements"])
        if len(rows) <= 1000:
            continue
        stamps = [datetime.datetime.fromisoformat(at.rstrip("Z")) for at, _ in rows]
        for k in range(1, len(rows)):
            sizes.append(rows[k][1] / 2**30)
            gaps.append((stamps[k] - stamps[k - 1]).total_seconds())
    a = np.vstack([np.ones(len(sizes)), sizes]).T
    fixed, per_gib = np.linalg.lstsq(a, np.array(gaps), rcond=None)[0]
    assert fixed == pytest.approx(fixed_s, rel=0.02)
    assert per_gib == pytest.approx(per_gib_s, rel=0.02)


def test_the_domain_estimate_is_within_15_percent_of_the_recorded_default_sweep():
    """Its items priced by the domain model against the wall time the two runs took (their timestamps)."""
    document = json.load(gzip.open(DOMAIN_SWEEP, "rt"))
    items = [SimpleNamespace(m=r["m"], n=r["n"], dtype=r["dtype"]) for run in document["runs"]
             for r in run["measurements"] + run["copy_references"]]
    took = sum((datetime.datetime.fromisoformat(run["finished_at"].rstrip("Z"))
                - datetime.datetime.fromisoformat(run["started_at"].rstrip("Z"))).total_seconds()
               for run in document["runs"])
    assert sampling.estimate_seconds(items, "domain") == pytest.approx(took, rel=0.15)


def test_default_domain_sweep_is_estimated_within_30_minutes_with_margin():
    """The coarse lattice (every registered variant, 3 dtypes) is estimated well inside the default budget,
    which bounds the whole sweep (refinement included) at 25 of the 30 minutes allowed."""
    _, items = plan(all_variants(), sampling.coarse_shapes())
    coarse_s = sampling.estimate_seconds(items, "domain")
    assert coarse_s <= 0.75 * sampling.DEFAULT_DOMAIN_BUDGET_S, coarse_s / 60
    assert sampling.DEFAULT_DOMAIN_BUDGET_S <= 25 * 60


# --- refinement -----------------------------------------------------------------------------------

def test_midpoints_halve_the_log_gap_and_stop_at_close_neighbours():
    assert midpoint(16, 256) == 64 and midpoint(1024, 2048) == 1448 and midpoint(1, 7) == 3
    assert midpoint(64, 72) is None and midpoint(1, 1) is None


def test_winner_regret_is_zero_for_one_winner_and_infinite_across_a_boundary():
    a, b = (1, 1024, "fp32"), (1, 2048, "fp32")
    assert winner_regret(a, {"x": 1.0, "y": 2.0}, b, {"x": 2.0, "y": 3.0}) == 0
    assert winner_regret(a, {"x": 1.0, "y": 1.2}, b, {"x": 2.0, "y": 1.0}) == pytest.approx(1.0)
    assert winner_regret(a, {"x": 1.0}, b, {"y": 1.0}) == math.inf


def test_refinement_picks_the_cells_whose_recorded_winners_disagree(tmp_path, recorded):
    candidates, plan_items = replay_plan(recorded)
    sweep = new_sweep(tmp_path / "r.sqlite", candidates)
    strategy = replay_strategy()
    sweep.run(ReplayMeasurer(recorded), plan_items(strategy.next_shapes({})))
    seen = observations(sweep)
    winner = {shape: min(times, key=times.get) for shape, times in seen.items()}
    proposed = strategy.refinements(seen)
    assert proposed, "the recorded H100 grid has disagreeing neighbours"
    pairs = strategy.neighbours()
    agreeing = [(a, b) for a, b in pairs if winner_regret(a, seen[a], b, seen[b]) <= strategy.threshold]
    assert agreeing, "some neighbours agree"
    for a, b in agreeing:  # no shape between agreeing neighbours, unless another pair asked for it
        between = strategy._between(a, b)
        asked = [p for p in pairs if strategy._between(*p) == between and p not in agreeing]
        assert between not in proposed or asked
    for shape in proposed:
        split = [(a, b) for a, b in pairs if strategy._between(a, b) == shape]
        assert any(winner[a] != winner[b] for a, b in split), shape
    errors = [max(winner_regret(a, seen[a], b, seen[b]) for a, b in pairs if strategy._between(a, b) == s)
              for s in proposed]
    assert errors == sorted(errors, reverse=True)  # most telling first: a budget cuts the least


def test_refinement_follows_a_models_error(tmp_path, recorded):
    """With ``prediction_error``, refinement goes where the model picks badly, also between neighbours
    with the same winner."""
    candidates, plan_items = replay_plan(recorded)
    sweep = new_sweep(tmp_path / "r.sqlite", candidates)
    coarse = sampling.coarse_shapes(("fp32",), REPLAY_M, REPLAY_N)
    sweep.run(ReplayMeasurer(recorded), plan_items(coarse))
    seen = observations(sweep)
    bad = (1024, 16384, "fp32")
    slowest = max(seen[bad], key=seen[bad].get)

    def predict(m: int, n: int, dtype: str):  # noqa: ANN202 - the measured winner, except at ``bad``
        times = seen[(m, n, dtype)]
        pick = slowest if (m, n, dtype) == bad else min(times, key=times.get)
        return pick, times[pick]

    strategy = DomainStrategy(coarse=coarse, error=prediction_error(predict))
    strategy.next_shapes(seen)
    proposed = set(strategy.refinements(seen))
    assert proposed == {(1024, 4096, "fp32"), (1024, 65536, "fp32"), (128, 16384, "fp32"), (4096, 16384, "fp32")}


def test_peer_lead_counts_only_a_peer_faster_than_every_candidate_of_ours():
    assert is_ours("cuda_warp_row[block=128]") and is_ours("triton_one_row[num_warps=1]")
    assert not is_ours("torch_softmax[]") and not is_ours("liger_softmax[]") and not is_ours("quack_softmax[]")
    times = {"cuda_warp_row[a]": 5.0, "triton_one_row[b]": 4.4, "liger_softmax[]": 4.0, "torch_softmax[]": 6.0}
    assert peer_lead(times) == pytest.approx(0.1)
    assert peer_lead({**times, "cuda_short_rows[c]": 3.9}) == 0.0
    assert peer_lead({"torch_softmax[]": 1.0}) == 0.0 and peer_lead({"cuda_warp_row[a]": 1.0}) == 0.0


def test_peer_aware_refinement_also_splits_where_a_recorded_peer_beats_ours():
    """The default domain sweep's coarse lattice as recorded on the H100 (bench/data, real torch and Liger
    times beside ours): with ``winner_or_peer_regret`` the refinement asks every shape the winners' rule
    asks, and more, each of them next to a point where a peer beat every candidate of ours by > 3 %
    (e.g. M = 2^20 x N = 1, where torch took 6.9 us and ours 27.8 on fp16)."""
    seen: dict[tuple, dict[str, float]] = {}
    for (_run, m, n, dtype), timings in load_recording(DOMAIN_SWEEP).items():
        times = seen.setdefault((m, n, dtype), {})
        for timed in timings:
            times[timed.candidate] = min(timed.median_us, times.get(timed.candidate, math.inf))
    lattice = [s for s in sampling.coarse_shapes() if s in seen]
    assert len(lattice) == len(sampling.coarse_shapes())
    plain = DomainStrategy(coarse=lattice, lattice=list(lattice))
    aware = DomainStrategy(coarse=lattice, lattice=list(lattice), error=winner_or_peer_regret())
    asked, more = plain.refinements(seen), aware.refinements(seen)
    extra = set(more) - set(asked)
    assert set(asked) <= set(more) and len(extra) >= 10, (len(asked), len(extra))
    led = {s for s in lattice if peer_lead(seen[s]) > aware.threshold}
    for shape in extra:
        pairs = [(a, b) for a, b in aware.neighbours() if aware._between(a, b) == shape]
        assert any(a in led or b in led for a, b in pairs), shape
    assert (524288, 1, "fp16") in extra or (524288, 1, "fp16") in asked
    assert seen[(1048576, 1, "fp16")]["torch_softmax[]"] < 7.0 < 27.0 < min(
        t for label, t in seen[(1048576, 1, "fp16")].items() if is_ours(label))


def test_refinement_never_proposes_a_held_out_shape():
    held_out = all_held_out_shapes()
    low, high = (3, 7, "fp32"), (3, 1001 * 1001 // 7, "fp32")
    assert (3, 1001, "fp32") in held_out and midpoint(low[1], high[1]) == 1001
    strategy = DomainStrategy(coarse=[low, high], avoid=held_out)
    strategy.next_shapes({})
    assert strategy.refinements({low: {"a": 1.0}, high: {"b": 1.0}}) == [(3, 1002, "fp32")]


# --- the loop: budget, resume ---------------------------------------------------------------------

def test_strategy_sweep_runs_rounds_until_neighbours_agree(tmp_path, recorded):
    candidates, plan_items = replay_plan(recorded)
    sweep = new_sweep(tmp_path / "r.sqlite", candidates)
    strategy = replay_strategy()
    runner = ReplayMeasurer(recorded)
    summaries = run_strategy(sweep, runner, strategy, plan_items)
    assert len(summaries) >= 3
    shapes = {item.shape_key for item in runner.calls}
    assert shapes > set(strategy.coarse)
    assert len(runner.calls) == len({item.identity for item in runner.calls})  # nothing measured twice
    assert strategy.next_shapes(observations(sweep)) == [] or strategy.rounds >= strategy.max_rounds
    with sweep.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT status FROM sweep_runs").scalar() == "finished"


def test_budget_stops_the_strategy_sweep(tmp_path, recorded):
    candidates, plan_items = replay_plan(recorded)
    sweep = new_sweep(tmp_path / "r.sqlite", candidates)
    runner = SlowReplay(recorded, pause_s=0.01)
    started = time.monotonic()
    run_strategy(sweep, runner, replay_strategy(), plan_items, budget_s=1.0)
    assert time.monotonic() - started < 1.0 + 0.5  # the item in flight and the run's bookkeeping
    assert 0 < len(runner.calls) < len(plan_items(replay_strategy().coarse))
    with sweep.engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT status FROM sweep_runs").scalar() == "interrupted"


# The resume and sharing tests replay one dtype's lattice (its rounds are those of any dtype: the
# strategy refines each dtype's lattice alone) against one uninterrupted run of it, made once per module:
# the three tests had cost 78-111 s each replaying both dtypes with a whole run of their own.
RESUME_DTYPES = ("fp32",)


@pytest.fixture(scope="module")
def whole_run(recorded, tmp_path_factory) -> set[tuple]:
    """The identities one uninterrupted strategy sweep over RESUME_DTYPES measures."""
    candidates, plan_items = replay_plan(recorded)
    whole = ReplayMeasurer(recorded)
    sweep = new_sweep(tmp_path_factory.mktemp("whole") / "whole.sqlite", candidates)
    summaries = run_strategy(sweep, whole, replay_strategy(RESUME_DTYPES), plan_items)
    assert len(summaries) >= 3  # refinement rounds to resume into
    return {item.identity for item in whole.calls}


def test_resumed_strategy_sweep_repeats_no_item_and_ends_as_one_run_would(tmp_path, recorded, whole_run):
    candidates, plan_items = replay_plan(recorded)
    db = tmp_path / "resumed.sqlite"
    first = SlowReplay(recorded, pause_s=0.002)
    run_strategy(new_sweep(db, candidates), first, replay_strategy(RESUME_DTYPES), plan_items, budget_s=0.6)
    second = ReplayMeasurer(recorded)
    run_strategy(new_sweep(db, candidates), second, replay_strategy(RESUME_DTYPES), plan_items)
    first_ids = {item.identity for item in first.calls}
    second_ids = {item.identity for item in second.calls}
    assert first_ids and second_ids and not first_ids & second_ids
    assert first_ids | second_ids == whole_run


def test_a_sweep_stopped_inside_a_refinement_round_is_finished_by_its_rerun(tmp_path, recorded, whole_run):
    """The first run stops a few items into round 1, leaving its shapes pending on the work list; the
    rerun replays round 0 (all measured) before reaching round 1, and must still measure all of it
    (on the H100, 2026-11-25, a resumed domain sweep skipped the rest of its round 2: 10,068 items)."""
    candidates, plan_items = replay_plan(recorded)
    coarse_items = len(plan_items(replay_strategy(RESUME_DTYPES).coarse))
    db = tmp_path / "resumed.sqlite"
    first = ReplayMeasurer(recorded)
    run_strategy(new_sweep(db, candidates), first, replay_strategy(RESUME_DTYPES), plan_items,
                 should_stop=lambda: len(first.calls) >= coarse_items + 3)
    assert coarse_items < len(first.calls) < len(whole_run)
    second = ReplayMeasurer(recorded)
    run_strategy(new_sweep(db, candidates), second, replay_strategy(RESUME_DTYPES), plan_items)
    measured = [item.identity for item in first.calls + second.calls]
    assert len(measured) == len(set(measured))
    assert set(measured) == whole_run


def test_fixed_grid_asks_its_shapes_once():
    grid = FixedGrid([(1, 1024, "fp32"), (4, 1024, "fp32")])
    assert grid.next_shapes({}) == [(1, 1024, "fp32"), (4, 1024, "fp32")]
    assert grid.next_shapes({}) == []


def test_two_strategy_sweepers_on_one_database_share_the_shapes(tmp_path, recorded):
    """Two sweepers (threads, each its own run and engine) on one SQLite file: each measures part of the
    lattice, no (candidate, shape) is measured twice, and the coarse lattice is covered."""
    import threading

    candidates, plan_items = replay_plan(recorded)
    db = tmp_path / "shared.sqlite"
    sweeps = [new_sweep(db, candidates) for _ in range(2)]
    runners = [SlowReplay(recorded, pause_s=0.002) for _ in range(2)]
    threads = [threading.Thread(target=run_strategy, args=(sweep, runner, replay_strategy(RESUME_DTYPES), plan_items))
               for sweep, runner in zip(sweeps, runners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert all(runner.calls for runner in runners)
    # a failed copy reference is tried again by design (docs/SWEEP.md); the replay fails the copies of
    # shapes the recording lacks, so candidates are what must never repeat
    identities = [item.identity for runner in runners for item in runner.calls if item.kind == "candidate"]
    assert len(identities) == len(set(identities))
    assert {item.shape_key for runner in runners for item in runner.calls} >= set(replay_strategy(RESUME_DTYPES).coarse)
