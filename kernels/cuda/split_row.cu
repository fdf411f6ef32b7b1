// Split-row ("split-k") softmax for few rows of many elements (seeds 000 "online v2" and 004
// "split-k"): S blocks share each row, so M = 1 still fills the GPU.
//
// Two launches on one stream (the launch boundary is the grid-wide barrier):
//   softmax_split_stats:     block (row, split) folds its chunk of body vectors into an online
//                            (max, sum) and writes it to ws[row * S + split] (float2).
//   softmax_split_normalize: block (row, split) merges the row's S partials, re-reads its chunk
//                            (L2 holds it while M * N is small, the regime this variant is for) and
//                            writes exp(x - max) / sum.
// Grid: one dimension of M * S blocks, block b = row * S + split. Chunks are whole ranges of the
// row's 16-byte body vectors (smx::row_split); split 0 also takes the < 2 * VEC head/tail scalars.
// Every block of a row merges the same S partials in the same order, so all chunks use one (max,
// sum). fp32 accumulation; edge rows as torch.softmax.
#include "softmax_common.cuh"

// Body vectors [begin, end) of split `split` out of `splits`: even shares, the last may be short.
__device__ __forceinline__ void split_range(int vecs, long long splits, long long split, int& begin, int& end) {
    const long long share = (vecs + splits - 1) / splits;
    begin = static_cast<int>(min(static_cast<long long>(vecs), split * share));
    end = static_cast<int>(min(static_cast<long long>(vecs), (split + 1) * share));
}

template <typename T, int THREADS, int UNROLL>
__global__ void __launch_bounds__(THREADS) softmax_split_stats(const T* __restrict__ x, float2* __restrict__ ws,
                                                               long long M, long long N, long long S) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ smx::MaxSum scratch[THREADS / 32];
    const long long row = blockIdx.x / S, split = blockIdx.x % S;
    const T* __restrict__ xr = x + row * N;
    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    int begin, end;
    split_range(rs.vecs, S, split, begin, end);
    const int tid = static_cast<int>(threadIdx.x);

    smx::MaxSum acc = smx::stream_stats<T, THREADS, UNROLL>(xr + rs.head, begin, end);
    if (split == 0 && tid < rs.head + rs.tail)
        acc = smx::add_value(acc, smx::to_float<T>(xr[smx::extra_index<VEC>(rs, tid)]));
    const smx::MaxSum part = smx::block_merge<THREADS>(acc, scratch);
    if (tid == 0) ws[blockIdx.x] = make_float2(part.m, part.s);
}

template <typename T, int THREADS, int UNROLL>
__global__ void __launch_bounds__(THREADS)
    softmax_split_normalize(const T* __restrict__ x, T* __restrict__ y, const float2* __restrict__ ws, long long M,
                            long long N, long long S) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ smx::MaxSum scratch[THREADS / 32];
    const long long row = blockIdx.x / S, split = blockIdx.x % S;
    const long long offset = row * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    int begin, end;
    split_range(rs.vecs, S, split, begin, end);
    const int tid = static_cast<int>(threadIdx.x);

    smx::MaxSum acc{SOFTMAX_NEG_INF, 0.0f};
    for (long long i = tid; i < S; i += THREADS) {
        const float2 p = __ldg(ws + row * S + i);
        acc = smx::merge(acc, smx::MaxSum{p.x, p.y});
    }
    const smx::MaxSum total = smx::block_merge<THREADS>(acc, scratch);

    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    smx::stream_normalize<T, THREADS, UNROLL>(xr + rs.head, yr + rs.head, begin, end, total, vec_ok);
    if (split == 0 && tid < rs.head + rs.tail) {
        const int k = smx::extra_index<VEC>(rs, tid);
        yr[k] = smx::from_float<T>(smx::exp_from(smx::to_float<T>(xr[k]), total.m) / total.s);
    }
}
