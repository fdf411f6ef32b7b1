// Many short rows (N up to about 1024, M up to millions): a group of LANES threads (1..32, within one
// warp) per row, each group holding ROWS rows at once, THREADS / LANES * ROWS rows per block tile.
//
// What warp_row lacks for such rows: more bytes in flight per thread (ROWS independent rows, every
// load issued before any use, so tiny rows still keep enough memory requests outstanding), and a
// grid-stride loop over tiles, so a grid capped near the resident block count (a persistent grid)
// streams millions of rows without a block-launch per handful of rows. The grid decides: one tile
// per block when it covers every tile, several when capped. Rows of a tile are interleaved
// (row = tile base + r * GROUPS + group) so that for each r the block reads GROUPS consecutive rows:
// one contiguous stretch of memory. No barriers and no shared memory; a row's (max, sum) pairs are
// combined with shuffles inside its group. Any N up to LANES * ITEMS * VEC through smx::RowSplit
// (vector body, scalar head/tail); 64-bit row offsets.
#include "softmax_common.cuh"

// Registers a thread keeps beside its rows' data: the 64-bit tile loop, row offsets and splits of
// ROWS rows and the 16-bit path's re-conversions need more than warp_row's 32 (with 32, ptxas
// spilled 4-36 bytes in the fp16 / bf16 instances).
constexpr int SPARE_REGISTERS = 48;

template <typename T, int LANES, int THREADS, int VEC, int ITEMS, int ROWS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, ROWS * ITEMS * VEC * sizeof(T) / 4, SPARE_REGISTERS))
    softmax_short_rows(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "LANES: a power of two up to 32");
    static_assert(THREADS % 32 == 0, "whole warps: every lane takes part in the shuffles");
    static_assert(ROWS >= 1, "at least one row per group");
    constexpr int GROUPS = THREADS / LANES;
    constexpr long long TILE_ROWS = static_cast<long long>(GROUPS) * ROWS;
    const int lane = threadIdx.x % LANES;
    const int group = threadIdx.x / LANES;
    const long long tiles = (M + TILE_ROWS - 1) / TILE_ROWS;
    const bool vec_ok = smx::same_alignment<T, VEC>(x, y);
    const unsigned zero = smx::opaque_zero();

    // The loop bound is the same for the whole block, so every warp runs every shuffle.
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        smx::RowTile<T, VEC, ITEMS, LANES> part[ROWS];
        smx::RowSplit split[ROWS];
        long long offset[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const long long row = tile * TILE_ROWS + r * GROUPS + group;
            // Groups past the last row load and store nothing but still join their warp's shuffles.
            const bool active = row < M;
            offset[r] = (active ? row : 0) * N;
            split[r] = smx::row_split<T, VEC>(x + offset[r], active ? static_cast<int>(N) : 0);
            part[r].load(x + offset[r], split[r], lane);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const float m = part[r].max();
            const float base = smx::exp_base(m);
            float s;
            if constexpr (sizeof(T) == 4) {
                s = part[r].apply_sum([&](float v) { return smx::exp_from(v, base); });
            } else {
                part[r].reconvert_later(zero);
                s = part[r].sum([&](float v) { return smx::exp_from(v, base); });
                part[r].reconvert_later(zero);
            }
            const smx::MaxSum total = smx::warp_merge<LANES>(smx::MaxSum{m, s});
            const float inv = 1.0f / total.s;
            T* __restrict__ yr = y + offset[r];
            if constexpr (sizeof(T) == 4) {
                const float scale = smx::rescale(m, total.m) * inv;
                part[r].store(yr, split[r], lane, vec_ok, [&](float p) { return p * scale; });
            } else {
                const float row_base = smx::exp_base(total.m);
                part[r].store(yr, split[r], lane, vec_ok, [&](float v) { return smx::exp_from(v, row_base) * inv; });
            }
        }
    }
}
