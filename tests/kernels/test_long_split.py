"""cuda_long_split on the CPU: how S is chosen per launch, its declared limits, and that the NVRTC
source inlines both headers (the GPU checks are in test_long_split_gpu.py)."""
from __future__ import annotations

import pytest

import kernels
from kernels.base import split_for
from kernels.cuda.long_split import LongSplitCuda
from kernels.cuda.two_pass import MAX_GRID_X, MAX_ROW

RESIDENT = 1056  # 8 blocks x 132 SMs


def test_one_row_spreads_over_every_resident_block():
    assert split_for(1, 2**21, 2048, 1024, RESIDENT) == RESIDENT  # fp32 2^23: 1024 chunks < 1056 slots
    assert split_for(1, 2**16, 2048, 1024, RESIDENT) == 64  # rows too short to fill: one load pass a block


def test_many_rows_keep_the_chunk_and_a_row_never_exceeds_the_resident_blocks():
    assert split_for(128, 2**17, 2048, 1024, RESIDENT) == 64
    assert split_for(1, 2**30, 2048, 1024, RESIDENT) == RESIDENT  # chunks grow past `chunk` instead
    assert split_for(3, 1, 2048, 1024, RESIDENT) == 1
    assert split_for(1, 0, 2048, 1024, RESIDENT) == 1  # N < one vector: split 0 takes the scalars


@pytest.mark.parametrize("m", [1, 2, 5, 77, 1000])
@pytest.mark.parametrize("vectors", [0, 1, 4095, 2**19 + 3, 2**22])
def test_split_is_within_bounds(m, vectors):
    split = split_for(m, vectors, 4096, 2048, 264)
    assert 1 <= split <= 264
    assert split == 264 or -(-vectors // split) <= 4096 or m * split >= 264


def test_declared_limits_and_sources():
    variant = kernels.get_variant("cuda_long_split")
    assert isinstance(variant, LongSplitCuda) and variant.min_arch == 70
    for config in variant.all_configs():
        for dtype in variant.dtypes:
            assert variant.constraints(config, dtype) == {"n_min": 262145, "n_max": MAX_ROW, "m_max": MAX_GRID_X}
            assert variant.supports(1, 2**24, dtype, config) and variant.supports(0, 262145, dtype, config)
            assert not variant.supports(1, 262144, dtype, config)  # the register-resident kernels' range
    assert not variant.supports(1, 0, "fp16")
    names = {p.name for p in variant.source_files()}
    assert names == {"long_split.cu", "softmax_common.cuh", "slot_exchange.cuh"}
    code = variant.source_code()
    assert "#include \"" not in code and "namespace slotsync" in code and "softmax_long_split" in code
