// A group of LANES threads (1..32, within one warp) per row, THREADS / LANES rows per block, the row
// held in registers (seeds 000, 004).
//
// No barriers and no shared memory: a row's (max, sum) pairs are combined with shuffles inside its
// group (smx::warp_merge<LANES>), so every warp streams its rows independently and small rows
// (LANES < 32) still keep whole warps busy. Each lane loads ITEMS vectors of VEC elements (16 bytes
// where the row is long enough), all issued before any use. Float rows keep exp(x - lane max) in
// place; 16-bit rows stay packed and recompute the exp at the store. Any N up to
// LANES * ITEMS * VEC: rows are split at VEC boundaries (smx::RowSplit), the scalar head/tail is
// held beside the vectors.
#include "softmax_common.cuh"

template <typename T, int LANES, int THREADS, int VEC, int ITEMS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, ITEMS * VEC * sizeof(T) / 4, 32))
    softmax_warp_row(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "LANES: a power of two up to 32");
    static_assert(THREADS % 32 == 0, "whole warps: every lane takes part in the shuffles");
    constexpr int ROWS = THREADS / LANES;
    const int lane = threadIdx.x % LANES;
    const long long row = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.x / LANES;
    // Groups past the last row load and store nothing but still join their warp's shuffles.
    const bool active = row < M;
    const long long offset = (active ? row : 0) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit split = smx::row_split<T, VEC>(xr, active ? static_cast<int>(N) : 0);
    const unsigned zero = smx::opaque_zero();

    smx::RowTile<T, VEC, ITEMS, LANES> tile;
    tile.load(xr, split, lane);
    const float m = tile.max();
    const float base = smx::exp_base(m);
    float s;
    if constexpr (sizeof(T) == 4) {
        s = tile.apply_sum([&](float v) { return smx::exp_from(v, base); });
    } else {
        tile.reconvert_later(zero);
        s = tile.sum([&](float v) { return smx::exp_from(v, base); });
        tile.reconvert_later(zero);
    }

    const smx::MaxSum total = smx::warp_merge<LANES>(smx::MaxSum{m, s});
    const float inv = 1.0f / total.s;
    const bool vec_ok = smx::same_alignment<T, VEC>(x, y);
    if constexpr (sizeof(T) == 4) {
        const float scale = smx::rescale(m, total.m) * inv;
        tile.store(yr, split, lane, vec_ok, [&](float p) { return p * scale; });
    } else {
        const float row_base = smx::exp_base(total.m);
        tile.store(yr, split, lane, vec_ok, [&](float v) { return smx::exp_from(v, row_base) * inv; });
    }
}
