"""The native launch module without a GPU: how CUDA and Triton launches become its argument slots,
the check of a layout against the driver's parameter sizes, the background build, and the module
itself built against this torch (allocation, argument errors)."""
from __future__ import annotations

import shutil
import struct
from types import SimpleNamespace

import pytest

from kernels import native
from kernels.cuda import launch as cuda_launch
from kernels.triton_impl import launch as triton_launch
from kernels.triton_impl.launch import OUT, X


def test_a_cuda_launch_packs_its_arguments_with_x_and_out_patched_per_call(monkeypatch):
    launcher = cuda_launch.KernelLauncher(SimpleNamespace(kernel=SimpleNamespace(ptr=0xABC)), (128,), "PPqif")
    raised = []
    monkeypatch.setattr(launcher, "_raise_smem", lambda device, smem: raised.append((device, smem)))
    got = launcher.native(0, (5, 1, 1), 256, (0, 0, 7, -3, 0.5))
    assert raised == [(0, 256)]  # the shared-memory opt-in is checked as the launch checks it
    function, grid_x, block_x, shared_mem, slots, x_slot, out_slot = got
    assert (function, grid_x, block_x, shared_mem) == (0xABC, 5, 128, 0x100)
    assert (x_slot, out_slot) == (0, 1)
    assert slots == struct.pack("<QQqi4xf4x", 0, 0, 7, -3, 0.5)
    assert launcher.native(0, (5, 2, 1), 0, (0, 0, 7, -3, 0.5)) is None  # a 2-D grid: the Python path
    launcher.direct = False  # AUTOTUNER_CUDA_DIRECT_LAUNCH=0: not native either
    assert launcher.native(0, (5,), 0, (0, 0, 7, -3, 0.5)) is None


def compiled(signature: dict, **metadata) -> SimpleNamespace:
    fields = {"num_warps": 4, "num_ctas": 1, "shared": 1024, "global_scratch_size": 0, "profile_scratch_size": 0}
    return SimpleNamespace(metadata=SimpleNamespace(**{**fields, **metadata}), src=SimpleNamespace(signature=signature),
                           function=0xDEF)


SIGNATURE = {"x_ptr": "*fp16", "out_ptr": "*fp16", "M": "i32", "stride": "constexpr", "scale": "fp32",
             "BLOCK": "constexpr"}
NAMES = ("x_ptr", "out_ptr", "M", "stride", "scale")


def test_a_triton_launch_follows_the_compiled_signature():
    template = triton_launch._native_template(compiled(SIGNATURE), NAMES, (X, OUT, 9, 1, 2.0))
    slot_struct, packed, x_slot, out_slot, block_x, shared, function, sizes = template
    assert (function, block_x, shared, x_slot, out_slot) == (0xDEF, 128, 1024, 0, 1)
    assert packed == (0, 1, 2, 4)  # the specialised stride (a constant) is dropped
    assert slot_struct.pack(0, 0, 9, 2.0) == struct.pack("<QQi4xf4x", 0, 0, 9, 2.0)
    assert sizes == (8, 8, 4, 4)


@pytest.mark.parametrize("change", [
    {"num_ctas": 2}, {"global_scratch_size": 64}, {"profile_scratch_size": 8}, {"launch_pdl": True},
])
def test_a_triton_launch_needing_more_than_a_plain_launch_is_not_native(change):
    assert triton_launch._native_template(compiled(SIGNATURE, **change), NAMES, (X, OUT, 9, 1, 2.0)) is None


def test_a_triton_launch_whose_signature_does_not_fit_is_not_native():
    assert triton_launch._native_template(compiled({**SIGNATURE, "M": "fp16"}), NAMES, (X, OUT, 9, 1, 2.0)) is None
    assert triton_launch._native_template(compiled(SIGNATURE), NAMES, (X, 0x9000, 9, 1, 2.0)) is None  # a workspace


def test_a_triton_native_launch_is_kept_per_class_of_its_ints_and_an_uncompiled_bucket_is_asked_again(monkeypatch):
    kernel = SimpleNamespace(arg_names=["x_ptr", "y_ptr", "N", "BLOCK"], __name__="one_row")
    launcher = triton_launch.Launcher(kernel, ("BLOCK",), {"num_warps": 4})
    assert launcher.direct
    made = []
    template = (struct.Struct("<QQi4x"), (0, 1, 2), 0, 1, 128, 0, 0xDEF, b"")
    monkeypatch.setattr(launcher, "_confirmed_template", lambda compiled, args: made.append(args[2]) or template)
    assert launcher.native(0, "fp16", (3,), (X, OUT, 1000), (1024,)) is None  # the bucket is not compiled yet
    launcher.compiled[launcher._aligned_key(0, "fp16", (X, OUT, 1000), (1024,))] = (None, None, None, "compiled")
    assert launcher.native(0, "fp16", (3,), (X, OUT, 1000), (1024,)) == (
        0xDEF, 3, 128, 0, struct.pack("<QQi4x", 0, 0, 1000), 0, 1)
    # N = 1001 is of 1000's class (32-bit, not 1, not a multiple of 16): the kept launch, its own N packed
    assert launcher.native(0, "fp16", (7,), (X, OUT, 1001), (1024,))[1:5:3] == (7, struct.pack("<QQi4x", 0, 0, 1001))
    assert made == [1000]
    # N = 1008 is a multiple of 16, which Triton compiles apart: not compiled, so not native
    assert launcher.native(0, "fp16", (3,), (X, OUT, 1008), (1024,)) is None
    launcher.direct = False  # AUTOTUNER_TRITON_DIRECT_LAUNCH=0
    assert launcher.native(0, "fp16", (3,), (X, OUT, 1000), (1024,)) is None


class FakeModule:
    def __init__(self, sizes):
        self.sizes = sizes

    def param_sizes(self, function):
        return self.sizes


@pytest.mark.parametrize("sizes, checked, nulls", [
    ((8, 8, 8, 8), True, 2),  # two scratch pointers after the arguments: appended as nulls
    ((8, 8), True, 0),
    ((8, 4), True, None),  # sizes differ
    ((8, 8, 8, 8, 8), True, None),  # more than the nulls allowed
    (None, True, None),  # a driver that cannot tell: a Triton layout is refused
    (None, False, 0),  # our own kinds, as the Python path trusts them
])
def test_a_layout_goes_native_only_as_the_driver_reports_it(monkeypatch, sizes, checked, nulls):
    monkeypatch.setattr(native, "_extra_nulls", {})
    assert native.confirmed_extra_nulls(FakeModule(sizes), 1, (8, 8), 2, checked) == nulls


def test_a_missing_module_is_built_in_the_background_never_in_the_caller(monkeypatch, tmp_path):
    import threading

    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(native.ENV, "1")
    release, calls = threading.Event(), []

    def slow_build(force=False):
        calls.append(threading.current_thread().name)
        release.wait(10)
        raise native.NativeBuildError("no C++ compiler found (a test)")

    monkeypatch.setattr(native, "build", slow_build)
    monkeypatch.setattr(native, "_background", [])
    native.reset()
    try:
        assert native.load() is None  # returns at once: the build waits on ``release``
        native.reset()
        assert native.load() is None and len(native._background) == 1  # one background build per process
        release.set()
        with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
            native.wait_for_background_build(10)
        assert calls == ["softmax-native-build"]
    finally:
        release.set()
        native.reset()


def test_load_returns_none_when_turned_off_or_not_built(monkeypatch, tmp_path):
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    native.reset()
    try:
        monkeypatch.setenv(native.ENV, "0")
        assert native.load() is None
        native.reset()
        monkeypatch.setattr(native, "_background", [object()])  # a build already started
        monkeypatch.setenv(native.ENV, "1")
        assert native.load() is None  # nothing built in this cache: never compiles in the caller
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

    x = torch.ones(2, 2)
    with pytest.raises(TypeError, match="empty_like expects a Tensor"):
        built.empty_like([1, 2])
    with pytest.raises(TypeError, match=r"run\(x: Tensor, stream: int, function: int, grid_x"):
        built.run([1], 0, 1, 1, 32, 0, bytes(16), 0, 1)
    with pytest.raises(TypeError, match=r"run\(x: Tensor"):
        built.run(x, 0, 1, 1, 32, 0, "not bytes", 0, 1)
    with pytest.raises(ValueError, match="8-byte slots"):
        built.run(x, 0, 1, 1, 32, 0, bytes(12), 0, 1)
    with pytest.raises(ValueError, match="x and out slots among them"):
        built.run(x, 0, 1, 1, 32, 0, bytes(16), 5, 1)
    with pytest.raises(ValueError, match="a function handle"):
        built.run(x, 0, 0, 1, 32, 0, bytes(16), 0, 1)


def test_the_module_reads_a_well_formed_launch_before_it_needs_the_driver(built):
    """The arguments are read before libcuda is looked up, so this machine (no driver) exercises the
    whole argument format of run."""
    import torch

    try:
        out = built.run(torch.ones(2, 2), 0, 0x1234, 2, 128, 64, bytes(24), 0, 2)
    except RuntimeError as exc:  # a machine without a CUDA driver
        assert "libcuda" in str(exc)
    else:
        pytest.fail(f"a launch of a made-up function handle returned {out!r}")


# --- plans: a new shape picked and launched in C ---------------------------------------------------

def one_cell(candidate: int) -> tuple[bytes, ...]:
    """A partition of one cell whose leaf answers ``candidate`` (-1: the fallback), as ``plan_new`` takes
    each N class's arrays (``autotuner/lookup/table.py``)."""
    return tuple(b"".join(v.to_bytes(8, "little", signed=True) for v in values)
                 for values in ([1], [0, 1], [1], [0], [0], [], [], [candidate]))


def _plan(built, table, view=0):
    return built.plan_new(len(table.candidates), *table.native_index(view), ())


def test_a_plan_picks_what_the_table_picks_at_every_measured_point_and_on_100000_shapes(built):
    """The C pick reads the same index arrays as DispatchTable.pick: every shipped table and view, its
    measured points and their neighbours, and 100,000 shapes log-uniform over the domain."""
    import random

    from autotuner.lookup.select import default_store

    rng = random.Random(29)
    shapes = [(int(2 ** rng.uniform(0, 20)), int(2 ** rng.uniform(0, 24))) for _ in range(100_000)]
    tables = default_store().tables()
    assert len(tables) >= 20
    for table in tables:
        for view in range(len(table.views)):
            plan = _plan(built, table, view)
            points = [(m, n) for n, by_m in table._exact[view].items() for m in by_m]
            probes = points + [(m + 1, n) for m, n in points] + [(m, n + 1) for m, n in points]
            probes += shapes if (table.gpu, table.dtype, view) == ("h100", "fp16", 0) else shapes[:5000]
            wrong = [(m, n) for m, n in probes
                     if built.plan_pick(plan, m, n) != (-1 if (pick := table.pick(m, n, view)) is None else pick)]
            assert not wrong, f"{table.gpu} {table.dtype} view {view}: the plan picks otherwise at {wrong[:5]}"
    assert built.plan_pick(plan, 0, 5) == -2  # M = 0 has no pick


def test_a_plan_reads_every_launch_rule_as_python_does(built, monkeypatch):
    """For every CUDA config and dtype with a native rule (and the Triton rules kept by the registry),
    the C geometry equals LaunchGeometry's on shapes over the domain and around the rule's steps."""
    import random

    from kernels import all_variants
    from kernels.cuda import loader
    from kernels.registry import _KEPT_NATIVE_RULES

    monkeypatch.setattr(loader, "device_limits", lambda: (2048, 1024, 132))  # an H100's threads per SM, SMs
    rng = random.Random(7)
    shapes = [(int(2 ** rng.uniform(0, 22)), int(2 ** rng.uniform(0, 24))) for _ in range(300)]
    rules = list(_KEPT_NATIVE_RULES.values())
    for variant in all_variants():
        if variant.backend == "cuda":
            rules += [rule for config in variant.all_configs() for dtype in variant.dtypes
                      if (rule := variant.native_rule(config, dtype)) is not None]
    assert len(rules) > 50
    for rule in rules:
        geometry = rule.geometry
        steps = [(k * geometry.rows + d, geometry.vec * (k * geometry.parts + geometry.held) + d)
                 for k in (1, 2, 7) for d in (-1, 0, 1) if k * geometry.rows + d >= 1]
        for m, n in shapes + [(m, max(n, 1)) for m, n in steps]:
            assert built.plan_geometry(rule.for_plan(), m, n) == geometry(m, n), (rule, m, n)


def test_a_plan_derives_long_splits_blocks_per_row_as_python_does(built, monkeypatch):
    """long_split's rule (RowSplit: S blocks per row, grid M * S): the C reading equals the Python one
    for every config and dtype and a few residencies, over the domain and around S's steps."""
    import random

    from kernels import get_variant
    from kernels.base import Resources
    from kernels.cuda import loader

    monkeypatch.setattr(loader, "device_limits", lambda: (2048, 1024, 132))
    variant = get_variant("cuda_long_split")
    rng = random.Random(11)
    shapes = [(int(2 ** rng.uniform(0, 21)), int(2 ** rng.uniform(0, 31))) for _ in range(400)]
    shapes += [(m, n) for m in (1, 2, 3, 131, 132, 133, 263, 264, 265, 1055, 1056, 1057, 2**30)
               for n in (1, 7, 8, 9, 8 * 1023, 8 * 1024, 8 * 1025, 2**19 + 1, 2**24, 2**31 - 1)]
    for config in variant.all_configs():
        for dtype in variant.dtypes:
            for blocks_per_sm in (1, 2, 8):
                rule = variant.native_rule(config, dtype, Resources(blocks_per_sm=blocks_per_sm))
                assert rule.split.resident == 132 * blocks_per_sm
                for m, n in shapes:
                    grid = m * rule.split(m, n)
                    assert built.plan_geometry(rule.for_plan(), m, n) == ((grid, 0) if grid < 2**31 else None), \
                        (config, dtype, blocks_per_sm, m, n)
    assert variant.native_rule(variant.all_configs()[0], "fp16") is None  # no residency reported: no rule


def test_a_plan_puts_its_own_workspace_per_stream_and_s_into_a_split_launch(built):
    """A split rule's launch is learned where S is in its slot and the grid is M * S; the plan then
    launches (here: attempts, on a made-up function) every (M, N) with a workspace of its own per
    stream and S: the slot array grown where more rows need it, a ticket counter where M * S blocks
    are more than resident. On CPU rows, whose workspaces are CPU tensors: no capture to check."""
    import torch

    from kernels.base import LaunchGeometry, NativeRule, RowSplit

    split = RowSplit(chunk=2048, min_share=1024, resident=264, vec=8, s_slot=5, tickets_slot=3, slots_slot=2)
    rule = NativeRule(LaunchGeometry(), n_slot=4, split=split).for_plan()
    plan = built.plan_new(1, b"", (one_cell(0),) * 2, ())
    n = 8 * 4096  # S = 2 where M * 2 >= 264 (two chunks); more where fewer rows leave slots empty

    def launch(m, s=None):
        s = split(m, n) if s is None else s
        return (0x1234, m * s, 512, 0, struct.pack("<QQQQqi4x", 0, 0, 0xA000, 0, n, s), 0, 1)

    def attempted(m, rows_n=n, stream=0x7000):
        try:
            return built.plan_run(plan, torch.ones(m, rows_n, dtype=torch.float16), stream) != 0
        except RuntimeError as exc:  # the launch was attempted
            assert "libcuda" in str(exc) or "cuLaunchKernel" in str(exc)
            return True

    assert {split(m, n) for m in (100, 120, 200, 300)} == {2} and split(10, n) == 4 and split(1, 8 * 100) == 1
    assert not built.plan_learn(plan, 0, rule, None, 100, n, *launch(100, s=3))  # S not the rule's
    assert not built.plan_learn(plan, 0, rule, None, 100, n, 0x1234, 100 * 2 + 1, *launch(100)[2:])  # grid
    assert not built.plan_learn(plan, 0, rule, None, 100, n + 8, *launch(100))  # N not in its slot
    assert built.plan_learn(plan, 0, rule, None, 100, n, *launch(100))
    assert built.plan_stats(plan)["workspaces"] == 0
    shapes = [(100, n), (300, n), (10, n), (1, 800), (100, n, 0x8000)]  # S = 2, 2 (grown, a second wave), 4, 1
    assert all(attempted(*shape) for shape in shapes)
    assert built.plan_stats(plan)["workspaces"] == 4  # (stream, S): (1, 2), (1, 4), (1, 1), (2, 2)
    assert built.plan_stats(plan)["declined"] == 0 and built.plan_stats(plan)["launches_kept"] == 1


def test_a_plan_learns_only_what_its_rule_derives_and_launches_a_learned_class_itself(built):
    """Before a launch is learned the plan answers its pick; a described launch that the rule does not
    derive is refused; once learned, shapes of the class are launched in C (here: the launch is
    attempted, which fails on a made-up function handle, with or without a driver), other classes not."""
    import torch

    from autotuner.lookup.select import default_store
    from kernels.base import LaunchGeometry, NativeRule

    table = default_store().get("h100", "fp16")
    plan = _plan(built, table)
    m, n = 3, 1000
    candidate = built.plan_pick(plan, m, n)
    assert candidate >= 0 and candidate == table.pick(m, n)
    # shapes the table gives the same candidate: N's class of 1000 (1024, not a multiple of 16), and 1008
    alike = [(m2, n2) for m2 in range(1, 9) for n2 in range(980, 1024) if table.pick(m2, n2) == candidate and (m2, n2) != (m, n)]
    same_class = next(shape for shape in alike if shape[1] % 16)
    other_class = next(shape for shape in alike if shape[1] % 16 == 0)
    x = torch.ones(m, n, dtype=torch.float16)
    assert built.plan_run(plan, x, 1) == candidate  # nothing learned: the caller's path
    rows = NativeRule(LaunchGeometry(), m_slot=2, n_slot=3).for_plan()
    launch = (0x1234, m, 128, 0, struct.pack("<QQqq", 0, 0, m, n), 0, 1)
    assert not built.plan_learn(plan, candidate, rows, None, m, n, 0x1234, m + 1, *launch[2:])  # grid: not the rule's
    assert not built.plan_learn(plan, candidate, rows, None, m, n + 1, *launch)  # N is not in its slot
    assert built.plan_learn(plan, candidate, rows, None, m, n, *launch)
    assert built.plan_stats(plan)["launches_kept"] == 1
    with pytest.raises(RuntimeError, match="libcuda|cuLaunchKernel"):
        built.plan_run(plan, torch.ones(*other_class, dtype=torch.float16), 1)
    # a Triton-like rule: one launch per class of N
    by_class = NativeRule(LaunchGeometry(), by_class=True, n_slot=2).for_plan()
    triton_launch = (0x1234, m, 128, 0, struct.pack("<QQi4x", 0, 0, n), 0, 1)
    assert built.plan_learn(plan, candidate, by_class, lambda: True, m, n, *triton_launch)
    assert built.plan_run(plan, torch.ones(*other_class, dtype=torch.float16), 1) == candidate  # not learned
    with pytest.raises(RuntimeError, match="libcuda|cuLaunchKernel"):
        built.plan_run(plan, torch.ones(*same_class, dtype=torch.float16), 1)
    assert built.plan_learn(plan, candidate, by_class, lambda: False, m, n, *triton_launch)
    assert built.plan_run(plan, torch.ones(*same_class, dtype=torch.float16), 1) == candidate  # the guard fails
    stats = built.plan_stats(plan)
    assert stats["launches"] == 0 and stats["declined"] == 3  # nothing learned, a class not learned, the guard


def test_a_persistent_grid_rule_keeps_each_class_its_own_cap_and_takes_any_m(built):
    """triton_fused_row's rule (kernels/registry.py): M in slot 2 is unspecialised, so a launch learned
    at M = 1 serves every M of N's class; the grid is min(M, the class's own cap), as each learned
    launch's rule gave it (a launch that exceeds it, or a cap learned for another class, is refused)."""
    import torch

    from kernels.registry import _KEPT_NATIVE_RULES

    rule = _KEPT_NATIVE_RULES["triton_fused_row"]
    assert rule.m_unspecialised and rule.cap_per_class
    plan = built.plan_new(1, b"", (one_cell(0),) * 2, ())  # candidate 0 everywhere
    candidate, n = 0, 1000
    slots = lambda rows, cols: struct.pack("<QQi4xi4x", 0, 0, rows, cols)  # (x, out, M, N): 8-byte slots
    assert built.plan_learn(plan, candidate, rule.for_plan(264), None, 1, n, 0x1234, 1, 128, 0, slots(1, n), 0, 1)
    # the class of N = 1000 (BLOCK 1024, N % 16 != 0), every M: launched in C (which fails on a made-up handle)
    for rows in (1, 2, 16, 5000):
        with pytest.raises(RuntimeError, match="libcuda|cuLaunchKernel"):
            built.plan_run(plan, torch.ones(rows, n, dtype=torch.float16), 1)
    # another class (N = 1008: % 16 == 0) with its own cap: its launch of many rows is capped there
    assert not built.plan_learn(plan, candidate, rule.for_plan(528), None, 5000, 1008, 0x1234, 264, 128, 0,
                                slots(5000, 1008), 0, 1)  # the grid is not this class's cap
    assert built.plan_learn(plan, candidate, rule.for_plan(528), None, 5000, 1008, 0x1234, 528, 128, 0,
                            slots(5000, 1008), 0, 1)
    assert built.plan_stats(plan)["launches_kept"] == 2


def test_a_plan_refuses_a_damaged_index_or_bad_arguments_with_clear_errors(built):
    from autotuner.lookup.select import default_store
    from kernels.base import LaunchGeometry, NativeRule

    table = default_store().get("h100", "fp16")
    exact, partitions = table.native_index(0)
    cut = tuple((fields[0], fields[1][:-8], *fields[2:]) for fields in partitions)
    with pytest.raises(ValueError, match="partition's arrays do not fit together"):
        built.plan_new(len(table.candidates), exact, cut, ())
    with pytest.raises(ValueError, match="partition's arrays do not fit together"):
        built.plan_new(2, exact, partitions, ())  # leaves name candidates the plan does not have
    with pytest.raises(TypeError, match=r"plan_new\(candidates: int, exact: bytes"):
        built.plan_new(len(table.candidates), exact, partitions)
    with pytest.raises(ValueError, match="torch_softmax candidate outside the plan"):
        built.plan_new(len(table.candidates), exact, partitions, (len(table.candidates),))
    with pytest.raises(TypeError, match="exact must be bytes of int64 values"):
        built.plan_new(len(table.candidates), exact[:-4], partitions, ())
    plan = _plan(built, table)
    with pytest.raises(TypeError, match=r"plan_run\(plan, x: Tensor, stream: int\)"):
        built.plan_run(plan, [1], 0)
    with pytest.raises((TypeError, ValueError)):
        built.plan_run("not a plan", __import__("torch").ones(2, 2), 0)
    with pytest.raises(ValueError, match="out of range"):  # rows 0
        built.plan_geometry((0, *NativeRule(LaunchGeometry()).for_plan()[1:]), 1, 1)
    with pytest.raises(TypeError, match="a rule is"):  # the format before m_unspecialised
        built.plan_geometry(NativeRule(LaunchGeometry()).for_plan()[:-1], 1, 1)


def test_a_plan_computes_a_torch_softmax_pick_as_torch_softmax_does(built):
    """torch.softmax's picks (the candidate of that name, and the fallback) are at::softmax in the plan:
    the bits of torch.softmax(x, -1), here on CPU rows (the same op on CUDA ones)."""
    import torch

    from autotuner.lookup.select import default_store

    table = default_store().get("h100", "fp32")
    torch_candidate = next(i for i, c in enumerate(table.candidates) if c["variant"] == "torch_softmax")
    shapes = [(m, n) for m in range(1, 200, 7) for n in (1, 2, 3, 5, 33, 999, 5000, 70000)
              if table.pick(m, n) == torch_candidate][:3]
    assert shapes, "the H100 fp32 table picks torch.softmax somewhere small"
    plan = built.plan_new(len(table.candidates), *table.native_index(0), (torch_candidate,))
    fallback = built.plan_new(0, b"", (one_cell(-1),) * 2, ())
    for m, n in shapes:
        x = torch.randn(m, n)
        assert torch.equal(built.plan_run(plan, x, 1), torch.softmax(x, -1))
        assert torch.equal(built.plan_run(fallback, x, 1), torch.softmax(x, -1))
    assert built.plan_stats(plan)["launches"] == built.plan_stats(fallback)["launches"] == len(shapes)


def test_a_plan_computes_misaligned_rows_as_torch_softmax_does_whatever_its_pick(built):
    """Rows whose data pointer is not 16-byte aligned are at::softmax's in the plan (a Triton launch is
    specialised on aligned pointers); aligned rows of the same pick, with no launch taught, are declined."""
    import torch

    plan = built.plan_new(1, b"", (one_cell(0),) * 2, ())  # candidate 0 everywhere, not torch.softmax
    base = torch.randn(5 * 8 + 1)
    misaligned, aligned = base[1:].view(5, 8), base[:40].view(5, 8)
    assert misaligned.data_ptr() % 16 and not aligned.data_ptr() % 16
    assert torch.equal(built.plan_run(plan, misaligned, 1), torch.softmax(misaligned, -1))
    assert built.plan_run(plan, aligned, 1) == 0  # the candidate it picked: no launch taught
    assert built.plan_stats(plan)["launches"] == 1 and built.plan_stats(plan)["declined"] == 1


def test_a_plan_reads_tritons_launch_hooks_itself_and_declines_while_one_is_registered(built):
    """The hooks-idle guard of Triton 3.4 on is read in C (kernels.triton_impl.launch.plan_guard): a
    hook added to either chain, or a chain replaced, sends the call back to the caller's path."""
    pytest.importorskip("triton")
    import torch
    from triton import knobs

    from autotuner.lookup.select import default_store
    from kernels.base import LaunchGeometry, NativeRule
    from kernels.triton_impl.launch import hooks_idle_guard, plan_guard

    spec = plan_guard(hooks_idle_guard())
    if not isinstance(spec, tuple):
        pytest.skip("this Triton's hooks are not HookChains: the guard stays a Python call")
    table = default_store().get("h100", "fp16")
    plan = _plan(built, table)
    m, n = 3, 1000
    candidate = built.plan_pick(plan, m, n)
    rule = NativeRule(LaunchGeometry(), by_class=True, n_slot=2).for_plan()
    assert built.plan_learn(plan, candidate, rule, spec, m, n, 0x1234, m, 128, 0, struct.pack("<QQi4x", 0, 0, n), 0, 1)
    x = torch.ones(m, n, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="libcuda|cuLaunchKernel"):  # hooks idle: the plan launches
        built.plan_run(plan, x, 1)
    hook = lambda *args: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert built.plan_run(plan, x, 1) == candidate
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    saved = knobs.runtime.launch_exit_hook
    knobs.runtime.launch_exit_hook = hook  # a plain function in place of the chain
    try:
        assert built.plan_run(plan, x, 1) == candidate
    finally:
        knobs.runtime.launch_exit_hook = saved


def test_dispatch_takes_a_call_to_its_routes_plan_only_while_the_route_holds(built):
    """dispatch(x, dim) does softmax()'s checks in C: a plain Tensor, its last dim (of any rank: an
    attention's 4-D scores are rows too; rows not contiguous are copied first, as torch does), M, N >= 1,
    a route for its device and dtype
    (device -1: CPU rows, as tests route them), the
    default store at the route's generation, the device current. Here the route's plan picks
    torch.softmax everywhere, which a plan computes itself on any device."""
    import types

    import torch

    store = types.SimpleNamespace(generation=3)
    select = types.SimpleNamespace(_default_store=store)
    current = [-1]
    plan = built.plan_new(1, b"", (one_cell(0),) * 2, (0,))
    built.dispatch_setup(select, lambda: current[0], lambda device: 1)
    built.dispatch_route(-1, "fp32", plan, store, 3)
    try:
        x = torch.randn(5, 7)
        assert torch.equal(built.dispatch(x, -1), torch.softmax(x, -1))
        assert torch.equal(built.dispatch(x, 1), torch.softmax(x, -1))
        scores = torch.randn(2, 3, 1, 7)  # (batch, heads, queries, keys)
        strided = (x.t(), torch.randn(2, 3, 4, 7).transpose(1, 2), torch.randn(4, 3, 7)[:, -1])  # copied first
        for rows, dim in ((scores, -1), (scores, 3), (x[None], 2), (x[0], -1), (x[0], 0), *((t, -1) for t in strided)):
            got = built.dispatch(rows, dim)
            assert got.shape == rows.shape and got.is_contiguous(), (rows.shape, dim)
            assert torch.equal(got, torch.softmax(rows, -1)), (rows.shape, dim)
        for other, dim in ((x, 0), (x[None], 1), (torch.randn(0, 7), -1),
                           (torch.randn(3, 0), -1), (torch.tensor(1.0), -1), (x.double(), -1), (x.half(), -1),
                           (torch.zeros(1, 1).expand(2**31, 1), -1),  # more rows than a table answers
                           (torch.nn.Parameter(x), -1), (x, None), ([1.0], -1)):
            assert built.dispatch(other, dim) is None, (other.shape if hasattr(other, "shape") else other, dim)
        current[0] = 0
        assert built.dispatch(x, -1) is None  # another device is current
        current[0] = -1
        store.generation = 4
        assert built.dispatch(x, -1) is None  # the tables changed since the route was made
        store.generation = 3
        select._default_store = types.SimpleNamespace(generation=3)
        assert built.dispatch(x, -1) is None  # another store
        select._default_store = store
        assert built.dispatch(x, -1) is not None
        learning = x.clone().requires_grad_()
        assert built.dispatch(learning, -1) is None  # autograd would record it: torch.softmax's, in Python
        with torch.no_grad():
            assert torch.equal(built.dispatch(learning, -1), torch.softmax(x, -1))
        built.dispatch_route(-1, "fp32", None, None, None)
        assert built.dispatch(x, -1) is None  # routed to nobody
    finally:
        built.dispatch_route(-1, "fp32", None, None, None)
    with pytest.raises(ValueError, match="a dtype fp32, fp16 or bf16"):
        built.dispatch_route(0, "fp64", plan, store, 3)
    with pytest.raises(TypeError, match="dispatch_setup"):
        built.dispatch_setup(select, 1, 2)
