// Split-row softmax in ONE launch on Hopper (sm_90+): a thread-block cluster of CLUSTER blocks
// shares each row and exchanges partial (max, sum) pairs through distributed shared memory.
//
// Grid: CLUSTER * M blocks; the cluster size is fixed at compile time (__cluster_dims__), so an
// ordinary launch (CuPy's) forms clusters; cluster c is row c, cluster rank r takes the r-th share
// of the row's 16-byte body vectors (smx::row_split). Share vector b goes to thread b % THREADS:
// the first PACKS per thread stay in registers in the input type (smx::RowTile), any beyond go to
// dynamic shared memory slot b - PACKS * THREADS by cp.async (the host sizes it from N; 0 when the
// share fits the registers). Rank 0 also holds the < 2 * VEC head/tail scalars, one per thread.
//
//   0. thread 0 sets up the block's mbarrier to expect CLUSTER * WARPS pairs (8 bytes each) and
//      every thread arrives (relaxed) on the cluster barrier, so the set-up is visible cluster-wide
//      once the cluster has arrived: blocks of a cluster start together, so the wait in step 3
//      costs nothing;
//   1. load the share (all loads in flight), thread max, then sum of exp(x - max) (fp32 rows keep
//      those exps in place of x, so step 5 only rescales them: one exp per element, not two);
//   2. one warp merge: every warp has its (max, sum) pair;
//   3. wait on the cluster barrier of step 0, then lane r of every warp pushes its warp's pair into
//      slot (rank, warp) of block r's `pairs` by st.async, which counts the bytes on block r's
//      mbarrier. No block barrier, no second cluster barrier: a block waits only for the bytes
//      addressed to it;
//   4. wait on the own mbarrier (all CLUSTER * WARPS pairs arrived), then every warp merges the
//      pairs in the same order (lane l takes slots l, l + 32, ..., then a warp merge), so the whole
//      row uses one bitwise (max, sum);
//   5. write the share from registers / shared memory.
// Shared memory stays valid for as long as anyone writes to it: a block exits only after its
// mbarrier has counted every pair addressed to it, and nothing else is read remotely. The row is
// read from global memory once and written once, whatever M. Cluster operations are inline PTX (no
// cooperative_groups header needed under NVRTC). fp32 accumulation; edge rows as torch.softmax.
#include "softmax_common.cuh"

namespace cluster {

__device__ __forceinline__ unsigned rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned index_x() {
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The address of `local`'s shared-memory offset in block `target` of this cluster.
__device__ __forceinline__ unsigned remote_address(unsigned local, unsigned target) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(target));
    return remote;
}
// Cluster barrier: a relaxed arrive (orders nothing but what the mbarrier fence released) and the
// acquiring wait.
__device__ __forceinline__ void arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// One thread: an mbarrier whose phase 0 completes once `bytes` have arrived by st.async (its one
// expected arrival is made here), with the initialisation released to the cluster.
__device__ __forceinline__ void expect_bytes(unsigned long long* barrier, unsigned bytes) {
    const unsigned addr = shared_address(barrier);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(addr) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(addr), "r"(bytes) : "memory");
}
// Store `v` at `local`'s offset in block `target`, counted on `barrier`'s copy in that block.
__device__ __forceinline__ void push(const float2* local, float2 v, const unsigned long long* barrier, unsigned target) {
    const unsigned slot = remote_address(shared_address(local), target);
    const unsigned bar = remote_address(shared_address(barrier), target);
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                 ::"r"(slot), "f"(v.x), "f"(v.y), "r"(bar) : "memory");
}
// Wait until phase 0 of the block's own mbarrier completes (acquire: the pushed bytes are visible).
__device__ __forceinline__ void wait_bytes(const unsigned long long* barrier) {
    const unsigned addr = shared_address(barrier);
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_PAIRS:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
        "@!done bra WAIT_PAIRS;\n"
        "}\n" ::"r"(addr) : "memory");
}

}  // namespace cluster

template <typename T, int CLUSTER, int THREADS, int PACKS>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, 4 * PACKS, 32))
    softmax_cluster_split(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int IN_REGS = PACKS * THREADS;  // share vectors held in registers; the rest in `cache`
    constexpr int WARPS = THREADS / 32;
    constexpr int PAIRS = CLUSTER * WARPS;  // slot rank * WARPS + warp: that warp's (max, sum)
    extern __shared__ uint4 cache[];
    __shared__ float2 pairs[PAIRS];
    __shared__ alignas(8) unsigned long long pairs_arrived;  // mbarrier counting the bytes of `pairs`
    if (threadIdx.x == 0) cluster::expect_bytes(&pairs_arrived, PAIRS * sizeof(float2));
    cluster::arrive_relaxed();
    const unsigned rank = cluster::rank();
    const long long offset = static_cast<long long>(cluster::index_x()) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const int per_block = (rs.vecs + CLUSTER - 1) / CLUSTER;
    const int begin = min(rs.vecs, static_cast<int>(rank) * per_block);
    const int count = min(rs.vecs - begin, per_block);  // vectors of this block's share
    const smx::RowSplit front{0, min(count, IN_REGS), 0};  // the register part, as a row of its own
    const T* __restrict__ xs = xr + rs.head + static_cast<long long>(begin) * VEC;
    const int tid = static_cast<int>(threadIdx.x);
    __builtin_assume(tid >= 0);  // lets the empty head/tail slot of smx::RowTile fold away
    const int extras = rank == 0 ? rs.head + rs.tail : 0;

    smx::RowTile<T, VEC, PACKS, THREADS> tile;
    tile.load(xs, front, tid);
    for (int b = tid + IN_REGS; b < count; b += THREADS)
        smx::cp_async16(&cache[b - IN_REGS], xs + static_cast<long long>(b) * VEC);
    const float extra = tid < extras ? smx::to_float<T>(xr[smx::extra_index<VEC>(rs, tid)]) : SOFTMAX_NEG_INF;

    float m = fmaxf(tile.max(), extra);
    smx::cp_async_wait_all();
    for (int b = tid + IN_REGS; b < count; b += THREADS)
        smx::for_each_in<T>(cache[b - IN_REGS], [&](float v) { m = fmaxf(m, v); });
    const float base = smx::exp_base(m);
    const float extra_exp = smx::exp_from(extra, base);
    float s = extra_exp;
    if constexpr (sizeof(T) == 4) {
        // exp once: the share is replaced by exp(x - base), in registers and in shared memory, and
        // step 5 rescales it (MUFU.EX2 throughput, not DRAM, bounds the store pass otherwise)
        s += tile.apply_sum([&](float v) { return smx::exp_from(v, base); });
        for (int b = tid + IN_REGS; b < count; b += THREADS)
            cache[b - IN_REGS] = smx::map_vec<T>(cache[b - IN_REGS], [&](float v) {
                const float e = smx::exp_from(v, base);
                s += e;
                return e;
            });
    } else {
        tile.reconvert_later(smx::opaque_zero());
        tile.for_each([&](float v) { s += smx::exp_from(v, base); });
        for (int b = tid + IN_REGS; b < count; b += THREADS)
            smx::for_each_in<T>(cache[b - IN_REGS], [&](float v) { s += smx::exp_from(v, base); });
    }
    const smx::MaxSum mine = smx::warp_merge(smx::MaxSum{m, s});
    const int lane = tid & 31;
    cluster::wait();  // every block's mbarrier is set up
    if (lane < CLUSTER)
        cluster::push(&pairs[rank * WARPS + (tid >> 5)], make_float2(mine.m, mine.s), &pairs_arrived,
                      static_cast<unsigned>(lane));
    cluster::wait_bytes(&pairs_arrived);
    smx::MaxSum pair{SOFTMAX_NEG_INF, 0.0f};
#pragma unroll
    for (int i = lane; i < PAIRS; i += 32) pair = smx::merge(pair, smx::MaxSum{pairs[i].x, pairs[i].y});
    const smx::MaxSum row = smx::warp_merge(pair);

    const float inv = 1.0f / row.s;
    // fp32: the share holds exp(x - base); exp(base - row.m) / sum turns it into the output (0 for a
    // thread with no element above -inf, NaN through inv where the row is NaN or all -inf)
    const float scale = smx::rescale(m, row.m) * inv;
    auto out = [&](float v) {
        if constexpr (sizeof(T) == 4) return v * scale;
        else return smx::exp_from(v, row.m) * inv;
    };
    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    T* __restrict__ ys = yr + rs.head + static_cast<long long>(begin) * VEC;
    if constexpr (sizeof(T) == 2) tile.reconvert_later(smx::opaque_zero());
    tile.store(ys, front, tid, vec_ok, out);
    for (int b = tid + IN_REGS; b < count; b += THREADS)
        smx::store_vec<T>(ys + static_cast<long long>(b) * VEC, smx::map_vec<T>(cache[b - IN_REGS], out), vec_ok);
    if (tid < extras) yr[smx::extra_index<VEC>(rs, tid)] = smx::from_float<T>(sizeof(T) == 4 ? extra_exp * scale : out(extra));
}
