"""The CUDA launch path without a GPU: ``loader.KernelLauncher`` packs the arguments into the buffer
cuLaunchKernel reads (checked through a stand-in for CuPy's ``driver.launchKernel`` that reads the
parameters back from memory), per device and per thread; ``loader.launch`` maps numpy scalar types
to parameter kinds; ``CudaVariant.make_launcher`` works the geometry out per call from (M, N), for
the launch and for the native module alike."""
from __future__ import annotations

import ctypes
import struct
import sys
import threading
import types

import numpy as np
import pytest

from kernels.base import KernelConfig
from kernels.cuda import launch as cuda_launch
from kernels.cuda import loader
from kernels.cuda.common import CudaVariant


class FakeDriver:
    """Records cuLaunchKernel calls, decoding each parameter from the ``void **`` array: the value
    at the slot's address, read with the width the kernel would read."""

    def __init__(self, widths):
        self.widths = widths  # bytes per parameter, e.g. (8, 8, 8, 4)
        self.calls = []
        self.attributes = {}

    def launchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        slots = (ctypes.c_uint64 * len(self.widths)).from_address(params) if params else []
        raw = [ctypes.string_at(slots[i], width) for i, width in enumerate(self.widths)]
        self.calls.append(((f, gx, gy, gz, bx, by, bz, smem, stream, extra), raw))

    def funcGetAttribute(self, attribute, f):  # noqa: N802
        default = 80 if attribute == loader.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES else 48 * 1024 - 80
        return self.attributes.get((f, attribute), default)

    def funcSetAttribute(self, f, attribute, value):  # noqa: N802
        self.attributes[(f, attribute)] = value


class FakeKernel:
    """A CuPy RawKernel: ``.kernel`` is the current device's Function (its ``.ptr`` the CUfunction)."""

    def __init__(self, device):
        self.device = device
        self.cupy_calls = []

    @property
    def kernel(self):
        return types.SimpleNamespace(ptr=0xC0DE + self.device[0])

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        self.cupy_calls.append((grid, block, args, shared_mem, stream))


@pytest.fixture
def fake_gpu(monkeypatch):
    device = [0]
    driver = FakeDriver((8, 8, 8, 8))
    monkeypatch.setattr(cuda_launch, "_current_device", lambda: device[0])
    monkeypatch.setattr(cuda_launch, "_raw_stream", lambda index: 0x5000 + index)
    monkeypatch.setattr(cuda_launch, "_launch_kernel", driver.launchKernel)
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.cuda = types.SimpleNamespace(driver=driver, ExternalStream=lambda handle: ("stream", handle))
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", fake_cupy.cuda)
    monkeypatch.setattr(cuda_launch, "_streams", {})
    monkeypatch.setattr(cuda_launch, "_generic", {})
    return types.SimpleNamespace(device=device, driver=driver, kernel=FakeKernel(device))


def test_kernel_launcher_packs_pointers_and_sizes_for_culaunchkernel(fake_gpu):
    launcher = loader.KernelLauncher(fake_gpu.kernel, (256,), "PPqq")
    launcher((7,), 0, 0x7F00_0000_0010, 0x7F00_0000_2000, 3, 2**40 + 5)
    (call, raw), = fake_gpu.driver.calls
    assert call == (0xC0DE, 7, 1, 1, 256, 1, 1, 0, 0x5000, 0)
    assert raw == [struct.pack("<Q", 0x7F00_0000_0010), struct.pack("<Q", 0x7F00_0000_2000),
                   struct.pack("<q", 3), struct.pack("<q", 2**40 + 5)]


def test_kernel_launcher_passes_32_bit_and_float_parameters_at_their_width(fake_gpu):
    fake_gpu.driver.widths = (8, 4, 4, 8)
    launcher = loader.KernelLauncher(fake_gpu.kernel, (128, 2, 1), "Pifd")
    launcher((1, 2, 3), 0, 16, -5, 1.5, -2.25)
    call, raw = fake_gpu.driver.calls[0]
    assert call[1:7] == (1, 2, 3, 128, 2, 1)
    assert raw == [struct.pack("<Q", 16), struct.pack("<i", -5), struct.pack("<f", 1.5), struct.pack("<d", -2.25)]


def test_kernel_launcher_uses_each_devices_function_and_stream(fake_gpu):
    launcher = loader.KernelLauncher(fake_gpu.kernel, (32,), "P")
    fake_gpu.driver.widths = (8,)
    launcher((1,), 0, 8)
    fake_gpu.device[0] = 1
    launcher((1,), 0, 8)
    fake_gpu.device[0] = 0
    launcher((1,), 0, 8)
    handles_streams = [(call[0], call[8]) for call, _ in fake_gpu.driver.calls]
    assert handles_streams == [(0xC0DE, 0x5000), (0xC0DF, 0x5001), (0xC0DE, 0x5000)]


def test_a_required_attribute_is_set_on_each_devices_function_before_its_first_launch(fake_gpu, monkeypatch):
    """A 16-block cluster needs CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED on the CUfunction it
    launches; CuPy loads a module per device, so the CUfunction of a second GPU needs it too (set on
    the build's device alone, the launch on the second failed with CUDA_ERROR_INVALID_CLUSTER_SIZE)."""
    from kernels.cuda import compiler
    from kernels.cuda.cluster_split import CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED as NON_PORTABLE
    from kernels.cuda.cluster_split import allow_non_portable_cluster

    monkeypatch.setattr(compiler, "_required_attributes", {})
    monkeypatch.setattr(compiler, "_attributes_set", set())
    fake_gpu.driver.widths = (8,)
    allow_non_portable_cluster(fake_gpu.kernel)  # at build, on device 0
    assert fake_gpu.driver.attributes == {(0xC0DE, NON_PORTABLE): 1}
    launcher = loader.KernelLauncher(fake_gpu.kernel, (128,), "P")
    for device in (0, 1, 1, 0):
        fake_gpu.device[0] = device
        launcher((16,), 0, 8)
    assert fake_gpu.driver.attributes == {(0xC0DE, NON_PORTABLE): 1, (0xC0DF, NON_PORTABLE): 1}
    assert [call[0] for call, _ in fake_gpu.driver.calls] == [0xC0DE, 0xC0DF, 0xC0DF, 0xC0DE]


def test_kernel_launcher_opts_into_large_dynamic_shared_memory_once_per_device(fake_gpu):
    launcher = loader.KernelLauncher(fake_gpu.kernel, (512,), "P")
    fake_gpu.driver.widths = (8,)
    for smem in (1024, 100 * 1024, 100 * 1024, 80 * 1024):
        launcher((1,), smem, 8)
    assert fake_gpu.driver.attributes == {(0xC0DE, loader.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): 100 * 1024}
    fake_gpu.device[0] = 1
    launcher((1,), 100 * 1024, 8)
    assert fake_gpu.driver.attributes[(0xC0DF, loader.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)] == 100 * 1024
    assert [call[7] for call, _ in fake_gpu.driver.calls] == [1024, 102400, 102400, 81920, 102400]


def test_kernel_launcher_opts_in_where_static_and_dynamic_shared_memory_pass_48_kb(fake_gpu):
    # 80 static bytes (the fake's) + 48 KB dynamic is over the default limit, 48 KB - 80 is not
    launcher = loader.KernelLauncher(fake_gpu.kernel, (512,), "P")
    fake_gpu.driver.widths = (8,)
    launcher((1,), 48 * 1024 - 80, 8)
    assert fake_gpu.driver.attributes == {}
    launcher((1,), 48 * 1024, 8)
    assert fake_gpu.driver.attributes == {(0xC0DE, loader.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): 48 * 1024}


def test_needs_smem_opt_in_counts_static_shared_memory():
    assert not loader.needs_smem_opt_in(0, 48 * 1024)
    assert loader.needs_smem_opt_in(16, 48 * 1024)
    assert not loader.needs_smem_opt_in(48 * 1024, 0)  # no dynamic memory: nothing to raise


def test_kernel_launcher_gives_each_thread_its_own_parameter_buffer(fake_gpu):
    launcher = loader.KernelLauncher(fake_gpu.kernel, (32,), "P")
    buffers = [launcher.buffer()]
    thread = threading.Thread(target=lambda: buffers.append(launcher.buffer()))
    thread.start()
    thread.join()
    assert buffers[0] is launcher.buffer() and buffers[1] is not buffers[0]
    assert buffers[0].params != buffers[1].params


def test_launch_maps_numpy_scalars_to_parameter_kinds(fake_gpu):
    fake_gpu.driver.widths = (8, 8, 4)
    args = (np.uint64(4096), np.int64(-3), np.int32(7))
    loader.launch(fake_gpu.kernel, (2, 1, 1), (64, 1, 1), args)
    loader.launch(fake_gpu.kernel, (2, 1, 1), (64, 1, 1), args)
    assert len(cuda_launch._generic) == 1
    (launcher,) = cuda_launch._generic.values()
    assert launcher.kinds == "Pqi"  # numpy.uint64 is a pointer (replays bind or refuse it)
    assert fake_gpu.driver.calls[0][1] == [struct.pack("<Q", 4096), struct.pack("<q", -3), struct.pack("<i", 7)]
    assert fake_gpu.kernel.cupy_calls == []


def test_launch_hands_other_argument_types_to_cupy(fake_gpu):
    loader.launch(fake_gpu.kernel, (2,), (64,), (np.uint64(8), 3))  # a Python int: CuPy decides its type
    assert fake_gpu.driver.calls == []
    grid, block, args, smem, stream = fake_gpu.kernel.cupy_calls[0]
    assert (grid, block, smem, stream) == ((2, 1, 1), (64, 1, 1), 0, ("stream", 0x5000))


def test_direct_launch_can_be_turned_off(fake_gpu, monkeypatch):
    monkeypatch.setenv(loader.DIRECT_LAUNCH_ENV, "0")
    launcher = loader.KernelLauncher(fake_gpu.kernel, (256,), "PPqi")
    launcher((5,), 0, 16, 32, 3, 4)
    assert fake_gpu.driver.calls == []
    grid, block, args, smem, stream = fake_gpu.kernel.cupy_calls[0]
    assert (grid, block, smem, stream) == ((5, 1, 1), (256, 1, 1), 0, ("stream", 0x5000))
    assert [type(a) for a in args] == [np.uint64, np.uint64, np.int64, np.int32] and list(args) == [16, 32, 3, 4]


class _RowKernel(CudaVariant):
    name = "test_row_kernel"
    source = "none.cu"
    dtypes = ("fp32",)

    def all_configs(self):
        return [KernelConfig.of(block=128)]

    def constraints(self, config, dtype):
        return {}

    def geometry(self, config, dtype):
        def of(m, n):
            self.grids = getattr(self, "grids", 0) + 1
            return m, 4 * n

        return of


class _Tensor:
    def __init__(self, shape, ptr):
        self.shape, self.ptr = shape, ptr

    def data_ptr(self):
        return self.ptr


def test_cuda_launcher_works_out_geometry_per_call_and_skips_empty_inputs(fake_gpu):
    variant = _RowKernel()
    launch, native = variant.make_launcher(fake_gpu.kernel, KernelConfig.of(block=128), "fp32", 128)
    launch(_Tensor((0, 100), 0), _Tensor((0, 100), 0))
    for _ in range(3):
        launch(_Tensor((3, 100), 256), _Tensor((3, 100), 512))
    launch(_Tensor((5, 100), 256), _Tensor((5, 100), 512))
    assert variant.grids == 4  # nothing kept per shape
    calls = fake_gpu.driver.calls
    assert len(calls) == 4
    assert calls[0][0][1:8] == (3, 1, 1, 128, 1, 1, 400)
    assert calls[0][1] == [struct.pack("<Q", 256), struct.pack("<Q", 512), struct.pack("<q", 3), struct.pack("<q", 100)]
    assert calls[3][0][1] == 5
    handle = calls[0][0][0]
    assert native(0, 0x5000, 0, 100) is None
    assert native(0, 0x5000, 7, 100) == (handle, 7, 128, 400, struct.pack("<QQqq", 0, 0, 7, 100), 0, 1)


def test_cuda_launcher_with_its_own_kernel_args_goes_through_loader_launch(fake_gpu):
    class Custom(_RowKernel):
        def kernel_args(self, config, x, out, m, n):
            return (np.uint64(x.data_ptr()), np.int32(n))

    fake_gpu.driver.widths = (8, 4)
    launch, native = Custom().make_launcher(fake_gpu.kernel, KernelConfig.of(block=128), "fp32", 128)
    launch(_Tensor((2, 10), 64), _Tensor((2, 10), 128))
    assert native is None  # its own argument layout: the Python path only
    assert fake_gpu.driver.calls[0][1] == [struct.pack("<Q", 64), struct.pack("<i", 10)]


@pytest.mark.gpu
@pytest.mark.parametrize(("numel", "dtype"), [(1, "fp16"), (7, "fp32"), (4096, "bf16"), (123457, "fp16"), (1 << 22, "fp32")])
def test_plain_copy_copies_every_byte_including_the_tail(numel, dtype):
    import torch

    from kernels.cuda.plain_copy import plain_copy_launcher
    from kernels.reference import torch_dtype

    x = torch.randn(numel, device="cuda").to(torch_dtype(dtype))
    out = torch.full_like(x, float("nan"))
    plain_copy_launcher()(x, out)
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16 if x.element_size() == 2 else torch.int32),
                       x.view(torch.int16 if x.element_size() == 2 else torch.int32))
    if numel > 8:  # a view one element in is not 16-byte aligned: refused, not copied wrongly
        with pytest.raises(ValueError, match="aligned"):
            plain_copy_launcher()(x[1:], out[1:])


def test_every_cuda_config_reports_its_shared_memory_and_launch_geometry_without_a_gpu():
    """``build`` reports a config's resources from ``dynamic_smem`` before any launch, and the
    default launcher's ``geometry`` runs on every new shape: both must answer for every config,
    dtype and row length the config admits (a variant that launches its own way has no geometry and
    answers 0)."""
    from kernels import all_variants
    from kernels.cuda.common import CudaVariant

    checked = 0
    for variant in all_variants():
        if not isinstance(variant, CudaVariant):
            continue
        for config in variant.all_configs():
            for dtype in variant.dtypes:
                limits = variant.constraints(config, dtype)
                for n in {limits.get("n_min", 1), min(limits.get("n_max", 1 << 20), 1 << 24)}:
                    smem = variant.dynamic_smem(config, dtype, n)
                    assert isinstance(smem, int) and smem >= 0, (variant.name, config.key, dtype, n)
                    if type(variant).geometry is not CudaVariant.geometry:
                        grid_x, same = variant.geometry(config, dtype)(1, n)
                        assert grid_x >= 1 and same == smem
                        checked += 1
    assert checked > 100
