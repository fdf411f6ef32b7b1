"""Measuring one work item on the GPU: build, verify against float64, then time. Runs in the worker.

A candidate is timed only after it passed verification on fresh random input (output poisoned with
NaN first, so unwritten elements fail) and on the edge rows of ``kernels.reference.edge_input``.
Every outcome is a plain dict of ``db.queries.MEASUREMENT_FIELDS`` plus ``fatal``: True when the CUDA
context is no longer usable (illegal address, launch failure), so the worker must be replaced.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable

from autotuner.tune.timing import Timing, is_unstable, spread
from kernels import KernelConfig, get_variant
from kernels.reference import POISON, CheckResult, check_softmax, edge_input, random_input

# Successive halving: a candidate whose quick estimate (the fastest of QUICK_REPS repetitions: noise
# and outliers only ever slow a repetition) is this much slower than the best so far on the shape
# keeps its quick timing instead of a full one. The factor is
# far above the repetition noise (a few percent), so a candidate that could win is never dropped.
DROP_FACTOR = 1.5
QUICK_REPS = 5
RETIME_ATTEMPTS = 2  # extra timings of a disturbed candidate (timing.UNSTABLE_SPREAD)
CHECK_CHUNK_ELEMENTS = 1 << 26  # float64 comparison in slices of rows, to bound memory
FATAL_MARKERS = ("illegal memory access", "illegal address", "unspecified launch failure",
                 "misaligned address", "an illegal instruction", "hardware stack error",
                 "CUDA_ERROR_ILLEGAL", "cudaErrorIllegal", "cudaErrorLaunchFailure", "device-side assert")


@dataclass(frozen=True)
class VariantConfig:
    """One variant at one config, as the database keys it: the config's key and its parameters.
    The sweep's candidates and the fit's observations are these and more."""

    variant: str
    config_key: str
    config: dict[str, Any]


@dataclass(frozen=True)
class WorkItem:
    """One thing to measure. ``kind`` "candidate" times variant/config; "copy" times the copy reference."""

    kind: str
    m: int
    n: int
    dtype: str
    variant: str = ""
    config_key: str = ""
    best_us: float | None = None  # fastest time seen on this shape so far: enables the quick drop

    @property
    def identity(self) -> tuple[str, int, int, str, str, str]:
        return (self.kind, self.m, self.n, self.dtype, self.variant, self.config_key)

    @property
    def shape_key(self) -> tuple[int, int, str]:
        return (self.m, self.n, self.dtype)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def copy_reference(timer: Any, x: Any, out: Any) -> Timing:
    """The speed-of-light time for x's shape: the faster (by median) of torch's ``out.copy_(x)`` and
    ``kernels.cuda.plain_copy`` (a plain 16-byte vector copy), each timed by ``timer``. On the H100
    ``copy_`` alone measured about 1.15x the anchors' copy on half of the large shapes of one sweep
    (and of one bench), which would have inflated every fraction of copy speed there."""
    timing = timer.time(lambda: out.copy_(x))
    try:
        from kernels.cuda.plain_copy import plain_copy_launcher

        copy = plain_copy_launcher()
        copy(x, out)
    except Exception:  # no CuPy, misaligned views: copy_ alone is the reference
        return timing
    plain = timer.time(lambda: copy(x, out))
    return plain if plain.median_us < timing.median_us else timing


def steadiest(measure: Callable[[], Timing], first: Timing | None = None, attempts: int = RETIME_ATTEMPTS) -> Timing:
    """A timing, measured again (at most ``attempts`` more times) while its p80 exceeds
    UNSTABLE_SPREAD x its p20: the one with the smallest spread is kept. A disturbed median (another
    process on the GPU, a clock change) would otherwise become a table's answer or a regret figure."""
    best = first if first is not None else measure()
    for _ in range(attempts):
        if not is_unstable(best.p20_us, best.p80_us):
            break
        again = measure()
        if spread(again.p20_us, again.p80_us) < spread(best.p20_us, best.p80_us):
            best = again
    return best


def bytes_moved(m: int, n: int, dtype: str) -> int:
    """One read and one write of every element: the least any softmax moves."""
    return 2 * m * n * {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]


def is_fatal(error: BaseException) -> bool:
    text = f"{type(error).__name__}: {error}"
    return any(marker.lower() in text.lower() for marker in FATAL_MARKERS)


def failure(status: str, error: BaseException | str, fatal: bool = False, **extra: Any) -> dict[str, Any]:
    text = error if isinstance(error, str) else "".join(traceback.format_exception_only(type(error), error)).strip()
    return {"status": status, "error": text[:4000], "fatal": fatal, **extra}


def check_chunked(out: Any, x: Any, dtype: str) -> CheckResult:
    """``check_softmax`` over slices of rows, keeping the worst error; first failure wins."""
    m, n = x.shape
    rows = max(1, CHECK_CHUNK_ELEMENTS // max(n, 1))
    worst = 0.0
    for start in range(0, m, rows):
        result = check_softmax(out[start:start + rows], x[start:start + rows], dtype)
        if not result.ok:
            return CheckResult(False, result.max_rel_error, f"rows {start}..: {result.message}")
        worst = max(worst, result.max_rel_error)
    return CheckResult(True, worst)


class Measurer:
    """Keeps per-shape input tensors and a timer; measures items one at a time."""

    def __init__(self, method: str = "cold", time_cap_s: float = 0.5):
        import torch

        from autotuner.tune.timing import Timer

        self.torch = torch
        self.timer = Timer(method, time_cap_s=time_cap_s)
        self._shape: tuple[int, int, str] | None = None
        self._x = self._out = None

    def _inputs(self, m: int, n: int, dtype: str) -> tuple[Any, Any]:
        if self._shape != (m, n, dtype):
            self._x = self._out = None
            self.torch.cuda.empty_cache()
            self._x = random_input(m, n, dtype)
            self._out = self.torch.empty_like(self._x)
            self._shape = (m, n, dtype)
        return self._x, self._out

    def measure(self, item: WorkItem) -> dict[str, Any]:
        try:
            if item.kind == "copy":
                return self._measure_copy(item)
            return self._measure_candidate(item)
        except Exception as exc:  # anything not classified below is a launch-level failure
            return failure("fault" if is_fatal(exc) else "launch_error", exc, fatal=is_fatal(exc))

    def _measure_copy(self, item: WorkItem) -> dict[str, Any]:
        x, out = self._inputs(item.m, item.n, item.dtype)
        timing = copy_reference(self.timer, x, out)
        return {"status": "ok", **timing.as_dict(), "gbps": bytes_moved(item.m, item.n, item.dtype) / timing.median_us / 1e3}

    def _measure_candidate(self, item: WorkItem) -> dict[str, Any]:
        torch = self.torch
        variant = get_variant(item.variant)
        config = KernelConfig.from_key(item.config_key)
        support = variant.supports(item.m, item.n, item.dtype, config)
        if not support:
            return failure("unsupported", support.reason)
        available = variant.available()
        if not available:
            return failure("unsupported", f"not available here: {available.reason}")
        started = time.perf_counter()
        try:
            build = variant.build(config, item.dtype, item.n)
        except Exception as exc:
            return failure("fault" if is_fatal(exc) else "compile_error", exc, fatal=is_fatal(exc))
        resources = build.resources.as_dict()
        if resources.get("compile_seconds") is None:
            resources["compile_seconds"] = time.perf_counter() - started
        x, out = self._inputs(item.m, item.n, item.dtype)
        try:
            out.fill_(POISON)
            build.launch(x, out)
            torch.cuda.synchronize()
            result = check_chunked(out, x, item.dtype)
            if result.ok and item.m > 0:
                edges = edge_input(item.n, item.dtype)
                edge_out = torch.full_like(edges, POISON)
                build.launch(edges, edge_out)
                torch.cuda.synchronize()
                edge_result = check_softmax(edge_out, edges, item.dtype)
                if not edge_result.ok:
                    result = CheckResult(False, edge_result.max_rel_error, f"edge rows: {edge_result.message}")
        except Exception as exc:
            return failure("fault" if is_fatal(exc) else "launch_error", exc, fatal=is_fatal(exc), **resources)
        if not result.ok:
            return failure("wrong", result.message, max_rel_error=result.max_rel_error, **resources)
        timing = self.timer.time(lambda: build.launch(x, out), max_reps=QUICK_REPS)
        if item.best_us is None or timing.min_us <= DROP_FACTOR * item.best_us:
            timing = steadiest(lambda: self.timer.time(lambda: build.launch(x, out)))
        else:  # dropped: the quick estimate is what is stored, so it too must not be a disturbed one
            timing = steadiest(lambda: self.timer.time(lambda: build.launch(x, out), max_reps=QUICK_REPS), first=timing)
        gbps = bytes_moved(item.m, item.n, item.dtype) / timing.median_us / 1e3 if timing.median_us > 0 else None
        return {"status": "ok", **timing.as_dict(), "gbps": gbps, "max_rel_error": result.max_rel_error,
                "error": None, **resources}
