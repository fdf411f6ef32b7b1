"""GPU timing with CUDA events (runs inside the worker process, which owns the device).

Methods:
- ``cold``: a 256 MB scratch write before each timed call evicts the L2 (H100 L2 is 50 MB, H200 60 MB),
  so every call reads its input from device memory, as a softmax on fresh activations does.
- ``warm``: no flush; the input may sit in L2 from the previous call.
- ``graph``: the call captured once in a CUDA graph, replays timed back to back (launch-bound shapes
  as inference runtimes run them); the time per replay is the total over the count.

``Timer(..., graph_launch=True)`` (``cold`` or ``warm``): the call is captured once in a CUDA graph and
each timed call is a replay of it, between the same flush and events. Every contender is then
submitted to the GPU by one ``cudaGraphLaunch``, whatever its own Python launch path costs the host.
That matters on shapes of a few µs: on the H100 the GPU time between the events moved by 0.1-0.3 µs
with the host's pacing alone (the same kernel, launched by Triton's JIT or by a pre-bound ``run``, on
11 shapes of 4-6 µs).

Repetitions adapt: batches are added until the median moves by less than ``rel_tol`` between batches
or ``time_cap_s`` of GPU time is spent; median, p20, p80 and the count are returned.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from autotuner.domain import TIMING_METHODS as METHODS

FLUSH_BYTES = 256 * 1024 * 1024
# Before each timed call the GPU spins this many cycles (about 50 µs at 2 GHz), so the host has
# enqueued the call before the GPU reaches it: host-side launch cost (tens of µs for a Python launch
# path) then never shows up as idle time between the events.
HEAD_START_CYCLES = 100_000


@dataclass(frozen=True)
class Timing:
    median_us: float
    p20_us: float
    p80_us: float
    repetitions: int
    min_us: float = 0.0  # fastest repetition: what the quick drop compares (outliers are slow-side)

    def as_dict(self) -> dict[str, float | int]:
        return {"median_us": self.median_us, "p20_us": self.p20_us, "p80_us": self.p80_us,
                "repetitions": self.repetitions}


# A timing whose p80 exceeds this multiple of its p20 was disturbed (another process, a clock change):
# the measurer times it again, and ``sweep --retime-unstable`` re-measures such rows already stored.
UNSTABLE_SPREAD = 2.0


def spread(p20_us: float | None, p80_us: float | None) -> float:
    """p80 / p20 of a timing (1.0 when either is missing or zero)."""
    return p80_us / p20_us if p20_us and p80_us else 1.0


def is_unstable(p20_us: float | None, p80_us: float | None, limit: float = UNSTABLE_SPREAD) -> bool:
    return spread(p20_us, p80_us) > limit


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    if not sorted_values:
        raise ValueError("no values")
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(samples_us: list[float]) -> Timing:
    ordered = sorted(samples_us)
    return Timing(statistics.median(ordered), quantile(ordered, 0.2), quantile(ordered, 0.8), len(ordered), ordered[0])


class Timer:
    """Times a zero-argument callable on the current CUDA device with the chosen method."""

    def __init__(self, method: str = "cold", warmup: int = 3, batch: int = 10, max_reps: int = 200,
                 time_cap_s: float = 0.5, rel_tol: float = 0.01, graph_launch: bool = False):
        if method not in METHODS:
            raise ValueError(f"timing method {method!r} not one of {', '.join(METHODS)}")
        if graph_launch and method == "graph":
            raise ValueError("graph_launch applies to the cold and warm methods (graph replays already)")
        self.graph_launch = graph_launch
        import torch

        self.torch = torch
        self.method = method
        self.warmup, self.batch, self.max_reps = warmup, batch, max_reps
        self.time_cap_s, self.rel_tol = time_cap_s, rel_tol
        self._scratch = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if method == "cold" else None

    def _flush(self) -> None:
        if self._scratch is not None:
            self._scratch.fill_(0x5A5A)

    def _batch_events(self, fn: Callable[[], Any], count: int) -> list[float]:
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        for start, end in zip(starts, ends):
            self._flush()
            torch.cuda._sleep(HEAD_START_CYCLES)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) * 1000.0 for start, end in zip(starts, ends)]

    def _batch_graph(self, graph: Any, count: int, replays: int = 20) -> list[float]:
        torch = self.torch
        samples = []
        for _ in range(count):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / replays)
        return samples

    def time(self, fn: Callable[[], Any], max_reps: int | None = None) -> Timing:
        """Median of at least two batches (``max_reps`` caps the count, e.g. for a quick estimate)."""
        torch = self.torch
        cap = self.max_reps if max_reps is None else max_reps
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        graph = None
        if self.method == "graph" or self.graph_launch:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()  # warm-up on the capture stream (allocations, lazy init)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            graph.replay()
            torch.cuda.synchronize()
        samples: list[float] = []
        previous_median = None
        started = time.perf_counter()
        while len(samples) < cap:
            count = min(self.batch, cap - len(samples))
            if self.method == "graph":
                batch = self._batch_graph(graph, count)
            else:
                batch = self._batch_events(graph.replay if graph is not None else fn, count)
            samples.extend(batch)
            median = statistics.median(samples)
            stable = previous_median is not None and abs(median - previous_median) <= self.rel_tol * median
            if (stable and len(samples) >= 2 * self.batch) or time.perf_counter() - started > self.time_cap_s:
                break
            previous_median = median
        return summarize(samples)
