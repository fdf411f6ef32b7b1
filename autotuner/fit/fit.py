"""Fitting dispatch tables from measurements, and scoring them by cross-validated regret.

For one (GPU model, dtype, timing method): reconcile every current reading of every candidate on every
shape, from every run, environment and uploader (``autotuner/fit/evidence.py``: conflicts beyond the
measured repeatability are reported and set aside, never "newest wins"; a candidate is banned only where
two sources reproduced a failed verification or fault), drop rows more than 3x the same candidate's time
at a larger shape (``without_disturbed``), prune candidates that never win by more than ``prune_margin``,
and write the table document of ``autotuner/lookup/table.py`` (lookup rule ``local-regret-clamped`` by
default).

Regret of a table on a shape = median time of the candidate it chooses there / the fastest median
time of any candidate the fit may dispatch to (every verified candidate, before pruning; peers
excluded) at that shape. The chosen candidate's time is whatever was measured, a full timing or the
sweep's quick estimate (``measure.QUICK_REPS`` repetitions, kept for candidates already > 1.5x slower
than the best so far); the fastest is always a full timing, since a quick row is by construction
more than 1.5x the shape's best. The fit reports leave-one-out regret: each measured shape is
answered by the table refitted (pruning included) without that shape, so nothing of it reaches its
own prediction; ``quick_picks`` counts the shapes where that answer had only a quick estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from sqlalchemy.orm import Session

from autotuner.fit.evidence import (BAD_STATUSES, EXCLUDED_BACKENDS, CurrentCode, Observation,  # noqa: F401 - the fit's names too
                                    readings_of_rows, reconcile)
from autotuner.fit.launch_cost import preferred_candidates
from autotuner.tune.measure import QUICK_REPS
from autotuner.tune.retime import slower_than_larger
from autotuner.fit.index import index_document
from autotuner.fit.rule import DEFAULT_RULE, RuleTable
from db import queries

# 3 %. 1 % gave lower leave-one-out regret on the recorded sweeps (H100 1.024 / 1.023 / 1.021 against
# 1.027 / 1.027 / 1.021) but kept 24-28 candidates instead of 15-21, more of them measured at only
# some neighbours of a shape, which made a first lookup about 50 % slower.
DEFAULT_PRUNE_MARGIN = 0.03


class FitError(RuntimeError):
    """Nothing to fit (no measurements of that GPU/dtype/method), with what was looked for."""


def build_document(observations: Sequence[Observation], constraints: Callable[[str, dict[str, Any]], dict[str, int]],
                   *, gpu: str, gpu_name: str, dtype: str, timing_method: str, rule: str = DEFAULT_RULE,
                   copy_times: dict[tuple[int, int], float] | None = None, prune_margin: float = DEFAULT_PRUNE_MARGIN,
                   source_runs: Sequence[int] = (), environment: dict[str, Any] | None = None,
                   requirements: Callable[[str, dict[str, Any]], dict[str, int]] | None = None,
                   with_index: bool = True) -> dict[str, Any]:
    """The table document for these observations (see ``autotuner/lookup/table.py``), pruned, with its
    decision index (``autotuner/fit/index.py``; without ``with_index``, the rule's inputs alone in
    format 1, for a caller that wants only its regret); each candidate carries
    ``requirements(variant, config)`` (what a GPU needs to run it) when given."""
    candidate_keys = sorted({(o.variant, o.config_key) for o in observations})
    configs = {(o.variant, o.config_key): o.config for o in observations}
    shapes = sorted({(o.m, o.n) for o in observations})
    times = {(o.variant, o.config_key, o.m, o.n): o.median_us for o in observations}
    kept = prune(candidate_keys, shapes, times, prune_margin)
    copy_times = copy_times or {}
    document = {
        "format_version": 1,
        "gpu": gpu, "gpu_name": gpu_name, "dtype": dtype, "timing_method": timing_method, "rule": rule,
        "prune_margin": prune_margin,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source_runs": list(source_runs), "environment": environment or {},
        "candidates": [
            {"variant": v, "config_key": k, "config": configs[(v, k)], "constraints": constraints(v, configs[(v, k)]),
             **({"requires": requirements(v, configs[(v, k)])} if requirements else {})}
            for v, k in kept
        ],
        "points": [
            {"m": m, "n": n, "copy_us": copy_times.get((m, n)), "times": [times.get((v, k, m, n)) for v, k in kept]}
            for m, n in shapes
        ],
    }
    return index_document(document) if with_index else document


def prune(candidates: Sequence[tuple[str, str]], shapes: Sequence[tuple[int, int]],
          times: dict[tuple[str, str, int, int], float], margin: float) -> list[tuple[str, str]]:
    """Drop, fewest wins first, each candidate whose removal slows no shape's best by more than
    ``margin`` and leaves every shape it was measured on with another measured candidate."""
    return _prune(candidates, _times_by_shape(candidates, shapes, times), margin)


def _times_by_shape(candidates: Sequence[tuple[str, str]], shapes: Sequence[tuple[int, int]],
                    times: dict[tuple[str, str, int, int], float]) -> dict[tuple[int, int], dict[tuple[str, str], float]]:
    wanted = set(candidates)
    rows: dict[tuple[int, int], dict[tuple[str, str], float]] = {shape: {} for shape in shapes}
    for (variant, config_key, m, n), time in times.items():
        row = rows.get((m, n))
        if row is not None and (variant, config_key) in wanted:
            row[(variant, config_key)] = time
    return rows


def _prune(candidates: Sequence[tuple[str, str]], rows: dict[tuple[int, int], dict[tuple[str, str], float]],
           margin: float) -> list[tuple[str, str]]:
    """``prune`` on times grouped by shape. A candidate goes when every shape where it is within
    ``margin`` of the best keeps another candidate within ``margin`` (the same test, counted). A shape's
    win goes to the candidates ``launch_cost.preferred_candidates`` names there: its fastest, unless one
    within the noise of them costs less to launch."""
    near: dict[tuple[str, str], list[tuple[int, int]]] = {c: [] for c in candidates}
    wins = dict.fromkeys(candidates, 0)
    count: dict[tuple[int, int], int] = {}
    for shape, row in rows.items():
        if not row:
            continue
        best = min(row.values())
        count[shape] = 0
        winners = preferred_candidates(row)  # issue 30: a tie within the noise goes to the cheaper launch
        for candidate, time in row.items():
            wins[candidate] += candidate in winners
            if time <= best * (1 + margin):
                near[candidate].append(shape)
                count[shape] += 1
    dropped = set()
    for candidate in sorted(candidates, key=lambda c: (wins[c], c)):
        if all(count[shape] >= 2 for shape in near[candidate]):
            for shape in near[candidate]:
                count[shape] -= 1
            dropped.add(candidate)
    return [c for c in candidates if c not in dropped]


@dataclass(frozen=True)
class LeftOut:
    """One shape of a leave-one-out score: what the table refitted without that shape chose there."""
    m: int
    n: int
    chosen: tuple[str, str] | None  # (variant, config_key); None: the table had no answer
    best: tuple[str, str]  # the fastest candidate measured here, pruned or not
    regret: float
    missed: bool  # the choice was not measured here: scored as the slowest measured
    quick: bool  # the choice had only the sweep's quick estimate here
    table: RuleTable  # the refitted table's rule that answered, for diagnosis


def leave_one_out_picks(observations: Sequence[Observation], constraints: Callable[[str, dict[str, Any]], dict[str, int]],
                        *, rule: str = DEFAULT_RULE, prune_margin: float = DEFAULT_PRUNE_MARGIN) -> list[LeftOut]:
    """For every measured shape (none if there is only one), the answer of the table refitted, pruning
    included, from the other shapes alone: nothing of the left-out shape reaches its own prediction."""
    candidates = sorted({(o.variant, o.config_key) for o in observations})
    configs = {(o.variant, o.config_key): o.config for o in observations}
    entries = {c: {"variant": c[0], "config_key": c[1], "config": configs[c], "constraints": constraints(c[0], configs[c])}
               for c in candidates}
    shapes = sorted({(o.m, o.n) for o in observations})
    times = {(o.variant, o.config_key, o.m, o.n): o.median_us for o in observations}
    quick = {(o.variant, o.config_key, o.m, o.n) for o in observations
             if o.repetitions is not None and o.repetitions <= QUICK_REPS}
    rows = _times_by_shape(candidates, shapes, times)
    picks: list[LeftOut] = []
    for held_out in shapes if len(shapes) > 1 else ():
        rest = [s for s in shapes if s != held_out]
        kept = _prune(candidates, {s: rows[s] for s in rest}, prune_margin)
        reduced = RuleTable({"format_version": 1, "gpu": "-", "dtype": "-", "rule": rule,
                                 "candidates": [entries[c] for c in kept],
                                 "points": [{"m": m, "n": n, "times": [times.get((*c, m, n)) for c in kept]} for m, n in rest]})
        pick = reduced.lookup(*held_out)
        measured = rows[held_out]
        chosen = kept[pick.candidate] if pick is not None else None
        chosen_us = measured.get(chosen) if chosen else None
        best = min(measured, key=measured.__getitem__)
        scored_us = chosen_us if chosen_us is not None else max(measured.values())  # a miss counts as the slowest
        picks.append(LeftOut(*held_out, chosen, best, scored_us / measured[best],
                             chosen_us is None, chosen is not None and (*chosen, *held_out) in quick, reduced))
    return picks


def leave_one_out_regret(observations: Sequence[Observation], constraints: Callable[[str, dict[str, Any]], dict[str, int]],
                         *, rule: str = DEFAULT_RULE, prune_margin: float = DEFAULT_PRUNE_MARGIN) -> dict[str, Any]:
    """Geomean, p95 and max of :func:`leave_one_out_picks`' regrets, with misses (choices not
    measured at the shape, scored as its slowest) and quick_picks (see the module docstring)."""
    picks = leave_one_out_picks(observations, constraints, rule=rule, prune_margin=prune_margin)
    result = summarize_regret([p.regret for p in picks], method="leave-one-out", misses=sum(p.missed for p in picks))
    result["quick_picks"] = sum(p.quick for p in picks)
    return result


def summarize_regret(regrets: Sequence[float], method: str, misses: int = 0) -> dict[str, Any]:
    if not regrets:
        return {"geomean": None, "p95": None, "max": None, "method": method, "shapes": 0, "misses": misses}
    ordered = sorted(regrets)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    geomean = math.exp(sum(math.log(r) for r in ordered) / len(ordered))
    return {"geomean": round(geomean, 4), "p95": round(p95, 4), "max": round(ordered[-1], 4),
            "method": method, "shapes": len(ordered), "misses": misses}


@dataclass(frozen=True)
class FitInputs:
    """What a fit of one (GPU model, dtype, timing method) reads (see :func:`fit_inputs`)."""
    gpu: Any  # the GpuModel row
    observations: list[Observation]
    banned: set[tuple[str, str]]  # candidates with a failure two sources reproduced: never fitted
    runs: list[int]
    environment_id: int | None  # the newest of those runs' environments
    constraints: Callable[[str, dict[str, Any]], dict[str, int]]  # (variant, config) -> its limits on this dtype
    requirements: Callable[[str, dict[str, Any]], dict[str, int]]  # (variant, config) -> what a GPU needs to run it
    evidence: Any = None  # the autotuner.fit.evidence.Evidence the observations come from


def fit_inputs(session: Session, gpu_key: str, dtype: str, timing_method: str = "cold", *,
               environment_id: int | None = None, any_source: bool = False, include_peers: bool = False,
               include_lone: bool = False) -> FitInputs:
    """The observations a fit uses (see the module docstring; ``environment_id``: only that environment's
    runs; ``include_lone``: readings one uploader alone stands behind too, see ``evidence.reconcile``) and
    the candidates' constraints; raises :class:`FitError` when there are none."""
    from kernels import KernelConfig, get_variant

    constraints_seen: dict[tuple[str, str], dict[str, int]] = {}

    def constraints(name: str, config: dict[str, Any]) -> dict[str, int]:
        key = (name, KernelConfig.from_dict(config).key)
        if key not in constraints_seen:
            constraints_seen[key] = dict(get_variant(name).constraints(KernelConfig.from_dict(config), dtype))
        return constraints_seen[key]

    def requirements(name: str, config: dict[str, Any]) -> dict[str, int]:
        return dict(get_variant(name).requirements(KernelConfig.from_dict(config), dtype))

    gpu = queries.gpu_by_key(session, gpu_key)
    if gpu is None:
        known = ", ".join(g.key for g in queries.list_gpus(session)) or "none"
        raise FitError(f"no measurements of GPU {gpu_key!r} in this database; GPUs measured: {known}")
    rows = queries.measurements_for(session, gpu_key, dtype, timing_method, environment_id=environment_id)
    environments = {run.id: run.environment_id for _, _, run in rows}
    evidence = reconcile(readings_of_rows(rows, CurrentCode(any_source, include_peers)), include_lone)
    observations = without_disturbed(evidence.observations)
    if not observations:
        lone = evidence.lone_readings()
        raise FitError(f"no verified measurements of {gpu_key}/{dtype} with timing method {timing_method!r}"
                       + (f" that a second source corroborates: {lone}" if lone else ""))
    runs = evidence.run_ids
    return FitInputs(gpu, observations, evidence.banned, runs, environments[runs[-1]] if runs else None,
                     constraints, requirements, evidence)


def without_disturbed(observations: Sequence[Observation]) -> list[Observation]:
    """``observations`` less those more than 3x the same candidate's time at a larger shape
    (``retime.slower_than_larger``): a timing disturbed for its whole duration, which would make the
    table pick or price from it; ``sweep --retime-unstable`` measures them again."""
    series: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
    for o in observations:
        series.setdefault((o.variant, o.config_key), []).append((o.m, o.n, o.median_us))
    disturbed = {(*key, m, n) for key, points in series.items() for m, n in slower_than_larger(points)}
    return [o for o in observations if (o.variant, o.config_key, o.m, o.n) not in disturbed]


def fit_table(session: Session, gpu_key: str, dtype: str, timing_method: str = "cold", *,
              rule: str = DEFAULT_RULE, prune_margin: float = DEFAULT_PRUNE_MARGIN, environment_id: int | None = None,
              any_source: bool = False, include_peers: bool = False, save: bool = True,
              accept: Callable[[dict[str, Any]], Any] | None = None, with_index: bool = True,
              inputs: FitInputs | None = None) -> dict[str, Any]:
    """Fit, score and (if ``save``) store the table of one (GPU, dtype, method); returns the document
    (with its decision index unless ``with_index`` is off and it is not saved: a caller comparing
    regrets only skips the index build, about 5-60 s a table on the CPU machine). ``accept(document)``
    runs before it is scored and stored (the document without ``regret``) and may refuse it by raising
    (``fit/guard.py``). ``inputs``: the :func:`fit_inputs` already read (the caller reports their
    evidence), else read here."""
    if inputs is None:
        inputs = fit_inputs(session, gpu_key, dtype, timing_method, environment_id=environment_id,
                            any_source=any_source, include_peers=include_peers)
    observations, constraints, runs = inputs.observations, inputs.constraints, inputs.runs
    copies = {(c.m, c.n): c.median_us for c in reversed(queries.copy_references_for(session, gpu_key, dtype, timing_method))
              if c.run_id in runs}
    document = build_document(observations, constraints, gpu=gpu_key, gpu_name=inputs.gpu.name, dtype=dtype,
                              timing_method=timing_method, rule=rule, copy_times=copies,
                              prune_margin=prune_margin, source_runs=runs,
                              environment={"id": inputs.environment_id}, requirements=inputs.requirements,
                              with_index=with_index or save)
    document["excluded_failing"] = sorted(f"{v}[{k}]" for v, k in inputs.banned)
    if inputs.evidence is not None:
        document["evidence"] = inputs.evidence.summary()
    if accept is not None:
        accept(document)  # before the leave-one-out scoring, which a refused table need not pay for
    document["regret"] = leave_one_out_regret(observations, constraints, rule=rule, prune_margin=prune_margin)
    if save:
        queries.save_table(session, inputs.gpu, dtype, timing_method, document, source_runs=runs,
                           candidate_count=len(document["candidates"]), regret=document["regret"],
                           environment_id=inputs.environment_id)
    return document
