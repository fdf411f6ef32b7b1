// Softmax of rows past register capacity (N up to 2^31 - 1) in ONE launch: S blocks share each row,
// each streams its chunk into an online (max, sum), the S partial pairs meet in epoch-tagged slots
// in global memory (slot_exchange.cuh), and each block re-reads its chunk to write the output.
//
// Grid: M * S blocks, work w = row * S + split (block index, or ticket order beyond one resident
// wave: slotsync::work_of_block). Split k takes the k-th share of the row's 16-byte body vectors
// (smx::row_split), ceil(vecs / S) of them; split 0 also takes the < 2 * VEC head/tail scalars.
//
//   1. stream the share, UNROLL 16-byte loads in flight per thread, into an online (max, sum);
//   2. one MaxSum block reduction; warp 0 publishes the pair and merges the row's S pairs;
//   3. re-read the share LAST VECTOR FIRST and write exp(x - max) / sum: the vectors read last in
//      step 1 are the likeliest still in L2 when a row (or the rows in flight) exceeds it, so a
//      64 MB row on a 50 MB L2 re-reads most of itself from L2 instead of thrashing it in order.
//      Stores are evict-first (st.global.cs) so the output does not push the input out.
//
// DRAM traffic: one read and one write while the rows in flight fit L2, up to two reads beyond.
// Registers are O(1) per thread; any N (odd, unaligned rows). fp32 accumulation; edge rows as
// torch.softmax (NaN / +inf make the row NaN, all -inf gives NaN).
// A launch must own its slots and ticket counter (one set per stream) while it runs.
#include "softmax_common.cuh"
#include "slot_exchange.cuh"

template <typename T, int THREADS, int UNROLL>
__global__ void __launch_bounds__(THREADS)
    softmax_long_split(const T* __restrict__ x, T* __restrict__ y, unsigned long long* __restrict__ slots,
                       unsigned* __restrict__ tickets, long long N, int S) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ smx::MaxSum scratch[THREADS / 32];
    __shared__ smx::MaxSum row_total;
    __shared__ int work_item;
    __shared__ unsigned previous;
    const int work = slotsync::work_of_block(tickets, &work_item);
    const int row = work / S;
    const int split = work % S;
    const long long offset = static_cast<long long>(row) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    unsigned long long* __restrict__ row_slots = slots + 2LL * row * S;
    const int tid = static_cast<int>(threadIdx.x);

    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const int per_block = (rs.vecs + S - 1) / S;
    const int begin = min(rs.vecs, split * per_block);
    const int end = min(rs.vecs, begin + per_block);
    const int extras = split == 0 ? rs.head + rs.tail : 0;
    if (tid == 0) previous = slotsync::epoch_of(slotsync::load_relaxed(row_slots + 2 * split));

    smx::MaxSum acc = smx::stream_stats<T, THREADS, UNROLL>(xr + rs.head, begin, end);
    if (tid < extras) acc = smx::add_value(acc, smx::to_float<T>(xr[smx::extra_index<VEC>(rs, tid)]));
    const smx::MaxSum mine = smx::block_merge<THREADS>(acc, scratch);  // its barriers publish `previous`

    if (tid < 32) {
        const smx::MaxSum total = slotsync::exchange(row_slots, split, S, previous + 1u, mine);
        if (tid == 0) row_total = total;
    }
    __syncthreads();
    const smx::MaxSum total = row_total;
    const float inv = 1.0f / total.s;
    auto out = [&](float v) { return smx::exp_from(v, total.m) * inv; };

    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    const T* __restrict__ xb = xr + rs.head;
    T* __restrict__ yb = yr + rs.head;
    const int count = end - begin;
    for (int j0 = tid; j0 < count; j0 += THREADS * UNROLL) {  // j counts back from the share's end
        uint4 raw[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = j0 + u * THREADS;
            if (j < count) raw[u] = __ldg(reinterpret_cast<const uint4*>(xb + static_cast<long long>(end - 1 - j) * VEC));
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = j0 + u * THREADS;
            if (j < count)
                smx::store_vec<T>(yb + static_cast<long long>(end - 1 - j) * VEC, smx::map_vec<T>(raw[u], out), vec_ok);
        }
    }
    if (tid < extras) {
        const int k = smx::extra_index<VEC>(rs, tid);
        yr[k] = smx::from_float<T>(out(smx::to_float<T>(xr[k])));
    }
}
