// Online two-pass softmax for rows of any length, O(1) registers (seeds 000 "online 2-pass" and 004
// "arbitrary").
//
// One block per row. Pass 1 streams the row's 16-byte body vectors, UNROLL loads in flight per
// thread, folding them into a per-thread online (max, sum) with one rescale per UNROLL vectors; one
// MaxSum block reduction combines the threads. Pass 2 re-reads the row through the read-only path
// (it was read microseconds ago, so it mostly hits L2) and writes exp(x - max) / sum. DRAM traffic
// is one read and one write of the row while L2 holds the rows in flight (SMs x blocks per SM x row
// bytes), up to two reads and one write beyond that.
//
// Any N: the row is split at 16-byte boundaries (smx::row_split); the < 2 * VEC head/tail scalars
// are taken by the first threads of the block. fp32 accumulation; edge rows as torch.softmax.
#include "softmax_common.cuh"

template <typename T, int THREADS, int UNROLL>
__global__ void __launch_bounds__(THREADS)
    softmax_two_pass(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ smx::MaxSum scratch[THREADS / 32];
    const long long offset = static_cast<long long>(blockIdx.x) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit split = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const int extras = split.head + split.tail;
    const int tid = static_cast<int>(threadIdx.x);

    smx::MaxSum acc = smx::stream_stats<T, THREADS, UNROLL>(xr + split.head, 0, split.vecs);
    if (tid < extras) acc = smx::add_value(acc, smx::to_float<T>(xr[smx::extra_index<VEC>(split, tid)]));
    const smx::MaxSum row = smx::block_merge<THREADS>(acc, scratch);

    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    smx::stream_normalize<T, THREADS, UNROLL>(xr + split.head, yr + split.head, 0, split.vecs, row, vec_ok);
    if (tid < extras) {
        const int k = smx::extra_index<VEC>(split, tid);
        yr[k] = smx::from_float<T>(smx::exp_from(smx::to_float<T>(xr[k]), row.m) / row.s);
    }
}
