#pragma once

// cp.async (sm_80+): asynchronous global -> shared copies that bypass the
// registers, with per-thread commit groups.

#include <cuda_runtime.h>

#include <cstdint>

namespace fuseserve::cuda {

// 16-byte cp.async, global -> shared, bypassing L1. With valid false it
// reads nothing and writes zeros (src-size 0).
__device__ __forceinline__ void CpAsync16(float* shared, const float* global, bool valid = true) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}

// CpAsync16 (always valid) that asks L2 to fetch the whole 128-byte line
// from DRAM (the .L2::128B prefetch size): GroupNorm's resident schedule,
// whose warps copy whole lines.
__device__ __forceinline__ void CpAsync16Line128(float* shared, const float* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(address), "l"(global)
               : "memory");
}

// CpAsync16 of data read for the last time: the L2 lines it reads are the
// first evicted (an L2 evict-first policy, as ld.global.cs gives a load).
// Caution (ptxas 13.0, sm_90a): where the shared address is a CTA-uniform
// base plus a per-thread offset (e.g. `staged + threadIdx.x + i * n`, no
// per-element predicate), ptxas can emit LDGSTS [R+UR], desc[UR] with the
// descriptor's register pair overlapping the base, which traps as an
// illegal instruction. GroupNorm's staging (predicated, one register per
// address) is not affected; bench/kernel_notes.md v31 has the SASS and a
// workaround (the address through __shfl_sync).
__device__ __forceinline__ void CpAsync16LastUse(float* shared, const float* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(global), "l"(policy)
               : "memory");
}

// 4-byte cp.async (for rows that are not 16-byte aligned); zeros when !valid.
__device__ __forceinline__ void CpAsync4(float* shared, const float* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address), "l"(global),
               "r"(valid ? 4 : 0)
               : "memory");
}

// CpAsync4 to a shared-memory address (the shared window's 32-bit offset),
// for copy loops that step the destination without generic pointers.
__device__ __forceinline__ void CpAsync4ToShared(uint32_t shared_address, const float* global,
                                                 bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address),
               "l"(global), "r"(valid ? 4 : 0)
               : "memory");
}

// CpAsync16 to a shared-memory address (the shared window's 32-bit offset).
__device__ __forceinline__ void CpAsync16ToShared(uint32_t shared_address, const float* global,
                                                  bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address),
               "l"(global), "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace fuseserve::cuda
