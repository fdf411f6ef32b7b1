"""The fit's lookup rules: what a table's measured points say of any shape. They run at fit and
convert time only: ``autotuner/fit/index.py`` evaluates them over the whole domain and writes the
answers into the table's decision index, which is all the lookup (``autotuner/lookup/table.py``)
reads. No torch, no CuPy.

The rule reads a table document's ``rule``, ``candidates`` and ``points`` (the format:
``autotuner/lookup/table.py``; format 1, without the index, and 2 alike). ``times[i]`` is candidate i's median time in µs at that point (null: not measured, unsupported or
failed). ``requires`` (tables fitted from 0.2.0 on) is what a GPU needs to run the candidate
(``autotuner/lookup/gpu_models.py``); ``autotuner/fit/model.py`` answers outside the measured points. Lookup rules:

- ``nearest-log``: the measured point nearest in (log2 M, log2 N); among candidates whose constraints
  admit the *exact* shape, the fastest there; if none there, the next nearest point.
  Example: table points at N=4096 and N=8192, query N=5000 → the N=4096 point (|log2 5000/4096| =
  0.29 < 0.71) but only candidates whose ``n_max`` ≥ 5000 and whose ``n_multiple_of`` divides 5000.
- ``interp-log`` (tables fitted before ``local-regret``): every candidate's time is predicted by
  bilinear interpolation of log time in (log2 M, log2 N) between the bracketing measured grid lines
  (clamped outside the grid), using only points of the same N alignment class (N % 8 == 0, or not)
  when that class's points surround N; the fastest predicted admissible candidate wins. A candidate
  missing at a corner is predicted from the corners it has; a candidate with none is not chosen.
  Exact measured points answer with their winner.
- ``local-regret-clamped`` (``fit_table``'s default) and ``local-regret`` (older
  tables): exact measured points answer with their winner. Otherwise, among points of the N
  alignment class as for ``interp-log``:

  1. Neighbours and weights (:meth:`RuleTable.neighbours`): the mean of two linear
     interpolations in (log2 M, log2 N): along N on the two measured M lines bracketing M, and along
     M on the two measured N lines bracketing N. Inside a fully measured cell these are the four
     corners with bilinear weights; on a grid line they are the measured points on either side along
     both axes (so a missing grid point is read from its 2-4 axis neighbours). The rules differ on a
     line whose measured points do not surround the query on the other axis (the query is past the
     grid's edge on that line, or the line's own point at the query was not measured):
     ``local-regret-clamped`` reads it at its nearest measured point, if that point is within
     ``CLAMP_REACH`` (a row, along N) or ``COLUMN_REACH`` (a column, along M) of the query
     (``autotuner/fit/regret.py``); ``local-regret`` brackets only among lines that do surround the
     query, and skips that axis if none does. So at the grid's edge
     (M = 1, the smallest N, ...) a missing point is read from both axes under the clamped rule, from
     its edge line alone under the old one: leave-one-out on the recorded sweeps preferred the
     former on both GPUs. ``local-regret-clamped`` also reads a line between two measured points of
     it only at a point within that reach of the query: a row of the domain sweep measured at N = 1431
     and 50257 is read at 50257 alone for N = 30522, at neither where both are that far. A line it
     cannot read at the query does not bracket it either: the rule looks past it to the next line on
     that side that it can read, within ``COLUMN_REACH`` of M for rows and ``CLAMP_REACH`` of N for
     columns. Rows measured at one far N (a sweep of M 48-200 at N >= 16384) had hidden the rows
     measured around N = 5542 from M = 170, and the query fell back to its nearest point.
  2. At each neighbour p, a candidate's regret r = its time / the fastest time there, capped at
     ``REGRET_CAP`` (1.5: past that the sweep keeps only a noisy 5-repetition estimate, and all it
     says is "much slower"). A candidate whose constraints exclude p has no value at p; it is
     neither credited nor penalised there. A candidate with no time at a neighbour its constraints
     admit (not swept there, as a variant added after the sweep and measured on part of the
     domain) is left out: only measurements vouch for a pick.
  3. log r[p, c] ~ mu[p] + theta[c], fitted by weighted least squares over the neighbours (alternating
     passes from the per-candidate weighted means), so candidates measured at different subsets of
     the neighbours are compared on one scale. The admissible candidate with the smallest theta
     (predicted regret) wins; ties go to the lower candidate index. ``predicted_us`` is its time
     interpolated in log space over the neighbours where it was measured.

  Example: on the default grid without the point (4096, 65536), its neighbours (4096, 32768),
  (4096, 131072), (1024, 65536), (16384, 65536) each weigh 1/4; a kernel with ``n_max`` 65536 is
  judged on the three where it can run, against candidates judged on all four. Without the point
  (1, 4096), ``local-regret-clamped`` weighs (1, 2048) and (1, 8192) 1/4 each and (4, 4096) 1/2;
  ``local-regret`` weighs the first two 1/2 each.
"""
from __future__ import annotations

import bisect
import math
from typing import Any, Container, Iterable, Mapping, Sequence

import numpy as np

from autotuner.lookup.table import Pick, TableFields, TableFormatError

from autotuner.fit import regret
from autotuner.fit.regret import CLAMP_REACH, Layout
from autotuner.fit.regret import log2_or_zero as _log2

RULE_FORMATS = (1, 2)  # the rule reads the candidates and points, alike in both
RULES = ("nearest-log", "interp-log", "local-regret", "local-regret-clamped")
DEFAULT_RULE = "local-regret-clamped"
LOCAL_REGRET_RULES = ("local-regret", "local-regret-clamped")
REGRET_CAP = 1.5  # local-regret: regrets past this at a neighbour count as this (see the module docstring)


def admits(constraints: Mapping[str, int], m: int, n: int) -> bool:
    """The data form of ``Variant.supports`` for one config (see ``kernels.base.check_constraints``);
    ``RuleTable.admissible`` applies the same test to every candidate's precomputed limits."""
    n_min, n_max, multiple, m_min, m_max = _limits_of(constraints)
    return n_min <= n <= n_max and not n % multiple and m_min <= m <= m_max


def _limits_of(constraints: Mapping[str, int]) -> tuple[int, int, int, int, int]:
    """(n_min, n_max, n_multiple_of, m_min, m_max), absent limits as no limit."""
    unbounded = 2**63
    return (constraints.get("n_min", 1), constraints.get("n_max", unbounded), constraints.get("n_multiple_of", 1),
            constraints.get("m_min", 0), constraints.get("m_max", unbounded))


def alignment_class(n: int) -> int:
    """N classes kept apart by the interpolation: vectorised kernels behave differently on them."""
    return 0 if n % 8 == 0 else 1


_ALLOWED_SETS_KEPT = 4096  # per table: one per cell of the candidates' limits and usable set
_PLANS_KEPT = 4096  # local-regret plans kept per table (one per neighbours and allowed set)


class RuleTable(TableFields):
    """A table document's rule over its measured points, with what it reads precomputed: the index
    build (``autotuner/fit/index.py``) and the leave-one-out fit ask it hundreds of thousands of times."""

    def __init__(self, document: Mapping[str, Any]):
        super().__init__(validate(document))
        self._exact = {(p["m"], p["n"]): p for p in self.points}
        self._by_class: dict[int, list[dict[str, Any]]] = {}
        for point in self.points:
            self._by_class.setdefault(alignment_class(point["n"]), []).append(point)
        # each class's N range (_class_points) and each candidate's limits as plain ints (admissible):
        # the index build asks the rule per shape, so its per-call work is kept small
        self._class_ns = {cls: sorted({p["n"] for p in same}) for cls, same in self._by_class.items()}
        self._limits = [_limits_of(c.get("constraints", {})) for c in self.candidates]
        # (variant, config items) per candidate, as a KernelChoice holds them
        self.choice_fields = [(c["variant"], tuple(c["config"].items())) for c in self.candidates]
        # which candidates admit a shape changes only at a limit on either axis and with N's residue
        # modulo the multiples' lcm: ``allowed`` keeps the set per such cell (not where the lcm is large)
        self._n_edges = sorted({lim[0] for lim in self._limits} | {lim[1] + 1 for lim in self._limits})
        self._m_edges = sorted({lim[3] for lim in self._limits} | {lim[4] + 1 for lim in self._limits})
        modulus = math.lcm(*(lim[2] for lim in self._limits)) if self._limits else 1
        self._modulus = modulus if 0 < modulus <= 1024 else 0
        self._allowed_sets: dict[tuple, tuple[int, ...]] = {}
        self._layouts: dict[int, Layout] = {}
        self._point_logs: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # class key -> log2 m, log2 n per point
        self._log_regret: dict[tuple[int, int], tuple[float | None, ...]] = {}
        self._log_times: dict[tuple[int, int], tuple[float | None, ...]] = {}
        self._gaps: dict[tuple[int, int], frozenset[int]] = {}
        self._plans: dict[tuple, tuple] = {}
        if self.rule in LOCAL_REGRET_RULES:
            cap = math.log(REGRET_CAP)
            for point in self.points:
                measured = [t for t in point["times"] if t is not None and t > 0]
                best = min(measured) if measured else None
                self._log_regret[(point["m"], point["n"])] = tuple(
                    min(math.log(t / best), cap) if t is not None and t > 0 and best else None for t in point["times"])

    def admissible(self, m: int, n: int) -> list[int]:
        """Indexes of the candidates whose constraints admit (m, n): ``admits`` on the limits
        precomputed per candidate (a first lookup is on the dispatch path)."""
        return [i for i, (n_min, n_max, multiple, m_min, m_max) in enumerate(self._limits)
                if n_min <= n <= n_max and not n % multiple and m_min <= m <= m_max]

    def allowed(self, m: int, n: int, usable: frozenset[int] | None = None) -> tuple[int, ...]:
        """``admissible(m, n)`` less the candidates not in ``usable`` (None: all), kept per cell of the
        candidates' limits: one dict probe on a first lookup once the cell has been seen."""
        if not self._modulus:
            return tuple(i for i in self.admissible(m, n) if usable is None or i in usable)
        key = (bisect.bisect_right(self._n_edges, n), bisect.bisect_right(self._m_edges, m), n % self._modulus, usable)
        found = self._allowed_sets.get(key)
        if found is None:
            found = tuple(i for i in self.admissible(m, n) if usable is None or i in usable)
            if len(self._allowed_sets) < _ALLOWED_SETS_KEPT:
                self._allowed_sets[key] = found
        return found

    def lookup(self, m: int, n: int, usable: Container[int] | None = None) -> Pick | None:
        """The candidate this table chooses for (m, n) among ``usable`` (default: all), or None if no
        admissible candidate has data."""
        allowed = self.admissible(m, n)
        if usable is not None:
            allowed = [i for i in allowed if i in usable]
        return self.lookup_among(m, n, allowed)

    def lookup_among(self, m: int, n: int, allowed: Sequence[int]) -> Pick | None:
        """``lookup`` among ``allowed``, candidates the caller has already checked admit (m, n)."""
        found = self.choose(m, n, allowed)
        return None if found is None else Pick(*found)

    def choose(self, m: int, n: int, allowed: Sequence[int], *,
               estimate: bool = True) -> tuple[int, float | None, bool] | None:
        """``lookup_among``'s pick as (candidate, predicted_us, exact), no object built: a first lookup
        is on the dispatch path. Without ``estimate``, a local-regret pick between measured points
        comes without its predicted_us (None), for a caller with a time of its own."""
        if not allowed:
            return None
        point = self._exact.get((m, n))
        if point is not None:
            best = _fastest(point["times"], allowed)
            if best is not None:
                return best, point["times"][best], True
        if self.rule == "interp-log":
            return self._interpolated(m, n, allowed)
        if self.rule in LOCAL_REGRET_RULES and point is None:
            return self._local_regret(m, n, allowed, estimate)
        return self._nearest(m, n, allowed)

    def _points_for(self, n: int) -> list[dict[str, Any]]:
        """Points of n's alignment class when they surround n closely on the N axis (its nearest class
        N on either side within ``CLAMP_REACH`` of n); otherwise all points: a class measured at one N,
        say only 50257, says nothing about N = 2500, nor does one measured at 500 and 50257."""
        return self._class_points(n)[1]

    def _class_points(self, n: int) -> tuple[int, list[dict[str, Any]]]:
        """(alignment class, its points), or (-1, all points): see :meth:`_points_for`."""
        cls = alignment_class(n)
        ns = self._class_ns.get(cls)
        if ns is not None:
            upper = bisect.bisect_left(ns, n)
            if upper < len(ns) and (ns[upper] == n or (upper > 0 and ns[upper] <= n * CLAMP_REACH
                                                        and ns[upper - 1] * CLAMP_REACH >= n)):
                return cls, self._by_class[cls]
        return -1, self.points

    def neighbours(self, m: int, n: int) -> list[tuple[tuple[int, int], float]]:
        """The local-regret rules' measured neighbours of (m, n) and their weights (summing to 1); []
        if none. ``local-regret`` brackets only among lines that span the query on the other axis;
        ``local-regret-clamped`` brackets among the lines it can read at the query and reads one that
        does not span the query at its nearest end (see the module docstring)."""
        return list(zip(*self._stencil(m, n)))

    def _stencil(self, m: int, n: int) -> tuple[tuple[tuple[int, int], ...], list[float]]:
        key, points = self._class_points(n)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = Layout(points)
        return regret.stencil(layout, m, n, self.rule != "local-regret")

    def _local_regret(self, m: int, n: int, allowed: Sequence[int],
                      estimate: bool = True) -> tuple[int, float | None, bool] | None:
        corners, weights = self._stencil(m, n)
        if not corners:  # local-regret past the grid's corner: no line reaches the query
            return self._nearest(m, n, allowed)
        key = (corners, allowed if type(allowed) is tuple else tuple(allowed))
        plan = self._plans.get(key)
        if plan is None:
            plan = regret.plan([self._log_regret[c] for c in corners],
                               frozenset().union(*map(self._gaps_at, corners)), allowed)
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            self._plans[key] = plan
        best = regret.best(plan, weights)
        if best is None:
            return self._nearest(m, n, allowed)
        return best, self._estimate(corners, weights, best) if estimate else None, False

    def estimate(self, m: int, n: int, candidate: int) -> float:
        """The local-regret rules' predicted_us of ``candidate`` at (m, n), which ``choose`` picked
        between measured points: its time interpolated in log space over the neighbours."""
        return self._estimate(*self._stencil(m, n), candidate)

    def _estimate(self, corners: Sequence[tuple[int, int]], weights: Sequence[float], candidate: int) -> float:
        return regret.predicted_us([self._log_times_at(corner)[candidate] for corner in corners], weights)

    def _log_times_at(self, corner: tuple[int, int]) -> tuple[float | None, ...]:
        found = self._log_times.get(corner)
        if found is None:
            found = self._log_times[corner] = tuple(
                math.log(t) if t is not None and t > 0 else None for t in self._exact[corner]["times"])
        return found

    def _gaps_at(self, corner: tuple[int, int]) -> frozenset[int]:
        """The candidates with no time at this point although their constraints admit its shape: not
        swept there (a variant added later, measured on part of the domain) or the row was lost, so
        nothing says how they do around it. A None where a candidate's limits exclude the point is what
        the module docstring's step 2 means, and is no gap. Worked out once per point, when first used."""
        gaps = self._gaps.get(corner)
        if gaps is None:
            pm, pn = corner
            gaps = self._gaps[corner] = frozenset(
                i for i, value in enumerate(self._log_regret[corner]) if value is None
                and (limits := self._limits[i])[0] <= pn <= limits[1] and not pn % limits[2]
                and limits[3] <= pm <= limits[4])
        return gaps

    def _nearest(self, m: int, n: int, allowed: Sequence[int]) -> tuple[int, float | None, bool] | None:
        """The fastest allowed candidate at the nearest point (log-distance; ties: the earlier point)
        that measured one; the points' logs are kept per class."""
        key, points = self._class_points(n)
        if not points:
            return None
        logs = self._point_logs.get(key)
        if logs is None:
            logs = self._point_logs[key] = (np.array([_log2(p["m"]) for p in points]),
                                            np.array([_log2(p["n"]) for p in points]))
        dm, dn = logs[0] - _log2(m), logs[1] - _log2(n)
        distances = dm * dm + dn * dn
        # the nearest point first (argmin keeps the earlier of equals): it nearly always has an allowed
        # candidate; only where it has none are the others sorted (a stable sort: ties, the earlier)
        nearest = int(distances.argmin())
        best = _fastest(points[nearest]["times"], allowed)
        if best is not None:
            return best, points[nearest]["times"][best], False
        for index in np.argsort(distances, kind="stable").tolist():
            times = points[index]["times"]
            best = _fastest(times, allowed)
            if best is not None:
                return best, times[best], False
        return None

    def _interpolated(self, m: int, n: int, allowed: Sequence[int]) -> tuple[int, float, bool] | None:
        points = self._points_for(n)
        grid = {(p["m"], p["n"]): p for p in points}
        ms = sorted({p["m"] for p in points})
        ns = sorted({p["n"] for p in points})
        (m0, m1, wm), (n0, n1, wn) = _bracket(ms, m), _bracket(ns, n)
        corners = [((m0, n0), (1 - wm) * (1 - wn)), ((m0, n1), (1 - wm) * wn),
                   ((m1, n0), wm * (1 - wn)), ((m1, n1), wm * wn)]
        best: tuple[float, int] | None = None
        for index in allowed:
            total_weight, log_time = 0.0, 0.0
            for corner, weight in corners:
                point = grid.get(corner)
                time = point["times"][index] if point is not None else None
                if time is not None and time > 0 and weight > 0:
                    total_weight += weight
                    log_time += weight * math.log(time)
            if total_weight <= 0:
                continue
            predicted = math.exp(log_time / total_weight)
            if best is None or predicted < best[0]:
                best = (predicted, index)
        if best is None:
            return self._nearest(m, n, allowed)
        return best[1], best[0], False


def _fastest(times: Sequence[float | None], allowed: Iterable[int]) -> int | None:
    best = None
    for index in allowed:
        time = times[index]
        if time is not None and (best is None or time < times[best]):
            best = index
    return best


def _bracket(values: Sequence[int], x: int) -> tuple[int, int, float]:
    """Grid values around x and x's weight toward the upper one in log2 space (clamped)."""
    if x <= values[0]:
        return values[0], values[0], 0.0
    if x >= values[-1]:
        return values[-1], values[-1], 0.0
    upper = bisect.bisect_left(values, x)
    lo, hi = values[upper - 1], values[upper]
    if hi == x:
        return hi, hi, 0.0
    return lo, hi, (_log2(x) - _log2(lo)) / (_log2(hi) - _log2(lo))


def validate(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """Check a table document's shape; raise :class:`TableFormatError` naming the first problem."""
    if not isinstance(document, Mapping):
        raise TableFormatError("a dispatch table must be a JSON object")
    version = document.get("format_version")
    if version not in RULE_FORMATS:
        raise TableFormatError(f"table format_version {version!r} is not supported (this program reads {RULE_FORMATS})")
    for field in ("gpu", "dtype", "candidates", "points"):
        if field not in document:
            raise TableFormatError(f"table lacks the field {field!r}")
    if document.get("rule", "nearest-log") not in RULES:
        raise TableFormatError(f"table rule {document.get('rule')!r} is not one of {RULES}")
    count = len(document["candidates"])
    for candidate in document["candidates"]:
        if "variant" not in candidate or "config" not in candidate:
            raise TableFormatError("every candidate needs 'variant' and 'config'")
        if not isinstance(candidate["config"], Mapping):
            raise TableFormatError(f"candidate {candidate['variant']!r}: 'config' must be an object")
    for point in document["points"]:
        if len(point.get("times", ())) != count:
            raise TableFormatError(f"point (m={point.get('m')}, n={point.get('n')}) has {len(point.get('times', ()))} times for {count} candidates")
    return document


def times_by_shape(document: Mapping[str, Any]) -> dict[tuple[int, int], dict[tuple[str, str], float]]:
    """A table document's measured (or predicted) times: per shape (m, n), each candidate's time there
    by (variant, config_key); candidates without a time at a shape are absent from it."""
    names = [(c["variant"], c["config_key"]) for c in document["candidates"]]
    return {(p["m"], p["n"]): {names[i]: t for i, t in enumerate(p["times"]) if t is not None}
            for p in document["points"]}
