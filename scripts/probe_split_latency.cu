// Diagnostic kernels for scripts/probe_split_latency.py: where does a one-row split softmax spend the
// ~2.5 us it takes over a copy at M = 1? fp32, S blocks of 256 threads, P float4 per thread, one row
// of S * 256 * P * 4 elements. Not a variant; never dispatched.
//   copy_p<P>:        the same loads and stores, nothing else
//   split_p<P, 0>:    + block max / sum of exp, output normalised by the block's own stats
//   split_p<P, 1>:    + the block's pair stored to its slot (not waited for)
//   split_p<P, 2>:    + wait until all S slots carry this launch's epoch, merge them (a full exchange)
//   split_p<P, 3>:    the same, the row's slot lines prefetched into L2 while the row loads
// With `stamps` not null, every block records (%globaltimer, ns) its start, its row loaded (thread
// 0's loads arrived), its pair published, the exchange done and its stores issued: 5 per block.
#define PROBE_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float2 merge_pair(float2 a, float2 b) {
    const float m = fmaxf(a.x, b.x);
    if (m == PROBE_NEG_INF) return make_float2(m, 0.0f);
    return make_float2(m, a.y * __expf(a.x - m) + b.y * __expf(b.x - m));
}

__device__ __forceinline__ float2 block_pair(float2 v, float2* scratch) {
    for (int o = 16; o > 0; o >>= 1) {
        float2 other = make_float2(__shfl_xor_sync(0xffffffffu, v.x, o), __shfl_xor_sync(0xffffffffu, v.y, o));
        v = merge_pair(v, other);
    }
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) v = merge_pair(v, scratch[w]);
    return v;
}

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int P>
__global__ void __launch_bounds__(256) copy_p(const float4* __restrict__ x, float4* __restrict__ y) {
    const int base = blockIdx.x * 256 * P + threadIdx.x;
    float4 v[P];
#pragma unroll
    for (int p = 0; p < P; ++p) v[p] = x[base + p * 256];
#pragma unroll
    for (int p = 0; p < P; ++p) y[base + p * 256] = v[p];
}

template <int P, int MODE>
__global__ void __launch_bounds__(256) split_p(const float4* __restrict__ x, float4* __restrict__ y,
                                               unsigned long long* __restrict__ slots, int S, unsigned epoch,
                                               unsigned long long* __restrict__ stamps) {
    __shared__ float2 scratch[8];
    __shared__ float2 total;
    const bool timed = stamps != nullptr && threadIdx.x == 0;
    unsigned long long times[5] = {timed ? now_ns() : 0ull, 0ull, 0ull, 0ull, 0ull};
    const int base = blockIdx.x * 256 * P + threadIdx.x;
    float4 v[P];
#pragma unroll
    for (int p = 0; p < P; ++p) v[p] = x[base + p * 256];
    if (MODE == 3 && threadIdx.x < 32) {  // bring the row's slot lines into L2 while the row loads
        for (int i = threadIdx.x; i < S; i += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(slots + 2 * i));
    }
    float m = PROBE_NEG_INF;
#pragma unroll
    for (int p = 0; p < P; ++p) m = fmaxf(fmaxf(fmaxf(m, v[p].x), fmaxf(v[p].y, v[p].z)), v[p].w);
    if (timed) times[1] = now_ns();  // m depends on thread 0's loads
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < P; ++p) s += __expf(v[p].x - m) + __expf(v[p].y - m) + __expf(v[p].z - m) + __expf(v[p].w - m);
    float2 mine = block_pair(make_float2(m, s), scratch);
    if (MODE >= 1 && threadIdx.x == 0) {
        const unsigned long long tag = static_cast<unsigned long long>(epoch) << 32;
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(slots + 2 * blockIdx.x), "l"(tag | __float_as_uint(mine.x)) : "memory");
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(slots + 2 * blockIdx.x + 1), "l"(tag | __float_as_uint(mine.y)) : "memory");
        if (timed) times[2] = now_ns();
    }
    if (MODE >= 2) {
        if (threadIdx.x < 32) {
            float2 acc = make_float2(PROBE_NEG_INF, 0.0f);
            for (int i = threadIdx.x; i < S; i += 32) {
                unsigned long long a, b;
                do {
                    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(a) : "l"(slots + 2 * i) : "memory");
                    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(b) : "l"(slots + 2 * i + 1) : "memory");
                } while (static_cast<unsigned>(a >> 32) != epoch || static_cast<unsigned>(b >> 32) != epoch);
                acc = merge_pair(acc, make_float2(__uint_as_float(static_cast<unsigned>(a)), __uint_as_float(static_cast<unsigned>(b))));
            }
            for (int o = 16; o > 0; o >>= 1) {
                float2 other = make_float2(__shfl_xor_sync(0xffffffffu, acc.x, o), __shfl_xor_sync(0xffffffffu, acc.y, o));
                acc = merge_pair(acc, other);
            }
            if (threadIdx.x == 0) total = acc;
            if (timed) times[3] = now_ns();
        }
        __syncthreads();
        mine = total;
    }
    const float inv = 1.0f / mine.y;
#pragma unroll
    for (int p = 0; p < P; ++p) {
        float4 o;
        o.x = __expf(v[p].x - mine.x) * inv; o.y = __expf(v[p].y - mine.x) * inv;
        o.z = __expf(v[p].z - mine.x) * inv; o.w = __expf(v[p].w - mine.x) * inv;
        y[base + p * 256] = o;
    }
    if (timed) {
        times[4] = now_ns();
        for (int i = 0; i < 5; ++i) stamps[5 * blockIdx.x + i] = times[i];
    }
}

