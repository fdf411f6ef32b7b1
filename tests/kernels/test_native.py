"""The native launch module without a GPU: how recorded CUDA and Triton launches become its argument
slots, the check of a layout against the driver's parameter sizes, and the module itself built
against this torch (allocation, argument errors)."""
from __future__ import annotations

import shutil
import struct
from types import SimpleNamespace

import pytest

from kernels import native
from kernels.cuda.replay import CudaLaunch
from kernels.native import NativeLaunch, plan_launches
from kernels.triton_impl.launch import TritonLaunch

X, OUT = 0x7000_0000, 0x7100_0000


def cuda_launch(kinds: str, args: tuple) -> CudaLaunch:
    launcher = SimpleNamespace(kinds=kinds, block=(128, 1, 1))
    return CudaLaunch(launcher, 0, 0xABC, (5, 1, 1), 256, 0, args, None)


def test_a_cuda_launch_packs_its_arguments_with_x_and_out_patched_per_call():
    launch = cuda_launch("PPqif", (X, OUT, 7, -3, 0.5))
    got = launch.native_launch(X, OUT)
    function, grid, block, shared_mem, slots, x_slots, out_slots = got
    assert (function, grid, block, shared_mem) == (0xABC, (5, 1, 1), (128, 1, 1), 256)
    assert (x_slots, out_slots) == ((0,), (1,))
    assert slots == struct.pack("<QQqi4xf4x", 0, 0, 7, -3, 0.5)
    assert got.sizes == (8, 8, 8, 4, 4) and got.trailing_nulls == 0 and not got.checked


def test_a_cuda_launch_with_any_other_pointer_is_not_native():
    assert cuda_launch("PPP", (X, OUT, 0x9000)).native_launch(X, OUT) is None  # a workspace, a stream's slots
    assert cuda_launch("PPP", (X, OUT, 0)).native_launch(X, OUT) is not None  # a null stays null


def triton_launch(signature: dict, values: tuple, consts: tuple = (), **metadata) -> TritonLaunch:
    fields = {"num_warps": 4, "num_ctas": 1, "shared": 1024, "global_scratch_size": 0, "profile_scratch_size": 0}
    kernel = SimpleNamespace(metadata=SimpleNamespace(**{**fields, **metadata}),
                             src=SimpleNamespace(signature=signature))
    names = [name for name in signature][: len(values)]
    launcher = SimpleNamespace(runtime_names=tuple(names))
    return TritonLaunch(launcher, (None, 0xDEF, None, kernel), (3, 1, 1), 0, values, consts)


SIGNATURE = {"x_ptr": "*fp16", "out_ptr": "*fp16", "M": "i32", "stride": "constexpr", "scale": "fp32",
             "BLOCK": "constexpr"}


def test_a_triton_launch_follows_the_compiled_signature():
    launch = triton_launch(SIGNATURE, (X, OUT, 9, 1, 2.0), consts=(1024,))
    got = launch.native_launch(X, OUT)
    function, grid, block, shared_mem, slots, x_slots, out_slots = got
    assert (function, grid, block, shared_mem) == (0xDEF, (3, 1, 1), (128, 1, 1), 1024)
    assert (x_slots, out_slots) == ((0,), (1,))
    assert slots == struct.pack("<QQi4xf4x", 0, 0, 9, 2.0)  # the specialised stride (a constant) is dropped
    assert got.sizes == (8, 8, 4, 4) and got.trailing_nulls == 2 and got.checked


@pytest.mark.parametrize("change", [
    {"num_ctas": 2}, {"global_scratch_size": 64}, {"profile_scratch_size": 8}, {"launch_pdl": True},
])
def test_a_triton_launch_needing_more_than_a_plain_launch_is_not_native(change):
    assert triton_launch(SIGNATURE, (X, OUT, 9, 1, 2.0), (1024,), **change).native_launch(X, OUT) is None


def test_a_triton_launch_whose_signature_does_not_fit_is_not_native():
    assert triton_launch({**SIGNATURE, "M": "fp16"}, (X, OUT, 9, 1, 2.0), (1024,)).native_launch(X, OUT) is None
    assert triton_launch(SIGNATURE, (X, OUT, 9, 1), (1024,)).native_launch(X, OUT) is None  # arity differs
    assert triton_launch(SIGNATURE, (X, 0x9000, 9, 1, 2.0), (1024,)).native_launch(X, OUT) is None


class FakeModule:
    def __init__(self, sizes):
        self.sizes, self.made = sizes, None

    def param_sizes(self, function):
        return self.sizes

    def make_plan(self, launches):
        self.made = launches
        return "plan"


def test_a_layout_goes_native_only_as_the_driver_reports_it():
    triton = NativeLaunch(1, (1, 1, 1), (32, 1, 1), 0, "PP", (0, 0), (0,), (1,), trailing_nulls=2, checked=True)
    module = FakeModule((8, 8, 8, 8))  # two scratch pointers after the arguments: appended as nulls
    assert plan_launches(module, [triton]) == "plan" and module.made[0][4] == bytes(32)
    assert plan_launches(FakeModule((8, 8)), [triton]) == "plan"
    assert plan_launches(FakeModule((8, 4)), [triton]) is None  # sizes differ
    assert plan_launches(FakeModule((8, 8, 8, 8, 8)), [triton]) is None  # more than the nulls allowed
    assert plan_launches(FakeModule(None), [triton]) is None  # a driver that cannot tell: Triton refused
    cuda = NativeLaunch(1, (1, 1, 1), (32, 1, 1), 0, "PP", (0, 0), (0,), (1,))
    assert plan_launches(FakeModule(None), [cuda]) == "plan"  # our own kinds, as the Python path trusts them
    assert plan_launches(FakeModule((8, 8, 8)), [cuda]) is None


def test_load_returns_none_when_turned_off_or_not_built(monkeypatch, tmp_path):
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    native.reset()
    try:
        monkeypatch.setenv(native.ENV, "0")
        assert native.load() is None
        native.reset()
        monkeypatch.setenv(native.ENV, "1")
        assert native.load() is None  # nothing built in this cache: never compiles on its own
    finally:
        native.reset()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        pytest.skip("no C++ compiler on this machine")
    import os

    previous = os.environ.get(native.CACHE_ENV)
    os.environ[native.CACHE_ENV] = str(tmp_path_factory.mktemp("native"))
    try:
        native.build()
        native.reset()
        yield native.load()
    finally:
        os.environ.pop(native.CACHE_ENV) if previous is None else os.environ.__setitem__(native.CACHE_ENV, previous)
        native.reset()


def test_the_module_builds_against_this_torch_and_allocates_like_torch(built):
    import torch

    assert built is not None
    x = torch.randn(3, 5, dtype=torch.float16)
    y = built.empty_like(x)
    assert (y.shape, y.dtype, y.stride(), y.device) == (x.shape, x.dtype, x.stride(), x.device)
    assert y.data_ptr() != x.data_ptr()


def test_the_module_refuses_bad_arguments_with_clear_errors(built):
    import torch

    with pytest.raises(TypeError, match="empty_like expects a Tensor"):
        built.empty_like([1, 2])
    with pytest.raises(TypeError, match=r"run\(x: Tensor, stream: int, plan\)"):
        built.run([1], 0, None)
    with pytest.raises(TypeError, match="plan must come from make_plan"):
        built.run(torch.ones(2, 2), 0, "not a plan")
    with pytest.raises(ValueError, match="at least one launch"):
        built.make_plan([])
    with pytest.raises(ValueError, match="8-byte slots"):
        built.make_plan([(1, (1, 1, 1), (32, 1, 1), 0, bytes(12), (0,), (1,))])
    with pytest.raises(ValueError, match="x_slots: slot 5 outside the 2 argument slots"):
        built.make_plan([(1, (1, 1, 1), (32, 1, 1), 0, bytes(16), (5,), (1,))])


def test_the_module_reads_a_well_formed_launch_before_it_needs_the_driver(built):
    """Parsing runs before libcuda is looked up, so this machine (no driver, Python 3.12 or not)
    exercises the whole argument format of make_plan."""
    launch = (0x1234, (2, 1, 1), (128, 1, 1), 64, bytes(24), (0,), (1,))
    try:
        plan = built.make_plan([launch, launch])
    except RuntimeError as exc:  # a machine without a CUDA driver
        assert "libcuda" in str(exc)
    else:
        assert type(plan).__name__ == "PyCapsule"
