// softmax_cluster_split for few long 16-bit rows, with each element's exponential kept in fp32
// registers between the sum and the store (cluster_split.cu exponentiates 16-bit rows twice, to keep
// its register count at the occupancy its large-M configs need). At M = 1-8 (M_MAX, cluster_keep.py)
// the grid is at most 8 * CLUSTER blocks, one per SM within one wave at CLUSTER 16, so registers are
// free: the store pass becomes one FMUL per element instead of an FFMA and a MUFU.EX2. Measured on the
// H100 with cuda_cluster_split beside it (bench/data/long_rows_h100.json.gz, 2026-11-25): 0.88-0.98
// of its time at M = 1, 2, 4 x N = 131072, 151936, 262144 in 16-bit; on the H200 0.82-0.94 of the best
// other kernel's at M 5, 7 x N 69728-246261 (bench/data/keep_variants_h200.json.gz). Registers only
// (no shared-memory share), one block per SM.
// The exchange and the geometry are cluster_split.cu's (included; its source is not changed).
#include "cluster_split.cu"

template <typename T, int CLUSTER, int THREADS, int PACKS>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
    softmax_cluster_keep(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    static_assert(sizeof(T) == 2, "fp32 rows already keep their exps (cluster_split.cu)");
    constexpr int VEC = 16 / sizeof(T);
    constexpr int WARPS = THREADS / 32;
    constexpr int PAIRS = CLUSTER * WARPS;
    __shared__ float2 pairs[PAIRS];
    __shared__ alignas(8) unsigned long long pairs_arrived;
    if (threadIdx.x == 0) cluster::expect_bytes(&pairs_arrived, PAIRS * sizeof(float2));
    cluster::arrive_relaxed();
    const unsigned rank = cluster::rank();
    const long long offset = static_cast<long long>(cluster::index_x()) * N;
    const T* __restrict__ xr = x + offset;
    T* __restrict__ yr = y + offset;
    const smx::RowSplit rs = smx::row_split<T, VEC>(xr, static_cast<int>(N));
    const int per_block = (rs.vecs + CLUSTER - 1) / CLUSTER;
    const int begin = min(rs.vecs, static_cast<int>(rank) * per_block);
    const int count = min(rs.vecs - begin, per_block);  // <= PACKS * THREADS (host)
    const smx::RowSplit front{0, count, 0};
    const T* __restrict__ xs = xr + rs.head + static_cast<long long>(begin) * VEC;
    const int tid = static_cast<int>(threadIdx.x);
    __builtin_assume(tid >= 0);
    const int extras = rank == 0 ? rs.head + rs.tail : 0;

    smx::RowTile<T, VEC, PACKS, THREADS> tile;
    tile.load(xs, front, tid);
    const float extra = tid < extras ? smx::to_float<T>(xr[smx::extra_index<VEC>(rs, tid)]) : SOFTMAX_NEG_INF;
    const float m = fmaxf(tile.max(), extra);
    const float base = smx::exp_base(m);
    const float extra_exp = smx::exp_from(extra, base);
    float s = extra_exp;
    constexpr int WORDS = smx::RowTile<T, VEC, PACKS, THREADS>::WORDS;
    float kept[PACKS][2 * WORDS];  // exp(x - base) of every body slot (-inf slots: 0), fp32
#pragma unroll
    for (int i = 0; i < PACKS; ++i)
#pragma unroll
        for (int k = 0; k < WORDS; ++k) {
            const float2 p = smx::Word<T>::unpack(tile.w[i][k]);
            kept[i][2 * k] = smx::exp_from(p.x, base);
            kept[i][2 * k + 1] = smx::exp_from(p.y, base);
            s += kept[i][2 * k] + kept[i][2 * k + 1];
        }
    const smx::MaxSum mine = smx::warp_merge(smx::MaxSum{m, s});
    const int lane = tid & 31;
    cluster::wait();
    if (lane < CLUSTER)
        cluster::push(&pairs[rank * WARPS + (tid >> 5)], make_float2(mine.m, mine.s), &pairs_arrived,
                      static_cast<unsigned>(lane));
    cluster::wait_bytes(&pairs_arrived);
    smx::MaxSum pair{SOFTMAX_NEG_INF, 0.0f};
#pragma unroll
    for (int i = lane; i < PAIRS; i += 32) pair = smx::merge(pair, smx::MaxSum{pairs[i].x, pairs[i].y});
    const smx::MaxSum row = smx::warp_merge(pair);

    // exp(base - row.m) / sum turns a kept exp into the output (0 for a thread with nothing above
    // -inf, NaN through the sum where the row is NaN or all -inf)
    const float scale = smx::rescale(m, row.m) * (1.0f / row.s);
    const bool vec_ok = smx::same_alignment<T, VEC>(xr, yr);
    T* __restrict__ ys = yr + rs.head + static_cast<long long>(begin) * VEC;
    const int left = count - tid;
#pragma unroll
    for (int i = 0; i < PACKS; ++i) {
        if (i * THREADS < left) {
            unsigned o[4];
#pragma unroll
            for (int k = 0; k < WORDS; ++k) o[k] = smx::Word<T>::pack(kept[i][2 * k] * scale, kept[i][2 * k + 1] * scale);
            smx::store_vec<T>(ys + static_cast<long long>(tid + i * THREADS) * VEC, make_uint4(o[0], o[1], o[2], o[3]), vec_ok);
        }
    }
    if (tid < extras) yr[smx::extra_index<VEC>(rs, tid)] = smx::from_float<T>(extra_exp * scale);
}
