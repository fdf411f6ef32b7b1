// fp16 / bf16 only: one block per row, 8 x 16-bit values per 128-bit load and store, the row held
// packed in registers (4 words per vector: half the registers of a float cache) (seed 004).
//
// Packed math where it is exact: the thread max runs on half2 / bfloat162 pairs (HMNMX2: two
// elements an instruction, no conversion); conversions to and from float go two at a time. exp and
// the sums stay in fp32. One combined MaxSum block reduction (smx::block_merge), then
// exp(x - row max) / sum is recomputed from the packed row and stored. Any N up to
// THREADS * ITEMS * 8: rows are split at 16-byte boundaries (smx::RowSplit), the scalar head/tail
// is held beside the vectors.
#include "softmax_common.cuh"

template <typename T> struct Pair;
template <> struct Pair<__half> {
    static __device__ __forceinline__ unsigned max(unsigned a, unsigned b) {
        const __half2 r = __hmax2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
        return *reinterpret_cast<const unsigned*>(&r);
    }
};
template <> struct Pair<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned max(unsigned a, unsigned b) {
        const __nv_bfloat162 r =
            __hmax2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
        return *reinterpret_cast<const unsigned*>(&r);
    }
};

template <typename T, int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, ITEMS * 4))
    softmax_packed16(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    static_assert(sizeof(T) == 2, "packed16 is for fp16 / bf16 rows");
    constexpr int VEC = 8;
    __shared__ smx::MaxSum scratch[THREADS / 32];
    const long long offset = static_cast<long long>(blockIdx.x) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit split = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const unsigned zero = smx::opaque_zero();

    smx::RowTile<T, VEC, ITEMS, THREADS> tile;
    tile.load(xr, split, threadIdx.x);

    // Four independent HMNMX2 chains (one per word of a vector), then their pairs, then the halves.
    unsigned pm[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) pm[k] = tile.w[0][k];
#pragma unroll
    for (int i = 1; i < ITEMS; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) pm[k] = Pair<T>::max(pm[k], tile.w[i][k]);
    const float2 pair = smx::Word<T>::unpack(Pair<T>::max(Pair<T>::max(pm[0], pm[1]), Pair<T>::max(pm[2], pm[3])));
    float m = fmaxf(pair.x, pair.y);
#pragma unroll
    for (int j = 0; j < decltype(tile)::EXTRA; ++j) m = fmaxf(m, tile.e[j]);

    const float base = smx::exp_base(m);
    const float s = tile.sum([&](float v) { return smx::exp_from(v, base); });
    tile.reconvert_later(zero);

    const smx::MaxSum row = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);
    const float inv = 1.0f / row.s;
    const float row_base = smx::exp_base(row.m);
    tile.store(yr, split, threadIdx.x, smx::same_alignment<T, VEC>(x, y),
               [&](float v) { return smx::exp_from(v, row_base) * inv; });
}
