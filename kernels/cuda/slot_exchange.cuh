// Blocks of one row meeting in global memory within one launch: epoch-tagged (max, sum) slots.
// The protocol of grid_split.cu (whose source stays as recorded), as a header for new kernels.
//
// Slots: two 64-bit words per (row, split), (m | epoch << 32) and (s | epoch << 32); a 64-bit
// access is single-copy atomic, so a slot whose two epochs match holds one block's pair. A block's
// epoch is its own slot's previous epoch + 1: a row's slots are always written together by launches
// of one S (the host keeps one slot array per S), so they all move from e to e + 1 in each launch,
// with no reset, no atomics and nothing from the host (CUDA-graph replays work). Zero-filled once.
// Needs only sm_70 (relaxed .gpu-scope loads and stores). No standard headers (NVRTC).
#pragma once

namespace slotsync {

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
// epoch `epoch`, wait for every slot of the row to carry it, and return the merge of the S pairs
// (merged in slot order, so every block of the row gets one bitwise (max, sum)).
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

// The work this block does: its block index where every block of the grid is resident at once
// (`tickets` null), else the next ticket in the order blocks start. Then a block only ever waits
// for row-mates whose works are taken by started blocks (tickets are taken as a prefix), and the
// untaken works go to the blocks that start as others finish, so every row completes in one launch
// provided S <= the resident blocks (the host checks). atomicInc wraps at the grid size, so the
// counter is back to 0 after every launch. Block-wide; uses one int of shared memory.
__device__ __forceinline__ int work_of_block(unsigned* tickets, int* shared_work) {
    if (tickets == nullptr) return static_cast<int>(blockIdx.x);
    if (threadIdx.x == 0) *shared_work = static_cast<int>(atomicInc(tickets, gridDim.x - 1u));
    __syncthreads();
    return *shared_work;
}

}  // namespace slotsync
