"""Lookup latency of select_kernel, host overhead of softmax() over a raw launch of the same kernel,
and correctness of softmax()'s fast path. One run prints a summary and one JSON object.

Run on the GPU machine, from the repository root:

    python scripts/bench_runtime.py h100 --out $OUT/runtime_h100.json

(``bash scripts/device_run.sh python scripts/bench_runtime.py h100 --out $OUT/runtime_h100.json``
where the wheelhouse is carried; ``--no-compile`` skips the torch.compile check, about 30 s;
``--quick`` times fewer rounds.) The first argument is the GPU key for the lookup figures and the
dispatch table (``auto``: the current device's). Without a GPU only the lookup figures are taken.

Lookup (any machine): first lookup = a shape not yet cached (tables already loaded); warm = repeat;
over 2000 bf16 shapes (m = 3 + i, n = 1000 + 7 i). The summary compares the medians with their
targets: first lookup <= 10 us, warm <= 0.5 us (a first lookup reads the table's decision index:
``autotuner/lookup/table.py``).

Host overhead: wall time per call of N enqueues without synchronisation (N = 2000, fewer where the
GPU time would fill the launch queue), median over interleaved rounds, for

- ``softmax_us``: ``autotuner.runtime.softmax(x)``, the goal's figure (output allocated per call;
  the shape's native launch kept after its first call, where the module is built: ``native`` says so;
  the run builds the module first unless ``--no-native``, ``native_build`` says how long that took);
- ``softmax_package_us``: ``autotuner.softmax(x)``, the package-level wrapper;
- ``build_launch_us``: the build's ``launch(x, out)`` with the output preallocated (the Python path).

New shapes are timed by ``python -m bench.dynamic_shapes``.

``torch_softmax_us``: ``torch.softmax(x, -1)`` timed the same way, interleaved with the others, and
``softmax_over_torch`` the ratio (target <= 1.10 at fp16 1x4096 and bf16 8x1024).

Cases: the dispatched kernel for fp16 1x4096, bf16 8x1024, bf16 1x1024, fp32 4x4096, fp16 4096x32000 and fp32 1x262144 (a
split-row shape), and forced split-row variants on small shapes (launched through the runtime's path
with that build). Every case also checks softmax's output against a float64 reference. The checks section covers non-contiguous, N-D, dim 0, M = 0, misaligned input,
a side stream, threads, a Triton launch hook, CUDA-graph capture, torch.compile and, with two
GPUs, a tensor on a non-current device. Any failure is reported in the JSON, never raised.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = [  # (label, m, n, dtype, forced variant or None for the dispatched one)
    ("fp16 1x4096", 1, 4096, "fp16", None),  # the host-cost target's two shapes (softmax vs torch.softmax)
    ("bf16 8x1024", 8, 1024, "bf16", None),
    ("bf16 1x1024", 1, 1024, "bf16", None),
    ("fp32 4x4096", 4, 4096, "fp32", None),
    ("fp16 4096x32000", 4096, 32000, "fp16", None),
    ("fp32 1x262144 (split-row shape)", 1, 262144, "fp32", None),
    ("fp32 2x65536 cuda_split_row", 2, 65536, "fp32", "cuda_split_row"),
    ("bf16 2x65536 triton_split_row", 2, 65536, "bf16", "triton_split_row"),
]


FIRST_LOOKUP_TARGET_US = 10.0  # select_kernel for a shape not yet cached, tables loaded (median)
WARM_LOOKUP_TARGET_US = 0.5  # a cached shape (median)


def lookup_figures(gpu: str) -> dict:
    from autotuner.lookup.select import default_store, select_kernel

    default_store()  # table loading is start-up, not a lookup
    firsts, warms = [], []
    for i in range(2000):
        m, n = 3 + i, 1000 + 7 * i
        t0 = time.perf_counter_ns()
        select_kernel(m, n, "bf16", gpu=gpu)
        t1 = time.perf_counter_ns()
        select_kernel(m, n, "bf16", gpu=gpu)
        t2 = time.perf_counter_ns()
        firsts.append((t1 - t0) / 1e3)
        warms.append((t2 - t1) / 1e3)
    p99 = int(0.99 * len(firsts))
    return {"lookup": "decision-index", "first_lookup_us_median": statistics.median(firsts), "first_lookup_us_p99": sorted(firsts)[p99],
            "warm_lookup_us_median": statistics.median(warms), "warm_lookup_us_p99": sorted(warms)[p99]}


# --- timing ----------------------------------------------------------------------------------------
def interleaved(fns: dict, count: int, rounds: int) -> dict:
    """Per-call wall time (us) of each callable: ``count`` calls back to back, no synchronisation
    inside, the device drained between samples; rounds interleave the callables."""
    import torch

    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(count):
                fn()
            samples[name].append((time.perf_counter_ns() - t0) / count / 1e3)
    torch.cuda.synchronize()
    return {name: {"median": statistics.median(v), "min": min(v)} for name, v in samples.items()}


def gpu_time_us(fn, count: int = 20) -> float:
    import torch

    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(count):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / count


# --- one case --------------------------------------------------------------------------------------
def forced_build(variant_name: str, m: int, n: int, dtype: str):
    from autotuner.runtime import build_for
    from kernels import get_variant

    variant = get_variant(variant_name)
    support = variant.available()
    if not support:
        raise RuntimeError(f"{variant_name} unavailable: {support.reason}")
    configs = [c for c in variant.all_configs() if variant.supports(m, n, dtype, c)]
    if not configs:
        raise RuntimeError(f"{variant_name} supports no config for {m}x{n} {dtype}")
    return configs[0], build_for(variant_name, configs[0].as_dict(), dtype, n)


def run_case(label: str, m: int, n: int, dtype: str, forced: str | None, rounds: int) -> dict:
    import torch

    import autotuner
    from autotuner import runtime, select_kernel
    from kernels.reference import check_softmax, random_input

    x = random_input(m, n, dtype)
    device = x.get_device()
    if forced:
        config, build = forced_build(forced, m, n, dtype)
        variant, config = forced, config.as_dict()
        softmax_call = lambda: _forced_call(runtime, build, x)  # noqa: E731
    else:
        choice = select_kernel(m, n, dtype)
        variant, config = choice.variant, choice.config
        runtime.softmax(x)  # compiles the instance, keeps the shape's native launch
        build = runtime.build_for(variant, config, dtype, n)
        softmax_call = lambda: runtime.softmax(x)  # noqa: E731
    key = (device, x.shape, x.dtype)
    native = key in runtime._recent if not forced else build.native is not None and runtime.native_module() is not None
    result = {"variant": variant, "config": config, "native": native}

    y = softmax_call()
    check = check_softmax(y, x, dtype)
    result["softmax_correct"] = check.ok
    result["softmax_check"] = check.message or f"max rel err {check.max_rel_error:.3g}"

    out = torch.empty_like(x)
    build.launch(x, out)
    fns = {
        "softmax_us": softmax_call,
        "torch_softmax_us": lambda: torch.softmax(x, -1),
        "softmax_package_us": (lambda: autotuner.softmax(x)) if not forced else softmax_call,
        "build_launch_us": lambda: build.launch(x, out),
    }
    gpu_us = gpu_time_us(lambda: build.launch(x, out))
    result["gpu_us"] = gpu_us
    count = min(2000, max(50, int(20000 / max(gpu_us, 1.0))))  # keep the launch queue from filling
    result["calls_per_sample"] = count
    for name, fn in fns.items():
        fn()
    timings = interleaved(fns, count, rounds)
    for name, figures in timings.items():
        result[name] = figures["median"]
        result[name.replace("_us", "_min_us")] = figures["min"]
    result["overhead_vs_build_launch_us"] = result["softmax_us"] - result["build_launch_us"]
    result["softmax_over_torch"] = result["softmax_us"] / result["torch_softmax_us"]
    result["host_bound"] = result["softmax_us"] > gpu_us
    return result


def _forced_call(runtime, build, x):
    """A forced variant's build through the runtime's launch path (native where it can), not the pick."""
    return runtime._launch_current(x.get_device(), x, build, x.shape)


# --- pieces ----------------------------------------------------------------------------------------
def piece_costs() -> dict:
    """Per-call CPU cost (ns) of the pieces of softmax()'s fast path, on a CUDA tensor."""
    import timeit

    import torch

    from autotuner import runtime
    from kernels.triton_impl import launch as triton_launch

    x = torch.randn(4, 4096, device="cuda")
    key = (x.get_device(), x.shape, x.dtype)
    plans = runtime._recent
    get_device, raw_stream = torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream
    triton_launch._hooks_idle()
    pieces = {
        "torch.empty_like(x) [cuda]": lambda: torch.empty_like(x),
        "runtime._is_compiling()": runtime._is_compiling,
        "kept-shape key + lookup": lambda: plans.get((x.get_device(), x.shape, x.dtype)),
        "dict probe only (key prebuilt)": lambda: plans.get(key),
        "x.is_contiguous()": x.is_contiguous,
        "x.data_ptr()": x.data_ptr,
        "x.shape": lambda: x.shape,
        "x.dtype": lambda: x.dtype,
        "x.get_device()": x.get_device,
        "torch._C._cuda_getDevice()": get_device,
        "torch._C._cuda_getCurrentRawStream(0)": lambda: raw_stream(0),
        "torch.cuda.current_device()": torch.cuda.current_device,
        "triton hooks_idle()": triton_launch._hooks_idle,
        "from autotuner.runtime import softmax (per call in autotuner.softmax)": _import_statement,
    }
    figures = {}
    for name, fn in pieces.items():
        per = min(timeit.repeat(fn, number=2000, repeat=50)) / 2000 * 1e9
        figures[name] = round(per, 1)
    torch.cuda.synchronize()
    return figures


def _import_statement() -> None:
    from autotuner.runtime import softmax  # noqa: F401


# --- checks ----------------------------------------------------------------------------------------
def _close(got, want, dtype) -> tuple[bool, float]:
    import torch

    tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}[dtype]
    err = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
    return bool(got.shape == want.shape and err <= tol and not torch.isnan(got).any()), err


def check(name: str, fn, results: dict) -> None:
    try:
        ok, detail = fn()
        results[name] = {"ok": bool(ok), "detail": detail}
    except Exception as exc:  # reported, never raised
        results[name] = {"ok": False, "detail": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=4)}


def correctness_checks(with_compile: bool) -> dict:
    import torch

    from autotuner import runtime
    from kernels.reference import random_input

    results: dict = {}
    softmax = runtime.softmax

    def vs_torch(x, dim, dtype):
        ok, err = _close(softmax(x, dim), torch.softmax(x.double(), dim).to(x.dtype), dtype)
        return ok, f"max abs err {err:.3g}"

    check("non-contiguous 2-D (transposed)", lambda: vs_torch(random_input(512, 64, "fp32").t(), -1, "fp32"), results)
    check("3-D over dim 1", lambda: vs_torch(random_input(8, 6 * 300, "fp16").reshape(8, 6, 300), 1, "fp16"), results)
    check("2-D over dim 0", lambda: vs_torch(random_input(300, 40, "bf16"), 0, "bf16"), results)
    check("4-D last dim", lambda: vs_torch(random_input(30, 1000, "fp32").reshape(2, 3, 5, 1000), -1, "fp32"), results)

    def empty_rows():
        y = softmax(torch.empty(0, 1024, device="cuda", dtype=torch.bfloat16))
        return y.shape == (0, 1024) and y.dtype == torch.bfloat16, f"shape {tuple(y.shape)}"

    check("M = 0", empty_rows, results)

    def misaligned():
        base = random_input(1, 4 * 4096 + 1, "fp32")
        x = base[0, 1:].view(4, 4096)  # data pointer 4 bytes past an allocation: not 16-byte aligned
        softmax(x.contiguous())  # the shape's native launch is kept (from aligned rows)
        return vs_torch(x, -1, "fp32")

    check("misaligned input (through the build's own launch)", misaligned, results)

    def side_stream():
        x = random_input(4, 4096, "fp32")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            ys = [softmax(x) for _ in range(3)]
        torch.cuda.current_stream().wait_stream(stream)
        return all(_close(y, torch.softmax(x.double(), -1).float(), "fp32")[0] for y in ys), "3 calls on a side stream"

    check("side stream", side_stream, results)

    def threads():
        inputs = [random_input(1, 1024, "bf16") for _ in range(8)]
        outputs: list = [None] * len(inputs)

        def work(i):
            for _ in range(200):
                outputs[i] = softmax(inputs[i])

        pool = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        torch.cuda.synchronize()
        oks = [_close(y, torch.softmax(x.double(), -1).to(x.dtype), "bf16")[0] for x, y in zip(inputs, outputs)]
        return all(oks), f"{sum(oks)}/{len(oks)} threads correct"

    check("8 threads, 200 calls each", threads, results)

    def launch_hook():
        from triton import knobs

        seen = []
        hook = lambda metadata: seen.append(1)  # noqa: E731
        chain = knobs.runtime.launch_enter_hook
        x = random_input(1, 1024, "bf16")
        softmax(x)
        if hasattr(chain, "add"):
            chain.add(hook)
        else:
            knobs.runtime.launch_enter_hook = hook
        try:
            y = softmax(x)
        finally:
            if hasattr(chain, "remove"):
                chain.remove(hook)
            else:
                knobs.runtime.launch_enter_hook = None
        ok, err = _close(y, torch.softmax(x.double(), -1).to(x.dtype), "bf16")
        variant = runtime.select_kernel(1, 1024, "bf16").variant
        called = bool(seen) or not variant.startswith("triton")
        return ok and called, f"{variant}: hook called {len(seen)} time(s), max abs err {err:.3g}"

    check("Triton launch hook is called", launch_hook, results)

    def graph_capture():
        x = random_input(32, 50257, "fp16")
        small = random_input(1, 1024, "bf16")
        softmax(x), softmax(small)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = softmax(x)
            y_small = softmax(small)
        x.copy_(random_input(32, 50257, "fp16"))
        small.copy_(random_input(1, 1024, "bf16"))
        graph.replay()
        torch.cuda.synchronize()
        ok1, e1 = _close(y, torch.softmax(x.double(), -1).half(), "fp16")
        ok2, e2 = _close(y_small, torch.softmax(small.double(), -1).bfloat16(), "bf16")
        return ok1 and ok2, f"max abs err {e1:.3g} / {e2:.3g}"

    check("CUDA-graph capture and replay on new input", graph_capture, results)

    def new_shape_inside_capture():
        x = random_input(3, 3000, "fp32")
        graph = torch.cuda.CUDAGraph()
        choice = runtime.select_kernel(3, 3000, "fp32")
        runtime.build_for(choice.variant, choice.config, "fp32", 3000)  # compiled; this shape never met
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            y = softmax(x)
        graph.replay()
        torch.cuda.synchronize()
        ok, err = _close(y, torch.softmax(x.double(), -1).float(), "fp32")
        return ok, f"max abs err {err:.3g}"

    check("new shape met inside graph capture", new_shape_inside_capture, results)

    if with_compile:
        def compiled():
            fn = torch.compile(lambda t: softmax(t * 2.0) + 1.0, fullgraph=True)
            x = random_input(16, 32000, "bf16")
            ok, err = _close(fn(x), (torch.softmax((x * 2.0).double(), -1) + 1.0).bfloat16(), "bf16")
            return ok, f"max abs err {err:.3g}"

        check("torch.compile(fullgraph=True)", compiled, results)

    if torch.cuda.device_count() > 1:
        def other_device():
            x = random_input(4, 4096, "fp32", device="cuda:1")
            with torch.cuda.device(0):
                y1 = softmax(x)
                y2 = softmax(x)  # the kept launch, from device 0
            ok, err = _close(y2, torch.softmax(x.double(), -1).float(), "fp32")
            return ok and y1.device == x.device and y2.device == x.device, f"on {y2.device}, max abs err {err:.3g}"

        check("tensor on a non-current device", other_device, results)
    return results


# --- main ------------------------------------------------------------------------------------------
def environment() -> dict:
    info = {"python": platform.python_version(), "machine": platform.processor() or platform.machine()}
    for module in ("torch", "triton", "cupy", "numpy"):
        try:
            info[module] = __import__(module).__version__
        except Exception as exc:  # noqa: BLE001
            info[module] = f"unavailable ({type(exc).__name__})"
    try:
        import torch

        if torch.cuda.is_available():
            info["device"] = torch.cuda.get_device_name()
            info["cuda"] = torch.version.cuda
    except ImportError:
        pass
    return info


def summary(result: dict) -> str:
    lines = []
    if "native_build" in result:
        lines.append(f"native module: {result['native_build']}")
    lookup = result.get("lookup", {})
    if "error" in lookup:
        lines.append(f"lookup ERROR {lookup['error']}")
    elif lookup:
        first, warm = lookup["first_lookup_us_median"], lookup["warm_lookup_us_median"]
        lines.append(f"lookup first {first:5.2f} us median (p99 {lookup['first_lookup_us_p99']:.1f}), "
                     f"target <= {FIRST_LOOKUP_TARGET_US:g} us: {'ok' if first <= FIRST_LOOKUP_TARGET_US else 'OVER'}; "
                     f"warm {warm:4.2f} us median, target <= {WARM_LOOKUP_TARGET_US:g} us: "
                     f"{'ok' if warm <= WARM_LOOKUP_TARGET_US else 'OVER'}")
    for label, case in result.get("host_overhead", {}).items():
        if "error" in case:
            lines.append(f"{label:34s} ERROR {case['error']}")
            continue
        figures = "  ".join(f"{k.removesuffix('_us')} {case[k]:6.2f}" for k in (
            "softmax_us", "torch_softmax_us", "softmax_over_torch", "build_launch_us", "softmax_package_us",
            "gpu_us") if k in case)
        ok = "ok" if case.get("softmax_correct") else "WRONG"
        lines.append(f"{label:34s} {case['variant']:24s} native={case.get('native')!s:5s} {ok:5s} {figures}")
    for name, outcome in result.get("checks", {}).items():
        lines.append(f"check {'ok  ' if outcome['ok'] else 'FAIL'} {name}: {outcome['detail']}")
    return "\n".join(lines)


def build_native() -> dict:
    """Build the native launch module (kernels.native) as a user would, timed; its outcome."""
    from kernels import native

    started = time.perf_counter()
    try:
        path = native.build()
    except native.NativeBuildError as exc:
        return {"built": False, "error": str(exc)[-2000:]}
    native.reset()
    return {"built": True, "seconds": round(time.perf_counter() - started, 1), "path": str(path),
            "loaded": native.load() is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gpu", nargs="?", default="auto", help="GPU key for lookups and tables (auto: this GPU's)")
    parser.add_argument("--out", type=Path, help="write the JSON here as well")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile check")
    parser.add_argument("--quick", action="store_true", help="fewer timing rounds")
    parser.add_argument("--no-native", action="store_true",
                        help="do not build the native launch module (plans use it only where built)")
    args = parser.parse_args(argv)

    result: dict = {"environment": environment()}
    gpu = args.gpu
    try:
        import torch

        have_gpu = torch.cuda.is_available()
    except ImportError:
        have_gpu = False
    if gpu == "auto":
        if have_gpu:
            from autotuner.lookup.gpu import normalize_gpu_name

            gpu = normalize_gpu_name(torch.cuda.get_device_name())
        else:
            gpu = "h100"
    result["gpu"] = gpu
    try:
        result["lookup"] = lookup_figures(gpu)
    except Exception as exc:  # noqa: BLE001
        result["lookup"] = {"error": f"{type(exc).__name__}: {exc}"}
    if have_gpu and not args.no_native:
        result["native_build"] = build_native()
    if have_gpu:
        rounds = 5 if args.quick else 15
        result["host_overhead"] = {}
        for label, m, n, dtype, forced in CASES:
            try:
                result["host_overhead"][label] = run_case(label, m, n, dtype, forced, rounds)
            except Exception as exc:  # a variant unavailable here, a failed build: reported, not raised
                result["host_overhead"][label] = {"error": f"{type(exc).__name__}: {exc}",
                                                  "trace": traceback.format_exc(limit=6)}
        try:
            result["pieces_ns"] = piece_costs()
        except Exception as exc:  # noqa: BLE001
            result["pieces_ns"] = {"error": f"{type(exc).__name__}: {exc}"}
        result["checks"] = correctness_checks(with_compile=not args.no_compile)
    text = json.dumps(result, indent=1, default=str)
    print(summary(result), file=sys.stderr)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
