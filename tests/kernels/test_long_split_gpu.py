"""GPU checks of cuda_long_split on rows past register capacity: N = 2^19 + 1 .. 2^24 (odd and
unaligned tails), M = 1, 3, 77 and a row count whose M * S exceeds the resident blocks (ticketed
works), every dtype, float64 reference, output poisoned with NaN before each launch; edge rows at
long N; an input view one element past its allocation; launch after launch on the same slots with
S changing; CUDA-graph replays. Float64 checks of shapes up to N = 262144 are in test_variants_gpu.py."""
from __future__ import annotations

import pytest

from kernels.base import KernelConfig
from kernels.reference import check_softmax, edge_input, random_input

pytestmark = pytest.mark.gpu

DTYPES = ("fp32", "fp16", "bf16")
LONG_NS = (2**19 + 1, 2**20, 3 * 2**20 + 7, 2**24)
SMALL_BLOCKS = KernelConfig.of(block=256, unroll=4, chunk=2048)  # most resident blocks: most S
LARGE_BLOCKS = KernelConfig.of(block=1024, unroll=4, chunk=8192)  # fewest resident blocks


def variant_or_skip():
    from kernels.cuda.long_split import LongSplitCuda

    variant = LongSplitCuda()
    support = variant.available()
    if not support:
        pytest.skip(support.reason)
    return variant


def checked_launch(build, x, dtype):
    import torch

    out = torch.full_like(x, float("nan"))
    build.launch(x, out)
    torch.cuda.synchronize()
    result = check_softmax(out, x, dtype)
    del out
    return result


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", LONG_NS)
def test_long_rows_match_float64(n, dtype):
    import torch

    variant = variant_or_skip()
    for config in (SMALL_BLOCKS, LARGE_BLOCKS):
        build = variant.build(config, dtype, n)
        for m in (1, 3, 77):
            if m * n > 2**30:  # 77 x 2^24 (5 GB of fp32) only for the config with the largest chunks
                if config is SMALL_BLOCKS:
                    continue
            result = checked_launch(build, random_input(m, n, dtype), dtype)
            assert result.ok, f"{config} M={m} N={n}: {result.message}"
            torch.cuda.empty_cache()
        result = checked_launch(build, edge_input(n, dtype), dtype)
        assert result.ok, f"{config} N={n} edge rows: {result.message}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_beyond_one_resident_wave_take_tickets(dtype):
    from kernels.cuda import loader
    from kernels.base import split_for

    variant = variant_or_skip()
    n = 2**19 + 1
    build = variant.build(SMALL_BLOCKS, dtype, n)
    _, _, sms = loader.device_limits()
    resident = build.resources.blocks_per_sm * sms
    m = 600
    assert m * split_for(m, n // (4 if dtype == "fp32" else 8), 2048, 1024, resident) > 2 * resident
    for rows in (m, 1, m, 3):  # ticketed and one-wave launches alternate on the same slots
        result = checked_launch(build, random_input(rows, n, dtype), dtype)
        assert result.ok, f"M={rows}: {result.message}"
    counters = list(variant._tickets.values())
    assert counters and all(int(c.item()) == 0 for c in counters)


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_shapes_and_offset_view(dtype):
    import torch

    variant = variant_or_skip()
    build = variant.build(SMALL_BLOCKS, dtype, 1)
    empty = random_input(0, 5, dtype)
    build.launch(empty, torch.empty_like(empty))  # M = 0: nothing to do, no error
    for m, n in ((1, 1), (5, 1), (2, 7), (3, 4097), (1, 300001)):
        result = checked_launch(build, random_input(m, n, dtype), dtype)
        assert result.ok, f"M={m} N={n}: {result.message}"
    n = 2**20 + 3
    base = random_input(1, 3 * n + 1, dtype).view(-1)
    x = base[1:].view(3, n)  # every row start off the 16-byte grid
    result = checked_launch(build, x, dtype)
    assert result.ok, f"offset view: {result.message}"


def test_cuda_graph_replays():
    import torch

    variant = variant_or_skip()
    dtype, m, n = "bf16", 2, 2**21 + 5
    build = variant.build(SMALL_BLOCKS, dtype, n)
    x = random_input(m, n, dtype)
    out = torch.full_like(x, float("nan"))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        build.launch(x, out)  # workspace of the capture stream, allocated before capturing
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        build.launch(x, out)
    for _ in range(4):
        x.copy_(random_input(m, n, dtype))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        result = check_softmax(out, x, dtype)
        assert result.ok, result.message


def test_workspaces_are_disjoint_zero_pieces_carved_per_stream_and_s():
    """A new S's slot array and ticket counter are views of the device and stream's arena: 16-byte
    aligned, zero, and overlapping no other S's (a slot array that grows takes a new piece)."""
    import torch

    variant = variant_or_skip()
    device, stream = torch.cuda.current_device(), torch.cuda.current_stream().cuda_stream
    pieces = [variant.slots(device, stream, rows, split) for rows, split in ((1, 900), (3, 901), (5000, 902))]
    pieces += [variant.tickets(device, stream, 903), variant.slots(device, stream, 9000, 900)]  # 900 grown
    spans = sorted((p.data_ptr(), p.data_ptr() + p.numel() * p.element_size()) for p in pieces)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert all(p.data_ptr() % 16 == 0 and not p.any() for p in pieces)
    assert pieces[-1].numel() >= 2 * 9000 * 900 and variant._retired
