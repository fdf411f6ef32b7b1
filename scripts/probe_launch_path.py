"""Diagnostic: does the way a Triton kernel is launched change its GPU time on small shapes?

`autotuner bench` found the dispatched `triton_one_row` 0.15-0.4 us behind Liger on shapes of 4-6 us
(every one of its misses against Liger), while the sweep, which times the same build's
`launch(x, out)`, found the two level, and a probe launching both kernels through Triton's JIT
(`scripts/probe_one_row.py`) found ours 1.9 % ahead. The bench launches ours through our
`Launcher`'s direct path (Triton's compiled `run`, pre-bound) and Liger through `kernel[grid]`.

On each shape, with the bench's cold-L2 timer, in rounds whose order rotates, every output checked
against float64 first:

- `softmax(x)`: the dispatched plan (replayed launch, output allocated per call);
- `launch(x,out)`: the same build's launch into a preallocated output (our `Launcher`);
- `jit(ours)`: the same kernel and options through `kernel[grid](...)`, Triton's JIT launch;
- `liger`: Liger as the bench runs it (its kernel through `kernel[grid]`);
- `launcher(liger)`: Liger's kernel, same grid and options, through our `Launcher`;
- `copy`: the copy reference.

With ``--cross``, on the shapes the table gives to ``triton_one_row``, each of four output buffers
(allocated one after another) is written both through our ``Launcher`` and through ``kernel[grid]``, so
that a gap that follows the buffer (its placement) is told apart from one that follows the launch path.

With ``--paths``, on the same shapes and one output buffer, the launch is taken apart: our
``Launcher``; the recorded launch replayed (``run`` with pointers as ints, as the plan does); ``run``
given the tensors instead; ``run`` with ints and the stream read from ``torch.cuda.current_stream()``;
the ``CompiledKernel``'s own ``kernel[grid]``; the JIT's ``kernel[grid]``; and the replay with the
host kept busy for SPIN_US before it, or after it (before the end event is recorded).

With ``--hold``, the same launches are timed sample by sample behind a hold instead of a head start:
a one-thread kernel spins on a flag in pinned host memory, the host enqueues the events and the call,
raises the flag, and waits for the sample (as NVBench's blocking kernel holds a stream). It differs
from the cold timer in the hold kernel (for the 50 µs sleep) and in waiting for every sample (for a
batch of 10): the mode times our replayed launch and the JIT's under each of the four combinations
(``HOLD_MODES``). The H100 run of 2026-11-25 (``docs/probe_launch_hold_h100.json``) had only "hold,
sync", with our ``Launcher`` as a third path.

Usage (on a GPU, Liger importable):
    python scripts/probe_launch_path.py [--out FILE] [--rounds 5] [--cross | --paths | --hold]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotuner import runtime, select_kernel, softmax  # noqa: E402
from autotuner.report.benchrun import peer_launchers  # noqa: E402
from autotuner.tune.measure import copy_reference  # noqa: E402
from autotuner.tune.timing import FLUSH_BYTES, HEAD_START_CYCLES, Timer  # noqa: E402
from kernels.base import next_power_of_two  # noqa: E402
from kernels.reference import check_softmax, random_input  # noqa: E402
from kernels.triton_impl.common import Launcher  # noqa: E402
from kernels.triton_impl.one_row import _one_row_kernel  # noqa: E402

SPIN_US = 15.0  # about what the JIT's launch costs the host over the replay
SHAPES = [(1, 1024, "fp16"), (1, 1024, "bf16"), (1, 2048, "fp32"), (4, 1024, "bf16"), (4, 2048, "fp16"),
          (32, 1024, "fp32"), (32, 2048, "bf16"), (128, 1024, "fp16"), (128, 2048, "bf16"), (4, 8192, "bf16"),
          (128, 4096, "bf16"), (1024, 1024, "fp16")]


def liger_paths(n: int) -> tuple[object, int, int] | None:
    """(Liger's single-block kernel, BLOCK_SIZE, num_warps) for rows of n, or None."""
    try:
        from liger_kernel.ops.softmax import _softmax_single_block_forward_kernel, calculate_settings
    except ImportError:
        return None
    block, warps = calculate_settings(n)
    return _softmax_single_block_forward_kernel, block, warps


def one_row_shapes():
    """(m, n, dtype, choice, x, build, num_warps, BLOCK) for the shapes the table gives to
    ``triton_one_row``: a fresh input and the dispatched build."""
    for m, n, dtype in SHAPES:
        choice = select_kernel(m, n, dtype)
        if choice.variant == "triton_one_row":
            build = runtime.build_for(choice.variant, choice.config, dtype, n)
            yield (m, n, dtype, choice, random_input(m, n, dtype), build, int(choice.config["num_warps"]),
                   next_power_of_two(n))


def rotated_times(calls: dict, rounds: int) -> dict[str, list[float]]:
    """Each call's result (a median time) per round, the order rotated by one each round."""
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(calls[name]())
    return times


def cross(timer: Timer, rounds: int) -> list[dict]:
    """Launch path x output buffer on the ``triton_one_row`` shapes (see the module docstring)."""
    results = []
    for m, n, dtype, choice, x, build, warps, block in one_row_shapes():
        buffers = [torch.full_like(x, float("nan")) for _ in range(4)]
        calls = {}
        for index, out in enumerate(buffers):
            calls[f"launcher b{index}"] = lambda o=out: (build.launch(x, o), o)[1]
            calls[f"jit b{index}"] = lambda o=out: (_one_row_kernel[(m,)](x, o, n, BLOCK=block, num_warps=warps,
                                                                          num_stages=1), o)[1]
        bad = [name for name, call in calls.items() if not check_softmax(call(), x, dtype).ok]
        if bad:
            raise RuntimeError(f"{dtype} {m}x{n}: wrong output from {bad}")
        times = rotated_times({name: (lambda c=call: timer.time(c).median_us) for name, call in calls.items()},
                              rounds)
        medians = {name: statistics.median(t) for name, t in times.items()}
        addresses = [hex(b.data_ptr()) for b in buffers]
        results.append({"m": m, "n": n, "dtype": dtype, "dispatched": f"{choice.variant}[{choice.config_key}]",
                        "x": hex(x.data_ptr()), "buffers": addresses, "median_us": medians, "times_us": times})
        print(f"{dtype} {m}x{n} x@{hex(x.data_ptr())}: " + "  ".join(
            f"b{i}@{addresses[i][-7:]} launcher {medians[f'launcher b{i}']:.2f} jit {medians[f'jit b{i}']:.2f}"
            for i in range(4)), flush=True)
        del x, buffers
        torch.cuda.empty_cache()
    return results


def recorded_launch(build, x, out):
    """The one Triton launch of ``build.launch(x, out)`` as the launch layer records it (after a warm-up)."""
    from kernels.launch_record import recording

    build.launch(x, out)
    records: list = []
    with recording(records):
        build.launch(x, out)
    (rec,) = records
    return rec


def check_each(calls: dict, out, x, dtype: str) -> None:
    """Every call must write a correct softmax of x into ``out`` (poisoned before each)."""
    for name, call in calls.items():
        out.fill_(float("nan"))
        call()
        if not check_softmax(out, x, dtype).ok:
            raise RuntimeError(f"{dtype} {tuple(x.shape)}: wrong output from {name}")


def paths(timer: Timer, rounds: int) -> list[dict]:
    """One output buffer, the launch taken apart (see the module docstring)."""
    results = []
    for m, n, dtype, choice, x, build, warps, block in one_row_shapes():
        out = torch.full_like(x, float("nan"))
        rec = recorded_launch(build, x, out)
        grid, meta = rec.grid, rec.metadata

        def spin(us: float = SPIN_US) -> None:
            end = time.perf_counter() + us * 1e-6
            while time.perf_counter() < end:
                pass

        calls = {
            "launcher": lambda: build.launch(x, out),
            "replay ints": rec.replay,
            "spin, replay": lambda: (spin(), rec.replay()),
            "replay, spin": lambda: (rec.replay(), spin()),
            "run tensors": lambda: rec.run(*grid, torch.cuda.current_stream().cuda_stream, rec.function, meta,
                                           None, None, None, x, out, n, *rec.consts),
            "run ints, torch stream": lambda: rec.run(*grid, torch.cuda.current_stream().cuda_stream, rec.function,
                                                      meta, None, None, None, *rec.values, *rec.consts),
            "compiled[grid]": lambda: rec.kernel[grid](x, out, n, *rec.consts),
            "jit": lambda: _one_row_kernel[(m,)](x, out, n, BLOCK=block, num_warps=warps, num_stages=1),
        }
        check_each(calls, out, x, dtype)
        times = rotated_times({name: (lambda c=call: timer.time(c).median_us) for name, call in calls.items()},
                              rounds)
        medians = {name: statistics.median(t) for name, t in times.items()}
        results.append({"m": m, "n": n, "dtype": dtype, "dispatched": f"{choice.variant}[{choice.config_key}]",
                        "recorded_stream": rec.stream, "median_us": medians, "times_us": times})
        print(f"{dtype} {m}x{n} (stream {rec.stream}): "
              + "  ".join(f"{name} {value:.2f}" for name, value in medians.items()), flush=True)
        del x, out
        torch.cuda.empty_cache()
    return results


HOLD_SOURCE = r"""
extern "C" __global__ void hold_stream(const volatile int* flag, int release, long long max_cycles) {
    const long long start = clock64();
    while (*flag != release && clock64() - start < max_cycles) {
    }
}
"""
HOLD_MAX_CYCLES = 400_000_000  # about 0.2 s: a host that never raises the flag costs a slow sample, not a hang


class HeldTimer:
    """Median event time of a call, the L2 flushed before each sample as the cold timer does, with the
    cold timer's two habits switchable one by one: ``hold`` (a one-thread kernel, queued before each
    group of samples, spinning on a pinned host flag that the host raises once the group is enqueued)
    in place of a 50 µs sleep before each sample, and ``sync_each`` (a group is one sample, waited
    for) in place of groups of 10."""

    BATCH = 10

    def __init__(self) -> None:
        import cupy
        import numpy as np

        self.np, self.cupy = np, cupy
        self.kernel = cupy.RawKernel(HOLD_SOURCE, "hold_stream")
        self.flag = torch.zeros(1, dtype=torch.int32).pin_memory()  # mapped into the GPU's address space (UVA)
        self.scratch = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.release = 0

    def time(self, fn, samples: int = 30, hold: bool = True, sync_each: bool = True) -> float:
        np, cupy = self.np, self.cupy
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        pairs = []
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        for index in range(samples):
            first = sync_each or index % self.BATCH == 0  # a group (one sample, or a batch) begins
            last = sync_each or (index + 1) % self.BATCH == 0 or index + 1 == samples
            if hold and first:  # the group's commands all queue behind it until the flag is raised
                self.release += 1
                with stream:
                    self.kernel((1,), (1,), (np.uint64(self.flag.data_ptr()), np.int32(self.release),
                                             np.int64(HOLD_MAX_CYCLES)))
            self.scratch.fill_(0x5A5A)
            if not hold:
                torch.cuda._sleep(HEAD_START_CYCLES)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
            if last:
                if hold:
                    self.flag[0] = self.release
                end.synchronize()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) * 1000.0 for start, end in pairs)


# (label, hold, sync_each): the cold timer's habits (sleep, batches of 10) and each one changed
HOLD_MODES = (("sleep, batch", False, False), ("sleep, sync", False, True), ("hold, batch", True, False),
              ("hold, sync", True, True))


def hold(rounds: int) -> list[dict]:
    """The launch paths of ``paths`` under a held stream (see the module docstring)."""
    held = HeldTimer()
    results = []
    for m, n, dtype, choice, x, build, warps, block in one_row_shapes():
        out = torch.full_like(x, float("nan"))
        rec = recorded_launch(build, x, out)
        launches = {
            "replay": rec.replay,
            "jit": lambda: _one_row_kernel[(m,)](x, out, n, BLOCK=block, num_warps=warps, num_stages=1),
        }
        check_each(launches, out, x, dtype)
        calls = {f"{path}, {label}": (lambda c=call, h=hold_on, e=each: held.time(c, hold=h, sync_each=e))
                 for path, call in launches.items() for label, hold_on, each in HOLD_MODES}
        times = rotated_times(calls, rounds)
        medians = {name: statistics.median(t) for name, t in times.items()}
        results.append({"m": m, "n": n, "dtype": dtype, "dispatched": f"{choice.variant}[{choice.config_key}]",
                        "median_us": medians, "times_us": times})
        print(f"{dtype} {m}x{n} (held): " + "  ".join(f"{name} {value:.2f}" for name, value in medians.items()),
              flush=True)
        del x, out
        torch.cuda.empty_cache()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cross", action="store_true", help="launch path x output buffer (see the docstring)")
    parser.add_argument("--paths", action="store_true", help="the launch taken apart (see the docstring)")
    parser.add_argument("--hold", action="store_true", help="the launch paths under a held stream (see the docstring)")
    args = parser.parse_args()
    timer = Timer("cold", time_cap_s=0.3)
    if args.cross or args.paths or args.hold:
        mode = "cross" if args.cross else "paths" if args.paths else "hold"
        if args.hold:
            results = hold(args.rounds)
        else:
            results = cross(timer, args.rounds) if args.cross else paths(timer, args.rounds)
        if args.out:
            with open(args.out, "w") as handle:
                json.dump({"device": torch.cuda.get_device_name(), "rounds": args.rounds, mode: results}, handle, indent=1)
        return
    results = []
    for m, n, dtype in SHAPES:
        x = random_input(m, n, dtype)
        choice = select_kernel(m, n, dtype)
        build = runtime.build_for(choice.variant, choice.config, dtype, n)
        softmax(x)  # makes the plan
        outs = {name: torch.full_like(x, float("nan")) for name in ("launch", "jit", "liger", "launcher_liger", "copy")}
        calls = {
            "softmax(x)": lambda: softmax(x),
            "launch(x,out)": lambda: (build.launch(x, outs["launch"]), outs["launch"])[1],
        }
        if choice.variant == "triton_one_row":
            warps = int(choice.config["num_warps"])
            calls["jit(ours)"] = lambda w=warps: (_one_row_kernel[(m,)](x, outs["jit"], n, BLOCK=next_power_of_two(n),
                                                                        num_warps=w, num_stages=1), outs["jit"])[1]
        peer = peer_launchers(dtype, n).get("liger")
        liger = liger_paths(n)
        if peer is not None and liger is not None:
            kernel, block, warps = liger
            ours_launching_liger = Launcher(kernel, ("BLOCK_SIZE",), {"num_warps": warps})
            calls["liger"] = lambda: (peer(x, outs["liger"]), outs["liger"])[1]
            calls["launcher(liger)"] = lambda: (ours_launching_liger(
                (m,), (outs["launcher_liger"], n, x, n, n), (block,)), outs["launcher_liger"])[1]
        checks = {name: check_softmax(call(), x, dtype) for name, call in calls.items()}
        failed = {name: str(c) for name, c in checks.items() if not c.ok}
        timed = {name: (lambda c=call: timer.time(c).median_us) for name, call in calls.items() if name not in failed}
        timed["copy"] = lambda: copy_reference(timer, x, outs["copy"]).median_us
        times = rotated_times(timed, args.rounds)
        medians = {name: statistics.median(t) for name, t in times.items()}
        row = {"m": m, "n": n, "dtype": dtype, "dispatched": f"{choice.variant}[{choice.config_key}]",
               "failed": failed, "median_us": medians, "times_us": times}
        results.append(row)
        print(f"{dtype} {m}x{n} [{row['dispatched']}]: "
              + "  ".join(f"{name} {value:.2f}" for name, value in medians.items())
              + (f"  FAILED {failed}" if failed else ""), flush=True)
        del x, outs
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"device": torch.cuda.get_device_name(), "rounds": args.rounds, "results": results}, handle, indent=1)


if __name__ == "__main__":
    main()
