"""What to measure next: the strategy seam of the sweep (as Kernel Tuner's ``strategies/``).

A strategy is asked, round after round, for the next shapes given what is measured so far
(``Observations``: per shape, the best ok time of every candidate measured there). The runner side
(``autotuner/tune/sweep.py``) measures them; ``run_strategy`` alternates the two until the strategy has
nothing more to ask or the budget is spent.

- ``FixedGrid``: one round, a fixed list of shapes (the classic grid, ``sweep --grid classic``).
- ``DomainStrategy``: the coarse lattice of ``autotuner/tune/sampling.py``, then refinement rounds. Its
  lattice is the shapes it has proposed itself; in each row (one M) and column (one N) of the lattice of a
  dtype, two neighbouring points are compared by an error function, and the geometric midpoint of every
  pair whose error exceeds ``threshold`` is proposed, largest error first. The default error function is
  ``winner_regret`` (how much is lost at one point by running the other point's winner); a model's error
  plugs in the same way (``prediction_error``). The domain sweep's command uses ``winner_or_peer_regret``:
  also where a peer (torch, QuACK, Liger: whichever were measured) beats every candidate of ours at either
  end by more than the threshold, so that the region where ours lose is mapped (issue 30).

Resume and several sweepers: a strategy's proposals depend only on the measurements of the shapes it
proposed, so a rerun asks the same shapes again (the sweep skips what is in the database) and sweepers on
one database ask the same shapes (the shared work list hands each to one of them). A sweeper that runs
out of free shapes while another still measures the last of a round refines on what is measured so far.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Mapping, Protocol, Sequence

from autotuner.tune import sampling
from autotuner.tune.sweep import Candidate, ProgressCallback, Runner, Shape, Sweep, SweepSummary

Observations = Mapping[Shape, Mapping[str, float]]  # shape -> candidate label -> best ok median (µs)
ErrorFunction = Callable[[Shape, Mapping[str, float], Shape, Mapping[str, float]], float]
Predictor = Callable[[int, int, str], tuple[str | None, float | None]]  # (candidate label, predicted µs)

DEFAULT_THRESHOLD = 0.03  # the fit's 3 % prune: closer winners are not worth a shape
MIN_GAP_RATIO = 1.25  # neighbours closer than this on their axis are not split further


class Strategy(Protocol):
    name: str

    def next_shapes(self, observed: Observations) -> list[Shape]:
        """Shapes to measure next (possibly some already measured: the sweep skips those); [] = done."""


@dataclass
class FixedGrid:
    """The given shapes, in one round."""

    shapes: Sequence[Shape]
    name: str = "classic"
    _asked: bool = False

    def next_shapes(self, observed: Observations) -> list[Shape]:
        if self._asked:
            return []
        self._asked = True
        return list(self.shapes)


def winner_regret(a: Shape, times_a: Mapping[str, float], b: Shape, times_b: Mapping[str, float]) -> float:
    """How much slower a point runs with its neighbour's winner than with its own (the worse of the two
    directions), minus 1: 0 when both points have the same winner; inf when a winner was not measured
    (or cannot run) at the other point, a candidate's boundary lies between them."""
    if not times_a or not times_b:
        return 0.0
    worst = 0.0
    for here, there in ((times_a, times_b), (times_b, times_a)):
        theirs = min(there, key=there.get)
        best = min(here.values())
        worst = max(worst, here.get(theirs, math.inf) / best - 1)
    return worst


@lru_cache(maxsize=256)  # one entry per variant name: bounded by the registry
def _ours(variant: str) -> bool:
    from autotuner.report.bench import OWN_BACKENDS, backend_of

    return backend_of(variant) in OWN_BACKENDS


def is_ours(label: str) -> bool:
    """Whether a candidate label (``variant[config_key]``) is one of this project's kernels (a CUDA,
    Triton or CuTe backend), not a peer."""
    return _ours(label.split("[", 1)[0])


def peer_lead(times: Mapping[str, float], ours: Callable[[str], bool] = is_ours) -> float:
    """How much slower the fastest candidate of ours measured at a point is than the fastest peer there,
    minus 1; 0 where one of ours is as fast, or where no peer or none of ours was measured."""
    own = [t for label, t in times.items() if ours(label)]
    peers = [t for label, t in times.items() if not ours(label)]
    if not own or not peers:
        return 0.0
    return max(0.0, min(own) / min(peers) - 1)


def winner_or_peer_regret(ours: Callable[[str], bool] = is_ours) -> ErrorFunction:
    """``winner_regret``, or a peer's lead at either end (``peer_lead``) where that is larger: a pair
    is split where the winners differ and also where a peer beats every candidate of ours."""

    def error(a: Shape, times_a: Mapping[str, float], b: Shape, times_b: Mapping[str, float]) -> float:
        return max(winner_regret(a, times_a, b, times_b), peer_lead(times_a, ours), peer_lead(times_b, ours))

    return error


def prediction_error(predict: Predictor) -> ErrorFunction:
    """An error function from a model: at each end, the regret of the model's pick (its measured time /
    the best there) and the relative error of its predicted time against that measurement; the largest."""

    def error(a: Shape, times_a: Mapping[str, float], b: Shape, times_b: Mapping[str, float]) -> float:
        worst = 0.0
        for shape, times in ((a, times_a), (b, times_b)):
            if not times:
                continue
            pick, predicted_us = predict(*shape)
            measured = times.get(pick) if pick else None
            if measured is None:
                return math.inf
            worst = max(worst, measured / min(times.values()) - 1)
            if predicted_us:
                worst = max(worst, abs(predicted_us - measured) / measured)
        return worst

    return error


def midpoint(low: int, high: int) -> int | None:
    """The integer geometric midpoint strictly between ``low`` and ``high``, or None when they are
    closer than ``MIN_GAP_RATIO``."""
    if high < low * MIN_GAP_RATIO:
        return None
    middle = round(math.sqrt(low * high))
    return middle if low < middle < high else None


@dataclass
class DomainStrategy:
    """Coarse lattice first, then midpoints of disagreeing neighbours, for at most ``max_rounds`` rounds.
    ``avoid`` holds shapes never to propose (the held-out sets: their rows must stay out of the fit); a
    midpoint that is one of them moves up by one."""

    coarse: Sequence[Shape] = field(default_factory=sampling.coarse_shapes)
    error: ErrorFunction = winner_regret
    threshold: float = DEFAULT_THRESHOLD
    max_rounds: int = 12
    max_tensor_bytes: int = sampling.SWEEP_MAX_TENSOR_BYTES
    avoid: frozenset = frozenset()
    name: str = "domain"
    lattice: list[Shape] = field(default_factory=list)
    rounds: int = 0

    def next_shapes(self, observed: Observations) -> list[Shape]:
        if self.rounds >= self.max_rounds:
            return []
        self.rounds += 1
        if not self.lattice:
            self.lattice = list(self.coarse)
            return list(self.coarse)
        proposed = self.refinements(observed)
        self.lattice.extend(proposed)
        return proposed

    def refinements(self, observed: Observations) -> list[Shape]:
        """Midpoints of every neighbouring pair of the lattice whose error exceeds the threshold, largest
        error first (a budget cuts the least telling ones); each shape once."""
        scored: dict[Shape, float] = {}
        known = set(self.lattice)
        for a, b in self.neighbours():
            error = self.error(a, observed.get(a, {}), b, observed.get(b, {}))
            if not error > self.threshold:
                continue
            shape = self._between(a, b)
            if shape is not None and shape not in known:
                scored[shape] = max(scored.get(shape, 0.0), error)
        return sorted(scored, key=lambda s: (-scored[s], s))

    def neighbours(self) -> list[tuple[Shape, Shape]]:
        """Consecutive points of each lattice row (same M and dtype, by N) and column (same N, by M)."""
        rows: dict[tuple[int, str], list[int]] = {}
        columns: dict[tuple[int, str], list[int]] = {}
        for m, n, dtype in set(self.lattice):
            rows.setdefault((m, dtype), []).append(n)
            columns.setdefault((n, dtype), []).append(m)
        pairs = []
        for (m, dtype), ns in sorted(rows.items()):
            ns.sort()
            pairs += [((m, low, dtype), (m, high, dtype)) for low, high in zip(ns, ns[1:])]
        for (n, dtype), ms in sorted(columns.items()):
            ms.sort()
            pairs += [((low, n, dtype), (high, n, dtype)) for low, high in zip(ms, ms[1:])]
        return pairs

    def _between(self, a: Shape, b: Shape) -> Shape | None:
        (m_a, n_a, dtype), (m_b, n_b, _) = a, b
        if m_a == m_b:
            middle = midpoint(n_a, n_b)
            shape = None if middle is None else (m_a, middle, dtype)
        else:
            middle = midpoint(m_a, m_b)
            shape = None if middle is None else (middle, n_a, dtype)
        if shape is not None and shape in self.avoid:
            shape = (shape[0], shape[1] + 1, dtype) if m_a == m_b else (shape[0] + 1, shape[1], dtype)
        if shape is None or not sampling.fits(*shape, max_tensor_bytes=self.max_tensor_bytes):
            return None
        return shape


def every_candidate(variants: Sequence) -> list[Candidate]:  # noqa: ANN001 - kernels.base.Variant
    """Every declared (variant, config): a strategy's later rounds may reach shapes where configs apply
    that its first round's shapes did not admit, and the sweep must know every candidate up front."""
    return [Candidate(variant.name, config.key, config.as_dict(), variant.source_hash())
            for variant in variants for config in variant.all_configs()]


def observations(sweep: Sweep) -> dict[Shape, dict[str, float]]:
    """What ``sweep``'s database holds for its GPU, environment and method: per shape, the fastest ok
    median of each of the sweep's candidates, labelled ``variant[config_key]``."""
    labels = {cid: f"{variant}[{key}]" for (variant, key), cid in sweep.candidate_ids.items()}
    found: dict[Shape, dict[str, float]] = {}
    for cid, m, n, dtype, status, median, *_ in sweep.measured():
        if status == "ok" and median and cid in labels:
            times = found.setdefault((m, n, dtype), {})
            times[labels[cid]] = min(median, times.get(labels[cid], math.inf))
    return found


def run_strategy(sweep: Sweep, runners: Runner | Sequence[Runner], strategy: Strategy,
                 plan_items: Callable[[list[Shape]], list], *, progress: ProgressCallback | None = None,
                 budget_s: float | None = None, should_stop: Callable[[], bool] | None = None,
                 on_round: Callable[[int, list], None] | None = None) -> list[SweepSummary]:
    """Ask ``strategy`` for shapes, measure them with ``sweep``, until it asks none or the budget (wall
    time over every round) is spent; the run is then marked finished or interrupted. ``on_round`` hears
    each round's number and work items before they are measured (progress totals, estimates)."""
    started = time.monotonic()
    summaries: list[SweepSummary] = []
    status = "finished"
    try:
        while True:
            left = None if budget_s is None else budget_s - (time.monotonic() - started)
            if left is not None and left <= 0:
                status = "interrupted"
                break
            shapes = strategy.next_shapes(observations(sweep))
            if not shapes:
                break
            items = plan_items(shapes)
            if on_round:
                on_round(len(summaries), items)
            summary = sweep.run(runners, items, progress, should_stop=should_stop, budget_s=left, finish=False)
            summaries.append(summary)
            if summary.stopped:
                status = "interrupted"
                break
    except BaseException:
        status = "interrupted"
        raise
    finally:
        sweep.finish(status)
    return summaries


Predictions = Mapping[Shape, Mapping[str, float]]  # shape -> candidate label -> predicted µs


def prediction_margin(times: Mapping[str, float]) -> float:
    """How sure a prediction is of its pick at one shape: the runner-up's predicted time over the pick's,
    minus 1 (inf with a single candidate)."""
    ordered = sorted(times.values())
    return ordered[1] / ordered[0] - 1 if len(ordered) > 1 else math.inf


@dataclass
class QuickStrategy:
    """``sweep --quick``: where a predicted table (``autotuner predict``) is least sure, its pick and
    runners-up. Round 1: per dtype, the ``shapes`` predicted points of smallest ``prediction_margin``, each at
    least ``spacing`` (log2 units of M and N together) from the others of its dtype, so the few shapes
    spread over the domain; at each, the ``width`` fastest predicted candidates and any within
    ``DEFAULT_THRESHOLD`` of the pick (``candidates_at``). Round 2: where the measured winner was
    not the predicted pick, up to ``shapes // 2`` predicted points not yet measured within
    ``2 · spacing`` of it, nearest first, spaced among themselves.
    The fit then corrects the prediction with what was measured (``autotuner/fit/quick.py``)."""

    predictions: Predictions
    shapes: int = 40  # round 1's shapes per dtype (round 2: half as many)
    width: int = 3
    spacing: float = 1.5
    name: str = "quick"
    chosen: dict[Shape, frozenset[str]] = field(default_factory=dict)
    rounds: int = 0

    def next_shapes(self, observed: Observations) -> list[Shape]:
        self.rounds += 1
        if self.rounds == 1:
            ranked = sorted(self.predictions, key=lambda s: (prediction_margin(self.predictions[s]), s))
            return self._take(ranked, self.shapes, list(self.chosen))
        if self.rounds == 2:
            missed = [s for s in self.chosen if observed.get(s) and self._surprised(s, observed[s])]
            distance = {s: min((_log_distance(s, t) for t in missed if t[2] == s[2]), default=math.inf)
                        for s in self.predictions if s not in self.chosen}
            near = sorted((s for s, d in distance.items() if d <= 2 * self.spacing), key=lambda s: (distance[s], s))
            return self._take(near, self.shapes // 2, [])  # next to a surprise: spaced among themselves only
        return []

    def candidates_at(self, shape: Shape) -> frozenset[str]:
        """The candidate labels (``variant[config_key]``) to measure at a shape this strategy proposed."""
        return self.chosen.get(shape, frozenset())

    def _surprised(self, shape: Shape, times: Mapping[str, float]) -> bool:
        predicted = self.predictions[shape]
        return min(times, key=times.get) != min(predicted, key=predicted.get)

    def _take(self, ranked: Sequence[Shape], count: int, apart_from: list[Shape]) -> list[Shape]:
        """Up to ``count`` shapes of each dtype from ``ranked``, in its order, spaced apart."""
        taken: list[Shape] = []
        per_dtype: dict[str, int] = {}
        for shape in ranked:
            if per_dtype.get(shape[2], 0) >= count:
                continue
            if any(other[2] == shape[2] and _log_distance(shape, other) < self.spacing for other in [*apart_from, *taken]):
                continue
            taken.append(shape)
            per_dtype[shape[2]] = per_dtype.get(shape[2], 0) + 1
            times = self.predictions[shape]
            best = min(times.values())
            ordered = sorted(times, key=times.get)
            self.chosen[shape] = frozenset(ordered[:self.width] + [c for c in ordered if times[c] <= best * (1 + DEFAULT_THRESHOLD)])
        return taken


def _log_distance(a: Shape, b: Shape) -> float:
    return abs(math.log2(max(a[0], 1) / max(b[0], 1))) + abs(math.log2(a[1] / b[1]))
