"""Plausibility of uploaded sweep runs: what an exchange document claims, checked against physics and
against the GPU model it names, before any of it is stored (``POST /runs`` and ``autotuner import``).

The schema (``exchange.py``) says a row is well formed; these rules say it could have been measured.
Each problem names its rule:

``unknown-gpu``      the run's GPU key is not a model ``autotuner/lookup/gpu_models.py`` lists: an upload
                     never creates a GPU model (its tables would answer for a device nobody measured).
``gpu-name``         the device name does not normalise to the key (``NVIDIA H100 80GB HBM3`` is ``h100``,
                     never ``h200``: ``autotuner.lookup.gpu.normalize_gpu_name``).
``gpu-properties``   SM count, compute capability or memory size is not the model's.
``gpu-scope``        the upload token may not upload runs of this GPU model (403, not 422).
``time-floor``       a time (p20, median or p80) below ``MIN_KERNEL_US``, or below the row's bytes (one read
                     and one write of every element) at the model's peak DRAM bandwidth; warm and graph
                     timings may find their data in L2, so they are held to ``L2_SPEEDUP`` times that peak.
                     The recorded cold sweeps reach at most 0.91 of the peak (H100) and 0.89 (H200).
``time-ceiling``     a time above an hour.
``quantile-order``   not p20 <= median <= p80.
``gbps``             ``gbps`` is not bytes / median (within 1 %), or given without a median.
``status-error``     an ``ok`` row whose relative error is above 1 (a row that passes the check has at most
                     1: ``kernels/reference.py`` bounds |err| by atol + rtol |ref| and divides by
                     |ref| + atol), or a row that is not ``ok`` carrying a time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from autotuner.lookup.gpu import normalize_gpu_name
from autotuner.lookup.gpu_models import GPU_MODELS, MEMORY_GIB, GpuSpec
from autotuner.tune.measure import bytes_moved

MIN_KERNEL_US = 0.5  # no kernel launch on any listed GPU completes, as timed, faster than this
MAX_TIME_US = 3600e6  # an hour
L2_SPEEDUP = 4.0  # warm/graph: data may stay in L2, whose bandwidth is a few times DRAM's
GBPS_TOLERANCE = 0.01
MAX_OK_REL_ERROR = 1.0
MEMORY_SLACK = (0.90, 1.02)  # reported total memory against the datasheet's GiB
TIME_FIELDS = ("p20_us", "median_us", "p80_us")
SHOWN_PER_RULE = 3  # rows named per rule in a message


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
    """A document with implausible runs (or runs its token may not upload): nothing of it is stored."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__(describe(problems))

    @property
    def status(self) -> int:
        return 403 if any(p.status == 403 for p in self.problems) else 422

    def details(self, limit: int = 100) -> list[dict[str, str]]:
        """The first ``limit`` problems as plain data (an HTTP error's ``detail``)."""
        return [{"rule": p.rule, "loc": p.where, "msg": p.detail} for p in self.problems[:limit]]


def validate_document(document: Any, allowed_gpus: Optional[frozenset[str]] = None) -> list[Problem]:
    """Every problem of a parsed :class:`~autotuner.records.exchange.ExchangeDocument`'s runs (see the
    module docstring); ``allowed_gpus`` (None: any known model) is what the uploader may send."""
    problems: list[Problem] = []
    for index, run in enumerate(document.runs):
        where = f"runs[{index}]"
        if allowed_gpus is not None and run.gpu.key not in allowed_gpus:
            problems.append(Problem("gpu-scope", f"{where}.gpu.key", f"this upload token may upload runs of "
                                    f"{', '.join(sorted(allowed_gpus)) or 'no GPU'} only, not {run.gpu.key!r}"))
        problems.extend(validate_run(run, where))
    return problems


def check_document(document: Any, allowed_gpus: Optional[frozenset[str]] = None) -> None:
    """Raise :class:`RefusedUpload` if :func:`validate_document` finds anything."""
    problems = validate_document(document, allowed_gpus)
    if problems:
        raise RefusedUpload(problems)


def validate_run(run: Any, where: str = "run") -> list[Problem]:
    """Every problem of one parsed :class:`~autotuner.records.exchange.RunRecord` (pure: reads nothing
    but the record and the model specs)."""
    spec = GPU_MODELS.get(run.gpu.key)
    problems = list(_gpu_problems(run.gpu, spec, f"{where}.gpu"))
    if spec is None:
        return problems  # no bandwidth to hold the times to
    peak = spec.bandwidth_gbps * (1.0 if run.timing_method == "cold" else L2_SPEEDUP)
    for index, row in enumerate(run.measurements):
        problems.extend(_row_problems(row, peak, spec.key, f"{where}.measurements[{index}]", row.status))
    for index, row in enumerate(run.copy_references):
        problems.extend(_row_problems(row, peak, spec.key, f"{where}.copy_references[{index}]", "ok"))
    return problems


def _gpu_problems(gpu: Any, spec: GpuSpec | None, where: str) -> Iterator[Problem]:
    if spec is None:
        yield Problem("unknown-gpu", f"{where}.key", f"{gpu.key!r} is not a GPU model this project knows "
                      f"({', '.join(sorted(GPU_MODELS))}); an upload never adds one")
        return
    named = normalize_gpu_name(gpu.name)
    if named != gpu.key:
        yield Problem("gpu-name", f"{where}.name", f"device {gpu.name!r} is GPU model {named!r}, not {gpu.key!r}")
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


def _row_problems(row: Any, peak_gbps: float, gpu: str, where: str, status: str) -> Iterator[Problem]:
    shape = f"{row.m}x{row.n} {row.dtype}"
    times = {name: getattr(row, name) for name in TIME_FIELDS if getattr(row, name) is not None}
    if status != "ok":
        if times or row.gbps is not None:
            yield Problem("status-error", where, f"{shape}: a {status!r} row carries a time")
        return
    error = getattr(row, "max_rel_error", None)  # copy references carry none
    if error is not None and error > MAX_OK_REL_ERROR:
        yield Problem("status-error", where, f"{shape}: an 'ok' row with relative error {error:.3g} "
                      f"(a verified row has at most {MAX_OK_REL_ERROR:g})")
    moved = bytes_moved(row.m, row.n, row.dtype)
    floor_us = max(MIN_KERNEL_US, moved / peak_gbps / 1e3)
    below = [f"{name} {value:.3g}" for name, value in times.items() if value < floor_us]
    if below:
        yield Problem("time-floor", where, f"{shape}: {', '.join(below)} us below {floor_us:.3g} us "
                      f"({moved} bytes at {gpu}'s {peak_gbps:g} GB/s, at least {MIN_KERNEL_US} us)")
    above = [f"{name} {value:.3g}" for name, value in times.items() if value > MAX_TIME_US]
    if above:
        yield Problem("time-ceiling", where, f"{shape}: {', '.join(above)} us is over an hour")
    ordered = [times[name] for name in TIME_FIELDS if name in times]
    if ordered != sorted(ordered):
        yield Problem("quantile-order", where, f"{shape}: p20 <= median <= p80 does not hold ("
                      + ", ".join(f"{name} {value:.4g}" for name, value in times.items()) + ")")
    if row.gbps is not None:
        median = times.get("median_us")
        expected = moved / median / 1e3 if median else None
        if expected is None or not math.isclose(row.gbps, expected, rel_tol=GBPS_TOLERANCE, abs_tol=1e-9):
            said = f"{expected:.4g}" if expected is not None else "none (no median)"
            yield Problem("gbps", where, f"{shape}: gbps {row.gbps:.4g} is not bytes / median = {said}")


def describe(problems: Iterable[Problem]) -> str:
    """One line: per rule, how many rows break it and the first few with what is wrong."""
    by_rule: dict[str, list[Problem]] = {}
    for problem in problems:
        by_rule.setdefault(problem.rule, []).append(problem)
    parts = []
    for rule, found in by_rule.items():
        shown = "; ".join(f"{p.where}: {p.detail}" for p in found[:SHOWN_PER_RULE])
        more = f" (and {len(found) - SHOWN_PER_RULE} more)" if len(found) > SHOWN_PER_RULE else ""
        parts.append(f"rule {rule}, {len(found)} place(s): {shown}{more}")
    return "refused, nothing stored: " + " | ".join(parts)
