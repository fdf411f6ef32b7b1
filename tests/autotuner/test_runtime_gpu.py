"""softmax() on the GPU: correct through the dispatch, inside torch.compile and CUDA-graph capture."""
from __future__ import annotations

import pytest

from kernels.reference import check_softmax, random_input

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("m, n", [(1, 1), (5, 7), (64, 1000), (4, 32000), (2, 50257), (1, 151936), (33, 4096)])
def test_dispatched_softmax_matches_float64(m, n, dtype):
    from autotuner import softmax

    x = random_input(m, n, dtype)
    result = check_softmax(softmax(x), x, dtype)
    assert result.ok, result.message


def test_softmax_over_a_middle_dimension_of_a_strided_tensor():
    import torch

    from autotuner import softmax

    x = random_input(8, 6 * 300, "fp32").reshape(8, 6, 300).transpose(0, 2)
    assert torch.allclose(softmax(x, dim=1), torch.softmax(x.double(), dim=1).float(), atol=1e-6)


def test_softmax_inside_torch_compile():
    import torch

    from autotuner import softmax

    compiled = torch.compile(lambda t: softmax(t * 2.0) + 1.0, fullgraph=True)
    x = random_input(16, 32000, "bf16")
    expected = torch.softmax((x * 2.0).double(), -1) + 1.0
    assert torch.allclose(compiled(x).double(), expected, atol=2e-2)


def test_softmax_captured_in_a_cuda_graph_replays_on_new_input():
    import torch

    from autotuner import softmax

    x = random_input(32, 50257, "fp16")
    softmax(x)  # compile and allocate outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = softmax(x)
    x.copy_(random_input(32, 50257, "fp16"))
    graph.replay()
    torch.cuda.synchronize()
    result = check_softmax(y, x, "fp16")
    assert result.ok, result.message


def test_a_new_shape_first_met_inside_a_cuda_graph_capture_replays_correctly():
    import torch

    from autotuner import softmax

    x = random_input(3, 3001, "fp32")
    softmax(random_input(3, 3000, "fp32"))  # the instance compiled; 3 x 3001 itself never seen
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = softmax(x)
    x.copy_(random_input(3, 3001, "fp32"))
    graph.replay()
    torch.cuda.synchronize()
    result = check_softmax(y, x, "fp32")
    assert result.ok, result.message


@pytest.mark.parametrize("m, n, dtype", [(1, 1024, "bf16"), (4, 4096, "fp32"), (33, 4096, "fp16"), (1, 262144, "fp32"),
                                         (2, 1048576, "bf16")])
def test_kept_launches_are_correct_on_any_stream(m, n, dtype):
    """A repeated shape's kept native launch (new pointers and stream per call; cuda_grid_split's and
    cuda_long_split's bound to their stream's slots) gives correct answers call after call, on the
    default and a side stream."""
    import torch

    from autotuner import softmax

    x = random_input(m, n, dtype)
    outputs = [softmax(x) for _ in range(3)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outputs += [softmax(x) for _ in range(3)]
    torch.cuda.current_stream().wait_stream(stream)
    outputs += [softmax(x) for _ in range(2)]
    for y in outputs:
        result = check_softmax(y, x, dtype)
        assert result.ok, result.message


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_every_new_shape_is_launched_correctly_from_its_instance(dtype):
    """200 shapes never seen before (M 1-64, N 1-9000, and a few decode-like ones growing by one):
    each takes its pick's instance and that instance's launch arithmetic, and is checked."""
    import random

    from autotuner import runtime, softmax

    rng = random.Random(29)
    shapes = [(rng.randint(1, 64), rng.randint(1, 9000)) for _ in range(180)] + [(256, 2048 + i) for i in range(20)]
    for m, n in shapes:
        x = random_input(m, n, dtype)
        result = check_softmax(softmax(x), x, dtype)
        assert result.ok, f"{m}x{n} {runtime.select_kernel(m, n, dtype).variant}: {result.message}"
    assert len(runtime._recent) <= runtime.RECENT_SHAPES


def test_misaligned_input_goes_through_the_builds_own_launch():
    import torch

    from autotuner import softmax

    base = random_input(1, 4 * 4096 + 1, "fp32")
    x = base[0, 1:].view(4, 4096)
    assert x.data_ptr() % 16
    softmax(x.contiguous())  # the shape's native launch, kept from aligned rows
    assert torch.allclose(softmax(x), torch.softmax(x.double(), -1).float(), atol=1e-6)


def test_softmax_from_fresh_threads():
    """A new thread has no CUDA context of its own until something sets one; launches from it work."""
    import threading

    import torch

    from autotuner import softmax

    inputs = [random_input(1, 1024, "bf16"), random_input(4, 4096, "fp32")] * 3
    for x in inputs:
        softmax(x)
    outputs = [None] * len(inputs)

    def work(i):
        outputs[i] = softmax(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    for x, y in zip(inputs, outputs):
        dtype = "bf16" if x.dtype == torch.bfloat16 else "fp32"
        assert check_softmax(y, x, dtype).ok


def test_triton_launch_hooks_are_called_on_the_fast_path():
    import torch
    from triton import knobs

    from autotuner import select_kernel, softmax

    if not select_kernel(1, 1024, "bf16").variant.startswith("triton"):
        pytest.skip("the dispatch picks no Triton kernel for bf16 1x1024 here")
    x = random_input(1, 1024, "bf16")
    softmax(x)
    seen = []

    def hook(metadata):
        seen.append(metadata)

    chain = knobs.runtime.launch_enter_hook
    chain.add(hook)
    try:
        y = softmax(x)
    finally:
        chain.remove(hook)
    torch.cuda.synchronize()
    assert seen and check_softmax(y, x, "bf16").ok


def test_softmax_of_a_tensor_on_another_device():
    import torch

    from autotuner import softmax

    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    x = random_input(4, 4096, "fp32", device="cuda:1")
    with torch.cuda.device(0):
        ys = [softmax(x), softmax(x)]
    for y in ys:
        assert y.device == x.device and check_softmax(y, x, "fp32").ok


def test_out_of_memory_raises_torchs_error_and_keeps_the_native_path():
    """An output that does not fit: the plan declines (it does not raise from C), the Python path raises
    torch.OutOfMemoryError as torch.softmax would, and the native module stays on for the next call."""
    import torch

    from autotuner import runtime, softmax

    x = random_input(8192, 8192, "fp32")  # 256 MB
    softmax(x[:3])  # the rows' plan made and its launch taught, on a small shape of the same class
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(x.device).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + x.numel() * 2) / total)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            softmax(x)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert not runtime._native_failed  # the module (where it is built) was not turned off
    assert runtime.native_module() is None or runtime._dispatch is not None
    assert check_softmax(softmax(x), x, "fp32").ok
