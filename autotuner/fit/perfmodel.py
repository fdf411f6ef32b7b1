"""A per-candidate performance model whose inputs are the shape, the GPU's specs
(``autotuner/lookup/gpu_models.py``) and the kernel's own resources (threads, registers, shared
memory: recorded with every timing, ``autotuner/fit/samples.py``).

Per (variant, config, dtype), a time in µs is a sum of four terms with non-negative coefficients:

    t = c0                                   launch and fixed cost
      + c1 · bytes / bandwidth               DRAM traffic (bytes = 2·M·N·element size, read and write)
      + c2 · waves · N·size / (threads·clock)   a row's serial work per thread, per wave of blocks
      + c3 · waves / clock                   per-wave cost (reductions, barriers)

where ``waves = ceil(M / (blocks_per_sm · SMs))`` (a block per row, as most variants launch; split
and persistent variants fold their own grid into the coefficients), ``blocks_per_sm`` the occupancy
the GPU's limits give the kernel's resources (:func:`blocks_per_sm`: threads, registers and shared
memory per SM, blocks per SM), ``clock`` the boost clock in MHz and ``bandwidth`` the peak DRAM
bandwidth. The coefficients are fitted by non-negative least squares on relative error
(:func:`fit_model`) over every recording of every GPU given, so that one GPU's recordings alone
already fix how a candidate's time splits into terms, and so how it scales to another GPU.

Two predictions: :meth:`PerfModel.predict` from the terms alone, and :meth:`PerfModel.transfer`,
a time measured on one GPU times the model's ratio between the two GPUs at that shape (what the
candidate does at that shape that the terms do not say carries over: alignment, code quality).
Neither is ever below the target GPU's copy floor (:func:`copy_floor_us`).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from autotuner.fit.samples import Resources, Sample
from autotuner.lookup.gpu_models import GpuSpec
from kernels.base import DTYPE_BYTES

TERMS = ("launch", "dram", "row_work", "waves")
REGISTER_GRANULE = 256  # registers are allocated per warp in units of 256 (8 per thread)


def element_bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def copy_floor_us(m: int, n: int, dtype: str, spec: GpuSpec) -> float:
    """Reading and writing the tensor once at the GPU's peak DRAM bandwidth: no softmax is faster."""
    return 2.0 * m * n * element_bytes(dtype) / (spec.bandwidth_gbps * 1e3)


def blocks_per_sm(resources: Resources, spec: GpuSpec) -> int:
    """Resident blocks of a kernel per SM on ``spec`` (at least 1: a block that fits nowhere does not
    run, which ``runs_on`` decides, not the model)."""
    warps = math.ceil(resources.threads / 32)
    registers = math.ceil(resources.registers * 32 / REGISTER_GRANULE) * REGISTER_GRANULE * warps
    limits = [spec.max_blocks_per_sm, spec.max_threads_per_sm // max(resources.threads, 1)]
    if registers:
        limits.append(spec.registers_per_sm // registers)
    if resources.smem:
        limits.append(spec.smem_per_sm // (resources.smem + 1024))  # 1 KB per block the driver reserves
    return max(1, min(limits))


FILL = 0.0  # a grid that fills the GPU whatever M (split-row and persistent kernels): one wave
GRIDS = (FILL, 1 / 32, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # blocks per row tried by the fit


def features(m: int, n: int, dtype: str, resources: Resources, spec: GpuSpec, grid: float = 1.0) -> np.ndarray:
    """The four terms' inputs (module docstring), each in µs for a coefficient of 1. ``grid`` is the
    kernel's blocks per row (``FILL``: as many blocks as the GPU holds at once, whatever M)."""
    return np.array(_grid_features(_shape_terms(m, n, dtype, resources, spec), grid))


def _shape_terms(m: int, n: int, dtype: str, resources: Resources, spec: GpuSpec) -> tuple:
    """What :func:`features` reads that does not depend on the grid (the fit tries every grid of
    ``GRIDS`` on each sample): M, the tensor's bytes, the resident blocks, the copy floor, the clock
    and the threads per block."""
    return (m, m * n * element_bytes(dtype), blocks_per_sm(resources, spec) * spec.sm_count,
            copy_floor_us(m, n, dtype, spec), float(spec.boost_clock_mhz), max(resources.threads, 1))


def _grid_features(terms: tuple, grid: float) -> tuple[float, float, float, float]:
    m, tensor_bytes, resident, floor, clock, threads = terms
    blocks = resident if grid == FILL else max(1, math.ceil(m * grid))
    waves = math.ceil(blocks / resident) if m else 0
    work_per_block = tensor_bytes / blocks
    return 1.0, floor, waves * work_per_block / (threads * clock), waves / clock


@dataclass(frozen=True)
class CandidateModel:
    coefficients: tuple[float, ...]
    samples: int
    log_rms: float  # of the fit on its own samples
    grid: float = 1.0  # blocks per row (``FILL``: the GPU's resident blocks)

    def time(self, m: int, n: int, dtype: str, resources: Resources, spec: GpuSpec) -> float:
        return float(np.dot(self.coefficients, features(m, n, dtype, resources, spec, self.grid)))


Key = tuple[str, str, str]  # (variant, config_key, dtype)


@dataclass(frozen=True)
class PerfModel:
    candidates: Mapping[Key, CandidateModel]
    gpus: tuple[str, ...]  # the GPUs whose recordings it was fitted on

    def predict(self, variant: str, config_key: str, dtype: str, m: int, n: int, resources: Resources,
                spec: GpuSpec) -> float | None:
        """The candidate's time on ``spec`` from the terms alone; None for a candidate never fitted."""
        model = self.candidates.get((variant, config_key, dtype))
        if model is None:
            return None
        return max(model.time(m, n, dtype, resources, spec), copy_floor_us(m, n, dtype, spec))

    def transfer(self, sample: Sample, spec: GpuSpec, measured_on: GpuSpec) -> float | None:
        """``sample``'s time (measured on ``measured_on``) moved to ``spec`` by the model's ratio."""
        model = self.candidates.get((sample.variant, sample.config_key, sample.dtype))
        if model is None:
            return None
        shape = (sample.m, sample.n, sample.dtype, sample.resources)
        there, here = model.time(*shape, spec), model.time(*shape, measured_on)
        if not (here > 0 and there > 0):
            return None
        return max(sample.median_us * there / here, copy_floor_us(sample.m, sample.n, sample.dtype, spec))


def nonnegative_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin ||a x - b|| over x >= 0, for a few columns: the best of the unconstrained solutions on
    every subset of columns whose solution is non-negative (the optimum is one of them)."""
    best, best_residual = np.zeros(a.shape[1]), float(np.dot(b, b))
    for size in range(1, a.shape[1] + 1):
        for subset in itertools.combinations(range(a.shape[1]), size):
            columns = list(subset)
            solution, *_ = np.linalg.lstsq(a[:, columns], b, rcond=None)
            if np.any(solution < 0):
                continue
            residual = float(np.sum((a[:, columns] @ solution - b) ** 2))
            if residual < best_residual:
                best_residual = residual
                best = np.zeros(a.shape[1])
                best[columns] = solution
    return best


def fit_candidate(rows: np.ndarray, times: np.ndarray, grid: float = 1.0) -> CandidateModel:
    """Coefficients minimising the relative error sum((t_model - t) / t)^2, non-negative."""
    coefficients = nonnegative_least_squares(rows / times[:, None], np.ones(len(times)))
    predicted = np.maximum(rows @ coefficients, 1e-9)
    log_rms = float(np.sqrt(np.mean(np.log(predicted / times) ** 2)))
    return CandidateModel(tuple(float(c) for c in coefficients), len(times), log_rms, grid)


def fit_samples(group: Sequence[Sample], specs: Mapping[str, GpuSpec]) -> CandidateModel:
    """The best :func:`fit_candidate` over the grids of ``GRIDS`` (the kernel's launch is not recorded)."""
    times = np.array([s.median_us for s in group])
    terms = [_shape_terms(s.m, s.n, s.dtype, s.resources, specs[s.gpu]) for s in group]
    fits = [fit_candidate(np.array([_grid_features(t, grid) for t in terms]), times, grid) for grid in GRIDS]
    return min(fits, key=lambda fit: fit.log_rms)


def fit_model(samples: Iterable[Sample], specs: Mapping[str, GpuSpec]) -> PerfModel:
    """One :class:`CandidateModel` per (variant, config, dtype) over every sample of a GPU in ``specs``."""
    grouped: dict[Key, list[Sample]] = {}
    gpus = set()
    for sample in samples:
        if sample.gpu in specs:
            grouped.setdefault((sample.variant, sample.config_key, sample.dtype), []).append(sample)
            gpus.add(sample.gpu)
    return PerfModel({key: fit_samples(group, specs) for key, group in grouped.items()}, tuple(sorted(gpus)))


def ratio_summary(ratios: Sequence[float]) -> dict[str, float | int | None]:
    """predicted/measured ratios summarised: their geomean (bias), the geomean of their size
    (exp mean |log r|) and the 90th percentile of max(r, 1/r)."""
    if not ratios:
        return {"geomean": None, "abs_geomean": None, "p90": None, "count": 0}
    logs = np.log(np.asarray(ratios, dtype=float))
    return {"geomean": round(float(np.exp(logs.mean())), 4), "abs_geomean": round(float(np.exp(np.abs(logs).mean())), 4),
            "p90": round(float(np.exp(np.quantile(np.abs(logs), 0.9))), 4), "count": len(ratios)}
