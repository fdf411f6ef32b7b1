// The speed-of-light reference: a plain copy of x's bytes to y, one read and one write of each byte,
// what no softmax can beat. torch's copy_ (a driver memcpy) was measured about 1.15x slower than this
// kind of copy at times on the H100, so the sweep and the bench time both and keep the faster.
//
// Each thread moves UNROLL 16-byte vectors, strided by the block so that every load instruction of
// a warp is coalesced; all loads are issued before the first store. The host launches it only when
// both pointers are 16-byte aligned; the < 16 tail bytes go one per thread of block 0.
template <int UNROLL>
__global__ void __launch_bounds__(256) plain_copy16(const uint4* __restrict__ x, uint4* __restrict__ y,
                                                    long long vectors, const unsigned char* __restrict__ x_tail,
                                                    unsigned char* __restrict__ y_tail, int tail_bytes) {
    const long long first = static_cast<long long>(blockIdx.x) * blockDim.x * UNROLL + threadIdx.x;
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long long i = first + static_cast<long long>(u) * blockDim.x;
        if (i < vectors) v[u] = x[i];
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const long long i = first + static_cast<long long>(u) * blockDim.x;
        if (i < vectors) y[i] = v[u];
    }
    if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail_bytes) y_tail[threadIdx.x] = x_tail[threadIdx.x];
}
