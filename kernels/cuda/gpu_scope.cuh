#pragma once

// Synchronisation between the blocks of running grids at GPU scope:
// flags and counters read with acquire and written with release semantics
// (PTX memory model), and programmatic dependent launch, by which a grid
// lets the next kernel on its stream start while it still runs. Internal to
// the CUDA backend.

#include <cuda_runtime.h>

namespace fuseserve::cuda::gpu_scope {

__device__ __forceinline__ int LoadAcquire(const int* flag) {
  int value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

__device__ __forceinline__ unsigned LoadAcquire(const unsigned* counter) {
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// A counter's value with no ordering of its own. Followed by
// FenceAcquireRelease, a read of the value some releases produced makes
// their writes visible to the reads after the fence (an acquire pattern),
// while the load itself can be issued early and used late.
__device__ __forceinline__ unsigned LoadRelaxed(const unsigned* counter) {
  unsigned value;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
  return value;
}

// A 64-bit value with no ordering of its own, read from (and written to)
// where every SM sees it: for values that are their own flag (a reader
// that sees the stored value needs nothing else the writer wrote), which
// need no fence on either side.
__device__ __forceinline__ double LoadRelaxed(const double* address) {
  double value;
  asm volatile("ld.relaxed.gpu.global.f64 %0, [%1];\n" : "=d"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void StoreRelaxed(double* address, double value) {
  asm volatile("st.relaxed.gpu.global.f64 [%0], %1;\n" ::"l"(address), "d"(value) : "memory");
}

__device__ __forceinline__ void FenceAcquireRelease() {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}

__device__ __forceinline__ void StoreRelease(int* flag, int value) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}

// counter += 1 with release semantics: whatever the calling thread's block
// wrote before a barrier that precedes this call is visible to a thread
// that then reads the new value with LoadAcquire.
__device__ __forceinline__ void IncrementRelease(unsigned* counter) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// Programmatic dependent launch (sm_90+; nothing on older targets, where a
// dependent kernel starts when this one has finished, as without it). The
// kernel launched after this one with cudaLaunchAttributeProgrammaticStream-
// Serialization may start once every block of this grid has called
// LaunchDependents (or exited).
__device__ __forceinline__ void LaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// In a kernel so launched: waits until the grids it depends on have
// finished and their memory operations are visible.
__device__ __forceinline__ void WaitForPrerequisiteGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace fuseserve::cuda::gpu_scope
