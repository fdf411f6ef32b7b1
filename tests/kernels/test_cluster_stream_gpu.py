"""GPU checks specific to cuda_cluster_stream's persistent loop: a cluster takes many rows one after
the other through two alternating shared-memory buffers and two alternating exchange slots, so rows
beyond the first wave, odd row counts, misaligned rows (head/tail scalars on every row) and edge
rows deep in the loop must all come out right. The general float64 suite (test_variants_gpu.py)
covers every config at the shapes it declares."""
from __future__ import annotations

import pytest

from kernels.reference import check_softmax, edge_input, random_input

pytestmark = pytest.mark.gpu

DTYPES = ("fp32", "fp16", "bf16")


def variant_or_skip():
    from kernels.cuda.cluster_stream import ClusterStreamCuda

    variant = ClusterStreamCuda()
    support = variant.available()
    if not support:
        pytest.skip(support.reason)
    return variant


def checked_launch(build, x, dtype):
    import torch

    out = torch.full_like(x, float("nan"))
    build.launch(x, out)
    torch.cuda.synchronize()
    return check_softmax(out, x, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_rows_per_cluster(dtype):
    variant = variant_or_skip()
    failures = []
    for config in variant.all_configs():
        limits = variant.constraints(config, dtype)
        for n in (limits["n_min"] + 3, min(limits["n_max"], 151936) - 1):
            build = variant.build(config, dtype, n)
            for m in (1, 37, 301):  # 301 rows: several per cluster whatever fits, odd counts
                result = checked_launch(build, random_input(m, n, dtype), dtype)
                if not result.ok:
                    failures.append(f"{config} M={m} N={n}: {result.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_rows_deep_in_the_loop(dtype):
    import torch

    variant = variant_or_skip()
    for config in variant.all_configs():
        n = variant.constraints(config, dtype)["n_min"] + 5
        rows = torch.cat([random_input(150, n, dtype), edge_input(n, dtype), random_input(90, n, dtype)])
        result = checked_launch(variant.build(config, dtype, n), rows, dtype)
        assert result.ok, f"{config}: {result.message}"


def test_cuda_graph_replays():
    import torch

    from kernels.base import KernelConfig

    variant = variant_or_skip()
    config, dtype, m, n = KernelConfig.of(cluster=8, block=256, stages=3), "bf16", 128, 262144
    build = variant.build(config, dtype, n)
    x = random_input(m, n, dtype)
    out = torch.full_like(x, float("nan"))
    build.launch(x, out)  # grid and shared-memory opt-in worked out before capturing
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        build.launch(x, out)
    for _ in range(3):
        x.copy_(random_input(m, n, dtype))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        result = check_softmax(out, x, dtype)
        assert result.ok, result.message
