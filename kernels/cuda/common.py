"""Shared layer for the CUDA C++ variants: from (config, dtype, shape) to a launch through CuPy.

A subclass names its ``.cu`` file and says, as small methods, which template instance a config
compiles to (``name_expression``), the launch geometry (``grid``, ``threads``, ``dynamic_smem``) and
the kernel's arguments (``kernel_args``). This class does the compile cache, resource report and the
launch on torch's current stream. Workspaces (split-row) are the subclass's, allocated in ``build``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from kernels.base import SUPPORTED, Build, KernelConfig, Resources, Support, Variant
from kernels.cuda import loader

_SHAPE_MEMO = 256  # input shapes whose launch geometry a launcher remembers


class CudaVariant(Variant):
    backend = "cuda"
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
        return Build(self.name, config, dtype, self.build_launcher(function, config, dtype, resources), resources)

    def build_launcher(self, function: Any, config: KernelConfig, dtype: str, resources: Resources):
        """``launch(x, out)`` of one build, given what the driver reported for it: ``make_launcher``'s,
        unless a kernel's launch depends on those figures (grid_split and long_split size their grid
        from ``blocks_per_sm``, since a row's blocks must all be resident)."""
        return self.make_launcher(function, config, dtype, int(resources.threads_per_block))

    def make_launcher(self, function: Any, config: KernelConfig, dtype: str, threads: int):
        """``launch(x, out)`` for one compiled kernel. Grid and dynamic shared memory are worked out
        once per input shape (a small memo); with the default ``kernel_args`` the pointers and sizes
        go to the kernel as plain ints through a ``loader.KernelLauncher`` (no numpy scalars)."""
        block = (threads, 1, 1)
        shapes: dict[Any, tuple] = {}  # x.shape -> (grid, dynamic smem, m, n)
        default_args = type(self).kernel_args is CudaVariant.kernel_args
        kernel = loader.KernelLauncher(function, block, "PPqq")

        def plan(shape: Any) -> tuple | None:
            m, n = shape
            if m == 0:
                return None
            if len(shapes) >= _SHAPE_MEMO:
                shapes.clear()
            entry = shapes[shape] = (self.grid(config, m, n), self.dynamic_smem(config, dtype, n), m, n)
            return entry

        if default_args:
            def launch(x: Any, out: Any) -> None:
                shape = x.shape
                entry = shapes.get(shape) or plan(shape)
                if entry is not None:
                    grid, smem, m, n = entry
                    kernel(grid, smem, x.data_ptr(), out.data_ptr(), m, n)
        else:
            def launch(x: Any, out: Any) -> None:
                shape = x.shape
                entry = shapes.get(shape) or plan(shape)
                if entry is not None:
                    grid, smem, m, n = entry
                    loader.launch(function, grid, block, self.kernel_args(config, x, out, m, n), smem)

        return launch
