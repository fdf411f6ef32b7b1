"""Plausibility of uploaded sweep runs: what an exchange document claims, checked against physics, the
GPU model it names and the kernels this project has, before any of it is stored (``POST /runs`` and
``autotuner import`` both hold a document to these rules, and only to these).

The schema (``exchange.py``) says a row is well formed; these rules say it could have been measured.
Each problem names its rule:

``too-many-runs``        more than ``MAX_RUNS`` runs, more than ``MAX_CANDIDATES`` candidates in a run
``too-many-candidates``  (every declared config of every variant, at a few source versions, fits), or
``too-many-rows``        more than ``MAX_ROWS`` measurements and copy references in the document (a
                         bigger export is sent in parts: ``autotuner export --run``).
``unknown-gpu``          the run's GPU key is not a model ``autotuner/lookup/gpu_models.py`` lists: an upload
                         never creates a GPU model (its tables would answer for a device nobody measured).
``gpu-name``             the device name does not normalise to the key (``NVIDIA H100 80GB HBM3`` is ``h100``,
                         never ``h200``: ``autotuner.lookup.gpu.normalize_gpu_name``).
``gpu-properties``       SM count, compute capability or memory size missing (a sweep records all three), or
                         not the model's (an H100's 79 GiB is neither an H200's 141 GB nor an H100 NVL's 94).
``gpu-scope``            the upload token may not upload runs of this GPU model (403, not 422).
``unknown-variant``      a candidate's variant is not registered here (``kernels/registry.py``);
``unknown-config``       its config is not one the variant declares (``all_configs``, or a former config
                         of ``kernels.registry.FORMER_CONFIGS``); where the variant's module cannot be
                         imported on this host (no Triton), ``kernels/declared.json`` says what it declares.
``unsupported-dtype``    a row that ran (any status but ``unsupported``) at a dtype its variant does not
``unsupported-gpu``      declare, or a candidate whose requirements the run's GPU model does not meet
                         (``Variant.requirements``, ``gpu_models.runs_on``: architecture, shared memory,
                         cluster size).
``shape``                m or n below 1 (no element), or input and output larger than the GPU's memory.
``launch-floor``,        a time (p20, median or p80) below the model's launch floor, the copy floor at the
``copy-floor``,          recorded fraction of peak DRAM bandwidth, or (warm, graph) what L2 can hold and
``l2-limit``             deliver: ``autotuner/records/physics.py`` gives the figures and where they come from.
``time-ceiling``         a time above an hour.
``quantile-order``       not p20 <= median <= p80.
``gbps``                 ``gbps`` is not bytes / median (within 1 %), or given without a median.
``status-error``         an ``ok`` row whose relative error is above 1 (a row that passes the check has at most
                         1: ``kernels/reference.py`` bounds |err| by atol + rtol |ref| and divides by
                         |ref| + atol), or a row that is not ``ok`` carrying a time.
``resources``            registers, threads, shared memory, spills, blocks per SM or occupancy outside what a
                         build on the model can report (``physics.resource_problems``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from autotuner.lookup.gpu import normalize_gpu_name
from autotuner.lookup.gpu_models import GPU_MODELS, MEMORY_GIB, GpuSpec, runs_on
from autotuner.records.physics import TimeFloors, resource_problems, shape_problem
from autotuner.tune.measure import bytes_moved

MAX_RUNS = 1000
MAX_CANDIDATES = 1024
MAX_ROWS = 2_000_000
GBPS_TOLERANCE = 0.01
MAX_OK_REL_ERROR = 1.0
MEMORY_SLACK = (0.90, 1.02)  # reported total memory against the datasheet's GiB
TIME_FIELDS = ("p20_us", "median_us", "p80_us")
SHOWN_PER_RULE = 3  # rows named per rule in a message
MAX_DETAILS = 100  # problems listed in an answer's detail
Uses = dict[tuple[int, str], int]  # (candidate index, dtype) -> the first row that ran it


@dataclass(frozen=True)
class Problem:
    """One broken rule at one place of the document (``runs[0].measurements[5]``)."""

    rule: str
    where: str
    detail: str

    @property
    def status(self) -> int:
        return 403 if self.rule == "gpu-scope" else 422


class RefusedUpload(ValueError):
    """A document with implausible runs (or runs its token may not upload): nothing of it is stored.
    ``counts`` (per rule) are given where ``problems`` holds only the first few (:class:`Tally`)."""

    def __init__(self, problems: list[Problem], counts: Optional[dict[str, int]] = None):
        self.problems = problems
        super().__init__(describe(problems, counts))

    @property
    def status(self) -> int:
        return 403 if any(p.status == 403 for p in self.problems) else 422

    def details(self, limit: int = MAX_DETAILS) -> list[dict[str, str]]:
        """The first ``limit`` problems as plain data (an HTTP error's ``detail``)."""
        return [{"rule": p.rule, "loc": p.where, "msg": p.detail} for p in self.problems[:limit]]


def validate_document(document: Any, allowed_gpus: Optional[frozenset[str]] = None) -> list[Problem]:
    """Every problem of a parsed :class:`~autotuner.records.exchange.ExchangeDocument`'s runs (see the
    module docstring); ``allowed_gpus`` (None: any known model) is what the uploader may send."""
    problems = list(count_problems("runs", len(document.runs), "runs"))
    rows = sum(len(run.measurements) + len(run.copy_references) for run in document.runs)
    problems.extend(count_problems("rows", rows, "runs"))
    if problems:  # nothing else is looked at in a document this large
        return problems
    for index, run in enumerate(document.runs):
        where = f"runs[{index}]"
        problems.extend(scope_problems(run.gpu.key, allowed_gpus, where))
        problems.extend(validate_run(run, where))
    return problems


LIMITS = {"runs": MAX_RUNS, "candidates": MAX_CANDIDATES, "rows": MAX_ROWS}


def count_problems(what: str, count: int, where: str) -> list[Problem]:
    """The ``too-many-<what>`` problem where ``count`` passes its limit (``LIMITS``)."""
    limit = LIMITS[what]
    if count <= limit:
        return []
    scope = "a run" if what == "candidates" else "a document"
    return [Problem(f"too-many-{what}", where, f"more than {limit} {what} in {scope} ({count} or more); "
                    "send a larger export in parts (autotuner export --run ID)")]


def scope_problems(gpu_key: str, allowed_gpus: Optional[frozenset[str]], where: str) -> list[Problem]:
    """The ``gpu-scope`` problem of a run of ``gpu_key`` where the uploader may send ``allowed_gpus``."""
    if allowed_gpus is None or gpu_key in allowed_gpus:
        return []
    return [Problem("gpu-scope", f"{where}.gpu.key", f"this upload token may upload runs of "
                    f"{', '.join(sorted(allowed_gpus)) or 'no GPU'} only, not {gpu_key!r}")]


def check_document(document: Any, allowed_gpus: Optional[frozenset[str]] = None) -> None:
    """Raise :class:`RefusedUpload` if :func:`validate_document` finds anything."""
    problems = validate_document(document, allowed_gpus)
    if problems:
        raise RefusedUpload(problems)


def validate_run(run: Any, where: str = "run", uses: Optional[Uses] = None) -> list[Problem]:
    """Every problem of one parsed :class:`~autotuner.records.exchange.RunRecord` (pure: reads nothing
    but the record, the model specs and the kernel registry). ``uses``: which candidates ran at which
    dtypes (:func:`note_uses`), for a caller that reads the rows apart (they are then not in the
    record, and are held to :func:`validate_rows` by that caller)."""
    problems = list(_gpu_problems(run.gpu, GPU_MODELS.get(run.gpu.key), f"{where}.gpu"))
    problems.extend(count_problems("candidates", len(run.candidates), f"{where}.candidates"))
    if uses is None:
        uses = note_uses(run.measurements, {})
        problems.extend(validate_rows(run.measurements, run.gpu.key, run.timing_method, f"{where}.measurements"))
    problems.extend(validate_rows(run.copy_references, run.gpu.key, run.timing_method, f"{where}.copy_references"))
    if not any(p.rule == "too-many-candidates" for p in problems):
        problems.extend(candidate_problems(run.candidates, uses, run.gpu.key, where))
    return problems


def note_uses(rows: Iterable[Any], uses: Uses, start: int = 0) -> Uses:
    """Add to ``uses`` each (candidate, dtype) the rows ran (numbered from ``start``; None rows skipped)."""
    for index, row in enumerate(rows, start):
        if row is not None and row.status != "unsupported":
            uses.setdefault((row.candidate, row.dtype), index)
    return uses


def load_registry() -> None:
    """Import the kernel registry the candidate rules read (:func:`candidate_problems`): a process that
    checks uploads calls it at its start, so its first upload does not pay for the import."""
    from kernels import all_variants

    all_variants()


def candidate_problems(candidates: list[Any], uses: Uses, gpu_key: str, where: str) -> list[Problem]:
    """Each candidate's variant and config against the registry, and each (candidate, dtype) a row
    ran against the variant's dtypes and the requirements the GPU model must meet."""
    from kernels import KernelConfig, all_variants
    from kernels.registry import declared_config_keys

    registered = {variant.name: variant for variant in all_variants()}
    spec = GPU_MODELS.get(gpu_key)
    problems: list[Problem] = []
    declared: dict[str, frozenset[str] | str] = {}
    for index, candidate in enumerate(candidates):
        place = f"{where}.candidates[{index}]"
        variant = registered.get(candidate.variant)
        if variant is None:
            problems.append(Problem("unknown-variant", place, f"{candidate.variant!r} is not a registered variant "
                                    f"({', '.join(sorted(registered))})"))
            continue
        if variant.name not in declared:
            try:
                declared[variant.name] = declared_config_keys(variant)
            except RuntimeError as exc:
                declared[variant.name] = f"its configs are unknown on this server ({exc})"
        keys = declared[variant.name]
        if isinstance(keys, str) or candidate.config_key not in keys:
            why = keys if isinstance(keys, str) else f"{variant.name} declares {len(keys)} configs (autotuner kernels)"
            problems.append(Problem("unknown-config", place, f"{variant.name} config {candidate.config_key!r} is "
                                    f"not one it declares: {why}"))
    for (index, dtype), row in sorted(uses.items()):
        if index >= len(candidates) or (variant := registered.get(candidates[index].variant)) is None:
            continue  # the schema refuses the first, the loop above the second
        place, name = f"{where}.measurements[{row}]", f"{variant.name} {candidates[index].config_key!r}"
        if dtype not in variant.dtypes:
            problems.append(Problem("unsupported-dtype", place, f"{name} ran at {dtype}, but {variant.name} "
                                    f"supports {', '.join(variant.dtypes)} only"))
        elif spec is not None and isinstance(declared.get(variant.name), frozenset):
            try:
                needs = variant.requirements(KernelConfig.from_dict(candidates[index].config), dtype)
            except Exception as exc:  # a config the variant cannot describe was refused above, or is broken
                problems.append(Problem("unsupported-gpu", place, f"{name}: its requirements are unknown ({exc})"))
                continue
            if not runs_on(needs, spec):
                problems.append(Problem("unsupported-gpu", place, f"{name} at {dtype} needs {needs}, which "
                                        f"{spec.key} (compute capability {spec.compute_capability}) does not meet"))
    return problems


def validate_rows(rows: Iterable[Any], gpu_key: str, timing_method: str, where: str, start: int = 0) -> list[Problem]:
    """The problems of a run's measurement or copy-reference rows, numbered from ``start`` (a streamed
    upload checks its rows a batch at a time; None rows, which broke the schema, are skipped); none
    for a GPU model this project does not know (:func:`validate_run` reports that: no bandwidth to
    hold the times to)."""
    spec = GPU_MODELS.get(gpu_key)
    if spec is None:
        return []
    floors = TimeFloors(spec, timing_method)
    problems: list[Problem] = []
    for index, row in enumerate(rows, start):
        if row is not None:
            found = _row_problems(row, floors)
            if found:
                place = f"{where}[{index}]"
                problems.extend(Problem(rule, place, detail) for rule, detail in found)
    return problems


class Tally:
    """Problems found a batch at a time, in bounded memory: every rule's count, and the problems an
    answer shows (the first ``MAX_DETAILS``, and the first ``SHOWN_PER_RULE`` of each rule)."""

    def __init__(self) -> None:
        self.kept: list[Problem] = []
        self.counts: dict[str, int] = {}

    def add(self, problems: Iterable[Problem]) -> None:
        for problem in problems:
            count = self.counts.get(problem.rule, 0)
            if len(self.kept) < MAX_DETAILS or count < SHOWN_PER_RULE:
                self.kept.append(problem)
            self.counts[problem.rule] = count + 1

    def check(self) -> None:
        """Raise :class:`RefusedUpload` if any problem was added."""
        if self.counts:
            raise RefusedUpload(self.kept, self.counts)


def _gpu_problems(gpu: Any, spec: GpuSpec | None, where: str) -> Iterator[Problem]:
    if spec is None:
        yield Problem("unknown-gpu", f"{where}.key", f"{gpu.key!r} is not a GPU model this project knows "
                      f"({', '.join(sorted(GPU_MODELS))}); an upload never adds one")
        return
    named = normalize_gpu_name(gpu.name)
    if named != gpu.key:
        yield Problem("gpu-name", f"{where}.name", f"device {gpu.name!r} is GPU model {named!r}, not {gpu.key!r}")
    missing = [name for name in ("sm_count", "memory_bytes", "compute_capability") if getattr(gpu, name) is None]
    if missing:
        yield Problem("gpu-properties", where, f"{', '.join(missing)} missing: a sweep records the device's SM count, "
                      f"memory and compute capability, and an upload is held to its model's ({gpu.key})")
    if gpu.sm_count is not None and gpu.sm_count != spec.sm_count:
        yield Problem("gpu-properties", f"{where}.sm_count", f"{gpu.key} has {spec.sm_count} SMs, not {gpu.sm_count}")
    capability = f"{spec.compute_capability // 10}.{spec.compute_capability % 10}"
    if gpu.compute_capability is not None and gpu.compute_capability != capability:
        yield Problem("gpu-properties", f"{where}.compute_capability",
                      f"{gpu.key} is compute capability {capability}, not {gpu.compute_capability}")
    sizes = MEMORY_GIB.get(spec.key, ())
    if gpu.memory_bytes is not None and sizes and not any(
            MEMORY_SLACK[0] * size * 2**30 <= gpu.memory_bytes <= MEMORY_SLACK[1] * size * 2**30 for size in sizes):
        yield Problem("gpu-properties", f"{where}.memory_bytes", f"{gpu.key} has {' or '.join(map(str, sizes))} GiB "
                      f"of memory, not {gpu.memory_bytes / 2**30:.1f}")


def _row_problems(row: Any, floors: TimeFloors) -> list[tuple[str, str]]:
    """(rule, what is wrong) for each rule one measurement or copy reference breaks (copy references
    carry no status, error or resources); an empty list, cheaply, for a plausible row."""
    spec, m, n, dtype = floors.spec, row.m, row.n, row.dtype
    shape = f"{m}x{n} {dtype}"
    wrong_shape = shape_problem(m, n, dtype, spec)
    if wrong_shape is not None:
        return [("shape", wrong_shape)]
    found: list[tuple[str, str]] = []
    if hasattr(row, "registers"):  # a measurement
        wrong = resource_problems(row, spec)
        if wrong:
            found.append(("resources", f"{shape}: {'; '.join(wrong)}"))
    p20, median, p80, gbps = row.p20_us, row.median_us, row.p80_us, row.gbps
    status = getattr(row, "status", "ok")
    if status != "ok":
        if p20 is not None or median is not None or p80 is not None or gbps is not None:
            found.append(("status-error", f"{shape}: a {status!r} row carries a time"))
        return found
    error = getattr(row, "max_rel_error", None)
    if error is not None and error > MAX_OK_REL_ERROR:
        found.append(("status-error", f"{shape}: an 'ok' row with relative error {error:.3g} "
                      f"(a verified row has at most {MAX_OK_REL_ERROR:g})"))
    times = {name: value for name, value in zip(TIME_FIELDS, (p20, median, p80)) if value is not None}
    moved = bytes_moved(m, n, dtype)
    found.extend((rule, f"{shape}: {detail}") for rule, detail in floors.problems(moved, times))
    ordered = list(times.values())
    if ordered != sorted(ordered):
        found.append(("quantile-order", f"{shape}: p20 <= median <= p80 does not hold ("
                      + ", ".join(f"{name} {value:.4g}" for name, value in times.items()) + ")"))
    if gbps is not None:
        expected = moved / median / 1e3 if median else None
        if expected is None or not math.isclose(gbps, expected, rel_tol=GBPS_TOLERANCE, abs_tol=1e-9):
            said = f"{expected:.4g}" if expected is not None else "none (no median)"
            found.append(("gbps", f"{shape}: gbps {gbps:.4g} is not bytes / median = {said}"))
    return found


def describe(problems: Iterable[Problem], counts: Optional[dict[str, int]] = None) -> str:
    """One line: per rule, how many rows break it (``counts``, else those in ``problems``) and the
    first few with what is wrong."""
    by_rule: dict[str, list[Problem]] = {}
    for problem in problems:
        by_rule.setdefault(problem.rule, []).append(problem)
    parts = []
    for rule, found in by_rule.items():
        total = counts[rule] if counts is not None else len(found)
        shown = "; ".join(f"{p.where}: {p.detail}" for p in found[:SHOWN_PER_RULE])
        more = f" (and {total - SHOWN_PER_RULE} more)" if total > SHOWN_PER_RULE else ""
        parts.append(f"rule {rule}, {total} place(s): {shown}{more}")
    return "refused, nothing stored: " + " | ".join(parts)
