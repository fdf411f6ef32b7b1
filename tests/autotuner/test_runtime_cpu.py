"""softmax() without a GPU: CPU tensors go to torch.softmax, input is validated with clear errors,
the fast path takes only 2-D contiguous rows over the last dim whose native launch is kept (on its
stream, while its guard holds), a new shape takes its instance's launch arithmetic through the native
module or the Python path, launches run under a device guard when their device is not current,
torch.compile traces the custom op, and the caches stay bounded over 100,000 new shapes."""
from __future__ import annotations

import contextlib
import types

import pytest
import torch

from autotuner import runtime
@pytest.mark.parametrize("shape, dim", [((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((7,), 0), ((0, 4), -1)])
def test_cpu_tensors_get_torch_softmax(shape, dim):
    x = torch.randn(shape)
    assert torch.equal(runtime.softmax(x, dim), torch.softmax(x, dim))


@pytest.mark.parametrize("value, dim, error, words", [
    ([1.0, 2.0], -1, TypeError, "torch.Tensor"),
    (torch.ones(3, dtype=torch.int32), -1, TypeError, "floating-point tensors"),
    (torch.ones(2, 3), None, TypeError, "dim must be an int, got NoneType"),
    (torch.ones(2, 3), 1.0, TypeError, "dim must be an int, got float"),
    (torch.ones(2, 3), True, TypeError, "dim must be an int, got bool"),
    (torch.ones(2, 3), 2, IndexError, "dim 2 out of range"),
    (torch.ones(2, 3), -3, IndexError, "dim -3 out of range"),
])
def test_invalid_input_is_refused_with_a_clear_error(value, dim, error, words):
    with pytest.raises(error, match=words):
        runtime.softmax(value, dim)


class FakeNative:
    """The native module's run: returns a tensor of 7s (or None, as for a misaligned input) and
    records (x, stream, launch)."""

    def __init__(self):
        self.runs, self.aligned = [], True

    def run(self, x, stream, *launch):
        self.runs.append((x, stream, launch))
        return torch.full_like(x, 7.0) if self.aligned else None


@pytest.fixture
def fake_cuda(monkeypatch):
    """Device -1 (what get_device() says of a CPU tensor) is current, stream 0x50 is current and a
    fake native module is loaded: the runtime's CUDA paths run on CPU tensors."""
    module = FakeNative()
    state = types.SimpleNamespace(module=module, device=-1, stream=0x50)
    monkeypatch.setattr(runtime, "_current_device", lambda: state.device)
    monkeypatch.setattr(runtime, "_raw_stream", lambda index: state.stream)
    monkeypatch.setattr(runtime, "_native_run", module.run)
    monkeypatch.setattr(runtime, "native_module", lambda: module)
    monkeypatch.setattr(runtime, "_module_loaded", None)
    monkeypatch.setattr(runtime, "_recent", {})
    monkeypatch.setattr(runtime, "_builds", {})
    return state


@pytest.fixture
def planted(fake_cuda, monkeypatch):
    """A kept native launch for (2, 3) fp32 rows on device -1."""
    monkeypatch.setitem(runtime._recent, (-1, (2, 3), torch.float32), (("planted",), None, -1, -1))
    return fake_cuda


@pytest.mark.parametrize("shape, dim", [((3, 5), -1), ((2, 3, 4), 1)])
def test_float64_and_a_dtype_argument_are_torchs(shape, dim):
    x = torch.randn(shape, dtype=torch.float64)
    assert torch.equal(runtime.softmax(x, dim), torch.softmax(x, dim))
    half = torch.randn(shape).half()
    for dtype in (torch.float32, torch.float64):
        got = runtime.softmax(half, dim, dtype=dtype)
        assert got.dtype == dtype and torch.equal(got, torch.softmax(half, dim, dtype=dtype))
    assert torch.equal(runtime.softmax(half, dim=dim, dtype=torch.float16), torch.softmax(half, dim))
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):  # torch refuses a name too
        runtime.softmax(half, dim, dtype="fp32")


def test_a_0d_tensor_and_a_dim_of_another_integer_kind_are_taken_as_torch_takes_them():
    numpy = pytest.importorskip("numpy")
    one = torch.tensor(2.5)
    for dim in (-1, 0):
        assert torch.equal(runtime.softmax(one, dim), torch.softmax(one, dim))
    with pytest.raises(IndexError):  # torch's own range check of a 0-d tensor's dim
        runtime.softmax(one, 1)
    x = torch.randn(2, 3, 4)
    for dim in (numpy.int64(1), numpy.int32(-1)):
        assert torch.equal(runtime.softmax(x, dim), torch.softmax(x, int(dim)))


def test_a_call_autograd_records_is_torchs_and_its_gradient_torchs(planted):
    """x requires grad with grad mode on: torch.softmax (a kept launch of the shape is not used), so
    backward gives torch's gradient; under no_grad the same x takes the kept launch."""
    x = torch.randn(2, 3, requires_grad=True)
    weights = torch.randn(2, 3)
    y = runtime.softmax(x)
    assert y.grad_fn is not None and planted.module.runs == []
    (y * weights).sum().backward()
    reference = x.detach().clone().requires_grad_()
    (torch.softmax(reference, -1) * weights).sum().backward()
    assert torch.allclose(x.grad, reference.grad)
    with torch.no_grad():
        assert torch.equal(runtime.softmax(x), torch.full((2, 3), 7.0))
    assert len(planted.module.runs) == 1


def test_fast_path_takes_2d_contiguous_rows_over_the_last_dim(planted):
    x = torch.randn(2, 3)
    for dim in (-1, 1):
        assert torch.equal(runtime.softmax(x, dim), torch.full((2, 3), 7.0))
    assert planted.module.runs == [(x, 0x50, ("planted",))] * 2


@pytest.mark.parametrize("make, dim", [
    (lambda: torch.randn(3, 2).t(), -1),  # not contiguous
    (lambda: torch.randn(2, 3), 0),  # not the last dim
    (lambda: torch.randn(1, 2, 3), -1),  # not 2-D
    (lambda: torch.randn(2, 3, dtype=torch.float16), -1),  # another dtype
    (lambda: torch.nn.Parameter(torch.randn(2, 3)), -1),  # a Tensor subclass
])
def test_anything_else_takes_the_general_path(planted, make, dim):
    x = make()
    with torch.no_grad():
        assert torch.allclose(runtime.softmax(x, dim), torch.softmax(x, dim))
    assert planted.module.runs == []


def test_a_kept_launch_is_used_only_on_its_stream_its_device_and_while_its_guard_holds(planted, monkeypatch):
    guard = [True]
    monkeypatch.setitem(runtime._recent, (-1, (2, 3), torch.float32), (("bound",), 0x50, runtime._callable_number(lambda: guard[0]), -1))
    x = torch.randn(2, 3)
    assert torch.equal(runtime.softmax(x), torch.full((2, 3), 7.0))  # its stream, guard holds
    for change in ("stream", "guard", "device"):
        planted.stream, guard[0], planted.device = (0x60 if change == "stream" else 0x50,
                                                    change != "guard", 0 if change == "device" else -1)
        assert torch.allclose(runtime.softmax(x), torch.softmax(x, -1))  # the general path (CPU: torch)
    assert len(planted.module.runs) == 1
    planted.stream, guard[0], planted.device = 0x50, True, -1
    planted.module.aligned = False  # the module refuses a misaligned input: the general path
    assert torch.allclose(runtime.softmax(x), torch.softmax(x, -1))


def picks_with(monkeypatch, instance_for) -> None:
    """The runtime picks ``instance_for(device, m, n, dtype)``'s build, as from a GPU without a table of its own."""
    monkeypatch.setattr(runtime, "_instance", lambda device, m, n, dtype: (None, -2, instance_for(device, m, n, dtype)))


def fake_build(launched: list, stream_bound: bool = False, native: bool = True, guard=None):
    def launch(x, out):
        launched.append(x.shape)
        out.fill_(3.0)

    def geometry(device, stream, m, n):
        return (0xF00, m, 128, 0, bytes(32), 0, 1)

    return types.SimpleNamespace(variant="fake", launch=launch, native=geometry if native else None,
                                 stream_bound=stream_bound, native_guard=guard, apply=None, native_rule=None)


def test_a_new_shape_takes_its_instances_launch_arithmetic_and_is_kept(fake_cuda, monkeypatch):
    launched = []
    picks_with(monkeypatch, lambda device, m, n, dtype: fake_build(launched, stream_bound=True))
    rows = torch.randn(4, 5)
    assert torch.equal(runtime._launch(-1, rows, "fp32"), torch.full((4, 5), 7.0))
    launch = (0xF00, 4, 128, 0, bytes(32), 0, 1)
    assert fake_cuda.module.runs == [(rows, 0x50, launch)]
    assert runtime._recent == {(-1, (4, 5), torch.float32): (launch, 0x50, -1, -1)}  # bound to its stream
    assert torch.equal(runtime.softmax(rows), torch.full((4, 5), 7.0))  # the repeat: one probe, one run
    assert fake_cuda.module.runs[1] == (rows, 0x50, launch) and launched == []


def test_a_pick_with_its_own_apply_is_kept_for_its_repeats(fake_cuda, monkeypatch):
    applied, picks = [], []

    def apply(x):
        applied.append(x.shape)
        return torch.full_like(x, 5.0)

    def instance_for(device, m, n, dtype):
        picks.append((m, n))
        return types.SimpleNamespace(apply=apply)

    picks_with(monkeypatch, instance_for)
    rows = torch.randn(4, 5)
    assert torch.equal(runtime._launch(-1, rows, "fp32"), torch.full((4, 5), 5.0))
    assert torch.equal(runtime.softmax(rows), torch.full((4, 5), 5.0))  # the repeat: no pick made again
    assert picks == [(4, 5)] and applied == [(4, 5)] * 2 and fake_cuda.module.runs == []


def test_the_kept_shapes_drop_their_oldest_quarter_when_full(fake_cuda, monkeypatch):
    launched = []
    monkeypatch.setattr(runtime, "RECENT_SHAPES", 8)
    picks_with(monkeypatch, lambda device, m, n, dtype: fake_build(launched))
    for n in range(1, 10):
        runtime._launch(-1, torch.randn(1, n), "fp32")
    assert [key[1][1] for key in runtime._recent] == [3, 4, 5, 6, 7, 8, 9]


def test_kept_shapes_hold_nothing_the_garbage_collector_tracks(fake_cuda, monkeypatch):
    """Thousands of kept shapes must not lengthen the process's full collections: once collected,
    no key or entry is tracked, whether it holds a guarded launch or a torch_softmax pick's apply."""
    import gc

    launched = []
    guarded = fake_build(launched, guard=lambda: True)
    applied = types.SimpleNamespace(apply=lambda x: torch.full_like(x, 5.0))
    picks_with(monkeypatch, lambda device, m, n, dtype: guarded if n % 2 else applied)
    for n in (3, 4):
        runtime._launch(-1, torch.randn(2, n), "fp32")
    assert runtime._recent[(-1, (2, 3), torch.float32)][2] >= 0 and runtime._recent[(-1, (2, 4), torch.float32)][3] >= 0
    gc.collect()
    gc.collect()  # a tuple is untracked once the tuples it holds are: a pass may meet it before them
    for key, entry in runtime._recent.items():
        assert not gc.is_tracked(key) and not gc.is_tracked(entry), (key, entry)
    assert torch.equal(runtime.softmax(torch.randn(2, 3)), torch.full((2, 3), 7.0))  # the kept guard is called
    assert torch.equal(runtime.softmax(torch.randn(2, 4)), torch.full((2, 4), 5.0))  # the kept apply


class FakePlans(FakeNative):
    """FakeNative with plans: dispatch answers ``answer`` (a tensor, a candidate, None, or an exception
    to raise); plan_learn records what it is taught and answers ``learns``."""

    def __init__(self):
        super().__init__()
        self.answer, self.learns, self.taught, self.routes = 0, True, [], []

    def plan_new(self, candidates, exact, partitions, torch_softmax):
        return "plan"

    def dispatch_route(self, device, dtype, plan, store, generation):
        self.routes.append((device, dtype, plan))

    def dispatch(self, x, dim):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def plan_learn(self, plan, candidate, rule, guard, m, n, *launch):
        self.taught.append((candidate, rule, m, n, launch))
        return self.learns


@pytest.fixture
def planned(fake_cuda, monkeypatch):
    """fake_cuda with the native module's dispatch, and a picker for device -1's fp32 rows (the GPU's
    own table: the shipped H100 fp32) whose plan is not made yet."""
    from autotuner.lookup.select import default_store

    module = FakePlans()
    monkeypatch.setattr(runtime, "native_module", lambda: module)
    monkeypatch.setattr(runtime, "_native_run", module.run)
    monkeypatch.setattr(runtime, "_dispatch", module.dispatch)
    monkeypatch.setattr(runtime, "_native_failed", [])
    store = default_store()
    table, view = store.answering_view("h100", "fp32")
    picker = [store, store.generation, table, view, [None] * (len(table.candidates) + 1), None]
    monkeypatch.setattr(runtime, "_pickers", {(-1, "fp32"): picker})
    fake_cuda.module, fake_cuda.picker = module, picker
    return fake_cuda


def test_a_call_the_dispatch_launches_is_its_answer_and_any_other_takes_the_python_path(planned, monkeypatch):
    x = torch.randn(4, 5)
    planned.module.answer = torch.full((4, 5), 9.0)
    assert runtime.softmax(x) is planned.module.answer  # picked and launched in C
    asked = []
    monkeypatch.setattr(runtime, "_instance", lambda device, m, n, dtype: asked.append((m, n)) or (
        planned.picker, 3, fake_build([])))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))  # CPU rows past the CUDA check
    for n, answer in ((7, 3), (8, None)):  # a candidate the plan picked but cannot launch; no plan for the rows
        planned.module.answer = answer
        assert torch.equal(runtime.softmax(torch.randn(2, n)), torch.full((2, n), 7.0))
    assert asked == [(2, 7), (2, 8)]  # picked again in Python: the tables may have changed since the plan's pick
    assert planned.module.taught == [] and (-1, (2, 7), torch.float32) in runtime._recent  # no rule: kept instead


@pytest.mark.parametrize("learns", [True, False])
def test_a_launch_is_taught_to_the_plan_where_its_build_has_a_rule(planned, learns):
    from kernels.base import LaunchGeometry, NativeRule

    build = fake_build([])
    build.native_rule, build.variant, build.dtype = NativeRule(LaunchGeometry(), m_slot=2, n_slot=3), "cuda_block_online", "fp32"
    planned.module.learns = learns
    rows = torch.randn(4, 5)
    assert torch.equal(runtime._launch_native(-1, rows, build, rows.shape, planned.picker, 2), torch.full((4, 5), 7.0))
    launch = (0xF00, 4, 128, 0, bytes(32), 0, 1)
    assert planned.module.taught == [(2, (1, 1, 0, 0, 1, 0, 0, 0, 2, 3, 0, 0, 0, 0, -1, -1, -1, 0), 4, 5, launch)]
    assert planned.module.routes == [(-1, "fp32", "plan")] and planned.picker[5] == "plan"  # made once, routed
    assert ((-1, (4, 5), torch.float32) in runtime._recent) is not learns  # a taught launch needs no memo


def test_a_persistent_grid_is_taught_with_its_classs_own_cap(planned):
    """triton_fused_row's rule caps each class's grid at what the build describes for the most rows:
    here the fake build's grid min(M, 1056) for N = 5, and none where the build describes no launch."""
    from kernels.registry import MOST_ROWS, _KEPT_NATIVE_RULES

    build = fake_build([])
    build.native = lambda device, stream, m, n: (0xF00, min(m, 1056), 128, 0, bytes(32), 0, 1)
    build.variant, build.dtype = "triton_fused_row", "fp32"
    rows = torch.randn(4, 5)
    assert torch.equal(runtime._launch_native(-1, rows, build, rows.shape, planned.picker, 2), torch.full((4, 5), 7.0))
    rule = _KEPT_NATIVE_RULES["triton_fused_row"]
    assert planned.module.taught == [(2, rule.for_plan(1056), 4, 5, (0xF00, 4, 128, 0, bytes(32), 0, 1))]
    assert rule.for_plan(1056)[2] == 1056 and rule.for_plan(1056)[-1] == 1  # the cap; M unspecialised
    planned.module.taught.clear()
    build.native = lambda device, stream, m, n: None if m == MOST_ROWS else (0xF00, m, 128, 0, bytes(32), 0, 1)
    runtime._launch_native(-1, rows, build, rows.shape, planned.picker, 2)
    assert planned.module.taught == []  # no cap described: nothing taught (the launch is kept for the shape)


def test_a_launch_holding_its_streams_workspace_is_taught_only_under_a_split_rule(planned):
    """long_split's launches name their stream's workspace: a plan is taught them under a RowSplit
    rule (it puts its own workspace in), and no such launch under a rule without one."""
    from kernels.base import LaunchGeometry, NativeRule, RowSplit

    for split in (None, RowSplit(2048, 1024, 264, 8, s_slot=5, tickets_slot=3, slots_slot=2)):
        build = fake_build([], stream_bound=True)
        build.native_rule, build.variant, build.dtype = NativeRule(LaunchGeometry(), n_slot=4, split=split), \
            "cuda_long_split", "fp32"
        planned.module.taught.clear()
        rows = torch.randn(4, 5)
        assert torch.equal(runtime._launch_native(-1, rows, build, rows.shape, planned.picker, 2), torch.full((4, 5), 7.0))
        assert [entry[1][10:17] for entry in planned.module.taught] == ([] if split is None else [tuple(split)])


def test_a_dispatch_that_fails_turns_the_native_module_off_with_one_warning(planned):
    planned.module.answer = RuntimeError("cuLaunchKernel failed: CUresult 700")
    with pytest.warns(RuntimeWarning, match="native launch module failed .*CUresult 700"):
        x = torch.randn(4, 5)
        assert torch.allclose(runtime.softmax(x), torch.softmax(x, -1))  # CPU rows: the general path after
    assert runtime._dispatch is None and runtime._native_failed and runtime._module_loaded is None


@pytest.mark.parametrize("why", ["no module", "no native geometry", "guard", "misaligned"])
def test_the_python_path_launches_the_build_where_the_native_one_cannot(fake_cuda, monkeypatch, why):
    launched = []
    build = fake_build(launched, native=why != "no native geometry", guard=(lambda: False) if why == "guard" else None)
    picks_with(monkeypatch, lambda device, m, n, dtype: build)
    if why == "no module":
        monkeypatch.setattr(runtime, "native_module", lambda: None)
    fake_cuda.module.aligned = why != "misaligned"
    rows = torch.randn(4, 5)
    assert torch.equal(runtime._launch(-1, rows, "fp32"), torch.full((4, 5), 3.0))
    assert launched == [(4, 5)] and runtime._recent == {}


def test_launches_run_under_a_device_guard_when_their_device_is_not_current(fake_cuda, monkeypatch):
    entered, devices_seen = [], []

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        previous, fake_cuda.device = fake_cuda.device, index
        yield
        fake_cuda.device = previous

    monkeypatch.setattr(torch.cuda, "device", device)
    build = fake_build([])
    geometry = build.native
    build.native = lambda device, stream, m, n: devices_seen.append(fake_cuda.device) or geometry(device, stream, m, n)
    picks_with(monkeypatch, lambda device, m, n, dtype: build)
    fake_cuda.device = 0
    runtime._launch(1, torch.randn(2, 3), "fp32")
    assert entered == [1] and devices_seen == [1] and fake_cuda.device == 0


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


def test_a_gpu_without_a_table_of_its_own_picks_from_the_one_it_borrows(monkeypatch):
    """The H800 has no table of its own and ``select_kernel`` answers it from the H100's: the runtime's
    picker reads that table and view too, so its new shapes go to a native plan instead of the Python
    path; the A100 PCIe borrows none (torch.softmax answers), and its picker holds no table."""
    from autotuner.lookup.select import default_store

    store = default_store()
    monkeypatch.setattr(runtime, "_pickers", {})
    monkeypatch.setitem(runtime._gpu_keys, 5, "h800")
    monkeypatch.setitem(runtime._gpu_keys, 6, "a100-pcie")
    picker = runtime._picker(5, "fp16", store)
    assert picker[2] is store.get("h100", "fp16") and (picker[2], picker[3]) == store.answering_view("h800", "fp16")
    assert runtime._picker(6, "fp16", store)[2] is None
