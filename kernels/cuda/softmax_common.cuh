// Device helpers shared by every CUDA softmax variant. Compiled by NVRTC (through CuPy: the loader
// inlines this header) and by nvcc (CI compile check), so it uses no host or standard headers.
//
// Numerics contract: all arithmetic in fp32; exp is exp2f of (x - max) * log2(e); the online merge
// guards the (-inf, -inf) case so a row whose first elements (or a thread's masked tail) are -inf
// still gives torch's answer; NaN and +inf propagate to an all-NaN row as in torch.softmax.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define SOFTMAX_LOG2E 1.4426950408889634f
#define SOFTMAX_NEG_INF __int_as_float(0xff800000)

namespace smx {

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// exp(x - max) without the libm call: one FFMA and one MUFU.EX2.
__device__ __forceinline__ float exp_shifted(float x, float max_scaled) {
    return exp2f(fmaf(x, SOFTMAX_LOG2E, -max_scaled));
}
__device__ __forceinline__ float scaled_max(float m) { return m * SOFTMAX_LOG2E; }

// Rescale factor exp(old - new) for a running sum; 1 where both are the same infinity (the sum is
// 0 for -inf, and the NaN from an x = +inf element carries the row to NaN on its own).
__device__ __forceinline__ float rescale(float old_max, float new_max) {
    return old_max == new_max ? 1.0f : exp2f((old_max - new_max) * SOFTMAX_LOG2E);
}

// (max, sum) pair of the online softmax, and its associative merge.
struct MaxSum {
    float m;
    float s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    float m = fmaxf(a.m, b.m);
    // fmaxf drops a NaN operand: keep NaN so a NaN row stays NaN.
    if (a.m != a.m || b.m != b.m) m = __int_as_float(0x7fc00000);
    return MaxSum{m, a.s * rescale(a.m, m) + b.s * rescale(b.m, m)};
}
__device__ __forceinline__ MaxSum online_add(MaxSum acc, float x) {
    return merge(acc, MaxSum{x, 1.0f});
}

__device__ __forceinline__ float nan_max(float a, float b) {
    return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b);
}

template <int WIDTH = 32> __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset, WIDTH));
    return v;
}
template <int WIDTH = 32> __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset, WIDTH);
    return v;
}
template <int WIDTH = 32> __device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
    for (int offset = WIDTH / 2; offset > 0; offset >>= 1) {
        MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, offset, WIDTH), __shfl_xor_sync(0xffffffffu, v.s, offset, WIDTH)};
        v = merge(v, other);
    }
    return v;
}

// Block-wide reductions for THREADS threads (a multiple of 32). `scratch` holds THREADS/32 values
// (MaxSum: THREADS/32 pairs); every thread gets the result. Ends with a barrier, so the scratch may
// be reused by the next call.
template <int THREADS> __device__ __forceinline__ float block_max(float v, float* scratch) {
    constexpr int WARPS = THREADS / 32;
    v = warp_max(v);
    if (WARPS == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < WARPS ? scratch[lane] : SOFTMAX_NEG_INF;
    v = warp_max(v);
    __syncthreads();
    return v;
}
template <int THREADS> __device__ __forceinline__ float block_sum(float v, float* scratch) {
    constexpr int WARPS = THREADS / 32;
    v = warp_sum(v);
    if (WARPS == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < WARPS ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}
template <int THREADS> __device__ __forceinline__ MaxSum block_merge(MaxSum v, MaxSum* scratch) {
    constexpr int WARPS = THREADS / 32;
    v = warp_merge(v);
    if (WARPS == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < WARPS ? scratch[lane] : MaxSum{SOFTMAX_NEG_INF, 0.0f};
    v = warp_merge(v);
    __syncthreads();
    return v;
}

// Vector of VEC elements of T moved as one load/store (VEC * sizeof(T) must be 4, 8 or 16 bytes,
// or VEC == 1). Callers guarantee alignment: row starts aligned because N % VEC == 0.
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_pack(const T* __restrict__ p, float (&out)[VEC]) {
    Pack<T, VEC> pack = *reinterpret_cast<const Pack<T, VEC>*>(p);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_float<T>(pack.v[i]);
}
template <int BYTES> struct RawVec;
template <> struct RawVec<16> { using type = uint4; };
template <> struct RawVec<8> { using type = uint2; };
template <> struct RawVec<4> { using type = unsigned int; };
template <> struct RawVec<2> { using type = unsigned short; };

// Read-only (non-coherent cache) load, for data this kernel never writes.
template <typename T, int VEC>
__device__ __forceinline__ void load_pack_nc(const T* __restrict__ p, float (&out)[VEC]) {
    using Raw = typename RawVec<sizeof(T) * VEC>::type;
    union {
        Raw raw;
        Pack<T, VEC> pack;
    } u;
    u.raw = __ldg(reinterpret_cast<const Raw*>(p));
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_float<T>(u.pack.v[i]);
}
template <typename T, int VEC>
__device__ __forceinline__ void store_pack(T* __restrict__ p, const float (&in)[VEC]) {
    Pack<T, VEC> pack;
#pragma unroll
    for (int i = 0; i < VEC; ++i) pack.v[i] = from_float<T>(in[i]);
    *reinterpret_cast<Pack<T, VEC>*>(p) = pack;
}

}  // namespace smx

// ---------------------------------------------------------------------------------------------
// Register-resident rows (warp_row, block_fused, block_online, packed16). Additive: nothing above
// depends on it.
namespace smx {

// exp2 as one MUFU.EX2; flushes results below 2^-126 to 0, which is below every atol.
__device__ __forceinline__ float exp2_approx(float v) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}
// The shift a row (or a thread's part of it) is exponentiated against: its max, or 0 when the max
// is -inf (all -inf / masked) so that exp(-inf - shift) is 0, not NaN.
__device__ __forceinline__ float exp_base(float m) { return m == SOFTMAX_NEG_INF ? 0.0f : m; }
// exp(v - base) with the subtraction done first: exact for the max element even at |x| ~ 1e30,
// where fmaf(v, log2e, -base * log2e) is off by an ulp of base * log2e (and overflows).
__device__ __forceinline__ float exp_from(float v, float base) { return exp2_approx((v - base) * SOFTMAX_LOG2E); }

template <typename T> __device__ __forceinline__ T neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return SOFTMAX_NEG_INF; }
template <> __device__ __forceinline__ __half neg_inf<__half>() { return __ushort_as_half((unsigned short)0xFC00U); }
template <> __device__ __forceinline__ __nv_bfloat16 neg_inf<__nv_bfloat16>() {
    return __ushort_as_bfloat16((unsigned short)0xFF80U);
}

// One VEC-wide read-only load / store of a Pack (VEC * sizeof(T) bytes, aligned to that).
template <typename T, int VEC> __device__ __forceinline__ Pack<T, VEC> ldg_pack(const T* p) {
    using Raw = typename RawVec<sizeof(T) * VEC>::type;
    union {
        Raw raw;
        Pack<T, VEC> pack;
    } u;
    u.raw = __ldg(reinterpret_cast<const Raw*>(p));
    return u.pack;
}
template <typename T, int VEC> __device__ __forceinline__ void st_pack(T* p, const Pack<T, VEC>& v) {
    using Raw = typename RawVec<sizeof(T) * VEC>::type;
    union {
        Raw raw;
        Pack<T, VEC> pack;
    } u;
    u.pack = v;
    *reinterpret_cast<Raw*>(p) = u.raw;
}

// Rows live in registers as 32-bit words (one float, or two 16-bit values: element 2k in the low
// half), because PTX gives every 16-bit scalar a register of its own.
template <typename T> struct Word;
template <> struct Word<float> {
    static __device__ __forceinline__ unsigned neg_inf() { return 0xff800000u; }
};
template <> struct Word<__half> {
    static __device__ __forceinline__ unsigned neg_inf() { return 0xfc00fc00u; }
    static __device__ __forceinline__ float2 unpack(unsigned w) {
        __half2 h = *reinterpret_cast<const __half2*>(&w);
        return __half22float2(h);
    }
    static __device__ __forceinline__ unsigned pack(float a, float b) {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<const unsigned*>(&h);
    }
};
template <> struct Word<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned neg_inf() { return 0xff80ff80u; }
    static __device__ __forceinline__ float2 unpack(unsigned w) {
        return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
    }
    static __device__ __forceinline__ unsigned pack(float a, float b) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<const unsigned*>(&h);
    }
};

// Blocks per SM to ask of __launch_bounds__ for THREADS-thread blocks whose threads each keep DATA
// registers of row: the most that still leave SPARE registers a thread for everything else (64K
// registers and 2048 threads per SM on sm_80 and sm_90). Without it ptxas spends registers on
// scheduling freedom and occupancy halves.
__host__ __device__ constexpr int row_min_blocks(int threads, int data, int spare = 24) {
    const int per_thread = (data + spare + 7) / 8 * 8;
    const int fit = 65536 / (threads * per_thread);
    const int most = 2048 / threads;
    return fit < 1 ? 1 : (fit > most ? most : fit);
}

// 0 at run time (kernels here launch 1-D blocks) but unknown to the compiler.
__device__ __forceinline__ unsigned opaque_zero() { return threadIdx.y; }

// A row of n elements split at the VEC-element boundaries of its *input* address: `head` scalars up
// to the first boundary, `vecs` aligned vectors, `tail` scalars after them. Any N and any row start
// (odd N, an offset view) then loads full-width vectors. n = 0 gives an empty split.
struct RowSplit {
    int head;
    int vecs;
    int tail;
};
template <typename T, int VEC> __device__ __forceinline__ RowSplit row_split(const T* row, int n) {
    const int mis = static_cast<int>((reinterpret_cast<unsigned long long>(row) / sizeof(T)) & (VEC - 1));
    RowSplit s;
    s.head = min(mis ? VEC - mis : 0, n);
    s.vecs = (n - s.head) / VEC;
    s.tail = n - s.head - s.vecs * VEC;
    return s;
}
// Whether y's rows are VEC-aligned wherever x's are (the same offset from a VEC boundary); if not,
// the body is stored element by element.
template <typename T, int VEC> __device__ __forceinline__ bool same_alignment(const T* x, const T* y) {
    return ((reinterpret_cast<unsigned long long>(x) ^ reinterpret_cast<unsigned long long>(y)) &
            (sizeof(T) * VEC - 1)) == 0;
}

// The part of a row that one of LANES cooperating threads holds: ITEMS body vectors of VEC elements
// (vector index lane + i * LANES: coalesced; kept as input-type words, so 16-bit rows take half the
// registers) and EXTRA head/tail scalars as float (extra element k = lane + j * LANES). Slots past
// the row hold -inf, so max and exp-sum loops run unpredicated and contribute (-inf, 0).
template <typename T, int VEC, int ITEMS, int LANES> struct RowTile {
    static constexpr int WORDS = VEC * static_cast<int>(sizeof(T)) / 4;
    static constexpr int EXTRA = VEC == 1 ? 0 : (2 * (VEC - 1) + LANES - 1) / LANES;
    static_assert(WORDS >= 1 && WORDS <= 4 && (WORDS & (WORDS - 1)) == 0, "a vector is 4, 8 or 16 bytes");
    using Raw = typename RawVec<4 * WORDS>::type;
    union Vec {
        Raw raw;
        unsigned w[WORDS];
    };
    unsigned w[ITEMS][WORDS];
    float e[EXTRA > 0 ? EXTRA : 1];

    // One base pointer and compile-time offsets: the loads use immediate offsets, not a 64-bit
    // address register each.
    __device__ __forceinline__ void load(const T* __restrict__ row, RowSplit s, int lane) {
        const T* __restrict__ base = row + s.head + lane * VEC;
        const int left = s.vecs - lane;  // body vectors from this lane's first one on
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            Vec u;
            if (i * LANES < left) {
                u.raw = __ldg(reinterpret_cast<const Raw*>(base + i * LANES * VEC));
            } else {
#pragma unroll
                for (int k = 0; k < WORDS; ++k) u.w[k] = Word<T>::neg_inf();
            }
#pragma unroll
            for (int k = 0; k < WORDS; ++k) w[i][k] = u.w[k];
        }
#pragma unroll
        for (int j = 0; j < EXTRA; ++j) {
            const int k = lane + j * LANES;
            e[j] = k < s.head + s.tail ? to_float<T>(row[k < s.head ? k : k + s.vecs * VEC]) : SOFTMAX_NEG_INF;
        }
    }

    // f(value) for every slot, masked ones included (as -inf).
    template <typename F> __device__ __forceinline__ void for_each(F f) const {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
            for (int k = 0; k < WORDS; ++k) {
                if constexpr (sizeof(T) == 4) {
                    f(__uint_as_float(w[i][k]));
                } else {
                    const float2 p = Word<T>::unpack(w[i][k]);
                    f(p.x);
                    f(p.y);
                }
            }
#pragma unroll
        for (int j = 0; j < EXTRA; ++j) f(e[j]);
    }
    // One accumulator in max() and sum(): more independent chains raise register pressure enough
    // to spill under the occupancy caps, and the exps are MUFU-throughput bound anyway.
    __device__ __forceinline__ float max() const {
        float m = SOFTMAX_NEG_INF;
        for_each([&](float a) { m = fmaxf(m, a); });
        return m;
    }
    // Sum of f(value) over every slot (f must give 0 for a masked -inf slot).
    template <typename F> __device__ __forceinline__ float sum(F f) const {
        float s = 0.0f;
        for_each([&](float a) { s += f(a); });
        return s;
    }
    // Replace every slot by f(value) and return the sum of the new values: float rows only (a
    // 16-bit slot would round).
    template <typename F> __device__ __forceinline__ float apply_sum(F f) {
        static_assert(sizeof(T) == 4, "apply_sum keeps fp32 values: float rows only");
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
            for (int k = 0; k < WORDS; ++k) {
                const float v = f(__uint_as_float(w[i][k]));
                s += v;
                w[i][k] = __float_as_uint(v);
            }
#pragma unroll
        for (int j = 0; j < EXTRA; ++j) {
            e[j] = f(e[j]);
            s += e[j];
        }
        return s;
    }
    // Renames the words (XOR with a zero the compiler cannot see through: opaque_zero()), so a
    // 16-bit row is converted again at its next use instead of being kept as floats beside the
    // packed copy, which would double its registers. One LOP3 per word.
    __device__ __forceinline__ void reconvert_later(unsigned zero) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
            for (int k = 0; k < WORDS; ++k) w[i][k] ^= zero;
    }

    // Write f(value) of every slot that belongs to the row; `vec_ok` from same_alignment().
    template <typename F>
    __device__ __forceinline__ void store(T* __restrict__ row, RowSplit s, int lane, bool vec_ok, F f) const {
        T* __restrict__ base = row + s.head + lane * VEC;
        const int left = s.vecs - lane;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            if (i * LANES < left) {
                Vec u;
#pragma unroll
                for (int k = 0; k < WORDS; ++k) {
                    if constexpr (sizeof(T) == 4) {
                        u.w[k] = __float_as_uint(f(__uint_as_float(w[i][k])));
                    } else {
                        const float2 p = Word<T>::unpack(w[i][k]);
                        const float a = f(p.x);
                        u.w[k] = Word<T>::pack(a, f(p.y));
                    }
                }
                T* p = base + i * LANES * VEC;
                if (vec_ok) {
                    *reinterpret_cast<Raw*>(p) = u.raw;
                } else if constexpr (sizeof(T) == 4) {
#pragma unroll
                    for (int k = 0; k < WORDS; ++k) reinterpret_cast<unsigned*>(p)[k] = u.w[k];
                } else {
#pragma unroll
                    for (int k = 0; k < WORDS; ++k) {
                        reinterpret_cast<unsigned short*>(p)[2 * k] = static_cast<unsigned short>(u.w[k]);
                        reinterpret_cast<unsigned short*>(p)[2 * k + 1] = static_cast<unsigned short>(u.w[k] >> 16);
                    }
                }
            }
        }
#pragma unroll
        for (int j = 0; j < EXTRA; ++j) {
            const int k = lane + j * LANES;
            if (k < s.head + s.tail) row[k < s.head ? k : k + s.vecs * VEC] = from_float<T>(f(e[j]));
        }
    }
};

}  // namespace smx

// ---------------------------------------------------------------------------------------------
// Rows larger than a block's registers (two_pass, split_row, smem_cache, cluster_split). Additive:
// nothing above depends on it. Rows are split with row_split() into aligned 16-byte body vectors
// (held as uint4 words, see Word<T>) plus at most 2 * (VEC - 1) head/tail scalars ("extras"),
// which one block of the row handles.
namespace smx {

// Position in the row of extra element k (0 <= k < head + tail): the head first, then the tail.
template <int VEC> __device__ __forceinline__ int extra_index(RowSplit s, int k) {
    return k < s.head ? k : k + s.vecs * VEC;
}

// 16 bytes global -> shared without a register round trip (sm_80+), and the wait that makes this
// thread's copies visible to itself (no block barrier needed when each thread reads its own slots).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// A running (max, sum) with one more value (an extra scalar of the row) added.
__device__ __forceinline__ MaxSum add_value(MaxSum acc, float v) {
    const float m = fmaxf(acc.m, v);
    const float base = exp_base(m);
    return MaxSum{m, acc.s * exp_from(acc.m, base) + exp_from(v, base)};
}

// f(value) for the 16 / sizeof(T) elements of one 16-byte vector.
template <typename T, typename F> __device__ __forceinline__ void for_each_in(const uint4& r, F f) {
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (sizeof(T) == 4) {
            f(__uint_as_float(w[k]));
        } else {
            const float2 p = Word<T>::unpack(w[k]);
            f(p.x);
            f(p.y);
        }
    }
}
// The 16-byte vector of f(value) for the elements of r.
template <typename T, typename F> __device__ __forceinline__ uint4 map_vec(const uint4& r, F f) {
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
    unsigned o[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (sizeof(T) == 4) {
            o[k] = __float_as_uint(f(__uint_as_float(w[k])));
        } else {
            const float2 p = Word<T>::unpack(w[k]);
            const float a = f(p.x);
            o[k] = Word<T>::pack(a, f(p.y));
        }
    }
    return make_uint4(o[0], o[1], o[2], o[3]);
}
// Stores a 16-byte vector at p: one st.global.cs (evict-first) when p is 16-byte aligned
// (`vec_ok`), else element by element (y at another 16-byte phase than x).
template <typename T> __device__ __forceinline__ void store_vec(T* p, const uint4& v, bool vec_ok) {
    if (vec_ok) {
        __stcs(reinterpret_cast<uint4*>(p), v);
    } else {
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if constexpr (sizeof(T) == 4) {
                reinterpret_cast<unsigned*>(p)[k] = w[k];
            } else {
                reinterpret_cast<unsigned short*>(p)[2 * k] = static_cast<unsigned short>(w[k]);
                reinterpret_cast<unsigned short*>(p)[2 * k + 1] = static_cast<unsigned short>(w[k] >> 16);
            }
        }
    }
}
// `r` unchanged at run time, renamed for the compilers (see opaque_zero): a 16-bit vector used by
// two loops is converted once per loop instead of being kept as floats between them.
__device__ __forceinline__ uint4 renamed(const uint4& r) {
    const unsigned z = opaque_zero();
    return make_uint4(r.x ^ z, r.y ^ z, r.z ^ z, r.w ^ z);
}
__device__ __forceinline__ uint4 neg_inf_vec(unsigned word) { return make_uint4(word, word, word, word); }

// This thread's (max, sum) over 16-byte body vectors [begin, end) of `body`, taking vectors
// begin + threadIdx.x + k * THREADS with UNROLL loads issued before any is used; one rescale per
// UNROLL vectors. -inf (masked) lanes add 0; a max still at -inf uses base 0 (exp_base), so no
// -inf - -inf NaN appears; NaN and +inf reach the sum as NaN, which makes the row NaN as in torch.
template <typename T, int THREADS, int UNROLL>
__device__ __forceinline__ MaxSum stream_stats(const T* __restrict__ body, int begin, int end) {
    MaxSum acc{SOFTMAX_NEG_INF, 0.0f};
    for (int i0 = begin + static_cast<int>(threadIdx.x); i0 < end; i0 += THREADS * UNROLL) {
        uint4 raw[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + u * THREADS;
            raw[u] = i < end ? *reinterpret_cast<const uint4*>(body + static_cast<long long>(i) * (16 / sizeof(T)))
                             : neg_inf_vec(Word<T>::neg_inf());
        }
        float m = acc.m;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) for_each_in<T>(raw[u], [&](float v) { m = fmaxf(m, v); });
        const float base = exp_base(m);
        float s = acc.s * exp_from(acc.m, base);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            for_each_in<T>(sizeof(T) == 4 ? raw[u] : renamed(raw[u]), [&](float v) { s += exp_from(v, base); });
        acc = MaxSum{m, s};
    }
    return acc;
}

// Writes exp(x - row.m) / row.s for body vectors [begin, end), re-reading x through the read-only
// path (the first pass has just pulled it into L2); evict-first stores keep the output from pushing
// the input out of L2 before its re-read. `vec_ok`: y shares x's 16-byte phase (same_alignment).
template <typename T, int THREADS, int UNROLL>
__device__ __forceinline__ void stream_normalize(const T* __restrict__ xbody, T* __restrict__ ybody, int begin,
                                                 int end, MaxSum row, bool vec_ok) {
    constexpr int VEC = 16 / sizeof(T);
    const float inv = 1.0f / row.s;
    for (int i0 = begin + static_cast<int>(threadIdx.x); i0 < end; i0 += THREADS * UNROLL) {
        uint4 raw[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + u * THREADS;
            if (i < end) raw[u] = __ldg(reinterpret_cast<const uint4*>(xbody + static_cast<long long>(i) * VEC));
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + u * THREADS;
            if (i < end)
                store_vec<T>(ybody + static_cast<long long>(i) * VEC,
                             map_vec<T>(raw[u], [&](float v) { return exp_from(v, row.m) * inv; }), vec_ok);
        }
    }
}

}  // namespace smx
