// The cluster_split kernel as of commit a0bf3de (exchange through two cluster barriers and remote
// loads), renamed, for scripts/probe_cluster_exchange.py to time beside the current mbarrier exchange.
// Appended to the current cluster_split.cu source (its softmax_common.cuh already inlined there).
namespace cluster_barrier {

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
__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// The float2 at `local`'s shared-memory offset in block `target` of this cluster.
__device__ __forceinline__ float2 load_remote(const float2* local, unsigned target) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local));
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(target));
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
    return v;
}

}  // namespace cluster

template <typename T, int CLUSTER, int THREADS, int PACKS>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, smx::row_min_blocks(THREADS, 4 * PACKS, 32))
    probe_cluster_barrier(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    constexpr int IN_REGS = PACKS * THREADS;  // share vectors held in registers; the rest in `cache`
    extern __shared__ uint4 cache[];
    __shared__ smx::MaxSum scratch[THREADS / 32];
    __shared__ float2 partial;
    const unsigned rank = cluster_barrier::rank();
    const long long offset = static_cast<long long>(cluster_barrier::index_x()) * N;
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
    const smx::MaxSum mine = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);
    if (tid == 0) partial = make_float2(mine.m, mine.s);

    cluster_barrier::arrive();
    cluster_barrier::wait();
    smx::MaxSum pair{SOFTMAX_NEG_INF, 0.0f};
    const int lane = tid & 31;
    if (lane < CLUSTER) {
        const float2 p = cluster_barrier::load_remote(&partial, static_cast<unsigned>(lane));
        pair = smx::MaxSum{p.x, p.y};
    }
    const smx::MaxSum row = smx::warp_merge(pair);
    cluster_barrier::arrive();  // release: orders the remote loads before it (a relaxed arrive would not)

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
    cluster_barrier::wait();
}
