#pragma once

// Hopper (sm_90a) device helpers for warp-specialised tensor-core kernels:
// mbarriers, bulk copies that complete on them, the async-proxy fence,
// register reallocation between warpgroups, shared-memory matrix
// descriptors and the TF32 wgmma m64n256k8 instruction. Every function
// compiles to its instruction only for sm_90a (FUSESERVE_HOPPER_DEVICE);
// other targets get an empty body, so kernels that use them trap there and
// launchers must not run them (see conv_wgmma::AvailableOnCurrentDevice).

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSESERVE_HOPPER_DEVICE 1
#else
#define FUSESERVE_HOPPER_DEVICE 0
#endif

namespace fuseserve::cuda::hopper {

__device__ __forceinline__ uint32_t SharedAddress(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// --- mbarrier -------------------------------------------------------------

__device__ __forceinline__ void MbarrierInit(uint64_t* barrier, uint32_t arrivals) {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(barrier)),
               "r"(arrivals)
               : "memory");
#endif
}

// Makes the initialisations visible to the async proxy (bulk copies); a
// block barrier must follow before any thread uses the barriers.
__device__ __forceinline__ void FenceMbarrierInit() {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void MbarrierArrive(uint64_t* barrier) {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(
                   SharedAddress(barrier))
               : "memory");
#endif
}

// One arrival that also expects `bytes` more bytes of bulk copies to
// complete on the barrier before its phase can complete.
__device__ __forceinline__ void MbarrierArriveExpectBytes(uint64_t* barrier, uint32_t bytes) {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   SharedAddress(barrier)),
               "r"(bytes)
               : "memory");
#endif
}

// Waits until the phase with parity `parity` has completed. A fresh barrier
// is in phase 0, so waiting for parity 1 returns at once (the "preceding
// phase"): producers wait for parity (round & 1) ^ 1 on slots that start
// empty.
__device__ __forceinline__ void MbarrierWait(uint64_t* barrier, uint32_t parity) {
#if FUSESERVE_HOPPER_DEVICE
  const uint32_t address = SharedAddress(barrier);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred complete;\n"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 complete, [%1], %2;\n"
        "selp.u32 %0, 1, 0, complete;\n"
        "}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (done == 0);
#endif
}

// --- copies ---------------------------------------------------------------

// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned)
// from global to this block's shared memory, completing as bytes on
// `barrier` (whose phase must expect them: MbarrierArriveExpectBytes).
__device__ __forceinline__ void BulkCopyToShared(void* shared, const void* global, uint32_t bytes,
                                                 uint64_t* barrier) {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(SharedAddress(shared)),
      "l"(global), "r"(bytes), "r"(SharedAddress(barrier))
      : "memory");
#endif
}

// One arrival on `barrier` when all of this thread's earlier cp.async copies
// have completed (their writes then visible to threads that observe the
// phase complete); counts as the thread's arrival (.noinc).
__device__ __forceinline__ void CpAsyncArriveOnCompletion(uint64_t* barrier) {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                   SharedAddress(barrier))
               : "memory");
#endif
}

// Orders this thread's earlier shared-memory writes (ordinary stores,
// cp.async) before later async-proxy accesses (wgmma operand reads) that a
// barrier hands them to.
__device__ __forceinline__ void FenceProxyAsyncShared() {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// --- warpgroup registers ----------------------------------------------------

template <int kRegisters>
__device__ __forceinline__ void ReleaseRegisters() {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

template <int kRegisters>
__device__ __forceinline__ void AcquireRegisters() {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// bar.sync on a named barrier for `threads` threads (ids 1..15; 0 is
// __syncthreads's).
__device__ __forceinline__ void NamedBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// --- wgmma ------------------------------------------------------------------

// Shared-memory matrix descriptor without swizzling (PTX ISA, "Matrix
// Descriptor Format"): the operand is made of 8-row x 16-byte core matrices,
// each 128 contiguous bytes; `leading_bytes` is the distance between core
// matrices adjacent along K, `stride_bytes` between core matrices adjacent
// along M (or N). The start address needs only 16-byte alignment.
__device__ __forceinline__ uint64_t MatrixDescriptor(uint32_t shared_address,
                                                     uint32_t leading_bytes,
                                                     uint32_t stride_bytes) {
  return static_cast<uint64_t>((shared_address & 0x3FFFF) >> 4) |
         static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32;
}

// Before the first wgmma that reads accumulators written by ordinary
// instructions (and after any such write).
__device__ __forceinline__ void WgmmaFence() {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void WgmmaCommit() {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most kPending committed wgmma groups of this warpgroup are
// in flight.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// d (64 x 256, float) = a (64 x 8) * b (8 x 256) + (accumulate ? d : 0), both
// operands TF32 in shared memory, K-major. Thread t of the warpgroup holds
// d[4 j + 2 h + e] = D[16 (t / 32) + (t % 32) / 4 + 8 h][8 j + 2 (t % 4) + e].
__device__ __forceinline__ void WgmmaTf32M64N256K8(float (&d)[128], uint64_t a, uint64_t b,
                                                   bool accumulate) {
#if FUSESERVE_HOPPER_DEVICE
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
      "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, "
      "%125, %126, %127}, "
      "%128, %129, accumulate, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),
        "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),
        "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),
        "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]),
        "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),
        "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(accumulate ? 1 : 0)
      : "memory");
#endif
}

}  // namespace fuseserve::cuda::hopper
