#pragma once

// glibc malloc settings (mallopt) that the mains of fuseserve and
// fuseserve-cli make, each only where the environment does not make it
// already: an operator's MALLOC_*_ variable or GLIBC_TUNABLES entry wins, so
// that every setting can still be tuned or undone without a rebuild.

namespace fuseserve {

enum class MallocOption {
  // M_MMAP_THRESHOLD: blocks from this size up get mappings of their own.
  // Environment: MALLOC_MMAP_THRESHOLD_, glibc.malloc.mmap_threshold.
  kMmapThreshold,
  // M_TRIM_THRESHOLD: how much free memory the top of a heap may hold before
  // a free() hands it back to the system. Environment:
  // MALLOC_TRIM_THRESHOLD_, glibc.malloc.trim_threshold.
  kTrimThreshold,
};

// A trim threshold above glibc's largest per-thread heap (64 MiB on 64-bit):
// no free() shrinks a heap. The server sets it only where its MallocTrimmer
// returns free pages every few seconds (common/malloc_trimmer.h).
//
// Why: glibc's default (128 KiB, and fixed there once any threshold is set
// with mallopt) made each 32 KiB GEMM request cost the server 1.6-1.9 and
// the bench client 0.1 minor page faults: a heap top given back by one
// free() (madvise) and faulted in again, zeroed, by the next read into it.
// On one H200 host at GEMM concurrency 64, keeping the tops cut the server's
// CPU from 134-146 to 125-131 us per inference and raised the batched rate
// from 53.2-58.0k to 58.5-60.5k infer/s, batching off unchanged
// (bench/results/2026-11-27-h200-malloc-trim-threshold.md).
inline constexpr int kNoTrimThresholdBytes = 256 << 20;

// Sets `option` to `bytes` and returns true; returns false, changing
// nothing, where the environment sets that option or mallopt refuses the
// value.
bool SetMallocOptionUnlessConfigured(MallocOption option, int bytes);

}  // namespace fuseserve
