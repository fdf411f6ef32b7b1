"""softmax() without a GPU: CPU tensors go to torch.softmax, input is validated with clear errors,
the fast path takes only 2-D contiguous rows over the last dim whose plan exists, plans launch under
a device guard when their device is not current, and torch.compile traces the custom op."""
from __future__ import annotations

import contextlib

import pytest
import torch

from autotuner import runtime
from kernels import replay_plan


@pytest.mark.parametrize("shape, dim", [((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((7,), 0), ((0, 4), -1)])
def test_cpu_tensors_get_torch_softmax(shape, dim):
    x = torch.randn(shape)
    assert torch.equal(runtime.softmax(x, dim), torch.softmax(x, dim))


@pytest.mark.parametrize("value, dim, error, words", [
    ([1.0, 2.0], -1, TypeError, "torch.Tensor"),
    (torch.ones(3, dtype=torch.int32), -1, TypeError, "float32, float16 and bfloat16"),
    (torch.tensor(1.0), -1, ValueError, "at least one dimension"),
    (torch.ones(2, 3), 2, IndexError, "dim 2 out of range"),
    (torch.ones(2, 3), -3, IndexError, "dim -3 out of range"),
])
def test_invalid_input_is_refused_with_a_clear_error(value, dim, error, words):
    with pytest.raises(error, match=words):
        runtime.softmax(value, dim)


@pytest.fixture
def planted_plan(monkeypatch):
    """A plan for (2, 3) fp32 rows on "device -1" (what get_device() says of a CPU tensor), so the
    fast path can be exercised without a GPU."""
    calls = []

    def plan(rows):
        calls.append(rows)
        return torch.full_like(rows, 7.0)

    monkeypatch.setattr(runtime, "_plans", {(-1, (2, 3), torch.float32): plan})
    return calls


def test_fast_path_takes_2d_contiguous_rows_over_the_last_dim(planted_plan):
    x = torch.randn(2, 3)
    for dim in (-1, 1):
        assert torch.equal(runtime.softmax(x, dim), torch.full((2, 3), 7.0))
    assert len(planted_plan) == 2 and all(rows is x for rows in planted_plan)


@pytest.mark.parametrize("make, dim", [
    (lambda: torch.randn(3, 2).t(), -1),  # not contiguous
    (lambda: torch.randn(2, 3), 0),  # not the last dim
    (lambda: torch.randn(1, 2, 3), -1),  # not 2-D
    (lambda: torch.randn(2, 3, dtype=torch.float16), -1),  # another dtype
    (lambda: torch.nn.Parameter(torch.randn(2, 3)), -1),  # a Tensor subclass
])
def test_anything_else_takes_the_general_path(planted_plan, make, dim):
    x = make()
    with torch.no_grad():
        assert torch.allclose(runtime.softmax(x, dim), torch.softmax(x, dim))
    assert planted_plan == []


def test_a_plan_launches_under_a_device_guard_when_its_device_is_not_current(monkeypatch):
    current = [0]
    entered = []

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        previous, current[0] = current[0], index
        yield
        current[0] = previous

    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current[0], raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0x500 + index, raising=False)
    monkeypatch.setattr(torch.cuda, "device", device)
    launched_on = []
    plan = replay_plan._make_plan(1, lambda x, out: launched_on.append(current[0]))
    x = torch.randn(2, 3)
    out = plan(x)
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    current[0] = 1
    plan(x)
    assert launched_on == [1, 1] and entered == [1]


def test_softmax_traces_as_one_custom_op_under_torch_compile():
    graphs = []

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    compiled = torch.compile(lambda t: runtime.softmax(t * 2.0, -1) + 1.0, backend=backend, fullgraph=True)
    x = torch.randn(4, 10)
    assert torch.allclose(compiled(x), torch.softmax(x * 2.0, -1) + 1.0)
    assert "torch.ops.autotuner.softmax" in graphs[0].code
    assert torch.allclose(torch.ops.autotuner.softmax(x, 0), torch.softmax(x, 0))


# --- the recorded replay ---------------------------------------------------------------------------
class _Driver:
    """Stands in for CuPy's driver.launchKernel: records (handle, grid, stream, packed values)."""

    def __init__(self, n_args):
        self.n_args, self.calls = n_args, []

    def launchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        import ctypes

        slots = (ctypes.c_uint64 * self.n_args).from_address(params)
        values = tuple(ctypes.c_uint64.from_address(slots[i]).value for i in range(self.n_args))
        self.calls.append((f, gx, stream, values))


@pytest.fixture
def fake_launches(monkeypatch):
    import types

    from kernels.cuda import launch as cuda_launch
    from kernels.cuda import loader

    driver = _Driver(4)
    monkeypatch.setattr(cuda_launch, "_current_device", lambda: 0)
    monkeypatch.setattr(cuda_launch, "_raw_stream", lambda index: 0x5000)
    monkeypatch.setattr(cuda_launch, "_launch_kernel", driver.launchKernel)
    kernel = loader.KernelLauncher(types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xC0DE)), (128,), "PPqq")
    return types.SimpleNamespace(driver=driver, kernel=kernel, loader=loader, launch_module=cuda_launch)


def test_a_plan_replays_the_recorded_launch_with_new_pointers_and_stream(fake_launches, monkeypatch):
    kernel, driver = fake_launches.kernel, fake_launches.driver

    def launch(x, out):
        m, n = x.shape
        kernel((m,), 0, x.data_ptr(), out.data_ptr(), m, n)

    rows, out = torch.zeros(2, 3), torch.zeros(2, 3)
    replay = replay_plan._replay_code(launch, rows, out)
    assert len(driver.calls) == 2 and replay is not None  # two recordings, compared

    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0x99, raising=False)
    monkeypatch.setattr(fake_launches.launch_module, "_launch_kernel", None)  # the replay calls the driver itself
    plan = replay_plan._make_plan(0, launch, replay)
    x = torch.randn(2, 3)
    y = plan(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert driver.calls[-1] == (0xC0DE, 2, 0x99, (x.data_ptr(), y.data_ptr(), 2, 3))
    misaligned = torch.randn(7)[1:].view(2, 3)
    monkeypatch.setattr(fake_launches.launch_module, "_launch_kernel", driver.launchKernel)
    y = plan(misaligned)  # not 16-byte aligned: the build's own launch
    assert driver.calls[-1] == (0xC0DE, 2, 0x5000, (misaligned.data_ptr(), y.data_ptr(), 2, 3))
    assert len(driver.calls) == 4


def test_a_plan_replays_several_launches_and_keeps_their_guards(monkeypatch):
    """Two recorded launches, one guarded (as Triton's are, by 'no launch hook registered'): the
    plan replays both while the guard holds and runs the build's launch when it does not."""
    issued, open_ = [], [True]

    class Record:
        def __init__(self, name, guard):
            self.name, self.guard = name, guard

        def same_launch(self, other):
            return self.name == other.name

        def bind_code(self, x_ptr, out_ptr, tag):
            names = {f"issue{tag}": issued.append, "is_open": lambda: open_[0]}
            return self.guard, [f"issue{tag}(('{self.name}', xp, op, stream))"], names

    def launch(x, out):
        issued.append(("launch", x.data_ptr(), out.data_ptr()))

    monkeypatch.setattr(replay_plan, "_recorded_launches", lambda *a: [Record("a", None), Record("b", "is_open()")])
    rows = torch.zeros(2, 3)
    replay = replay_plan._replay_code(launch, rows, torch.zeros(2, 3))
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0x99, raising=False)
    plan = replay_plan._make_plan(0, launch, replay)
    out = plan(rows)
    assert issued == [("a", rows.data_ptr(), out.data_ptr(), 0x99), ("b", rows.data_ptr(), out.data_ptr(), 0x99)]
    open_[0] = False
    issued.clear()
    out = plan(rows)
    assert issued == [("launch", rows.data_ptr(), out.data_ptr())]


def test_launches_that_are_not_safe_to_replay_are_not_recorded(fake_launches, monkeypatch):
    kernel = fake_launches.kernel
    workspace = torch.zeros(16)
    state = [0]

    def with_workspace(x, out):
        kernel((1,), 0, x.data_ptr(), workspace.data_ptr(), 1, 3)
        kernel((1,), 0, workspace.data_ptr(), out.data_ptr(), 1, 3)

    def with_a_torch_op(x, out):
        out.zero_()
        kernel((1,), 0, x.data_ptr(), out.data_ptr(), 1, 3)

    def changing(x, out):
        state[0] += 1
        kernel((state[0],), 0, x.data_ptr(), out.data_ptr(), 1, 3)

    def through_torch(x, out):
        torch.softmax(x, -1, out=out)

    def through_cupy(x, out):
        kernel.direct = False
        try:
            kernel((1,), 0, x.data_ptr(), out.data_ptr(), 1, 3)
        finally:
            kernel.direct = True

    rows, out = torch.zeros(1, 3), torch.zeros(1, 3)
    for launch in (with_workspace, with_a_torch_op, changing, through_torch):
        assert replay_plan._replay_code(launch, rows, out) is None, launch.__name__
    kernel.function = lambda *args, **kwargs: None  # what the CuPy path calls
    monkeypatch.setitem(fake_launches.launch_module._streams, 0x5000, "stream")  # no CuPy to make one
    kernel._handles.clear()
    assert replay_plan._replay_code(through_cupy, rows, out) is None
    shifted = torch.zeros(4)[1:].view(1, 3)
    assert replay_plan._replay_code(lambda x, o: kernel((1,), 0, x.data_ptr(), o.data_ptr(), 1, 3), shifted, out) is None


@pytest.mark.parametrize("capturing", [False, True])
def test_plan_for_build_records_outside_graph_capture_only(fake_launches, monkeypatch, capturing):
    import types

    kernel, driver = fake_launches.kernel, fake_launches.driver
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0x99, raising=False)
    build = types.SimpleNamespace(launch=lambda x, out: kernel((x.shape[0],), 0, x.data_ptr(), out.data_ptr(), *x.shape))
    rows = torch.zeros(2, 3)
    plan = runtime.plan_for_build(0, rows, build)
    assert plan.replays is not capturing
    assert len(driver.calls) == (0 if capturing else 3)  # a warm-up launch and two recordings
    out = plan(rows)
    assert driver.calls[-1] == (0xC0DE, 2, 0x5000 if capturing else 0x99, (rows.data_ptr(), out.data_ptr(), 2, 3))


def _raw_kernel(handle):
    """A CuPy RawKernel as the loader sees it: hashable, its CUfunction on ``.kernel.ptr``."""
    import types

    return type("RawKernel", (), {"kernel": types.SimpleNamespace(ptr=handle)})()


def test_numpy_uint64_arguments_are_pointers_a_replay_binds_or_refuses(fake_launches, monkeypatch):
    """Launches through ``loader.launch`` pass pointers as numpy.uint64 (split_row, grid_split). A
    replay must bind x / out to the new tensors and refuse one that also uses another pointer (the
    grid-split slots, a workspace): the H100 caught grid_split replays writing to the recorded out."""
    import numpy as np

    loader = fake_launches.loader
    function = _raw_kernel(0xBEEF)
    slots = torch.zeros(8)
    monkeypatch.setattr(fake_launches.launch_module, "_generic", {})

    def grid_split_like(x, out):
        loader.launch(function, (4,), (128,), (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()),
                                              np.uint64(slots.data_ptr()), np.int64(x.shape[1])))

    def pointers_only(x, out):
        loader.launch(function, (4,), (128,), (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()),
                                              np.int64(x.shape[0]), np.int64(x.shape[1])))

    rows, out = torch.zeros(2, 4), torch.zeros(2, 4)
    assert replay_plan._replay_code(grid_split_like, rows, out) is None
    replay = replay_plan._replay_code(pointers_only, rows, out)
    assert replay is not None
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0x77, raising=False)
    plan = replay_plan._make_plan(0, pointers_only, replay)
    x = torch.randn(2, 4)
    y = plan(x)
    assert fake_launches.driver.calls[-1] == (0xBEEF, 4, 0x77, (x.data_ptr(), y.data_ptr(), 2, 4))


def test_a_stream_buffer_is_replayed_as_recorded_only_on_its_stream(fake_launches, monkeypatch):
    """cuda_grid_split's slots and ticket counter belong to one stream (loader.register_stream_buffer):
    a plan keeps them, with a null pointer, while the current stream is the recorded one, and
    otherwise launches through the build (which picks that stream's buffers)."""
    import numpy as np

    from kernels.cuda import replay as cuda_replay

    loader = fake_launches.loader
    function = _raw_kernel(0xFACE)
    slots = torch.zeros(8)
    monkeypatch.setattr(fake_launches.launch_module, "_generic", {})
    monkeypatch.setattr(cuda_replay, "_stream_buffers", {})
    loader.register_stream_buffer(slots.data_ptr(), 0x5000)  # the fixture's recording stream
    built = []

    def grid_split_like(x, out):
        built.append(x.data_ptr())
        loader.launch(function, (4,), (128,), (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()),
                                              np.uint64(slots.data_ptr()), np.uint64(0), np.int64(x.shape[1])))

    rows, out = torch.zeros(2, 4), torch.zeros(2, 4)
    replay = replay_plan._replay_code(grid_split_like, rows, out)
    assert replay is not None and replay[0] == ["raw_stream(DEVICE) == 20480"]
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    stream = {"now": 0x5000}
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: stream["now"], raising=False)
    plan = replay_plan._make_plan(0, grid_split_like, replay)
    x = torch.randn(2, 4)
    calls_before = len(built)
    y = plan(x)
    assert len(built) == calls_before  # replayed, not launched through the build
    # (the fake driver reads the first four parameters)
    assert fake_launches.driver.calls[-1] == (0xFACE, 4, 0x5000, (x.data_ptr(), y.data_ptr(), slots.data_ptr(), 0))
    stream["now"] = 0x6000  # another stream: the build's own launch
    plan(x)
    assert len(built) == calls_before + 1
    loader.register_stream_buffer(slots.data_ptr(), 0x6000)  # now another stream's buffer
    assert replay_plan._replay_code(grid_split_like, rows, out) is None  # recorded on 0x5000: unsafe
