// Many short 16-bit rows (N up to 1024, M up to millions), each element's exponential kept in fp32
// registers between the sum and the store: one MUFU.EX2 an element instead of short_rows.cu's two.
//
// The layout is cuda_short_rows' with one row a group (a group of LANES threads of one warp per row,
// THREADS / LANES rows a block, each lane holding ITEMS vectors of VEC elements, all loads issued
// before any use, no barriers, no shared memory). What differs, and why:
// - short_rows.cu exponentiates a 16-bit row twice (once for the sum, once for the store) to keep the
//   row packed in half the registers. At 16-bit rows of 32-256 elements that kernel ran at 0.85-0.94
//   of copy speed where QuACK, which keeps its exps, ran at the copy's (H200 domain bench, 2026-11-28);
//   a 16-bit element costs 2 bytes of traffic each way, so the exps' MUFU throughput is in the way.
// - The reduction is the two-phase one: the group's max by shuffles, then exp(x - max) once per
//   element, then the group's sum by shuffles; no (max, sum) merges with their rescaling exps.
// - One row tile a block, no grid-stride loop: a grid of ceil(M / (THREADS / LANES)) blocks covers
//   any M this project meets (the host declares m_max), and the loop's 64-bit state costs registers.
// Two pieces repeat code of other files on purpose: the loop that makes the kept exps is cluster_keep.cu's,
// the element-wise store where y is not aligned like x is RowTile::store's (softmax_common.cuh). Moving
// either into a shared helper would edit those files, whose text is the source hash of rows recorded on
// the H100, which no lent GPU can record again (kernels/source_hash.py).
// Edge rows as everywhere (softmax_common.cuh): NaN or +inf in a row gives an all-NaN row (the max
// is NaN, or +inf - +inf), an all -inf row gives NaN (0 * 1/0), as torch.softmax does.
#include "softmax_common.cuh"

// Registers a thread keeps beside its row's fp32 exps (the packed words are dead once the exps are
// made): row offset, split, pointers and loop temporaries.
constexpr int KEEP_SPARE_REGISTERS = 32;

template <typename T, int LANES, int THREADS, int VEC, int ITEMS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, ITEMS * VEC, KEEP_SPARE_REGISTERS))
    softmax_short_keep(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    static_assert(sizeof(T) == 2, "fp32 rows keep their exps in short_rows.cu already");
    static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "LANES: a power of two up to 32");
    static_assert(THREADS % 32 == 0, "whole warps: every lane takes part in the shuffles");
    using Tile = smx::RowTile<T, VEC, ITEMS, LANES>;
    constexpr int WORDS = Tile::WORDS;
    constexpr int GROUPS = THREADS / LANES;
    const int lane = threadIdx.x % LANES;
    const long long row = static_cast<long long>(blockIdx.x) * GROUPS + threadIdx.x / LANES;
    // A group past the last row loads and stores nothing but still joins its warp's shuffles.
    const bool active = row < M;
    const long long offset = (active ? row : 0) * N;
    const smx::RowSplit split = smx::row_split<T, VEC>(x + offset, active ? static_cast<int>(N) : 0);

    Tile tile;
    tile.load(x + offset, split, lane);
    const float base = smx::exp_base(smx::warp_max<LANES>(tile.max()));
    float kept[ITEMS][2 * WORDS];  // exp(x - base) of every body slot (masked slots: 0)
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            const float2 p = smx::Word<T>::unpack(tile.w[i][k]);
            kept[i][2 * k] = smx::exp_from(p.x, base);
            kept[i][2 * k + 1] = smx::exp_from(p.y, base);
            s += kept[i][2 * k] + kept[i][2 * k + 1];
        }
#pragma unroll
    for (int j = 0; j < Tile::EXTRA; ++j) {
        tile.e[j] = smx::exp_from(tile.e[j], base);
        s += tile.e[j];
    }
    const float inv = 1.0f / smx::warp_sum<LANES>(s);

    T* __restrict__ yr = y + offset;
    T* __restrict__ body = yr + split.head + lane * VEC;
    const int left = split.vecs - lane;  // body vectors from this lane's first one on
    const bool vec_ok = smx::same_alignment<T, VEC>(x, y);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        if (i * LANES < left) {
            union {
                typename Tile::Raw raw;
                unsigned w[WORDS];
            } u;
#pragma unroll
            for (int k = 0; k < WORDS; ++k) u.w[k] = smx::Word<T>::pack(kept[i][2 * k] * inv, kept[i][2 * k + 1] * inv);
            T* p = body + i * LANES * VEC;
            if (vec_ok) {
                *reinterpret_cast<typename Tile::Raw*>(p) = u.raw;
            } else {
#pragma unroll
                for (int k = 0; k < WORDS; ++k) {
                    reinterpret_cast<unsigned short*>(p)[2 * k] = static_cast<unsigned short>(u.w[k]);
                    reinterpret_cast<unsigned short*>(p)[2 * k + 1] = static_cast<unsigned short>(u.w[k] >> 16);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < Tile::EXTRA; ++j) {
        const int k = lane + j * LANES;
        if (k < split.head + split.tail) yr[smx::extra_index<VEC>(split, k)] = smx::from_float<T>(tile.e[j] * inv);
    }
}
