"""GPU checks specific to cuda_grid_split's epoch-tagged slots: launch after launch (different M,
configs sharing one S, CUDA-graph replays) every block of a row waits for this launch's pairs, rows
beyond one resident wave take their works from the ticket counter in one launch (which is back to 0
after it), and torch's edge rows come out right. The general float64 suite (test_variants_gpu.py) covers
every config at the shapes it declares."""
from __future__ import annotations

import pytest

from kernels.base import KernelConfig
from kernels.reference import check_softmax, edge_input, random_input

pytestmark = pytest.mark.gpu

DTYPES = ("fp32", "fp16", "bf16")
CONFIGS = (KernelConfig.of(split=128, block=256, packs=2), KernelConfig.of(split=16, block=512, packs=4))


def variant_or_skip():
    from kernels.cuda.grid_split import GridSplitCuda

    variant = GridSplitCuda()
    support = variant.available()
    if not support:
        pytest.skip(support.reason)
    return variant


def fresh_output(x):
    import torch

    return torch.full_like(x, float("nan"))


def launched_on_random_rows(build, m, n, dtype):
    """The float64 check of one launch of ``build`` on fresh random (m, n) rows, output poisoned."""
    import torch

    x = random_input(m, n, dtype)
    out = fresh_output(x)
    build.launch(x, out)
    torch.cuda.synchronize()
    return check_softmax(out, x, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_repeated_launches_and_more_rows_than_one_wave(config, dtype):
    variant = variant_or_skip()
    n = 50257  # odd: head and tail scalars beside the vectors
    build = variant.build(config, dtype, n)
    for m in (1, 3, 200, 2):  # 200 rows exceed one resident wave for both configs: tickets
        for _ in range(3):  # each launch moves the row's slots to the next epoch
            result = launched_on_random_rows(build, m, n, dtype)
            assert result.ok, f"{config} M={m}: {result.message}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_edge_rows(config, dtype):
    import torch

    variant = variant_or_skip()
    n = variant.constraints(config, dtype)["n_min"] + 5
    x = edge_input(n, dtype)
    out = fresh_output(x)
    variant.build(config, dtype, n).launch(x, out)
    torch.cuda.synchronize()
    result = check_softmax(out, x, dtype)
    assert result.ok, result.message


def test_cuda_graph_replays():
    import torch

    variant = variant_or_skip()
    config, dtype, m, n = CONFIGS[0], "bf16", 4, 151936
    build = variant.build(config, dtype, n)
    x = random_input(m, n, dtype)
    out = fresh_output(x)
    build.launch(x, out)  # workspace allocated outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        build.launch(x, out)  # workspace of the capture stream, allocated before capturing
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        build.launch(x, out)
    for _ in range(5):
        x.copy_(random_input(m, n, dtype))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        result = check_softmax(out, x, dtype)
        assert result.ok, result.message


@pytest.mark.parametrize("dtype", DTYPES)
def test_configs_sharing_one_split_share_the_slots(dtype):
    variant = variant_or_skip()
    n = 131072
    builds = [variant.build(KernelConfig.of(split=64, block=b, packs=p), dtype, n) for b, p in ((256, 4), (512, 2))]
    for step in range(6):  # alternate configs and row counts on one slot array
        m = (1, 5, 2)[step % 3]
        result = launched_on_random_rows(builds[step % 2], m, n, dtype)
        assert result.ok, f"step {step} M={m}: {result.message}"


@pytest.mark.parametrize(("config", "dtype", "m", "n"), [
    (KernelConfig.of(split=8, block=512, packs=8), "fp16", 128, 262144),
    (KernelConfig.of(split=16, block=256, packs=8), "bf16", 300, 262144),
    (KernelConfig.of(split=32, block=256, packs=4), "fp32", 129, 131072),
], ids=str)
def test_ticketed_launches_of_many_rows_alternate_with_one_wave_launches(config, dtype, m, n):
    variant = variant_or_skip()
    build = variant.build(config, dtype, n)
    for rows in (m, 1, m, 3, m):  # the ticketed and the one-wave regime on the same slots
        result = launched_on_random_rows(build, rows, n, dtype)
        assert result.ok, f"{config} M={rows}: {result.message}"
    counters = list(variant._tickets.values())
    assert counters and all(int(c.item()) == 0 for c in counters)
