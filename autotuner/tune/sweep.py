"""The sweep: every applicable (variant, config) on every (shape, dtype), verified, timed, recorded.

Seams (kernel_tuner-style): a *runner* measures one ``WorkItem`` and returns a result dict (the real
one is ``worker.WorkerRunner``, one per GPU; tests pass replaying ones); this module plans the work,
skips what the database already holds for the same GPU model, environment, timing method and candidate
(source hash included), and commits every result as it arrives, so a killed sweep loses at most the
items in flight and a rerun resumes where it stopped.

Work is handed out by shape group through the database work list (``autotuner/tune/parallel.py``): with
several runners each takes whole groups in its own thread; several processes or hosts on one database
share the list. When a group is taken its rows are re-read, so what another sweeper measured meanwhile
is skipped and its best time seeds the quick-drop hint.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

from sqlalchemy import Engine

from autotuner.lookup.gpu import GpuInfo
from autotuner.tune.measure import VariantConfig, WorkItem
from autotuner.tune.parallel import DEFAULT_LEASE_S, SharedWorkList, run_threads, work_list_key
from autotuner.tune.retime import retime_keys
from db import queries, worklist
from db.retry import in_transaction

log = logging.getLogger(__name__)

Shape = tuple[int, int, str]


class Runner(Protocol):
    def measure(self, item: WorkItem) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Candidate(VariantConfig):
    source_hash: str


@dataclass
class SweepSummary:
    run_id: int
    planned: int = 0
    skipped_existing: int = 0
    measured: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    stopped: bool = False  # by the budget, ``should_stop`` or a failure, before every item was measured

    def count(self, status: str) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1


ProgressCallback = Callable[[WorkItem, dict[str, Any] | None], None]


def plan(variants: Sequence[Any], shapes: Iterable[tuple[int, int, str]]) -> tuple[list[Candidate], list[WorkItem]]:
    """Candidates and work items, grouped by shape (the worker reuses one input per shape): for each
    shape its copy reference first, then every (variant, config) that supports it. Candidates that
    cannot apply are left out here, before anything compiles."""
    candidates: dict[tuple[str, str], Candidate] = {}
    items: list[WorkItem] = []
    for m, n, dtype in shapes:
        items.append(WorkItem("copy", m, n, dtype))
        for variant in variants:
            if not variant.supports(m, n, dtype):
                continue
            for config in variant.configs(m, n, dtype):
                key = (variant.name, config.key)
                if key not in candidates:
                    candidates[key] = Candidate(variant.name, config.key, config.as_dict(), variant.source_hash())
                items.append(WorkItem("candidate", m, n, dtype, variant.name, config.key))
    return list(candidates.values()), items


def usable_variants(variants: Sequence[Any], names: Sequence[str] | None = None) -> tuple[list[Any], dict[str, str]]:
    """Variants to sweep (all, or those named) that can run here; the rest with the reason why not."""
    chosen, skipped = [], {}
    known = {v.name for v in variants}
    for name in names or ():
        if name not in known:
            raise ValueError(f"unknown variant {name!r}; registered: {', '.join(sorted(known))}")
    for variant in variants:
        if names and variant.name not in names:
            continue
        support = variant.available()
        if support:
            chosen.append(variant)
        else:
            skipped[variant.name] = support.reason
    return chosen, skipped


def group_by_shape(items: Sequence[WorkItem]) -> dict[Shape, list[WorkItem]]:
    """Items per shape, shapes in first-seen order (coarse to fine, as planned), items in plan order."""
    groups: dict[Shape, list[WorkItem]] = {}
    for item in items:
        groups.setdefault(item.shape_key, []).append(item)
    return groups


class _RunState:
    """What one ``Sweep.run`` call shares among its runner threads: the counts, the progress callback,
    and when to stop (asked to, budget spent, or another thread failed). The best time per shape is
    not here: a shape group is measured by one thread, which keeps it."""

    def __init__(self, summary: "SweepSummary", progress: ProgressCallback | None,
                 should_stop: Callable[[], bool] | None, budget_s: float | None, precounted: set[tuple]):
        self.summary = summary
        self.progress = progress
        self.should_stop = should_stop
        self.budget_s = budget_s
        self.precounted = precounted
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def stopping(self) -> bool:
        """Checked before each measurement; ``should_stop`` is asked once per measurement at most."""
        if self.stop.is_set():
            return True
        if self.budget_s is not None and time.monotonic() - self.started > self.budget_s:
            log.info("budget of %.0f s spent; stopping", self.budget_s)
            self.stop.set()
        elif self.should_stop is not None and self.should_stop():
            self.stop.set()
        return self.stop.is_set()

    def skipped(self, item: WorkItem) -> None:
        with self.lock:
            if item.identity in self.precounted:
                return
            self.summary.skipped_existing += 1
            if self.progress:
                self.progress(item, None)

    def measured(self, item: WorkItem, result: dict[str, Any]) -> None:
        with self.lock:
            self.summary.measured += 1
            self.summary.count(result.get("status", "unknown"))
            if self.progress:
                self.progress(item, result)


class Sweep:
    """Drives one sweep run into the database. Construct, then ``run(runners, items)``."""

    def __init__(self, engine: Engine, gpu: GpuInfo, environment: dict[str, Any], timing_method: str,
                 candidates: Sequence[Candidate], *, command: str | None = None, grid: dict[str, Any] | None = None,
                 lease_s: float = DEFAULT_LEASE_S, retime_spread: float | None = None, recopy: bool = False):
        self.engine = engine
        self.recopy = recopy  # measure every planned shape's copy reference again (sweep --recopy)
        self.timing_method = timing_method

        def register(session):  # noqa: ANN001, ANN202 - safe to rerun: every step is get-or-create
            gpu_row = queries.get_or_create_gpu(
                session, gpu.key, gpu.name, sm_count=gpu.sm_count, l2_bytes=gpu.l2_bytes,
                memory_bytes=gpu.memory_bytes, compute_capability=gpu.compute_capability)
            versions = {k: v for k, v in environment.items() if k != "fingerprint"}
            env_row = queries.get_or_create_environment(session, environment["fingerprint"], **versions)
            run = queries.create_run(session, gpu_row, env_row, timing_method, host=socket.gethostname(),
                                     command=command, grid=grid)
            worklist.register_process(session, run.id, socket.gethostname(), os.getpid())  # to tell if it dies
            candidate_ids = {
                (c.variant, c.config_key): queries.get_or_create_candidate(
                    session, c.variant, c.config_key, c.config, c.source_hash).id
                for c in candidates
            }
            return (gpu_row.id, env_row.id, run.id, candidate_ids,
                    queries.measured_rows(session, gpu_row.id, env_row.id, timing_method),
                    queries.copied_keys(session, gpu_row.id, env_row.id, timing_method))

        (self.gpu_id, self.environment_id, self.run_id, self.candidate_ids, measured,
         self.copied) = in_transaction(engine, register, what="starting the sweep run")
        if recopy:  # only this run's copies count as done; reports read the newest
            self.copied = set()
        # rows to measure again (sweep --retime-unstable): not done until this run measures them
        self.retime = retime_keys(measured, retime_spread) if retime_spread is not None else set()
        self.done = {tuple(row[:4]) for row in measured} - self.retime
        self._lock = threading.Lock()
        key = work_list_key(gpu.key, environment["fingerprint"], timing_method,
                            {(c.variant, c.source_hash) for c in candidates})
        self.work = SharedWorkList(engine, key, self.run_id, lease_s)

    def already_done(self, item: WorkItem) -> bool:
        with self._lock:
            if item.kind == "copy":
                return item.shape_key in self.copied
            return (self.candidate_ids[(item.variant, item.config_key)], item.m, item.n, item.dtype) in self.done

    def refresh(self, shape: Shape) -> float | None:
        """Re-read one shape's rows (another sweeper may have measured some since this run started);
        returns the best ok time of this run's candidates there, the quick-drop hint."""
        ours = set(self.candidate_ids.values())
        m, n, dtype = shape
        rows, copied = in_transaction(self.engine, lambda s: (
            queries.shape_measurements(s, self.gpu_id, self.environment_id, self.timing_method, m, n, dtype),
            queries.has_copy_reference(s, self.gpu_id, self.environment_id, self.timing_method, m, n, dtype)),
            what="reading a shape")
        times = [median for cid, status, median in rows if cid in ours and status == "ok" and median]
        with self._lock:
            self.done.update(key for key in ((cid, m, n, dtype) for cid, _, _ in rows) if key not in self.retime)
            if copied and not self.recopy:
                self.copied.add(shape)
        return min(times) if times else None

    def record(self, item: WorkItem, result: dict[str, Any]) -> None:
        """Commit one result now (a later crash must not lose it); retried while the database is busy."""
        fields = {k: v for k, v in result.items() if k in queries.MEASUREMENT_FIELDS}
        if item.kind == "copy":
            if result.get("status") != "ok":
                log.warning("copy reference for %s failed: %s", item.shape_key, result.get("error"))
                return
            in_transaction(self.engine, lambda s: queries.record_copy_reference(
                s, self.run_id, item.m, item.n, item.dtype, **fields), what="recording a copy reference")
            with self._lock:
                self.copied.add(item.shape_key)
            return
        candidate_id = self.candidate_ids[(item.variant, item.config_key)]
        in_transaction(self.engine, lambda s: queries.record_measurement(
            s, self.run_id, candidate_id, item.m, item.n, item.dtype, **fields), what="recording a measurement")
        with self._lock:
            self.done.add((candidate_id, item.m, item.n, item.dtype))
            self.retime.discard((candidate_id, item.m, item.n, item.dtype))

    def run(self, runners: Runner | Sequence[Runner], items: Sequence[WorkItem],
            progress: ProgressCallback | None = None, should_stop: Callable[[], bool] | None = None,
            budget_s: float | None = None, finish: bool = True) -> SweepSummary:
        """Measure every item not already in the database, committing each result. With several
        runners (one per GPU) each takes whole shape groups in its own thread. Items already done are
        reported to ``progress`` first. ``budget_s`` stops (status "interrupted") once that much wall
        time is spent; groups go coarse to fine, so what was measured covers the grid. ``finish=False``
        leaves the run "running" (a strategy's round: ``autotuner.tune.strategy.run_strategy`` finishes it)."""
        runners = list(runners) if isinstance(runners, Sequence) else [runners]
        if not runners:
            raise ValueError("a sweep needs at least one runner")
        summary = SweepSummary(self.run_id, planned=len(items))
        groups = group_by_shape(items)
        done_now = {item.identity for item in items if self.already_done(item)}
        state = _RunState(summary, progress, should_stop, budget_s, done_now)
        summary.skipped_existing = len(done_now)
        if progress:
            for item in items:
                if item.identity in done_now:
                    progress(item, None)
        status = "interrupted"
        try:
            dead = self.work.fill([shape for shape, group in groups.items()
                                   if any(item.identity not in done_now for item in group)])
            if dead:
                log.warning("sweep runs %s of this host had been killed; their shapes are free again", dead)
            run_threads([lambda slot=slot, runner=runner: self._drain(state, runner, slot, groups)
                         for slot, runner in enumerate(runners)], state.stop)
            status = "interrupted" if state.stop.is_set() else "finished"
        finally:
            summary.stopped = status == "interrupted"
            if finish or summary.stopped:
                self.finish(status)
        return summary

    def finish(self, status: str) -> None:
        in_transaction(self.engine, lambda s: queries.finish_run(s, self.run_id, status), what="finishing the run")

    def measured(self) -> list[tuple]:
        """Every row measured for this sweep's GPU, environment and method (``queries.measured_rows``)."""
        return in_transaction(self.engine, lambda s: queries.measured_rows(
            s, self.gpu_id, self.environment_id, self.timing_method), what="reading the measurements")

    def _drain(self, state: _RunState, runner: Runner, slot: int, groups: dict[Shape, list[WorkItem]]) -> None:
        """One runner's loop: take a group, measure what is left of it, mark it done; until none is left."""
        while not state.stop.is_set():
            if state.budget_s is not None and time.monotonic() - state.started > state.budget_s:
                state.stop.set()
                return
            shape = self.work.claim(slot, planned=groups.__contains__)
            if shape is None:
                return
            complete = False
            try:
                complete = self._measure_group(state, runner, slot, shape, groups[shape])
            finally:
                if complete:
                    self.work.finish(slot, shape)
                else:
                    self.work.release(slot, shape)

    def _measure_group(self, state: _RunState, runner: Runner, slot: int, shape: Shape,
                       group: Sequence[WorkItem]) -> bool:
        """True when every item of the group is in the database; False when stopped or the claim lost."""
        best = self.refresh(shape)
        for item in group:
            if self.already_done(item):
                state.skipped(item)
                continue
            if state.stopping():
                return False
            if item.kind == "candidate":
                item = dataclasses.replace(item, best_us=best)
            result = runner.measure(item)
            if item.kind == "candidate" and result.get("status") == "ok" and result.get("median_us"):
                best = min(best if best is not None else float("inf"), result["median_us"])
            self.record(item, result)
            state.measured(item, result)
            if not self.work.renew(slot, shape):
                log.warning("lost the claim on %s (lease expired; another sweeper took it over)", shape)
                return False
        return True
