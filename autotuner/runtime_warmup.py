"""``warmup(gpu, dtypes)``: compile, before the first request, everything ``softmax()`` can need.

A server's first calls must not pay a compile: every kernel instance the GPU's dispatch tables can
pick (their candidates, read from the lookup's store; those the GPU runs) is built and loaded on the
current device, a Triton instance once per bucket it specialises on (each power-of-two BLOCK of its
N range, N aligned to 16 elements or not), and the native launch module is built for this torch
(``kernels.native``). Everything lands in the on-disk caches as well (CuPy's and Triton's kernel
caches, the native module's folder), so the next process finds it there. Last, the tables' decision
indexes are read as ``softmax()`` and ``select_kernel`` read them (``_read_indexes``): a table's
index is decoded on first use, about 10 ms, which the first request of each dtype would pay; so
is the native plan made from it, where the native module is loaded. Last, each instance is launched
once per class of N its native rule tells apart (a Triton bucket; one N for a CUDA rule) through
that plan (``_teach``), so the plan knows the launch before a request needs it: a
first call of a class would otherwise take the Python path to teach it (tens of microseconds).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from autotuner.domain import MAX_DIM
from kernels.base import next_power_of_two

TRITON_N_CAP = 1 << 17  # a Triton config without an N limit is specialised per alignment only: probe up to here
PROBE_N_CAP = 1 << 22  # the longest row another build is taught with (8-16 MB): longer ones take no more shared memory
Progress = Callable[[int, int, str], None]  # (done, total, what was just done)


def _bucket_probes(n_min: int, n_max: int) -> list[int]:
    """Row lengths that reach every bucket a Triton build specialises on within [n_min, n_max]:
    per power-of-two BLOCK, one N that is a multiple of 16 and one that is not, where the range has them."""
    probes = set()
    block = next_power_of_two(n_min)
    while block // 2 < n_max:
        low, high = max(n_min, block // 2 + 1), min(n_max, block)
        aligned = high - high % 16
        probes.update(n for n in (aligned, high if high % 16 else high - 1) if low <= n <= high)
        block *= 2
    return sorted(n for n in probes if n >= 1)


def _candidates(gpu: str, dtype: str) -> list[tuple[int, str, dict[str, Any], dict[str, int]]]:
    """(index, variant, config, constraints) of every candidate that ``gpu`` runs of the ``dtype`` table
    it is answered from (its own, or the one it borrows: ``TableStore.answering_table``)."""
    from autotuner.lookup.gpu_models import gpu_spec, runnable_candidates
    from autotuner.lookup.select import default_store

    answering = default_store().answering_table(gpu, dtype)
    if answering is None:
        return []
    table = answering[0]
    spec = gpu_spec(gpu)
    runnable = runnable_candidates(table.candidates, table.gpu, spec) if spec else range(len(table.candidates))
    return [(i, table.candidates[i]["variant"], dict(table.candidates[i]["config"]),
             dict(table.candidates[i].get("constraints", {}))) for i in sorted(runnable)]


def _read_indexes(device: int, gpu: str, dtypes: tuple[str, ...]) -> None:
    """Decode, for each dtype, the index partitions (N a multiple of 8, and not) of the table view
    that ``softmax()`` picks from on ``device`` and that ``select_kernel`` answers ``gpu`` from, and
    make the native plans that ``softmax()`` calls go through (``runtime.plan_for``)."""
    from autotuner import runtime
    from autotuner.lookup.select import select_kernel

    for dtype in dtypes:
        for n in (8, 9):
            runtime.instance_for(device, 1, n, dtype)
            select_kernel(1, n, dtype, gpu=gpu)
        runtime.plan_for(device, dtype)


def _probes(triton: bool, limits: dict[str, int]) -> list[int]:
    """Row lengths that reach every class of N a build within ``limits`` compiles or launches apart:
    a Triton build's buckets; for the others (one class) the shortest and the longest row, up to
    ``PROBE_N_CAP``, each a multiple of 16 where the range has one (every kernel takes it: vector
    loads need no tail): a rule whose shared memory grows with N then has its largest opt-in taught,
    which serves every shorter row."""
    n_min, n_max = max(1, limits.get("n_min", 1)), limits.get("n_max", MAX_DIM)
    if triton:
        return _bucket_probes(n_min, min(n_max, TRITON_N_CAP))
    shortest = -(-n_min // 16) * 16
    longest = min(n_max, max(PROBE_N_CAP, n_min))
    longest -= longest % 16 if longest - longest % 16 >= n_min else 0
    return sorted({shortest if shortest <= n_max else n_max, longest})


def _teach(device: int, dtype: str, candidate: int, build: Any, rows: Any) -> bool:
    """Launch the softmax of ``rows`` (2-D contiguous, on ``device``, the current one) with ``build``,
    candidate ``candidate`` of the GPU's own ``dtype`` table, through the native module, as a first
    call whose pick it is would (``runtime._launch_native``), so that the plan learns the launch of
    N's class (a rule whose shared memory grows with N widens the opt-in the plan allows). True
    where the plan keeps a launch of a class it did not hold before; False where it learned nothing
    new: no plan made (``runtime.plan_for``), a build without a native rule, a launch the module
    refused, a class it held already."""
    from autotuner import runtime
    from kernels.registry import native_rule

    picker = runtime._pickers.get((device, dtype))
    module = runtime.native_module()
    if picker is None or picker[2] is None or picker[5] is None or module is None or native_rule(build) is None:
        return False
    before = module.plan_stats(picker[5])["launches_kept"]
    runtime._launch_native(device, rows, build, rows.shape, picker, candidate)
    return module.plan_stats(picker[5])["launches_kept"] > before


def _warm_instance(device: int, candidate: int | None, variant: str, config: dict[str, Any], limits: dict[str, int],
                   dtype: str) -> tuple[int, int]:
    """Build one instance and launch it once per class of N (``_probes``): a Triton build through
    its own launch first (which compiles the bucket), then, where ``candidate`` (its number in the
    device's own table) is given, through the device's plan, which learns the launch. (Triton
    buckets launched, launches the plan learned.)"""
    import torch

    from autotuner import runtime
    from kernels import get_variant
    from kernels.reference import random_input

    build = runtime.build_for(variant, config, dtype, max(1, limits.get("n_min", 1)))
    triton = get_variant(variant).backend == "triton"
    probes = _probes(triton, limits)
    taught = 0
    for n in probes:
        x = random_input(1, n, dtype)
        if triton:
            build.launch(x, torch.empty_like(x))
        if candidate is not None:
            taught += _teach(device, dtype, candidate, build, x)
    return (len(probes) if triton else 0), taught


def warmup(gpu: str | None = None, dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16"),
           progress: Progress | None = None, native: bool = True) -> dict[str, Any]:
    """Compile every kernel instance the ``dtypes`` tables of ``gpu`` (default: the current
    device's) can pick, and (``native``) build the native launch module; a report of what was
    done, how long it took, and what failed (a candidate that does not build is reported, and
    ``softmax()`` would replace it by torch.softmax, as it does at call time). The plans taught and
    the modules loaded are the current device's: a process serving several GPUs calls it under each
    (``with torch.cuda.device(i)``); the compiles are shared."""
    import torch

    from autotuner import runtime
    from kernels import native as native_loader

    if not torch.cuda.is_available():
        raise RuntimeError("warmup needs a CUDA device (torch sees none)")
    gpu = gpu or runtime._gpu_key(torch.cuda.current_device())
    started = time.perf_counter()
    report: dict[str, Any] = {"gpu": gpu, "dtypes": {}}
    if native:
        native_started = time.perf_counter()
        try:
            report["native"] = {"path": str(native_loader.build()), "ok": True}
            native_loader.reset()
        except native_loader.NativeBuildError as exc:
            report["native"] = {"ok": False, "error": str(exc)[-2000:]}
        report["native"]["seconds"] = round(time.perf_counter() - native_started, 2)
    device = torch.cuda.current_device()
    indexes_started = time.perf_counter()
    _read_indexes(device, gpu, dtypes)  # first: the plans the launches below are taught to
    report["index_seconds"] = round(time.perf_counter() - indexes_started, 3)
    own = gpu == runtime._gpu_key(device)  # another GPU's tables: compiled, not taught to this device's plans
    work = [(dtype, *candidate) for dtype in dtypes for candidate in _candidates(gpu, dtype)]
    for dtype in dtypes:
        report["dtypes"][dtype] = {"instances": 0, "triton_launches": 0, "plan_launches_taught": 0, "failed": [],
                                   "seconds": 0.0}
    for done, (dtype, index, variant, config, limits) in enumerate(work, 1):
        entry = report["dtypes"][dtype]
        item_started = time.perf_counter()
        label = f"{dtype} {variant} {','.join(f'{k}={v}' for k, v in config.items())}"
        try:
            launched, taught = _warm_instance(device, index if own else None, variant, config, limits, dtype)
            entry["triton_launches"] += launched
            entry["plan_launches_taught"] += taught
            entry["instances"] += 1
        except Exception as exc:  # noqa: BLE001 - one candidate that fails to build must not stop the rest
            entry["failed"].append(f"{label}: {type(exc).__name__}: {exc}")
        entry["seconds"] = round(entry["seconds"] + time.perf_counter() - item_started, 2)
        if progress is not None:
            progress(done, len(work), label)
    torch.cuda.synchronize()
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report
