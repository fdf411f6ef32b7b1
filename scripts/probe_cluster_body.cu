// Probe kernel (not a registered variant), compiled after cluster_split.cu by
// scripts/probe_cluster_body.py: the body of softmax_cluster_split rearranged the way QuACK's
// cluster softmax is, to find which difference makes QuACK's anchors near copy speed on
// M = 128 rows of 1 MB where ours reaches 0.87-0.89. Rows must fill the cluster exactly:
// N = CLUSTER * THREADS * ITEMS * (16 / sizeof(T)), rows 16-byte aligned.
//   STAGE: the share goes global -> shared memory by cp.async, then shared -> registers (else
//          straight into registers with __ldg, as softmax_cluster_split does);
//   KEEP:  each element's exp is kept as fp32 and the store pass rescales it (else the store pass
//          exponentiates again, as softmax_cluster_split does for 16-bit rows);
//   MIN_BLOCKS: __launch_bounds__' blocks per SM (registers a thread may take).
// The (max, sum) exchange is softmax_cluster_split's (block merge, cluster barrier, DSM reads).
// The cluster helpers this probe was written with (cluster_split.cu's exchange now uses st.async on
// mbarriers and no longer has them): a releasing cluster-barrier arrive, and a read of `local`'s
// offset in block `target`.
namespace probe_cluster {
__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ float2 load_remote(const float2* local, unsigned target) {
    const unsigned remote = cluster::remote_address(cluster::shared_address(local), target);
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(remote) : "memory");
    return v;
}
}  // namespace probe_cluster

template <typename T, int CLUSTER, int THREADS, int ITEMS, bool STAGE, bool KEEP, int MIN_BLOCKS>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, MIN_BLOCKS)
    probe_cluster_body(const T* __restrict__ x, T* __restrict__ y, long long N) {
    constexpr int VEC = 16 / sizeof(T);
    extern __shared__ uint4 staged[];
    __shared__ smx::MaxSum scratch[THREADS / 32];
    __shared__ float2 partial;
    const unsigned rank = cluster::rank();
    const long long share = static_cast<long long>(THREADS) * ITEMS * VEC;
    const long long offset = static_cast<long long>(cluster::index_x()) * N + rank * share;
    const uint4* __restrict__ xs = reinterpret_cast<const uint4*>(x + offset);
    uint4* __restrict__ ys = reinterpret_cast<uint4*>(y + offset);
    const int tid = static_cast<int>(threadIdx.x);

    uint4 raw[ITEMS];
    if constexpr (STAGE) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) smx::cp_async16(&staged[tid + i * THREADS], xs + tid + i * THREADS);
        smx::cp_async_wait_all();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) raw[i] = staged[tid + i * THREADS];
    } else {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) raw[i] = __ldg(xs + tid + i * THREADS);
    }
    // renames the words before each re-read (as smx::RowTile::reconvert_later does), so 16-bit
    // values are converted again instead of being kept as floats beside the packed words
    auto rename = [&]() {
        const unsigned zero = smx::opaque_zero();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            raw[i].x ^= zero;
            raw[i].y ^= zero;
            raw[i].z ^= zero;
            raw[i].w ^= zero;
        }
    };
    float m = SOFTMAX_NEG_INF;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) smx::for_each_in<T>(raw[i], [&](float v) { m = fmaxf(m, v); });
    const float base = smx::exp_base(m);
    float s = 0.0f;
    float kept[KEEP ? ITEMS * VEC : 1];
    if constexpr (KEEP) {
        int j = 0;  // unconditional increments in unrolled loops: a compile-time index
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            smx::for_each_in<T>(raw[i], [&](float v) {
                kept[j] = smx::exp_from(v, base);
                s += kept[j++];
            });
    } else {
        rename();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) smx::for_each_in<T>(raw[i], [&](float v) { s += smx::exp_from(v, base); });
    }
    const smx::MaxSum mine = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);
    if (tid == 0) partial = make_float2(mine.m, mine.s);
    probe_cluster::arrive();
    cluster::wait();
    smx::MaxSum pair{SOFTMAX_NEG_INF, 0.0f};
    if ((tid & 31) < CLUSTER) {
        const float2 p = probe_cluster::load_remote(&partial, static_cast<unsigned>(tid & 31));
        pair = smx::MaxSum{p.x, p.y};
    }
    const smx::MaxSum row = smx::warp_merge(pair);
    probe_cluster::arrive();

    const float inv = 1.0f / row.s;
    const float scale = smx::rescale(m, row.m) * inv;
    if constexpr (KEEP) {
        int j = 0;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            ys[tid + i * THREADS] = smx::map_vec<T>(raw[i], [&](float) { return kept[j++] * scale; });
    } else {
        rename();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
            ys[tid + i * THREADS] = smx::map_vec<T>(raw[i], [&](float v) { return smx::exp_from(v, row.m) * inv; });
    }
    cluster::wait();
}
