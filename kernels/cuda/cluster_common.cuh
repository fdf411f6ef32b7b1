// Thread-block cluster helpers (sm_90+) as inline PTX, so NVRTC needs no cooperative_groups header.
// Used by the cluster kernels beside softmax_common.cuh; the loader inlines it like that header.
#pragma once

namespace cluster {

// This block's rank in its cluster, and the cluster's index in the grid (x only: 1-D grids).
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
__device__ __forceinline__ unsigned count_x() {
    unsigned r;
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return r;
}
// Cluster barrier in two halves. Every thread of every block of the cluster must arrive; the
// release / acquire pair makes each block's shared-memory writes before `arrive` visible to every
// block after its `wait`, and orders a block's remote reads before its next `arrive`.
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

// cp.async groups: close the copies issued so far into a group; wait until at most PENDING of this
// thread's groups are still in flight (their copies then visible to this thread).
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int PENDING> __device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

}  // namespace cluster
