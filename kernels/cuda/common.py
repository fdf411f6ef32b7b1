"""Shared layer for the CUDA C++ variants: from (config, dtype, shape) to a launch through CuPy.

A subclass names its ``.cu`` file and says, as small methods, which template instance a config
compiles to (``name_expression``), the launch geometry (``threads``; ``geometry``: a plain function
of (M, N) giving grid and dynamic shared memory, the config's numbers read once) and the kernel's
arguments (``kernel_args``): one compile per (config, dtype) serves every shape, and a shape met
for the first time costs that function and a pack of the arguments. This class does the compile
cache, resource report, the launch on torch's current stream and its description for the native
module. Workspaces (split-row) are the subclass's, allocated in ``build``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from kernels.base import SUPPORTED, Build, KernelConfig, LaunchGeometry, NativeRule, Resources, Support, Variant
from kernels.cuda import loader

class CudaVariant(Variant):
    backend = "cuda"
    native_stream_bound: ClassVar[bool] = False  # Build.stream_bound of its builds
    source: ClassVar[str]  # file name beside this module, e.g. "block_online.cu"

    def spill_free(self, config: KernelConfig) -> bool:
        """Whether the project asserts every instance of ``config`` compiles without local memory
        (checked with nvcc -Xptxas -v in CI): every config unless a subclass names exceptions."""
        return True

    def source_files(self) -> list[Path]:
        files = [loader.SOURCE_DIR / self.source]
        common = loader.SOURCE_DIR / "softmax_common.cuh"
        return files + ([common] if common.exists() else [])

    def source_code(self) -> str:
        """The text handed to NVRTC: the shared header inlined (NVRTC has no include path to it)."""
        text = (loader.SOURCE_DIR / self.source).read_text()
        include = '#include "softmax_common.cuh"'
        if include in text:
            text = text.replace(include, (loader.SOURCE_DIR / "softmax_common.cuh").read_text())
        return text

    def available(self) -> Support:
        ok, reason = loader.cupy_available()
        return SUPPORTED if ok else Support(False, reason)

    # --- what a subclass describes -------------------------------------------------------------
    def name_expression(self, config: KernelConfig, dtype: str) -> str:
        """The template instance, every compile-time parameter in it: ``k<float, 256, 8>``."""
        raise NotImplementedError

    def threads(self, config: KernelConfig) -> int:
        return int(config["block"])

    def geometry(self, config: KernelConfig, dtype: str) -> LaunchGeometry:
        """The config's launches as a ``LaunchGeometry``: ``geometry(m, n) -> (grid x, dynamic shared
        memory in bytes)``, m >= 1, the config's numbers read here once per build; the native module's
        plans read the same numbers in C. Grids are one-dimensional and do not depend on the dtype."""
        raise NotImplementedError

    def grid(self, config: KernelConfig, m: int, n: int) -> tuple[int, int, int]:
        """The launch grid of (m, n), as ``geometry`` gives it (for reports and tests)."""
        return (self.geometry(config, "fp32")(m, n)[0], 1, 1)

    def dynamic_smem(self, config: KernelConfig, dtype: str, n: int) -> int:
        """The dynamic shared memory of rows of n, as ``geometry`` gives it; 0 for a variant that
        launches its own way, with no ``geometry`` (split-row, grid- and long-split)."""
        if type(self).geometry is CudaVariant.geometry:
            return 0
        return self.geometry(config, dtype)(1, n)[1]

    def launch_row_limit(self, config: KernelConfig, dtype: str) -> int | None:
        """The longest row a launch may be given, where a longer one would be left partly unwritten
        (not merely slow): ``launch`` raises on it and ``native`` declines it. None: no such limit."""
        return None

    def kernel_args(self, config: KernelConfig, x: Any, out: Any, m: int, n: int) -> tuple:
        """Default signature ``(const T* x, T* y, int64 M, int64 N)``, both row-major contiguous."""
        return (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.int64(m), np.int64(n))

    # --- done here -----------------------------------------------------------------------------
    def all_name_expressions(self, dtype: str) -> list[str]:
        """Every kernel instance the configs need, each once: configs that differ only in a launch-time
        choice (shared memory size, blocks per row, chunk) share their kernel."""
        return list(dict.fromkeys(self.name_expression(c, dtype) for c in self.all_configs()))

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        function, seconds = loader.get_function(
            self.source, self.name_expression(config, dtype), code=self.source_code()
        )
        threads = self.threads(config)
        smem = self.dynamic_smem(config, dtype, n)
        resources = loader.resources_of(function, threads, smem, compile_seconds=seconds)
        launch, native = self.build_launcher(function, config, dtype, resources)
        return Build(self.name, config, dtype, launch, resources, native, self.native_stream_bound,
                     native_rule=self.native_rule(config, dtype, resources))

    def build_launcher(self, function: Any, config: KernelConfig, dtype: str, resources: Resources):
        """``(launch, native)`` of one build (``Build``), given what the driver reported for it:
        ``make_launcher``'s, unless a kernel's launch depends on those figures (grid_split and
        long_split size their grid from ``blocks_per_sm``, since a row's blocks must all be resident)."""
        return self.make_launcher(function, config, dtype, int(resources.threads_per_block))

    def make_launcher(self, function: Any, config: KernelConfig, dtype: str, threads: int):
        """``(launch, native)`` for one compiled kernel (``Build``'s two fields). Grid and dynamic
        shared memory come from (M, N) on every call through ``geometry``; with the default
        ``kernel_args`` the pointers and sizes go to the kernel as plain ints through a
        ``loader.KernelLauncher`` (no numpy scalars), and ``native`` packs the same arguments
        (``KernelLauncher.row_native``). A subclass with its own ``kernel_args`` launches through
        ``loader.launch`` and has no ``native``."""
        block = (threads, 1, 1)
        geometry = self.geometry(config, dtype)
        if type(self).kernel_args is not CudaVariant.kernel_args:
            def launch_any(x: Any, out: Any) -> None:
                m, n = x.shape
                if m:
                    grid_x, smem = geometry(m, n)
                    loader.launch(function, (grid_x, 1, 1), block, self.kernel_args(config, x, out, m, n), smem)

            return launch_any, None
        kernel = loader.KernelLauncher(function, block, "PPqq")
        n_max = self.launch_row_limit(config, dtype)

        def launch(x: Any, out: Any) -> None:
            m, n = x.shape
            if n_max is not None and n > n_max:
                raise ValueError(f"{self.name} {config.key}: N={n} exceeds the row capacity {n_max}")
            if m:
                grid_x, smem = geometry(m, n)
                kernel((grid_x, 1, 1), smem, x.data_ptr(), out.data_ptr(), m, n)

        return launch, kernel.row_native(geometry, n_max)

    def native_rule(self, config: KernelConfig, dtype: str, resources: Resources | None = None) -> NativeRule | None:
        """How the native plans derive a launch of the default signature from ``geometry`` (M and N
        in slots 2 and 3); None for a variant with its own arguments or launch. ``resources``: what
        the driver reported for the build, for a rule that depends on it (long_split's residency)."""
        if type(self).kernel_args is not CudaVariant.kernel_args or type(self).geometry is CudaVariant.geometry:
            return None
        return NativeRule(self.geometry(config, dtype), self.launch_row_limit(config, dtype) or 0, m_slot=2, n_slot=3)


def resident_blocks(threads: int) -> int:
    """Blocks of ``threads`` threads the current device holds at once, at least 1 (a persistent
    grid's cap: ``LaunchGeometry.residency``)."""
    threads_per_sm, _, sm_count = loader.device_limits()
    return max(1, threads_per_sm // threads) * sm_count


ONE_BLOCK_PER_ROW = LaunchGeometry()  # ``CudaVariant.geometry`` of one block per row, no dynamic shared memory
