// One block per row, the row held in registers; three fused phases (seed 000).
//
// Phase 1: every thread loads its part of the row with 16-byte vectors (all loads issued before
// any use) and takes its max; the block reduces the max. Phase 2: exp(x - row max) and its sum,
// reduced across the block. Phase 3: scale by 1 / sum and store. One read and one write of the row,
// two block reductions.
//
// Float rows keep exp(x - max) in place between phases 2 and 3; 16-bit rows stay packed (half the
// registers) and recompute the exp at the store. Any N up to THREADS * ITEMS * VEC: rows are split
// at 16-byte boundaries (smx::RowSplit) and the scalar head/tail is held beside the vectors.
#include "softmax_common.cuh"

template <typename T, int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, ITEMS * 4))
    softmax_block_fused(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float scratch[THREADS / 32];
    const long long offset = static_cast<long long>(blockIdx.x) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit split = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const unsigned zero = smx::opaque_zero();

    smx::RowTile<T, VEC, ITEMS, THREADS> tile;
    tile.load(xr, split, threadIdx.x);
    const float base = smx::exp_base(smx::block_max<THREADS>(tile.max(), scratch));

    float s;
    if constexpr (sizeof(T) == 4) {
        s = tile.apply_sum([&](float v) { return smx::exp_from(v, base); });
    } else {
        tile.reconvert_later(zero);
        s = tile.sum([&](float v) { return smx::exp_from(v, base); });
        tile.reconvert_later(zero);
    }
    const float inv = 1.0f / smx::block_sum<THREADS>(s, scratch);

    const bool vec_ok = smx::same_alignment<T, VEC>(x, y);
    if constexpr (sizeof(T) == 4) {
        tile.store(yr, split, threadIdx.x, vec_ok, [&](float p) { return p * inv; });
    } else {
        tile.store(yr, split, threadIdx.x, vec_ok, [&](float v) { return smx::exp_from(v, base) * inv; });
    }
}
