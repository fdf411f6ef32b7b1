// Split-row softmax in ONE launch on any sm_70+ GPU: S blocks share each row, keep their chunk in
// registers, and trade partial (max, sum) pairs through tagged slots in global memory.
// It is split_row.cu without the second launch and without the re-read, and cluster_split.cu
// without the cluster size limit (8, or 16 non-portable): a few long rows (M = 1, N = 262144) use
// every SM of the GPU.
//
// Grid: M * S blocks, block b = row * S + split. Split k takes the k-th
// share of the row's 16-byte body vectors (smx::row_split), ceil(vecs / S) of them, which the host
// guarantees fit PACKS vectors per thread; split 0 also holds the < 2 * VEC head/tail scalars.
//
//   1. load the share into registers (all loads in flight), thread max, sum of exp(x - max);
//   2. one MaxSum block reduction;
//   3. warp 0 publishes the block's pair in its slot, tagged with the launch's epoch, and polls the
//      row's S slots until every one carries that epoch; it merges them in slot order, so every
//      block of the row uses one bitwise (max, sum);
//   4. write the share from registers.
//
// Slots: two 64-bit words per (row, split), (m | epoch << 32) and (s | epoch << 32); a 64-bit
// access is single-copy atomic, so a slot whose two epochs match holds one block's pair. A block's
// epoch is its own slot's previous epoch + 1: the slots of a row are always written together (same
// S: the host keeps one slot array per S), so they all move from e to e + 1 in each launch, with no
// reset, no atomics and nothing from the host (CUDA-graph replays work). Zero-filled once.
// Work order: a block waits only for the other blocks of its row, so the wait completes if those are
// resident or can become resident. Where all M * S blocks fit on the GPU at once (the host checks
// the driver's occupancy figure) block b simply takes work b. Beyond that the host passes `tickets`
// and each block takes work t = atomicInc(tickets) in the order blocks actually start: a block then
// only ever waits for works of a row whose lower works are all taken by started blocks, and the
// works still untaken go to the blocks that start as others finish (S <= the resident blocks, which
// the host checks), so every row completes in one launch whatever M. atomicInc wraps at the grid
// size, so the counter is back to 0 after every launch, with nothing to reset.
// A launch must own its slots and counter (one set per stream) while it runs.
// fp32 accumulation; edge rows as torch.softmax (NaN / +inf make the row NaN, all -inf gives NaN).
#include "softmax_common.cuh"

namespace gridsync {

__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long tagged(float v, unsigned epoch) {
    return static_cast<unsigned long long>(epoch) << 32 | __float_as_uint(v);
}
__device__ __forceinline__ unsigned epoch_of(unsigned long long w) { return static_cast<unsigned>(w >> 32); }
__device__ __forceinline__ float value_of(unsigned long long w) { return __uint_as_float(static_cast<unsigned>(w)); }

// Warp-wide (all 32 lanes): publish this block's pair in slot `split` of the row's `S` slots with
// epoch `epoch`, wait for every slot of the row to carry it, and return the merge of the S pairs.
__device__ __forceinline__ smx::MaxSum exchange(unsigned long long* row_slots, int split, int S, unsigned epoch,
                                                smx::MaxSum mine) {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    if (lane == 0) {
        store_relaxed(row_slots + 2 * split, tagged(mine.m, epoch));
        store_relaxed(row_slots + 2 * split + 1, tagged(mine.s, epoch));
    }
    smx::MaxSum acc{SOFTMAX_NEG_INF, 0.0f};
    for (int i = lane; i < S; i += 32) {
        unsigned long long m, s;
        do {
            m = load_relaxed(row_slots + 2 * i);
            s = load_relaxed(row_slots + 2 * i + 1);
        } while (epoch_of(m) != epoch || epoch_of(s) != epoch);
        acc = smx::merge(acc, smx::MaxSum{value_of(m), value_of(s)});
    }
    return smx::warp_merge(acc);
}

}  // namespace gridsync

template <typename T, int THREADS, int PACKS>
__global__ void __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, 4 * PACKS, PACKS <= 2 ? 48 : 32))
    softmax_grid_split(const T* __restrict__ x, T* __restrict__ y, unsigned long long* __restrict__ slots,
                       unsigned* __restrict__ tickets, long long N, int S) {
    constexpr int VEC = 16 / sizeof(T);
    __shared__ smx::MaxSum scratch[THREADS / 32];
    __shared__ smx::MaxSum row_total;
    __shared__ int work_item;
    int work = static_cast<int>(blockIdx.x);
    if (tickets != nullptr) {  // more blocks than fit at once: works in the order blocks start
        if (threadIdx.x == 0) work_item = static_cast<int>(atomicInc(tickets, gridDim.x - 1u));
        __syncthreads();
        work = work_item;
    }
    const int row = work / S;
    const int split = work % S;
    const long long offset = static_cast<long long>(row) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    unsigned long long* __restrict__ row_slots = slots + 2LL * row * S;
    const int tid = static_cast<int>(threadIdx.x);
    __builtin_assume(tid >= 0);

    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const int per_block = (rs.vecs + S - 1) / S;
    const int begin = min(rs.vecs, split * per_block);
    const int count = min(rs.vecs - begin, per_block);  // <= PACKS * THREADS (host)
    const smx::RowSplit front{0, count, 0};  // the share, as a row of its own
    const T* __restrict__ xs = xr + rs.head + static_cast<long long>(begin) * VEC;
    const int extras = split == 0 ? rs.head + rs.tail : 0;

    smx::RowTile<T, VEC, PACKS, THREADS> tile;
    tile.load(xs, front, tid);
    // this block's previous epoch, read while the row loads are in flight (kept in shared memory:
    // a register live across the whole row costs a spill at the occupancy asked for)
    __shared__ unsigned previous;
    if (tid == 0) previous = gridsync::epoch_of(gridsync::load_relaxed(row_slots + 2 * split));
    const float extra = tid < extras ? smx::to_float<T>(xr[smx::extra_index<VEC>(rs, tid)]) : SOFTMAX_NEG_INF;
    const float m = fmaxf(tile.max(), extra);
    const float base = smx::exp_base(m);
    if constexpr (sizeof(T) == 2) tile.reconvert_later(smx::opaque_zero());
    float s = smx::exp_from(extra, base);
    tile.for_each([&](float v) { s += smx::exp_from(v, base); });
    const smx::MaxSum mine = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);

    if (tid < 32) {
        const unsigned epoch = previous + 1u;  // written before block_merge's barriers
        const smx::MaxSum total = gridsync::exchange(row_slots, split, S, epoch, mine);
        if (tid == 0) row_total = total;
    }
    __syncthreads();
    const smx::MaxSum total = row_total;

    const float inv = 1.0f / total.s;
    auto out = [&](float v) { return smx::exp_from(v, total.m) * inv; };
    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    if constexpr (sizeof(T) == 2) tile.reconvert_later(smx::opaque_zero());
    tile.store(yr + rs.head + static_cast<long long>(begin) * VEC, front, tid, vec_ok, out);
    if (tid < extras) yr[smx::extra_index<VEC>(rs, tid)] = smx::from_float<T>(out(extra));
}
