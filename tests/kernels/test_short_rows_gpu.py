"""cuda_short_rows and cuda_short_rows_keep on the shapes they are for: every config at the ends of
its N range and at odd N between, M around its row tile, a persistent grid that must loop several
times over its tiles, and rows past 2^31 elements (64-bit offsets). Float64 reference, edge rows,
poisoned output and guard bands, as in test_variants_gpu."""
from __future__ import annotations

import pytest

import kernels
from kernels.base import DTYPES
from kernels.reference import edge_input, random_input, torch_dtype
from tests.kernels.test_variants_gpu import EDGE_ROWS, MAX_REPORTED, run_one

pytestmark = pytest.mark.gpu

VARIANTS = ("cuda_short_rows", "cuda_short_rows_keep")
PASSES = 3  # tiles per block a persistent grid must loop over in the large-M check


def lengths(limits: dict[str, int]) -> list[int]:
    """Both ends of a config's N range, odd lengths between, and N = 1, 2, 3 where it starts at 1."""
    low, high = limits["n_min"], limits["n_max"]
    middle = (low + high) // 2 | 1
    tiny = [1, 2, 3, 7] if low == 1 else []
    return sorted({*tiny, low, low | 1, middle, high - 1, high} & set(range(low, high + 1)))


def row_counts(variant, config) -> list[int]:
    """0, 1, a tile and a row, and (persistent) enough rows that each resident block loops PASSES times."""
    from kernels.cuda import loader

    tile = variant.tile_rows(config)
    counts = [0, 1, tile - 1, tile + 1]
    if int(config.get("persistent", 0)):
        threads_per_sm, _, sm_count = loader.device_limits()
        resident = threads_per_sm // int(config["block"]) * sm_count
        counts.append(PASSES * tile * resident + 5)
    return counts


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant_name", VARIANTS)
def test_short_rows_matches_float64_reference_on_short_row_shapes(variant_name: str, dtype: str) -> None:
    variant = kernels.get_variant(variant_name)
    if dtype not in variant.dtypes:
        pytest.skip(f"{variant_name} does not declare {dtype}")
    available = variant.available()
    if not available:
        pytest.skip(f"{variant_name} not available here: {available.reason}")
    failures: list[str] = []
    for config in variant.all_configs():
        ns = lengths(variant.constraints(config, dtype))
        big_n = next((n for n in reversed(ns) if n % 2), ns[-1])
        for n in ns:
            build = variant.build(config, dtype, n)
            cases = [(f"M={m} N={n}", lambda m=m: random_input(m, n, dtype)) for m in row_counts(variant, config)
                     if m < 1000 or n == big_n]
            if n in (ns[0], big_n, ns[-1]):
                cases.append((f"N={n} {EDGE_ROWS} edge rows", lambda: edge_input(n, dtype)))
            for label, make in cases:
                message = run_one(build, make(), dtype)
                if message:
                    failures.append(f"{config} {label}: {message}")
    shown = "\n".join(failures[:MAX_REPORTED])
    assert not failures, f"{variant_name} {dtype}: {len(failures)} failing check(s)\n{shown}"


@pytest.mark.parametrize(("variant_name", "persistent"),
                         [("cuda_short_rows", 0), ("cuda_short_rows", 1), ("cuda_short_rows_keep", 0)])
def test_short_rows_reaches_rows_past_two_to_the_31_elements(variant_name: str, persistent: int) -> None:
    """M * N > 2^31 (fp16, N = 33): the last rows must be as right as the first (no 32-bit wrap)."""
    import torch

    variant = kernels.get_variant(variant_name)
    n = 33
    m = 2**31 // n + 4099
    config = next(c for c in variant.configs(m, n, "fp16") if int(c.get("persistent", 0)) == persistent)
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * m * n * 2:
        pytest.skip(f"needs {3 * m * n * 2 / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} free")
    x = torch.randn(m, n, device="cuda", dtype=torch_dtype("fp16")) * 4
    out = torch.full_like(x, float("nan"))
    variant.build(config, "fp16", n).launch(x, out)
    torch.cuda.synchronize()
    for rows in (slice(0, 4096), slice(m - 8192, m)):
        expected = torch.softmax(x[rows].double(), dim=-1)
        error = (out[rows].double() - expected).abs().max().item()
        assert error < 2e-3, f"{config} rows {rows}: max abs error {error}"
