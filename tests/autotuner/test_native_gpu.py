"""The native launch module on the GPU: built as a user builds it, every variant's native launch
descriptions (``Build.native``) give through it the bits the build's own launch gives, on any stream,
and the dispatched small shapes (the host-cost targets) take it."""
from __future__ import annotations

import pytest

import kernels
from kernels.reference import check_softmax, edge_input, random_input
from tests.kernels.test_native import one_cell

pytestmark = pytest.mark.gpu

SHAPES = ((1, 4096), (8, 1024), (5, 7), (3, 50257))
LONG_SHAPES = ((2, 300000),)  # rows past register capacity: our CUDA kernels only (Liger refuses N > 65536)
# variants whose builds take the Python path by design: a workspace that moves when it grows (the
# split-row pair), Triton kernels that are not the picks of small shapes, torch's and third-party launches
PYTHON_PATH_VARIANTS = ("torch_softmax", "cuda_split_row", "triton_tiled_three_pass", "triton_online_two_pass",
                        "triton_split_row", "cute_online", "quack_softmax", "liger_softmax")


@pytest.fixture(scope="module")
def native_module(tmp_path_factory):
    from kernels import native

    previous = native.os.environ.get(native.CACHE_ENV)
    native.os.environ[native.CACHE_ENV] = str(tmp_path_factory.mktemp("native-cache"))
    try:
        try:
            native.build()
        except native.NativeBuildError as exc:
            if "no C++ compiler" in str(exc):
                pytest.skip(str(exc))
            raise
        native.reset()
        module = native.load()
        assert module is not None
        from autotuner import runtime

        runtime._recent.clear()  # kept before the module loaded: none
        runtime._native_failed.clear()
        yield module
    finally:
        if previous is None:
            native.os.environ.pop(native.CACHE_ENV, None)
        else:
            native.os.environ[native.CACHE_ENV] = previous
        native.reset()


def _driver_reports_parameter_sizes() -> bool:
    """Drivers of CUDA 12.4 on have cuFuncGetParamInfo; before it a Triton plan keeps the Python path
    by design (``kernels.native.launches``), so the asserts that it goes native do not apply. A driver
    version that cannot be read counts as a recent driver: the asserts then stand."""
    try:
        import cupy

        return cupy.cuda.runtime.driverGetVersion() >= 12040
    except Exception:  # noqa: BLE001 - any failure to read it keeps the asserts
        return True


def _needs_parameter_sizes(m: int, n: int, dtype: str) -> None:
    """Skip when the shape's dispatched kernel is a Triton one and the driver cannot size its parameters."""
    from autotuner import select_kernel

    if select_kernel(m, n, dtype).variant.startswith("triton") and not _driver_reports_parameter_sizes():
        pytest.skip("this driver predates cuFuncGetParamInfo (CUDA 12.4): Triton plans keep the Python path")


def _bits(tensor):
    import torch

    return tensor.contiguous().view(torch.uint8)


def _key(x):
    return (x.get_device(), x.shape, x.dtype)


def _plan_launches(module) -> int:
    """Calls the runtime's native plans have launched themselves so far."""
    from autotuner import runtime

    return runtime.plan_stats()["launches"]


def test_native_launch_on_edge_rows_and_misaligned_input(native_module):
    import torch

    from autotuner import runtime, softmax

    x = edge_input(4096, "fp16")
    softmax(x)
    launched = _plan_launches(native_module)
    y = softmax(x)
    _needs_parameter_sizes(x.shape[0], 4096, "fp16")
    assert _plan_launches(native_module) == launched + 1 or runtime._recent[_key(x)][0] is not None  # native
    assert torch.equal(torch.isnan(y), torch.isnan(torch.softmax(x, -1)))
    assert check_softmax(y, x, "fp16").ok
    base = random_input(1, 7 * 4096 + 1, "fp16")
    shifted = base[0, 1:].view(7, 4096)
    assert shifted.data_ptr() % 16
    assert check_softmax(softmax(shifted), shifted, "fp16").ok


@pytest.mark.parametrize("m, n, dtype", [(1, 4096, "fp16"), (8, 1024, "bf16")])
def test_dispatched_small_shapes_take_the_native_path(native_module, m, n, dtype):
    from autotuner import runtime, softmax

    x = random_input(m, n, dtype)
    for _ in range(2):  # a Triton bucket first met compiles on the Python path: native from its next call
        assert check_softmax(softmax(x), x, dtype).ok
    _needs_parameter_sizes(m, n, dtype)
    launched = _plan_launches(native_module)
    assert check_softmax(softmax(x), x, dtype).ok
    assert _plan_launches(native_module) == launched + 1 or runtime._recent.get(_key(x), (None,))[0] is not None, \
        "the host-cost targets' shapes must take the native path"



def _rule_shapes(variant, config, dtype):
    """Shapes of rows the config takes, at its ends and between, M small to large."""
    limits = variant.constraints(config, dtype)
    low, high = max(1, limits.get("n_min", 1)), min(limits.get("n_max", 1 << 20), 1 << 20)
    ns = sorted({low, high, (low + high) // 2, low + 1, max(low, high - 17), max(low, (low + high) // 3 | 1)})
    ms = (1, 3, 37, 1000) if high <= 65536 else (1, 3)
    return [(m, n) for n in ns for m in ms if variant.supports(m, n, dtype, config)]


@pytest.mark.parametrize("variant_name", [v.name for v in kernels.all_variants()])
def test_plan_launches_give_the_bits_of_the_builds_own_launch(native_module, variant_name):
    """Every build with a native rule: the launch a plan derives from one it was taught gives the bits
    of the build's own launch, on rows over the config's whole range of N (shared memory growing with
    it) and M up to 1000, each class of N taught once."""
    import torch

    from kernels.registry import native_rule, plan_rule

    variant = kernels.get_variant(variant_name)
    if not variant.available():
        pytest.skip(variant.available().reason)
    checked = 0
    device, stream = torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream
    for dtype in variant.dtypes:
        configs = variant.all_configs()
        for config in dict.fromkeys([configs[0], configs[-1]]):
            shapes = _rule_shapes(variant, config, dtype)
            if not shapes:
                continue
            build = variant.build(config, dtype, shapes[0][1])
            rule = native_rule(build)
            if rule is None:
                continue
            plan = native_module.plan_new(1, b"", (one_cell(0),) * 2, ())  # candidate 0 everywhere
            for m, n in shapes:
                x = random_input(m, n, dtype)
                expected = torch.empty_like(x)
                build.launch(x, expected)  # compiles a Triton bucket first met
                got = native_module.plan_run(plan, x, stream)
                if rule.by_class and n == 1:  # an int argument of 1 is a constant to Triton: declined by design
                    assert got == 0
                    continue
                if isinstance(got, int):  # N's class not taught yet: teach it the build's own description
                    launch = build.native(device, stream, m, n)
                    assert launch is not None, f"{config} {dtype} {m}x{n}: no native launch"
                    learned = plan_rule(rule, build, device, stream, n)
                    assert native_module.plan_learn(plan, 0, learned, build.native_guard, m, n, *launch), \
                        f"{config} {dtype} {m}x{n}: the rule {learned} does not derive the build's own " \
                        f"launch {launch[:4]}, slots {launch[4].hex()}"
                    got = native_module.plan_run(plan, x, stream)
                assert not isinstance(got, int), \
                    f"{config} {dtype} {m}x{n}: the plan declined a taught class ({native_module.plan_stats(plan)})"
                assert torch.equal(_bits(got), _bits(expected)), f"{config} {dtype} {m}x{n}"
                checked += 1
    if variant_name.startswith("triton") and not _driver_reports_parameter_sizes():
        return
    if not checked:
        pytest.skip(f"{variant_name}: no build with a native rule")


@pytest.mark.parametrize("variant_name", [v.name for v in kernels.all_variants()])
def test_native_launches_give_the_bits_of_the_builds_own_launch(native_module, variant_name):
    import torch

    variant = kernels.get_variant(variant_name)
    if not variant.available():
        pytest.skip(variant.available().reason)
    checked = natives = 0
    for dtype in variant.dtypes:
        for m, n in SHAPES + (LONG_SHAPES if variant.backend == "cuda" else ()):
            configs = [c for c in variant.all_configs() if variant.supports(m, n, dtype, c)]
            for config in configs[len(configs) // 2:][:1]:  # one config per shape: compiles cost seconds
                build = variant.build(config, dtype, 1 + n // 3)  # another N than the launches': a hint only
                x = random_input(m, n, dtype)
                expected = torch.empty_like(x)
                build.launch(x, expected)
                got = []
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                for stream in (torch.cuda.current_stream(), side):
                    with torch.cuda.stream(stream):
                        launch = build.native(x.get_device(), stream.cuda_stream, m, n) if build.native else None
                        if launch is not None:
                            got.append(native_module.run(x, stream.cuda_stream, *launch))
                torch.cuda.current_stream().wait_stream(side)
                for y in got:
                    assert torch.equal(_bits(y), _bits(expected)), f"{config} {dtype} {m}x{n}"
                result = check_softmax(expected, x, dtype)
                assert result.ok, f"{config} {dtype} {m}x{n}: {result.message}"
                checked += 1
                natives += len(got) == 2
    if not checked:
        pytest.skip(f"{variant_name} supports none of {SHAPES}")
    if variant_name.startswith("triton") and not _driver_reports_parameter_sizes():
        return  # bits checked above; such a driver keeps Triton launches on the Python path by design
    if variant_name not in PYTHON_PATH_VARIANTS:
        assert natives == checked, f"{variant_name}: {natives} of {checked} builds described their launches"


def test_long_rows_are_launched_by_the_plan_with_its_own_workspaces_and_replay_in_a_cuda_graph(native_module):
    """long_split picks (rows past register capacity): once a config's launch is taught, new shapes of
    any S are launched by the plan with workspaces of its own (a second wave of blocks, ticketed,
    included), float64-checked; under CUDA-graph capture the plan declines (a workspace zeroed there
    would be zeroed only on replay) and the captured call replays right."""
    import torch

    from autotuner import runtime, select_kernel, softmax

    def config_of(m, n):
        choice = select_kernel(m, n, "fp16")
        return choice.config_items if choice.variant == "cuda_long_split" else None

    passes = [[(m + k, n + 8 * k) for m, n in ((1, 300001), (3, 524288), (2, 700001), (64, 600000), (200, 300000),
                                                (5, 1048577))] for k in range(3)]
    taught = set()
    for shapes in passes:
        picked = [(m, n) for m, n in shapes if config_of(m, n) is not None]
        if len(picked) < 3:
            pytest.skip("this GPU's tables pick long_split on too few of these shapes")
        before = runtime.plan_stats()["launches"]
        for m, n in picked:
            x = random_input(m, n, "fp16")
            assert check_softmax(softmax(x), x, "fp16").ok, (m, n)
        assert runtime.plan_stats()["launches"] - before >= sum(config_of(m, n) in taught for m, n in picked)
        taught |= {config_of(m, n) for m, n in picked}
    assert runtime.plan_stats()["workspaces"] >= 2
    m, n = picked[0]
    static = random_input(m + 7, n + 24, "fp16")
    softmax(static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = softmax(static)
    for _ in range(2):
        fresh = random_input(m + 7, n + 24, "fp16")
        static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert check_softmax(out, fresh, "fp16").ok
