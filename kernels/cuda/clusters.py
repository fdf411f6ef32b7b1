"""What the thread-block-cluster variants share (``cluster_split``, ``cluster_stream``; Hopper only).

The cluster size C is compiled in (``__cluster_dims__``) so an ordinary launch (CuPy's) forms the
clusters. C = 16 is beyond the portable limit of 8: its build sets
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, and the launch fails (recorded by the sweep)
where the GPU cannot co-schedule 16 blocks. A launch refuses a row longer than the config holds
(it would be left partly unwritten).
"""
from __future__ import annotations

import ctypes
import functools
import logging
from typing import Any, ClassVar

from kernels.base import SUPPORTED, Build, KernelConfig, Support, unsupported
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant

log = logging.getLogger(__name__)

PORTABLE_CLUSTER = 8
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # cuda.h, CUDA 12 and 13


class ClusterVariant(CudaVariant):
    """A CUDA variant whose configs carry ``cluster`` (blocks per cluster) and a row capacity
    (``constraints(...)["n_max"]``)."""

    min_arch: ClassVar[int] = 90  # thread-block clusters and distributed shared memory

    def available(self) -> Support:
        ok = super().available()
        if not ok:
            return ok
        import cupy

        cc = int(cupy.cuda.Device().compute_capability)
        if cc < self.min_arch:
            return unsupported(
                f"{self.name} needs compute capability {self.min_arch // 10}.{self.min_arch % 10} "
                f"(thread-block clusters); this GPU is {cc // 10}.{cc % 10}"
            )
        return SUPPORTED

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        function, seconds = loader.get_function(self.source, self.name_expression(config, dtype), code=self.source_code())
        if int(config["cluster"]) > PORTABLE_CLUSTER:
            allow_non_portable_cluster(function)
        threads = self.threads(config)
        resources = loader.resources_of(function, threads, self.dynamic_smem(config, dtype, n), compile_seconds=seconds)
        return Build(self.name, config, dtype, self.make_launcher(function, config, dtype, threads), resources)

    def make_launcher(self, function: Any, config: KernelConfig, dtype: str, threads: int):
        launch_any = super().make_launcher(function, config, dtype, threads)
        n_max = self.constraints(config, dtype)["n_max"]

        def launch(x: Any, out: Any) -> None:
            if x.shape[1] > n_max:
                raise ValueError(f"{self.name} {config.key}: N={x.shape[1]} exceeds the row capacity {n_max}")
            launch_any(x, out)

        return launch


def allow_non_portable_cluster(function: Any) -> None:
    """Let a CuPy kernel compiled with __cluster_dims__ above 8 launch (cuFuncSetAttribute)."""
    from cupy.cuda import driver

    handle = loader.function_handle(function)
    driver.funcSetAttribute(handle, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig of cuda.h (CUDA 12 and 13), with no launch attributes."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p), ("numAttrs", ctypes.c_uint),
    ]


@functools.lru_cache(maxsize=None)
def _occupancy_entry() -> Any:
    library = ctypes.CDLL("libcuda.so.1")
    entry = library.cuOccupancyMaxActiveClusters
    entry.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_LaunchConfig)]
    entry.restype = ctypes.c_int
    return entry


@functools.lru_cache(maxsize=4096)
def max_active_clusters(handle: int, cluster: int, threads: int, dynamic_smem: int, fallback: int) -> int:
    """Clusters of one kernel (CUfunction ``handle``, its cluster size compiled in) that fit on the
    current GPU at once: the driver's cuOccupancyMaxActiveClusters, which knows how SMs group into
    GPCs. ``fallback`` (the caller's estimate) where the driver entry cannot be reached."""
    config = _LaunchConfig(cluster, 1, 1, threads, 1, 1, dynamic_smem, None, None, 0)
    count = ctypes.c_int(0)
    try:
        status = _occupancy_entry()(ctypes.byref(count), ctypes.c_void_p(handle), ctypes.byref(config))
    except (OSError, AttributeError) as exc:
        log.warning("cuOccupancyMaxActiveClusters unreachable (%s); using %d clusters", exc, fallback)
        return max(1, fallback)
    if status != 0 or count.value < 1:
        log.warning("cuOccupancyMaxActiveClusters returned %d (%d clusters); using %d", status, count.value, fallback)
        return max(1, fallback)
    return int(count.value)
