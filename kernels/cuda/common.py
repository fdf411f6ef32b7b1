"""Shared layer for the CUDA C++ variants: from (config, dtype, shape) to a launch through CuPy.

A subclass names its ``.cu`` file and says, as small methods, which template instance a config
compiles to (``name_expression``), the launch geometry (``grid``, ``threads``, ``dynamic_smem``) and
the kernel's arguments (``kernel_args``), each a function of (config, M, N) evaluated per call: one
compile per (config, dtype) serves every shape. This class does the compile cache, resource report,
the launch on torch's current stream and its description for the native module. Workspaces (split-row) are the subclass's, allocated in ``build``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from kernels.base import SUPPORTED, Build, KernelConfig, Resources, Support, Variant
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

    def grid(self, config: KernelConfig, m: int, n: int) -> tuple[int, int, int]:
        raise NotImplementedError

    def dynamic_smem(self, config: KernelConfig, dtype: str, n: int) -> int:
        return 0

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
        return Build(self.name, config, dtype, launch, resources, native, self.native_stream_bound)

    def build_launcher(self, function: Any, config: KernelConfig, dtype: str, resources: Resources):
        """``(launch, native)`` of one build (``Build``), given what the driver reported for it:
        ``make_launcher``'s, unless a kernel's launch depends on those figures (grid_split and
        long_split size their grid from ``blocks_per_sm``, since a row's blocks must all be resident)."""
        return self.make_launcher(function, config, dtype, int(resources.threads_per_block))

    def make_launcher(self, function: Any, config: KernelConfig, dtype: str, threads: int):
        """``(launch, native)`` for one compiled kernel (``Build``'s two fields). Grid and dynamic
        shared memory come from (M, N) on every call through ``grid`` and ``dynamic_smem``; with the
        default ``kernel_args`` the pointers and sizes go to the kernel as plain ints through a
        ``loader.KernelLauncher`` (no numpy scalars), and ``native`` packs the same arguments. A
        subclass with its own ``kernel_args`` launches through ``loader.launch`` and has no ``native``."""
        block = (threads, 1, 1)
        grid_of, smem_of = self.grid, self.dynamic_smem
        if type(self).kernel_args is not CudaVariant.kernel_args:
            def launch_any(x: Any, out: Any) -> None:
                m, n = x.shape
                if m:
                    loader.launch(function, grid_of(config, m, n), block, self.kernel_args(config, x, out, m, n),
                                  smem_of(config, dtype, n))

            return launch_any, None
        kernel = loader.KernelLauncher(function, block, "PPqq")

        def launch(x: Any, out: Any) -> None:
            m, n = x.shape
            if m:
                kernel(grid_of(config, m, n), smem_of(config, dtype, n), x.data_ptr(), out.data_ptr(), m, n)

        def native(device: int, stream: int, m: int, n: int) -> tuple | None:
            if not m:
                return None
            launch_data = kernel.native(device, grid_of(config, m, n), smem_of(config, dtype, n), (0, 0, m, n))
            return launch_data and (launch_data,)

        return launch, native
