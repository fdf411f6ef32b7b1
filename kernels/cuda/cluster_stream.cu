// Persistent, pipelined split-row softmax on Hopper (sm_90+): G thread-block clusters of CLUSTER
// blocks take rows g, g + G, g + 2G, ... (G = the clusters that fit on the GPU at once, set by the
// host), and while a cluster reduces and writes one row, the next rows are already on their way in.
//
// Why: cluster_split.cu keeps a row on chip but loads, exchanges and stores in lock-step, one row
// per cluster, so at M ~ 128 and rows of 0.5-1 MB the memory system idles between a wave's loads
// and its stores. Here each block owns STAGES shared-memory buffers of one share each; the shares
// of the next STAGES - 1 rows are copied in (cp.async, no registers held) while row i is read out.
//
// Block `rank` of the cluster takes the rank-th share of each row's 16-byte body vectors
// (smx::row_split), ceil(vecs / CLUSTER) of them; share vector b goes to thread b % THREADS, in
// both the copy and every later use, so a thread only ever reads slots it copied itself: the
// cp.async group wait alone makes them visible (no block barrier), and the buffer a thread refills
// was last read by that same thread. Rank 0 also takes the < 2 * VEC head/tail scalars (plain
// loads into a register, issued with the row's copies).
//
// Per row: thread max, then sum of exp(x - max), over its slots; one MaxSum block reduction;
// thread 0 puts the block's pair in `partial[parity]`; a cluster barrier; lanes 0..CLUSTER-1 of
// every warp read the CLUSTER pairs over distributed shared memory and merge them in rank order, so
// every block of the row uses one bitwise (max, sum); then the share is written from the buffer.
// `partial` alternates by row parity: the pair of row i + 2 is written after the barrier of row
// i + 1, which every block passes only after its reads of row i. The buffer refilled in an
// iteration is the one read out in the previous one, by the same threads. A last barrier keeps
// every block's shared memory alive until no other block can still read it.
//
// Dynamic shared memory: STAGES * ceil((N / VEC) / CLUSTER) * 16 bytes (the host sizes it from N
// and opts in above 48 KB). fp32 accumulation; edge rows as torch.softmax.
#include "softmax_common.cuh"
#include "cluster_common.cuh"

namespace stream {

// One block's part of one row: the row, its split, and this block's share of its body vectors.
template <typename T, int VEC> struct Share {
    const T* xr;
    T* yr;
    smx::RowSplit rs;
    long long begin;  // first body vector of the share
    int count;        // body vectors in the share
    int extras;       // head/tail scalars this block takes (rank 0 only)

    __device__ __forceinline__ Share(const T* x, T* y, long long row, long long n, int rank_in_cluster, int cluster) {
        xr = x + row * n;
        yr = y + row * n;
        rs = smx::row_split<T, VEC>(xr, static_cast<int>(n));
        const int per_block = (rs.vecs + cluster - 1) / cluster;
        const int first = min(rs.vecs, rank_in_cluster * per_block);
        begin = first;
        count = min(rs.vecs - first, per_block);
        extras = rank_in_cluster == 0 ? rs.head + rs.tail : 0;
    }
    __device__ __forceinline__ const T* x_body() const { return xr + rs.head + begin * VEC; }
    __device__ __forceinline__ T* y_body() const { return yr + rs.head + begin * VEC; }
};

}  // namespace stream

template <typename T, int CLUSTER, int THREADS, int STAGES>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
    softmax_cluster_stream(const T* __restrict__ x, T* __restrict__ y, long long M, long long N) {
    static_assert(STAGES >= 2, "one buffer being read out, at least one arriving");
    constexpr int VEC = 16 / sizeof(T);
    extern __shared__ uint4 buffers[];
    __shared__ smx::MaxSum scratch[THREADS / 32];
    __shared__ float2 partial[2];
    const int capacity = static_cast<int>((N / VEC + CLUSTER - 1) / CLUSTER);  // vectors per buffer
    const int rank = static_cast<int>(cluster::rank());
    const long long clusters = cluster::count_x();
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31;

    // Issues the copies of `row`'s share into buffer `stage` as one cp.async group (an empty group
    // past the last row, so every iteration commits exactly one) and returns this thread's head/tail
    // scalar of the row (-inf where it has none); that load completes while the thread works on.
    auto fetch = [&](long long row, int stage) -> float {
        float extra = SOFTMAX_NEG_INF;
        if (row < M) {
            const stream::Share<T, VEC> share(x, y, row, N, rank, CLUSTER);
            const T* __restrict__ xs = share.x_body();
            uint4* buffer = buffers + stage * capacity;
            for (int b = tid; b < share.count; b += THREADS)
                smx::cp_async16(&buffer[b], xs + static_cast<long long>(b) * VEC);
            if (tid < share.extras) extra = smx::to_float<T>(share.xr[smx::extra_index<VEC>(share.rs, tid)]);
        }
        cluster::commit_copies();
        return extra;
    };

    // Rows this cluster has asked for ahead of the one in hand, nearest first: their scalars, in
    // registers (shifted with compile-time indices, never a run-time-indexed array).
    const long long first = cluster::index_x();
    float ahead[STAGES - 1];
#pragma unroll
    for (int k = 0; k < STAGES - 1; ++k) ahead[k] = fetch(first + k * clusters, k);
    int stage = 0;
    for (long long row = first, i = 0; row < M; row += clusters, ++i) {
        const float extra = ahead[0];
#pragma unroll
        for (int k = 0; k + 1 < STAGES - 1; ++k) ahead[k] = ahead[k + 1];
        const int refill = stage == 0 ? STAGES - 1 : stage - 1;  // the buffer read out last iteration
        ahead[STAGES - 2] = fetch(row + (STAGES - 1) * clusters, refill);
        cluster::wait_copies<STAGES - 1>();  // this row's group has landed; the later ones fly on

        const stream::Share<T, VEC> share(x, y, row, N, rank, CLUSTER);
        const uint4* buffer = buffers + stage * capacity;
        float m = extra;
        for (int b = tid; b < share.count; b += THREADS)
            smx::for_each_in<T>(buffer[b], [&](float v) { m = fmaxf(m, v); });
        const float base = smx::exp_base(m);
        float s = smx::exp_from(extra, base);
        for (int b = tid; b < share.count; b += THREADS)
            smx::for_each_in<T>(buffer[b], [&](float v) { s += smx::exp_from(v, base); });
        const smx::MaxSum mine = smx::block_merge<THREADS>(smx::MaxSum{m, s}, scratch);
        const int parity = static_cast<int>(i & 1);
        if (tid == 0) partial[parity] = make_float2(mine.m, mine.s);

        cluster::arrive();
        cluster::wait();
        smx::MaxSum pair{SOFTMAX_NEG_INF, 0.0f};
        if (lane < CLUSTER) {
            const float2 p = cluster::load_remote(&partial[parity], static_cast<unsigned>(lane));
            pair = smx::MaxSum{p.x, p.y};
        }
        const smx::MaxSum total = smx::warp_merge(pair);

        const float inv = 1.0f / total.s;
        auto out = [&](float v) { return smx::exp_from(v, total.m) * inv; };
        const bool vec_ok = smx::same_alignment<T, VEC>(share.xr, share.yr);
        T* __restrict__ ys = share.y_body();
        for (int b = tid; b < share.count; b += THREADS)
            smx::store_vec<T>(ys + static_cast<long long>(b) * VEC, smx::map_vec<T>(buffer[b], out), vec_ok);
        if (tid < share.extras) share.yr[smx::extra_index<VEC>(share.rs, tid)] = smx::from_float<T>(out(extra));
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    cluster::wait_copies<0>();
    cluster::arrive();
    cluster::wait();
}
