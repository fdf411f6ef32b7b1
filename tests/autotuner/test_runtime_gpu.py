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
