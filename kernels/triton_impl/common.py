"""Kernel side shared by the Triton variants: the variant base (availability, the files that define
its generated code), the launch options a config carries, and the tiled-row variant whose build
decides its kernels' grids and warps.

This module is part of every Triton variant's source hash (``TritonVariant.source_files``: the
variant's own module, ``tiles.py`` and this one). The host plumbing it uses is not, as
``kernels/cuda/launch.py`` is not for the CUDA variants: ``launch.py`` (a launcher per jit kernel
with its compile cache, the recorded launch) and ``device.py`` (interpreter or CUDA device, device
facts, the resources of a compiled kernel).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

from kernels.base import SUPPORTED, Build, KernelConfig, Support, Variant
from kernels.triton_impl.device import interpreting, probe_tensor, resources_of, sm_count
from kernels.triton_impl.launch import launcher_for


class TritonVariant(Variant):
    """Base of the Triton variants: availability and the files that define the generated code."""

    backend = "triton"

    def available(self) -> Support:
        if interpreting():
            return SUPPORTED
        try:
            import torch
        except ImportError as exc:
            return Support(False, f"torch not importable: {exc}")
        if not torch.cuda.is_available():
            return Support(False, "torch sees no CUDA device (TRITON_INTERPRET=1 runs Triton on the CPU)")
        return SUPPORTED

    def source_files(self) -> list[Path]:
        here = Path(__file__).parent
        own = Path(sys.modules[type(self).__module__].__file__)
        return [own, here / "tiles.py", here / "common.py"]


def config_options(config: KernelConfig) -> dict[str, int]:
    """Triton launch options carried by a config (``num_warps``, ``num_stages``)."""
    return {"num_warps": int(config["num_warps"]), "num_stages": int(config.get("num_stages", 1))}


class TiledRowVariant(TritonVariant):
    """A kernel that walks each row in tiles of BLOCK, so it serves any N. Its signature is
    ``(x_ptr, y_ptr, M, N, BLOCK, STAGES, ALIGNED)``; configs are rows of ``table``:
    (block, num_warps, num_stages, per_sm). ``per_sm`` 0 launches one program per row, k > 0 launches
    k programs per SM looping over rows, which bounds the rows in flight (and so their L2 footprint)."""

    kernel: ClassVar[Any]
    table: ClassVar[tuple[tuple[int, int, int, int], ...]]

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=b, num_warps=w, num_stages=s, per_sm=p) for b, w, s, p in self.table]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        """The smallest block serves every N; a larger one only rows of at least half its size."""
        block = int(config["block"])
        return {"n_min": 1 if block <= min(row[0] for row in self.table) else block // 2 + 1}

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        options = config_options(config)
        launcher = launcher_for(type(self).kernel, ("BLOCK", "STAGES", "ALIGNED"), **options)
        block, stages, per_sm = int(config["block"]), options["num_stages"], int(config["per_sm"])
        consts = (block, stages, n % 16 == 0)
        kernels = [] if interpreting() else [launcher.compile((probe_tensor(dtype),) * 2 + (2, n), consts)]
        resources = resources_of(kernels, options["num_warps"])

        def launch(x: Any, out: Any) -> None:
            m, n_cols = x.shape
            if m == 0:
                return
            programs = m if per_sm == 0 else min(m, per_sm * sm_count(x))
            launcher((programs,), (x, out, m, n_cols), (block, stages, n_cols % 16 == 0))

        return Build(self.name, config, dtype, launch, resources)
