"""Evidence, not the last word: how the fit reconciles every stored reading of a candidate at a shape,
and when a reading may move an answer. The one home of these rules (the fit, the recordings' samples,
the guard and ``autotuner confirm`` call it).

**Which rows count.** :class:`CurrentCode` is the one predicate of a row being current: its variant is
registered (and not a peer, unless peers are asked for) and its source hash is one the variant's code
carries now. Every run of the GPU model and timing method counts, in every environment and from every
uploader, except runs marked held-out (those only score tables).

**Sources.** Readings are grouped by who vouches for them (:func:`source_of`): an HTTP uploader (the
token's name; the hosts its documents name are its own claims, so one token is one source), this
database's own host by host name (a local sweep or ``autotuner import``), and each run of ``autotuner
confirm`` on this database's host, a side-by-side re-measurement that is a source of its own.

**Reconciliation** (:func:`reconcile`), per (candidate, shape):

1. degenerate rows (M or N below 1; an ok row without a positive, finite median or with its quantiles out
   of order) are skipped and reported;
2. a row that repeats another source's earlier row exactly (median, p20, p80 and repetitions) is a replay
   of it, not new evidence: it is dropped and its run reported;
3. each source's newest reading stands for it (a source re-measuring itself, ``sweep --retime-unstable``,
   corrects itself);
4. the sources agree when every two readings are within the measured repeatability (:func:`agree`); the
   value is then their median (in log space). Otherwise it is a **conflict**, reported and quarantined:
   the readings that agree with the most sources are kept (ties: the side with a confirmation, then the
   side with this database's own host, then the side stored first); the others are set aside for the fit,
   never "newest wins";
5. the value is fitted only where what is kept is **corroborated**: it includes this database's own host
   or a confirmation, or two sources. A reading one uploader alone stands behind (nobody else measured
   that candidate at that shape, or the one other source disagrees) is reported and not fitted: an
   uploader's claims at shapes or kernels nobody else timed would otherwise shape the table between and
   around its measured shapes, where the guard has nothing to price a changed answer by. A second
   uploader's run or ``autotuner confirm`` (which plans from a fit that includes them: ``include_lone``)
   makes them count.

A ``wrong`` or ``fault`` verdict bans a candidate (on this dtype) only where it is reproduced: two sources
reported one. A verdict of one source alone is reported (``autotuner confirm`` checks it again) and bans
nothing.

**Moving an answer** (:meth:`Evidence.price_change`): a changed pick is priced by each source's own
reading of both picks at the shape: the worst, over the sources, of the median ratio the other sources
give (with two sources: the worse of the two), so no single source sets it. It is evidenced when two
sources measured both, or a confirmation did, or when the one source that did is this database's own
host and finds the two within the measured repeatability (a tie the fit's rule may settle either way,
as refits do, never a claimed gain); and, in every case, when that price finds the new pick no slower
than today's beyond the measured repeatability (:func:`not_slower`). Sources that timed both and
disagree whether it is faster do not corroborate it: a forger's run stored before a genuine one keeps
its value in a one-to-one conflict, never the answer.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from autotuner.tune.measure import VariantConfig

BAD_STATUSES = ("wrong", "fault")
# Peers (QuACK, Liger) are measured for comparison but never dispatched to by default: a table
# shipped to hosts without those packages must only name kernels this project carries.
EXCLUDED_BACKENDS = ("external",)

# |log(a / b)| two readings of one candidate at one shape may differ by and still agree: the 99th
# percentile of the run-to-run spread of repeated rows in the committed H100 recordings (0.106:
# 14,610 groups of repeated rows, one host, six days; the 95th is 0.049), rounded up, plus half of each
# reading's own log(p80 / p20), capped at that spread's 99th percentile (0.17) so that a reading cannot
# widen its own agreement. tests/autotuner/test_evidence.py holds both to the recordings.
REPEATABILITY = 0.11
SPREAD_CAP = 0.17
CONFIRM_PURPOSE = "confirm"  # grid["purpose"] of an ``autotuner confirm`` run
HELD_OUT_PURPOSE = "held-out"
Key = tuple[str, str, int, int]  # variant, config_key, m, n


@dataclass(frozen=True)
class Observation(VariantConfig):
    """One candidate's reconciled time at one shape: what the fit (``autotuner/fit/fit.py``) is made of."""

    m: int
    n: int
    median_us: float
    repetitions: int | None = None  # QUICK_REPS or fewer: the sweep's quick estimate only


class CurrentCode:
    """The one predicate of a stored row being current (module docstring): ``current(variant, source_hash)``.
    ``any_source`` also accepts rows of a variant's older sources; ``include_peers`` accepts peers;
    ``registered(variant)`` (tests) stands for the registry: (backend, current hashes), None if unknown."""

    def __init__(self, any_source: bool = False, include_peers: bool = False,
                 registered: Callable[[str], tuple[str, frozenset[str]] | None] | None = None):
        self.any_source, self.include_peers = any_source, include_peers
        self.registered = registered or _registered
        self._hashes: dict[str, frozenset[str] | None] = {}

    def hashes(self, variant: str) -> frozenset[str] | None:
        """The hashes rows of the variant's code carry now; None when it is not registered here or is a
        peer left out. Read once per variant (hashing reads its files)."""
        if variant not in self._hashes:
            found = self.registered(variant)
            excluded = found is None or (found[0] in EXCLUDED_BACKENDS and not self.include_peers)
            self._hashes[variant] = None if excluded else found[1]
        return self._hashes[variant]

    def __call__(self, variant: str, source_hash: str) -> bool:
        hashes = self.hashes(variant)
        return hashes is not None and (self.any_source or source_hash in hashes)


def _registered(variant: str) -> tuple[str, frozenset[str]] | None:
    from kernels import get_variant

    try:
        found = get_variant(variant)
    except KeyError:
        return None
    return found.backend, found.current_hashes()


class Source(NamedTuple):
    """Who vouches for a reading: ``uploader``, ``host`` (this database's own) or ``confirmation``."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


def source_of(uploader: str | None, host: str | None, run_id: int, grid: Any) -> Source:
    if uploader is not None:
        return Source("uploader", uploader)
    if isinstance(grid, dict) and grid.get("purpose") == CONFIRM_PURPOSE:
        return Source("confirmation", f"run {run_id}")
    return Source("host", host or "unnamed")


class Reading(NamedTuple):
    """One stored row as evidence: what it measured, its times, and where it came from. ``order`` is the
    order it was stored in (run id, row id). A tuple: a fit reads one per stored row."""

    variant: str
    config_key: str
    m: int
    n: int
    status: str
    median_us: float | None
    p20_us: float | None
    p80_us: float | None
    repetitions: int | None
    run_id: int
    order: tuple[int, int]
    source: Source
    config: Any = None

    @property
    def key(self) -> Key:
        return (self.variant, self.config_key, self.m, self.n)

    def where(self) -> str:
        time = f"{self.median_us:.4g} us" if self.median_us else self.status
        return f"{time} ({self.source}, run {self.run_id})"


def degenerate(reading: Reading) -> bool:
    """M or N below 1; an ok row without a positive, finite median, or with p20 <= median <= p80 broken."""
    if reading.m < 1 or reading.n < 1:
        return True
    if reading.status != "ok":
        return False
    median = reading.median_us
    if not (isinstance(median, (int, float)) and 0 < median < math.inf):
        return True
    low, high = reading.p20_us, reading.p80_us
    return (low is not None and not 0 < low <= median) or (high is not None and not median <= high < math.inf)


def spread(reading: Reading) -> float:
    if not reading.p20_us or not reading.p80_us:
        return 0.0
    return min(SPREAD_CAP, math.log(reading.p80_us / reading.p20_us))


def not_slower(ratio: float) -> bool:
    """Whether a new time / old time ``ratio`` finds the new no slower beyond the measured repeatability."""
    return math.log(ratio) <= REPEATABILITY


def agree(a: Reading, b: Reading) -> bool:
    """Whether two readings of one thing lie within the measured repeatability (module docstring)."""
    return abs(math.log(a.median_us / b.median_us)) <= REPEATABILITY + (spread(a) + spread(b)) / 2


@dataclass(frozen=True)
class Conflict:
    key: Key
    kept: tuple[Reading, ...]
    set_aside: tuple[Reading, ...]

    def __str__(self) -> str:
        variant, config_key, m, n = self.key
        return (f"{m}x{n} {variant}[{config_key}]: kept {', '.join(r.where() for r in self.kept)}; set aside "
                f"{', '.join(r.where() for r in self.set_aside)}")


@dataclass(frozen=True)
class Price:
    """A changed pick priced by the sources that measured both picks at its shape."""

    ratio: float | None  # new pick's time / old pick's, as no single source alone would set it
    sources: tuple[Source, ...]  # those that measured both picks at the shape
    evidenced: bool  # enough sources timed both, and the price finds the new pick no slower (module docstring)
    proposed_by: tuple[Source, ...] = ()  # those behind the new pick's time there

    @property
    def disputed(self) -> bool:
        """Enough sources timed both picks, but the price finds the new one slower."""
        return self.ratio is not None and not self.evidenced and not not_slower(self.ratio) and (
            len(self.sources) >= 2 or any(s.kind == "confirmation" for s in self.sources))


@dataclass
class Evidence:
    """What :func:`reconcile` made of the readings (see the module docstring)."""

    observations: list[Observation]
    sources: dict[Key, tuple[Source, ...]]  # who stands behind each observation's value
    runs: dict[Source, set[int]]  # the runs each source's readings came from
    by_source: dict[Source, dict[Key, float]]  # every source's own newest reading, set-aside ones too
    used_runs: set[int] = field(default_factory=set)  # the runs of the readings behind the observations
    conflicts: list[Conflict] = field(default_factory=list)
    banned: set[tuple[str, str]] = field(default_factory=set)
    unreproduced: list[Reading] = field(default_factory=list)  # one per candidate
    degenerate: list[Reading] = field(default_factory=list)
    replays: dict[int, int] = field(default_factory=dict)  # run id -> rows repeating an earlier source's
    lone: dict[Source, set[Key]] = field(default_factory=dict)  # readings one uploader alone stands behind

    @property
    def run_ids(self) -> list[int]:
        return sorted(self.used_runs)

    def price_change(self, m: int, n: int, old: tuple[str, str], new: tuple[str, str]) -> Price:
        ratios = {source: times[(*new, m, n)] / times[(*old, m, n)] for source, times in sorted(self.by_source.items())
                  if (*new, m, n) in times and (*old, m, n) in times}
        proposed_by = self.sources.get((*new, m, n), ())
        if not ratios:
            return Price(None, (), False, proposed_by)
        values = list(ratios.values())
        if len(values) == 1:
            ratio = values[0]
        else:
            ratio = max(_log_median(values[:i] + values[i + 1:]) for i in range(len(values)))
        local_tie = len(values) == 1 and next(iter(ratios)).kind == "host" and abs(math.log(values[0])) <= REPEATABILITY
        enough = len(values) >= 2 or local_tie or any(source.kind == "confirmation" for source in ratios)
        return Price(ratio, tuple(ratios), enough and not_slower(ratio), proposed_by)

    def summary(self) -> dict[str, Any]:
        """What a table document records of its evidence."""
        return {"sources": {str(source): _id_list(runs) for source, runs in sorted(self.runs.items())},
                "conflicts": len(self.conflicts), "unreproduced_failures": [_verdict(r) for r in self.unreproduced],
                "degenerate_rows": len(self.degenerate), "replayed_rows": sum(self.replays.values()),
                "uncorroborated": {str(source): len(keys) for source, keys in sorted(self.lone.items())}}

    def report(self, label: str, shown: int = 5) -> list[str]:
        """One line per kind of finding a fit reports (none when the readings agree)."""
        lines = []
        if self.conflicts:
            lines.append(f"{label}: {len(self.conflicts)} conflict(s) between sources beyond the measured repeatability, "
                         f"quarantined (the side most sources agree with is kept, never the newest): "
                         + "; ".join(map(str, self.conflicts[:shown])) + _more(self.conflicts, shown))
        if self.unreproduced:
            lines.append(f"{label}: {len(self.unreproduced)} failure(s) reported by one source only, so no ban "
                         f"(autotuner confirm checks them again): " + "; ".join(map(_verdict, self.unreproduced[:shown]))
                         + _more(self.unreproduced, shown))
        if self.degenerate:
            runs = _id_list({r.run_id for r in self.degenerate})
            lines.append(f"{label}: {len(self.degenerate)} degenerate row(s) skipped (M or N below 1, or no usable "
                         f"time) in runs {runs}")
        if self.lone:
            lines.append(f"{label}: {self.lone_readings()}")
        if self.replays:
            lines.append(f"{label}: {sum(self.replays.values())} row(s) of runs {_id_list(self.replays)} repeat another "
                         f"source's rows exactly: counted once, as that source's")
        return lines

    def lone_readings(self) -> str:
        """The readings one uploader alone stands behind, in words (none: empty)."""
        if not self.lone:
            return ""
        return (", ".join(f"{len(keys)} reading(s) of {self.describe_sources([source])}"
                          for source, keys in sorted(self.lone.items()))
                + " that no other source corroborates, not fitted (a second uploader's or host's run, or autotuner "
                  "confirm, makes them count)")

    def describe_sources(self, sources: Iterable[Source]) -> str:
        """``uploader lab-a (runs 40, 41), host vm (runs 1-23)``."""
        return ", ".join(f"{source} (runs {_id_list(self.runs.get(source, set()))})" for source in sorted(set(sources)))


def corroborated(sources: Iterable[Source]) -> bool:
    """Whether readings backed by ``sources`` may be fitted (module docstring, step 5)."""
    backers = set(sources)
    return len(backers) >= 2 or any(source.kind != "uploader" for source in backers)


def reconcile(readings: Iterable[Reading], include_lone: bool = False) -> Evidence:
    """The fit's observations from every current reading of one (GPU model, dtype, timing method);
    ``include_lone``: readings one uploader alone stands behind are fitted too (what ``autotuner confirm``
    plans from), not only reported."""
    evidence = Evidence([], {}, {}, {})
    first_seen: dict[tuple, Source] = {}
    newest: dict[Key, dict[Source, tuple[tuple[int, int], Reading]]] = {}  # per source: (first order, newest reading)
    verdicts: dict[tuple[str, str], dict[Source, Reading]] = {}
    source_runs: set[tuple[Source, int]] = set()
    for reading in sorted(readings, key=lambda r: r.order):
        if degenerate(reading):
            evidence.degenerate.append(reading)
            continue
        source = reading.source
        if reading.status in BAD_STATUSES:  # nothing measured to tell a copy by: each source's verdict counts
            verdicts.setdefault((reading.variant, reading.config_key), {}).setdefault(source, reading)
        elif reading.status == "ok":
            key = (reading.variant, reading.config_key, reading.m, reading.n)
            if first_seen.setdefault((key, reading.median_us, reading.p20_us, reading.p80_us, reading.repetitions),
                                     source) != source:
                evidence.replays[reading.run_id] = evidence.replays.get(reading.run_id, 0) + 1
                continue
            by_source = newest.setdefault(key, {})
            earlier = by_source.get(source)
            by_source[source] = (earlier[0] if earlier else reading.order, reading)
        else:
            continue
        source_runs.add((source, reading.run_id))
    for source, run_id in source_runs:
        evidence.runs.setdefault(source, set()).add(run_id)
    for key, by_source in newest.items():
        if len(by_source) == 1:
            (_, reading), = by_source.values()
            kept, value, nearest = (reading,), reading.median_us, reading
        else:
            kept = _kept(key, by_source, evidence)
            value = _log_median([r.median_us for r in kept])
            nearest = min(kept, key=lambda r: abs(math.log(r.median_us / value)))
        for source, (_, reading) in by_source.items():
            evidence.by_source.setdefault(source, {})[key] = reading.median_us
        if not corroborated(r.source for r in kept):
            evidence.lone.setdefault(kept[0].source, set()).add(key)
            if not include_lone:
                continue
        evidence.observations.append(Observation(key[0], key[1], dict(nearest.config or {}), key[2], key[3], value,
                                                 nearest.repetitions))
        evidence.sources[key] = tuple(sorted({r.source for r in kept}))
        evidence.used_runs.update(r.run_id for r in kept)
    for candidate, by_source in verdicts.items():
        if len(by_source) >= 2:
            evidence.banned.add(candidate)
        else:
            evidence.unreproduced.append(next(iter(by_source.values())))
    evidence.observations = [o for o in evidence.observations if (o.variant, o.config_key) not in evidence.banned]
    return evidence


def _kept(key: Key, by_source: dict[Source, tuple[tuple[int, int], Reading]], evidence: Evidence) -> list[Reading]:
    """The readings of one (candidate, shape) whose value the fit uses; a conflict is recorded."""
    readings = [reading for _, reading in by_source.values()]
    if all(agree(a, b) for a, b in combinations(readings, 2)):
        return readings
    first = {reading.source: order for order, reading in by_source.values()}

    def side_of(anchor: Reading) -> list[Reading]:  # the readings agreeing with the anchor and each other
        side = [anchor]
        for other in sorted(readings, key=lambda r: abs(math.log(r.median_us / anchor.median_us))):
            if other is not anchor and all(agree(other, member) for member in side):
                side.append(other)
        return side

    def rank(side: list[Reading]) -> tuple:
        earliest = min(first[r.source] for r in side)
        return (len(side), any(r.source.kind == "confirmation" for r in side),
                any(r.source.kind != "uploader" for r in side), (-earliest[0], -earliest[1]))

    kept = max((side_of(anchor) for anchor in readings), key=rank)
    evidence.conflicts.append(Conflict(key, tuple(kept), tuple(r for r in readings if r not in kept)))
    return kept


def _verdict(reading: Reading) -> str:
    return f"{reading.variant}[{reading.config_key}] {reading.status} at {reading.m}x{reading.n} ({reading.source}, run {reading.run_id})"


def _more(items: Sequence[Any], shown: int) -> str:
    return f" (and {len(items) - shown} more)" if len(items) > shown else ""


def _log_median(values: Sequence[float]) -> float:
    """The median in log space (of two: their geometric mean); one value is itself, to the bit."""
    if len(values) == 1:
        return values[0]
    return math.exp(statistics.median(math.log(v) for v in values))


def _id_list(ids: Iterable[int]) -> str:
    """``1-23`` for consecutive ids, else ``3, 7, 9`` (at most 8 shown)."""
    ids = sorted(ids)
    if len(ids) > 2 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"{ids[0]}-{ids[-1]}"
    shown = ", ".join(map(str, ids[:8]))
    return shown + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")


def readings_of_rows(rows: Iterable[tuple[Any, Any, Any]], current: Callable[[str, str], bool]) -> list[Reading]:
    """Readings of (Measurement, Candidate, SweepRun) rows that are current and not of a held-out run."""
    return [Reading(candidate.variant, candidate.config_key, measurement.m, measurement.n, measurement.status,
                    measurement.median_us, measurement.p20_us, measurement.p80_us, measurement.repetitions, run.id,
                    (run.id, measurement.id), source_of(run.uploader, run.host, run.id, run.grid), candidate.config)
            for measurement, candidate, run in rows
            if (run.grid or {}).get("purpose") != HELD_OUT_PURPOSE and current(candidate.variant, candidate.source_hash)]
