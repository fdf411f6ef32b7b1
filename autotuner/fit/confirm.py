"""``autotuner confirm``: a re-measurement that lets a pending fit move answers one source alone proposed.

A fit moves an answer only on evidence that does not come from one run alone (``evidence.py``). Where the
rows that propose a change all come from one source, ``autotuner confirm`` on a GPU of that model
re-times, side by side, the pick the pending fit would give (counting the readings one uploader alone
stands behind, which a fit leaves out) and the pick answering today at each measured shape where they
differ, and verifies again each candidate whose failure one source alone reported. The
results are stored as a run of their own (``grid.purpose`` "confirm", this database's host): a source of
its own, which the next ``autotuner fit`` reads like any other, so a confirmed change moves the answer and
a refuted one is a conflict the confirmation settles.

The decisions (:func:`pending`, :func:`plan`, :func:`verdicts`) run on the CPU; :func:`record` measures
through any runner (the GPU worker, or a test's fake measurer).
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from autotuner.fit.evidence import CONFIRM_PURPOSE, Reading, not_slower
from autotuner.tune.measure import WorkItem
from db import queries
from db.retry import in_transaction


@dataclass
class Pending:
    """What a fit of one (GPU model, dtype, timing method) would change against the table answering today."""

    dtype: str
    changes: list[Any]  # guard.Change, every changed answer at a measured shape
    unreproduced: list[Reading]  # failures one source alone reported
    origin: str  # what answers today, in words


def pending(session: Session, gpu_key: str, dtype: str, timing_method: str = "cold") -> Pending:
    """The pending fit's changed answers (``guard.compare`` against what answers today; the fit counting
    the readings one uploader alone stands behind, which a confirmation would corroborate) and its
    unreproduced failures. Raises ``FitError`` when there is nothing to fit."""
    from autotuner.fit import guard
    from autotuner.fit.fit import fit_inputs, fit_table

    today = guard.incumbent(session, gpu_key, dtype, timing_method)
    inputs = fit_inputs(session, gpu_key, dtype, timing_method, include_lone=True)
    document = fit_table(session, gpu_key, dtype, timing_method, save=False, inputs=inputs)
    changes = guard.compare(document, today.document, inputs.evidence, today_answers=today.answers).changes
    return Pending(dtype, changes, inputs.evidence.unreproduced, today.origin)


def plan(pendings: Sequence[Pending], runnable: Callable[[str], bool] = lambda name: True) -> tuple[list[WorkItem], list[str]]:
    """Work items, each changed answer's two picks side by side (today's first) and each unreproduced
    failure's candidate at its shape, once each; and what cannot be measured here (``runnable(variant)``
    false), in words."""
    items: dict[tuple, WorkItem] = {}
    skipped: list[str] = []
    for entry in pendings:
        wanted = [(change.m, change.n, pick) for change in entry.changes for pick in (change.today, change.new)]
        wanted += [(r.m, r.n, (r.variant, r.config_key)) for r in entry.unreproduced]
        for m, n, (variant, config_key) in wanted:
            item = WorkItem("candidate", m, n, entry.dtype, variant, config_key)
            if not runnable(variant):
                skipped.append(f"{variant} at {m}x{n} {entry.dtype}")
            else:
                items.setdefault(item.identity, item)
    return list(items.values()), skipped


@dataclass(frozen=True)
class Verdict:
    change: Any  # guard.Change
    dtype: str
    ratio: float | None  # new pick / today's, as re-timed; None when either failed

    @property
    def confirmed(self) -> bool:
        """The new pick is not slower than today's beyond the measured repeatability."""
        return self.ratio is not None and not_slower(self.ratio)


def verdicts(pendings: Sequence[Pending], results: dict[tuple, dict[str, Any]]) -> list[Verdict]:
    """Each changed answer against what the confirmation measured (``results`` by work item identity)."""
    found = []
    for entry in pendings:
        for change in entry.changes:
            times = [results.get(("candidate", change.m, change.n, entry.dtype, *pick), {}) for pick in (change.today, change.new)]
            ok = all(t.get("status") == "ok" and t.get("median_us") for t in times)
            found.append(Verdict(change, entry.dtype, times[1]["median_us"] / times[0]["median_us"] if ok else None))
    return found


def record(engine: Engine, gpu: Any, environment: dict[str, Any], timing_method: str, items: Sequence[WorkItem],
           runner: Any, *, command: str | None = None,
           progress: Callable[[WorkItem, dict[str, Any]], None] | None = None) -> tuple[int, dict[tuple, dict[str, Any]]]:
    """Measure ``items`` with ``runner`` into a new confirmation run of this host, each result committed as
    it comes (a crash keeps what was measured); returns the run id and the results by item identity.
    ``gpu`` is a ``lookup.gpu.GpuInfo``, ``environment`` what ``tune.env.collect_environment`` returns."""
    from kernels import KernelConfig, get_variant

    def register(session: Session) -> tuple[int, dict[tuple[str, str], int]]:
        gpu_row = queries.get_or_create_gpu(session, gpu.key, gpu.name, sm_count=gpu.sm_count, l2_bytes=gpu.l2_bytes,
                                            memory_bytes=gpu.memory_bytes, compute_capability=gpu.compute_capability)
        env_row = queries.get_or_create_environment(session, environment["fingerprint"],
                                                    **{k: v for k, v in environment.items() if k != "fingerprint"})
        run = queries.create_run(session, gpu_row, env_row, timing_method, host=socket.gethostname(), command=command,
                                 grid={"purpose": CONFIRM_PURPOSE, "items": len(items)})
        candidates = {}
        for item in items:
            if (item.variant, item.config_key) not in candidates:
                variant = get_variant(item.variant)
                config = KernelConfig.from_key(item.config_key)
                candidates[(item.variant, item.config_key)] = queries.get_or_create_candidate(
                    session, item.variant, item.config_key, config.as_dict(), variant.source_hash()).id
        return run.id, candidates

    run_id, candidates = in_transaction(engine, register, what="starting the confirmation run")
    results: dict[tuple, dict[str, Any]] = {}
    status = "interrupted"
    try:
        for item in items:
            result = runner.measure(item)
            fields = {k: v for k, v in result.items() if k in queries.MEASUREMENT_FIELDS}
            in_transaction(engine, lambda s: queries.record_measurement(
                s, run_id, candidates[(item.variant, item.config_key)], item.m, item.n, item.dtype, **fields),
                what="recording a confirmation")
            results[item.identity] = result
            if progress:
                progress(item, result)
        status = "finished"
    finally:
        in_transaction(engine, lambda s: queries.finish_run(s, run_id, status), what="finishing the confirmation run")
    return run_id, results
