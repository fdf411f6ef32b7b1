"""Dynamic shapes on the GPU: per-call host time of ``autotuner.softmax`` against ``torch.softmax`` on the
same shapes in the same process, where every call meets a new shape (and then the same shapes again),
the GPU time of the picks on repeats, and the runtime's cache sizes at the end.

Run on the GPU machine, from the repository root (through ``bash bench/device/run.sh exec`` where the
wheelhouse is carried: bench/device/README.md):

    python -m bench.dynamic_shapes --out bench/data/dynamic_shapes_h100.json

Workloads: (a) eager-attention decode, 256 rows, key length 2048 -> 2447 (+1 per call), fp16, and
the same as a model hands its scores over, 4-D (batch 4, 32 heads, 1 query, key length 1024 -> 1423); (b)
vocabulary sampling M = 1 ... 400 x 128256, bf16; (c) 6,000 random shapes M 1-64 x N 1000-9000, fp16;
(d) 10,000 shapes drawn log-uniform over the domain (M 1-2^20, N 1-2^24, tensors up to 256 MB), each
new, fp16 and bf16 alternately. Each workload also has a second list of shapes, as many, new as well
(decode 2448 -> 2847, the 4-D scores 1424 -> 1823, M = 401 ... 800, another 6,000 and 10,000 drawn alike), timed back to back. ``autotuner.warmup`` runs first (timed: every instance of the GPU's
fp16 and bf16 tables compiled, the native module built), as a server would at start.

Host time of one call: ``perf_counter_ns`` around the call, the device drained before it (outside the
timing), so a full launch queue never blocks it; ``softmax`` and ``torch.softmax`` alternate shape by
shape, inputs are views of one preallocated buffer. Per workload: mean and median per call of each,
their ratios, on the first pass (every shape new to softmax) and on a second pass (repeats). GPU time:
CUDA events around 20 back-to-back calls on a sample of each workload's shapes (warm L2), geomean
ratio of softmax's pick to torch.softmax. Back to back: each list in one loop without synchronising
(softmax's, then torch.softmax's), wall time per call with the final drain, as the issue measured.
The garbage collector's collections during each pass are counted and timed (``GcPauses``).
Also: ``select_kernel`` per call on 2,000 shapes it has not answered (the lookup's share of a new
shape), and a cProfile of 2,000 new shapes' calls. Repeated-shape host time of the two target shapes (fp16
1x4096, bf16 8x1024): 2000 calls back to back per sample, 15 interleaved rounds, median.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUFFER_BYTES = 256 << 20


def _views(buffer, shapes, dtype):
    """``buffer``'s first elements as a tensor of ``dtype`` of each shape ((m, n), or any rank)."""
    flat = buffer.view(dtype)
    return [flat[: math.prod(shape)].view(shape) for shape in shapes]


class GcPauses:
    """The garbage collector's collections while in use (``gc.callbacks``): per generation, how
    many and their total pause (ms). A full collection walks every tracked object of the process
    (tens of ms with torch loaded): a few of them move a workload's mean host time per call."""

    def __init__(self) -> None:
        self.counts, self.ms, self._started = [0, 0, 0], [0.0, 0.0, 0.0], 0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        else:
            self.counts[info["generation"]] += 1
            self.ms[info["generation"]] += (time.perf_counter_ns() - self._started) / 1e6

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)

    def figures(self) -> dict:
        return {"gc_collections_by_generation": self.counts, "gc_pause_ms_by_generation": [round(v, 2) for v in self.ms]}


def host_times(inputs, softmax, reference, labels=None) -> dict:
    """Per-call host time (us) of ``softmax`` and ``reference`` on each input, alternating; the
    collector's pauses meanwhile (``GcPauses``), which land on whichever call triggers them; with
    ``labels`` (one per input: its pick), the medians per label too."""
    import torch

    ours, theirs = [], []
    with GcPauses() as pauses:
        for i, x in enumerate(inputs):
            order = ((softmax, ours), (reference, theirs)) if i % 2 == 0 else ((reference, theirs), (softmax, ours))
            for fn, sink in order:
                torch.cuda.synchronize()
                t0 = time.perf_counter_ns()
                fn(x)
                sink.append((time.perf_counter_ns() - t0) / 1e3)
        torch.cuda.synchronize()
    slowest = {name: [(tuple(inputs[i].shape), round(times[i], 1)) for i in sorted(range(len(times)), key=times.__getitem__)[-6:]]
               for name, times in (("softmax", ours), ("torch", theirs))}
    by_label = {}
    for label in sorted(set(labels or ())):
        picked = [i for i, name in enumerate(labels) if name == label]
        mine, torch_times = statistics.median(ours[i] for i in picked), statistics.median(theirs[i] for i in picked)
        by_label[label] = {"calls": len(picked), "softmax_median_us": round(mine, 2), "torch_median_us": round(torch_times, 2),
                           "median_ratio": round(mine / torch_times, 3)}
    return {**pauses.figures(), "slowest_calls": slowest, **({"by_pick": by_label} if labels else {}),
            "softmax_mean_us": statistics.fmean(ours), "torch_mean_us": statistics.fmean(theirs),
            "softmax_median_us": statistics.median(ours), "torch_median_us": statistics.median(theirs),
            "softmax_p99_us": sorted(ours)[int(0.99 * len(ours))], "torch_p99_us": sorted(theirs)[int(0.99 * len(theirs))],
            "mean_ratio": statistics.fmean(ours) / statistics.fmean(theirs),
            "median_ratio": statistics.median(ours) / statistics.median(theirs), "calls": len(inputs)}


def back_to_back(inputs, softmax, reference) -> dict:
    """Wall time per call (us) of ``softmax`` over ``inputs`` called back to back (each shape new to
    it), then ``reference`` over the same inputs, the device drained before and after each loop: the
    issue's way (a GPU-bound loop measures GPU time, a host-bound one host time)."""
    import torch

    figures = {}
    for name, fn in (("softmax", softmax), ("torch", reference)):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for x in inputs:
            fn(x)
        t1 = time.perf_counter_ns()
        torch.cuda.synchronize()
        t2 = time.perf_counter_ns()
        figures[f"{name}_host_us"] = (t1 - t0) / len(inputs) / 1e3
        figures[f"{name}_wall_us"] = (t2 - t0) / len(inputs) / 1e3
    figures["wall_ratio"] = figures["softmax_wall_us"] / figures["torch_wall_us"]
    figures["calls"] = len(inputs)
    return figures


def lookup_uncached(shapes, dtype: str) -> dict:
    """``select_kernel`` per call on shapes it has not answered yet (the lookup's share of a new shape)."""
    from autotuner import select_kernel
    from autotuner.lookup.gpu import current_gpu_key

    gpu = current_gpu_key()
    times = []
    for m, n in shapes:
        t0 = time.perf_counter_ns()
        select_kernel(m, n, dtype, gpu=gpu)
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return {"median_us": statistics.median(times), "mean_us": statistics.fmean(times), "shapes": len(times)}


def profile_new_shapes(inputs, softmax) -> str:
    """cProfile of softmax over new shapes: where a new shape's host time goes (top 25 by own time)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for x in inputs:
        softmax(x)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    return text.getvalue()[-6000:]


def gpu_ratio(inputs, softmax, reference, sample: int, rng: random.Random) -> dict:
    """Geomean over a sample of inputs of (softmax's GPU time / torch.softmax's), CUDA events around
    20 back-to-back calls each (warm L2)."""
    import torch

    def timed(fn, x):
        fn(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(20):
            fn(x)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / 20

    chosen = rng.sample(inputs, min(sample, len(inputs)))
    logs = [math.log(timed(softmax, x) / timed(reference, x)) for x in chosen]
    return {"gpu_time_ratio_geomean": math.exp(statistics.fmean(logs)), "shapes_timed": len(chosen),
            "worst_ratio": math.exp(max(logs)), "best_ratio": math.exp(min(logs))}


def workload(name, inputs, fresh, softmax, reference, rng) -> dict:
    """``inputs`` timed call by call (new, then repeated; the medians also per pick), ``fresh`` (other
    shapes, also new) back to back; how many of the new shapes' calls the native plans launched themselves."""
    import torch

    from autotuner import runtime, select_kernel

    names = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
    labels = [select_kernel(x.numel() // x.shape[-1], x.shape[-1], names[x.dtype]).variant for x in inputs]
    before = runtime.plan_stats()
    first = host_times(inputs, softmax, reference, labels)
    after = runtime.plan_stats()
    first["plan_launched"], first["plan_declined"] = (after[key] - before[key] for key in ("launches", "declined"))
    again = host_times(inputs, softmax, reference, labels)
    loop = back_to_back(fresh, softmax, reference)
    result = {"new_shapes": first, "repeats": again, "new_shapes_back_to_back": loop,
              **gpu_ratio(inputs, softmax, reference, 100, rng)}
    print(f"{name}: new {first['softmax_mean_us']:.1f} vs {first['torch_mean_us']:.1f} us (mean, "
          f"{first['mean_ratio']:.2f}x; median {first['median_ratio']:.2f}x), repeats {again['mean_ratio']:.2f}x "
          f"(median {again['median_ratio']:.2f}x), back to back {loop['softmax_wall_us']:.1f} vs "
          f"{loop['torch_wall_us']:.1f} us ({loop['wall_ratio']:.2f}x), GPU {result['gpu_time_ratio_geomean']:.3f}x; "
          f"plan launched {first['plan_launched']} of {first['calls']}; "
          f"gc on the new pass {first['gc_collections_by_generation']} ({first['gc_pause_ms_by_generation']} ms)",
          file=sys.stderr)
    return result


def repeated_target(m, n, dtype_name, softmax) -> dict:
    import torch

    from kernels.reference import random_input

    x = random_input(m, n, dtype_name)
    fns = {"softmax": lambda: softmax(x), "torch": lambda: torch.softmax(x, -1)}
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(15):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(2000):
                fn()
            samples[name].append((time.perf_counter_ns() - t0) / 2000 / 1e3)
    torch.cuda.synchronize()
    ours, theirs = statistics.median(samples["softmax"]), statistics.median(samples["torch"])
    return {"softmax_us": ours, "torch_us": theirs, "ratio": ours / theirs}


def domain_shapes(count: int, rng: random.Random, element_bytes: int = 2) -> list[tuple[int, int]]:
    from autotuner.domain import DOMAIN_M_MAX, DOMAIN_N_MAX

    shapes: set[tuple[int, int]] = set()
    while len(shapes) < count:
        m = int(math.exp(rng.uniform(0, math.log(DOMAIN_M_MAX))))
        n = int(math.exp(rng.uniform(0, math.log(DOMAIN_N_MAX))))
        if m * n * element_bytes <= BUFFER_BYTES:
            shapes.add((m, n))
    return sorted(shapes, key=lambda _: rng.random())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--domain-shapes", type=int, default=10_000)
    parser.add_argument("--no-warmup", action="store_true", help="skip autotuner.warmup (new shapes then compile)")
    args = parser.parse_args(argv)

    import torch

    import autotuner
    from autotuner import runtime

    rng = random.Random(29)
    result: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if not args.no_warmup:
        result["warmup"] = autotuner.warmup(dtypes=("fp16", "bf16"))
        print(f"warm-up: {result['warmup']['seconds']} s", file=sys.stderr)
    result["native_loaded"] = runtime.native_module() is not None
    softmax, reference = autotuner.softmax, (lambda x: torch.softmax(x, -1))
    buffer = torch.randn(BUFFER_BYTES // 4, device="cuda")
    fp16, bf16 = torch.float16, torch.bfloat16
    result["lookup_uncached_fp16"] = lookup_uncached([(rng.randint(1, 64), rng.randint(20000, 40000))
                                                      for _ in range(2000)], "fp16")
    result["decode_fp16_256x2048_2447"] = workload(
        "decode", _views(buffer, [(256, 2048 + i) for i in range(400)], fp16),
        _views(buffer, [(256, 2448 + i) for i in range(400)], fp16), softmax, reference, rng)
    # an eager attention's scores, (batch, heads, queries, keys), as a model hands them to softmax
    result["attention_fp16_4x32x1x1024_1423"] = workload(
        "attention", _views(buffer, [(4, 32, 1, 1024 + i) for i in range(400)], fp16),
        _views(buffer, [(4, 32, 1, 1424 + i) for i in range(400)], fp16), softmax, reference, rng)
    result["vocab_bf16_1_400x128256"] = workload(
        "vocab", _views(buffer, [(m, 128256) for m in range(1, 401)], bf16),
        _views(buffer, [(m, 128256) for m in range(401, 801)], bf16), softmax, reference, rng)
    random_shapes = [(rng.randint(1, 64), rng.randint(1000, 9000)) for _ in range(12000)]
    result["random_fp16_6000"] = workload("random 6000", _views(buffer, random_shapes[:6000], fp16),
                                          _views(buffer, random_shapes[6000:], fp16), softmax, reference, rng)
    shapes = domain_shapes(2 * args.domain_shapes, rng)
    inputs = [x for i, x in enumerate(_views(buffer, shapes, fp16)) if i % 2 == 0] + \
        [x for i, x in enumerate(_views(buffer, shapes, bf16)) if i % 2 == 1]
    rng.shuffle(inputs)
    half = len(inputs) // 2
    result[f"domain_{half}_fp16_bf16"] = workload("domain", inputs[:half], inputs[half:], softmax, reference, rng)
    result["profile_new_shapes"] = profile_new_shapes(
        _views(buffer, [(rng.randint(1, 64), rng.randint(9001, 17000)) for _ in range(2000)], fp16), softmax)
    result["repeated_fp16_1x4096"] = repeated_target(1, 4096, "fp16", softmax)
    result["repeated_bf16_8x1024"] = repeated_target(8, 1024, "bf16", softmax)
    print(f"repeats: fp16 1x4096 {result['repeated_fp16_1x4096']['ratio']:.3f}x, bf16 8x1024 "
          f"{result['repeated_bf16_8x1024']['ratio']:.3f}x torch.softmax's host time", file=sys.stderr)
    result["cache_sizes"] = runtime.cache_sizes()
    print(f"caches: {result['cache_sizes']}", file=sys.stderr)
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
