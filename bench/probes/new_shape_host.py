"""What does a new shape cost ``softmax()`` in Python, beyond the native module's C call? (CPU)

The runtime's new-shape path (``autotuner.runtime._launch``: the pick, the instance, its launch
arithmetic, the glue) on the CPU, with the shipped H100 tables' real lookup and real CUDA launchers
(``CudaVariant.make_launcher`` over a stand-in function handle; every CUDA variant but the
workspace-holding and two-launch ones), a stand-in for the Triton and other launches and for the
native module, whose ``run`` returns at once. Per call: ``perf_counter_ns`` around ``_launch`` on
shapes it has not met (the lookup's answer cache cleared), and ``select_kernel`` alone on the same
shapes. Run from the repository root: ``python -m bench.probes.new_shape_host [--shapes 5500]``.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

WORKSPACE_OR_TWO_LAUNCHES = ("cuda_grid_split", "cuda_long_split", "cuda_split_row")


class _StandInModule:
    def make_plan(self, launches):  # the runtime before the plan objects went took a plan
        return launches

    def run(self, x, stream, *launch):
        return x


class _Rows:
    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def _stand_in_build(variant_name, config, dtype):
    from kernels import KernelConfig, get_variant
    from kernels.cuda.common import CudaVariant

    variant, config_obj = get_variant(variant_name), KernelConfig.from_dict(config)
    native = None
    if isinstance(variant, CudaVariant) and variant_name not in WORKSPACE_OR_TWO_LAUNCHES:
        native = variant.make_launcher(types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xF00)), config_obj,
                                       dtype, variant.threads(config_obj))[1]
    if native is None:
        native = lambda device, stream, m, n: (0xF00, m, 128, 0, bytes(32), 0, 1)  # noqa: E731
    return types.SimpleNamespace(launch=None, native=native, stream_bound=False, native_guard=None, apply=None)


def _install_stand_ins() -> None:
    from autotuner import runtime
    from kernels.cuda import launch as cuda_launch
    from kernels.cuda import loader

    cuda_launch.KernelLauncher._raise_smem = lambda self, device, smem: self._smem.__setitem__(device, smem)
    cuda_launch.KernelLauncher.handle = lambda self, device: self._handles.setdefault(device, 0xF00)
    loader.device_limits = lambda *args: (2048, 0, 132)  # H100: threads per SM, -, SMs
    module = _StandInModule()
    runtime._gpu_keys[-1] = "h100"
    runtime._current_device = lambda: -1
    runtime._raw_stream = lambda index: 0
    runtime.native_module = lambda: module
    runtime._module_loaded, runtime._native_run = module, module.run

    def build_for(variant_name, config, dtype, n=None):
        key = (variant_name, tuple(config.items()), dtype)
        build = runtime._builds.get(key)
        if build is None:
            build = runtime._builds[key] = _stand_in_build(variant_name, config, dtype)
        return build

    runtime.build_for = build_for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", type=int, default=5500, help="new shapes timed (M 1-64 x N 1000-9000, fp16)")
    args = parser.parse_args(argv)
    import torch

    from autotuner import runtime
    from autotuner.lookup.select import default_store, select_kernel

    _install_stand_ins()
    rng = random.Random(29)
    store = default_store()
    seen = {(rng.randint(1, 64), rng.randint(1000, 9000)) for _ in range(20_000)}
    for shape in seen:  # every instance these shapes pick built first, as after a warm-up
        runtime._launch(-1, _Rows(torch.Size(shape), torch.float16), "fp16")
    shapes = []
    while len(shapes) < args.shapes:
        shape = (rng.randint(1, 64), rng.randint(1000, 9000))
        if shape not in seen:
            seen.add(shape)
            shapes.append(shape)
    rows = [_Rows(torch.Size(shape), torch.float16) for shape in shapes]
    store._cache.clear()
    runtime._recent.clear()
    launch_ns = []
    for x in rows:
        started = time.perf_counter_ns()
        runtime._launch(-1, x, "fp16")
        launch_ns.append(time.perf_counter_ns() - started)
    store._cache.clear()
    lookup_ns = []
    for m, n in shapes:
        started = time.perf_counter_ns()
        select_kernel(m, n, "fp16", gpu="h100")
        lookup_ns.append(time.perf_counter_ns() - started)
    print(f"new shape, Python part of softmax()'s path: median {statistics.median(launch_ns) / 1e3:.2f} us, "
          f"mean {statistics.fmean(launch_ns) / 1e3:.2f}; select_kernel alone, uncached: median "
          f"{statistics.median(lookup_ns) / 1e3:.2f} us ({len(shapes)} shapes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
