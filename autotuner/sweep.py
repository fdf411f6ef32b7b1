"""The sweep: every applicable (variant, config) on every (shape, dtype), verified, timed, recorded.

Seams (kernel_tuner-style): a *runner* measures one ``WorkItem`` and returns a result dict (the real
one is ``worker.WorkerRunner``; tests pass a replaying runner); this module plans the work, skips what
the database already holds for the same GPU model, environment, timing method and candidate (source
hash included), and commits every result as it arrives, so a killed sweep loses at most the item in
flight and a rerun resumes where it stopped.
"""
from __future__ import annotations

import dataclasses
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from autotuner.gpu import GpuInfo
from autotuner.measure import WorkItem
from db import queries

log = logging.getLogger(__name__)


class Runner(Protocol):
    def measure(self, item: WorkItem) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Candidate:
    variant: str
    config_key: str
    config: dict[str, Any]
    source_hash: str


@dataclass
class SweepSummary:
    run_id: int
    planned: int = 0
    skipped_existing: int = 0
    measured: int = 0
    by_status: dict[str, int] = field(default_factory=dict)

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


class Sweep:
    """Drives one sweep run into the database. Construct, then ``run(runner, items)``."""

    def __init__(self, engine: Engine, gpu: GpuInfo, environment: dict[str, Any], timing_method: str,
                 candidates: Sequence[Candidate], *, command: str | None = None, grid: dict[str, Any] | None = None):
        self.engine = engine
        self.timing_method = timing_method
        with Session(engine, expire_on_commit=False) as session, session.begin():
            gpu_row = queries.get_or_create_gpu(
                session, gpu.key, gpu.name, sm_count=gpu.sm_count, l2_bytes=gpu.l2_bytes,
                memory_bytes=gpu.memory_bytes, compute_capability=gpu.compute_capability)
            versions = {k: v for k, v in environment.items() if k != "fingerprint"}
            env_row = queries.get_or_create_environment(session, environment["fingerprint"], **versions)
            run = queries.create_run(session, gpu_row, env_row, timing_method, host=socket.gethostname(),
                                     command=command, grid=grid)
            self.candidate_ids = {
                (c.variant, c.config_key): queries.get_or_create_candidate(
                    session, c.variant, c.config_key, c.config, c.source_hash).id
                for c in candidates
            }
            self.gpu_id, self.environment_id, self.run_id = gpu_row.id, env_row.id, run.id
            self.done = queries.measured_keys(session, gpu_row.id, env_row.id, timing_method)
            self.copied = queries.copied_keys(session, gpu_row.id, env_row.id, timing_method)

    def already_done(self, item: WorkItem) -> bool:
        if item.kind == "copy":
            return item.shape_key in self.copied
        return (self.candidate_ids[(item.variant, item.config_key)], item.m, item.n, item.dtype) in self.done

    def record(self, item: WorkItem, result: dict[str, Any]) -> None:
        """Commit one result now (a later crash must not lose it)."""
        fields = {k: v for k, v in result.items() if k in queries.MEASUREMENT_FIELDS}
        with Session(self.engine) as session, session.begin():
            if item.kind == "copy":
                if result.get("status") == "ok":
                    queries.record_copy_reference(session, self.run_id, item.m, item.n, item.dtype, **fields)
                    self.copied.add(item.shape_key)
                else:
                    log.warning("copy reference for %s failed: %s", item.shape_key, result.get("error"))
                return
            candidate_id = self.candidate_ids[(item.variant, item.config_key)]
            queries.record_measurement(session, self.run_id, candidate_id, item.m, item.n, item.dtype, **fields)
            self.done.add((candidate_id, item.m, item.n, item.dtype))

    def run(self, runner: Runner, items: Sequence[WorkItem], progress: ProgressCallback | None = None,
            should_stop: Callable[[], bool] | None = None, budget_s: float | None = None) -> SweepSummary:
        """Measure every item not already in the database, committing each result. ``budget_s`` stops
        (status "interrupted") once that much wall time is spent; items are coarse to fine, so what was
        measured covers the grid."""
        summary = SweepSummary(self.run_id, planned=len(items))
        status = "finished"
        started = time.monotonic()
        best: dict[tuple[int, int, str], float] = {}
        try:
            for item in items:
                if self.already_done(item):
                    summary.skipped_existing += 1
                    if progress:
                        progress(item, None)
                    continue
                if (should_stop is not None and should_stop()) or (
                        budget_s is not None and time.monotonic() - started > budget_s):
                    status = "interrupted"
                    break
                if item.kind == "candidate":
                    item = dataclasses.replace(item, best_us=best.get(item.shape_key))
                result = runner.measure(item)
                if item.kind == "candidate" and result.get("status") == "ok" and result.get("median_us"):
                    best[item.shape_key] = min(best.get(item.shape_key, float("inf")), result["median_us"])
                self.record(item, result)
                summary.measured += 1
                summary.count(result.get("status", "unknown"))
                if progress:
                    progress(item, result)
        except BaseException:
            status = "interrupted"
            raise
        finally:
            with Session(self.engine) as session, session.begin():
                queries.finish_run(session, self.run_id, status)
        return summary
