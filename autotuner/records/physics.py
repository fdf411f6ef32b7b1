"""What one measured row can be on one GPU model: the floors its times cannot pass and the range of
the resources a build can report. Pure data and arithmetic; ``plausibility.py`` names the rules.

Times (µs). A softmax reads and writes every element at least once (``bytes_moved``), so:

- ``copy-floor``: no time is below those bytes at ``MAX_DRAM_FRACTION`` of the model's datasheet DRAM
  peak. The fraction is the highest any committed recording reaches (``RECORDED_DRAM_FRACTION``: the
  H100's and H200's sweeps and copy references, every quantile, ``tests/records`` recomputes it) plus
  ``DRAM_MARGIN``, so a faster genuine host has room and a forged "0.99 of peak" has none.
- ``launch-floor``: no time is below the model's launch floor: the lowest p20 of any recorded row
  (kernels and copies, ``RECORDED_LAUNCH_FLOOR_US``) times ``LAUNCH_MARGIN``; a model without a
  recording is held to the lowest recorded floor. Warm timings bracket one call as cold ones do;
  graph replays run back to back and overlap the launch, so they are held to ``GRAPH_LAUNCH_SHARE``
  of the floor (no graph recording exists yet to measure it).
- ``l2-limit`` (warm and graph): the data may stay in L2 between calls, but only as much as L2 holds:
  the bytes past ``l2_bytes`` still cross DRAM (at the copy floor's fraction), and all of them cross
  L2, which delivers at most ``L2_BYTES_PER_CLOCK_PER_SM`` bytes a clock to each SM at the boost clock
  (an upper bound: the A100 whitepaper gives its L2 5,120 bytes a clock over 108 SMs, 47 an SM).

Resources, as ``kernels.base.Resources`` reports them (CUDA Programming Guide, "Technical
Specifications per Compute Capability"): at most 255 registers a thread, 1,024 threads a block,
48 KB of static shared memory, the architecture's opt-in shared memory per block in all, 512 KB of
local memory (spills) a thread, 1 to the architecture's blocks per SM, and a residency the SM can hold
(threads and registers per SM); occupancy in (0, 1], equal to the resident warps over the SM's.
"""
from __future__ import annotations

from typing import Any, Iterator

from autotuner.lookup.gpu_models import GpuSpec
from autotuner.tune.measure import bytes_moved

RECORDED_DRAM_FRACTION = 0.911  # H100 p20 at 1048576x500 fp32 (tests/data/h100_domain.json.gz); H200 0.898
DRAM_MARGIN = 0.04
MAX_DRAM_FRACTION = RECORDED_DRAM_FRACTION * (1 + DRAM_MARGIN)
RECORDED_LAUNCH_FLOOR_US = {"h100": 3.385, "h200": 3.103}  # lowest p20 of any recorded row (copies, both)
LAUNCH_MARGIN = 0.8
GRAPH_LAUNCH_SHARE = 0.5
L2_BYTES_PER_CLOCK_PER_SM = 64
MAX_TIME_US = 3600e6  # an hour

MAX_REGISTERS = 255
MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SMEM = 48 * 1024
MAX_SPILL_BYTES = 512 * 1024
WARP = 32
OCCUPANCY_TOLERANCE = 0.01


def launch_floor_us(spec: GpuSpec, timing_method: str) -> float:
    """The least time any call of ``timing_method`` takes on ``spec``'s model (see the module docstring)."""
    recorded = RECORDED_LAUNCH_FLOOR_US.get(spec.key, min(RECORDED_LAUNCH_FLOOR_US.values()))
    return recorded * LAUNCH_MARGIN * (GRAPH_LAUNCH_SHARE if timing_method == "graph" else 1.0)


def l2_gbps(spec: GpuSpec) -> float:
    """The most bytes a second (GB/s) the model's L2 can deliver to its SMs (an upper bound)."""
    return spec.sm_count * L2_BYTES_PER_CLOCK_PER_SM * spec.boost_clock_mhz * 1e6 / 1e9


class TimeFloors:
    """The floors of one (GPU model, timing method): ``problems(m, n, dtype, times)`` names each broken one."""

    def __init__(self, spec: GpuSpec, timing_method: str):
        self.spec = spec
        self.cold = timing_method == "cold"
        self.launch_us = launch_floor_us(spec, timing_method)
        self.dram_gbps = spec.bandwidth_gbps * MAX_DRAM_FRACTION
        self.l2_gbps = l2_gbps(spec)

    def problems(self, moved: int, times: dict[str, float]) -> list[tuple[str, str]]:
        """(rule, what is wrong) for times of a row that moves ``moved`` bytes."""
        if not times:
            return []
        fastest, slowest = min(times.values()), max(times.values())
        bound = max(self.launch_us, (moved if self.cold else moved - self.spec.l2_bytes) / self.dram_gbps / 1e3,
                    0.0 if self.cold else moved / self.l2_gbps / 1e3)
        if fastest >= bound and slowest <= MAX_TIME_US:
            return []  # the common case, at the cost of one comparison
        return list(self._problems(moved, times, fastest))

    def _problems(self, moved: int, times: dict[str, float], fastest: float) -> Iterator[tuple[str, str]]:
        if fastest < self.launch_us:
            yield "launch-floor", (f"{_listed(times, self.launch_us)} below {self.spec.key}'s launch floor of "
                                   f"{self.launch_us:.3g} us")
        dram_bytes = moved if self.cold else max(0, moved - self.spec.l2_bytes)
        copy_us = dram_bytes / self.dram_gbps / 1e3
        if fastest < copy_us:
            reach = "" if self.cold else f" (the {dram_bytes} bytes past its {self.spec.l2_bytes}-byte L2)"
            yield "copy-floor", (f"{_listed(times, copy_us)} below {copy_us:.3g} us: {dram_bytes} bytes{reach} at "
                                 f"{MAX_DRAM_FRACTION:.3f} of {self.spec.key}'s {self.spec.bandwidth_gbps:g} GB/s")
        if not self.cold:
            l2_us = moved / self.l2_gbps / 1e3
            if fastest < l2_us:
                yield "l2-limit", (f"{_listed(times, l2_us)} below {l2_us:.3g} us: {moved} bytes through "
                                   f"{self.spec.key}'s L2 at {self.l2_gbps:.0f} GB/s at most")
        slow = [name for name, value in times.items() if value > MAX_TIME_US]
        if slow:
            yield "time-ceiling", f"{', '.join(slow)} over an hour"


def _listed(times: dict[str, float], floor: float) -> str:
    return ", ".join(f"{name} {value:.3g}" for name, value in times.items() if value < floor) + " us"


def shape_problem(m: int, n: int, dtype: str, spec: GpuSpec) -> str | None:
    """Why (m, n) cannot have been measured on ``spec``'s model: no element (m or n is 0), or input
    and output larger than its memory; None when it can."""
    if m < 1 or n < 1:
        return f"{m}x{n} holds no element: a row of M = 0 or N = 0 measures nothing (m, n >= 1)"
    moved = bytes_moved(m, n, dtype)
    if spec.memory_bytes and moved > spec.memory_bytes:
        return f"input and output take {moved} bytes, more than {spec.key}'s {spec.memory_bytes} bytes of memory"
    return None


def resource_problems(row: Any, spec: GpuSpec) -> list[str]:
    """What is out of range among a row's reported resources (None: not reported, not checked)."""
    if row.registers is None and row.threads_per_block is None and row.blocks_per_sm is None and \
            row.static_smem is None and row.dynamic_smem is None and row.occupancy is None and row.spill_bytes is None:
        return []
    return list(_resource_problems(row, spec))


def _resource_problems(row: Any, spec: GpuSpec) -> Iterator[str]:
    registers, threads, blocks = row.registers, row.threads_per_block, row.blocks_per_sm
    static, dynamic, occupancy, spills = row.static_smem, row.dynamic_smem, row.occupancy, row.spill_bytes
    if registers is not None and not 1 <= registers <= MAX_REGISTERS:
        yield f"registers {registers} (a thread has 1 to {MAX_REGISTERS})"
    if threads is not None and not 1 <= threads <= MAX_THREADS_PER_BLOCK:
        yield f"threads_per_block {threads} (1 to {MAX_THREADS_PER_BLOCK})"
    if static is not None and static > MAX_STATIC_SMEM:
        yield f"static_smem {static} (at most {MAX_STATIC_SMEM} bytes)"
    if (static or 0) + (dynamic or 0) > spec.smem_per_block:
        yield f"shared memory {(static or 0) + (dynamic or 0)} bytes (a block has at most {spec.smem_per_block} on {spec.key})"
    if spills is not None and spills > MAX_SPILL_BYTES:
        yield f"spill_bytes {spills} (a thread has at most {MAX_SPILL_BYTES} bytes of local memory)"
    if blocks is not None and not 1 <= blocks <= spec.max_blocks_per_sm:
        yield f"blocks_per_sm {blocks} (1 to {spec.max_blocks_per_sm} on {spec.key})"
    if occupancy is not None and not 0 < occupancy <= 1:
        yield f"occupancy {occupancy} (in (0, 1])"
    if threads and blocks and 1 <= threads <= MAX_THREADS_PER_BLOCK:
        if threads * blocks > spec.max_threads_per_sm:
            yield f"{blocks} blocks of {threads} threads on one SM ({spec.key}'s SM holds {spec.max_threads_per_sm})"
        elif registers and registers * threads * blocks > spec.registers_per_sm:
            yield (f"{blocks} blocks of {threads} threads at {registers} registers on one SM ({spec.key}'s SM has "
                   f"{spec.registers_per_sm} registers)")
        elif occupancy is not None:
            resident = blocks * -(-threads // WARP) / (spec.max_threads_per_sm // WARP)
            if abs(occupancy - resident) > OCCUPANCY_TOLERANCE:
                yield f"occupancy {occupancy:.4g}, where {blocks} blocks of {threads} threads are {resident:.4g} of the SM"
