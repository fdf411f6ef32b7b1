"""GPU checks of cuda_cluster_split's shared-memory configs on the rows they exist for, past what
test_variants_gpu.py reaches (N up to 262144): each config at its longest row, at an odd N inside its
range (a misaligned head and tail) and at its shortest row, every dtype, M = 3, float64 reference,
output poisoned with NaN before the launch."""
from __future__ import annotations

import pytest

from kernels.reference import check_softmax, edge_input, random_input

pytestmark = pytest.mark.gpu


def _odd(n: int) -> int:
    return n if n % 2 else n - 1


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_shared_memory_configs_on_their_longest_odd_and_shortest_rows(dtype):
    import torch

    from kernels.cuda.cluster_split import ClusterSplitCuda

    variant = ClusterSplitCuda()
    support = variant.available()
    if not support:
        pytest.skip(support.reason)
    failures = []

    def check(build, x, what):
        out = torch.full_like(x, float("nan"))
        build.launch(x, out)
        torch.cuda.synchronize()
        result = check_softmax(out, x, dtype)
        if not result.ok:
            failures.append(f"{what}: {result.message}")

    for config in variant.all_configs():
        if not config["smem"]:
            continue
        limits = variant.constraints(config, dtype)
        n_min, n_max = limits["n_min"], limits["n_max"]
        build = variant.build(config, dtype, n_max)
        for n in sorted({n_max, _odd((n_min + n_max) // 2), n_min}):
            check(build, random_input(3, n, dtype), f"{config.key} N={n}")
        check(build, edge_input(n_max, dtype), f"{config.key} edge rows N={n_max}")
    assert not failures, failures
