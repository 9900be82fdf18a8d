#pragma once

// Debian builds Abseil without NDEBUG, so every absl::Mutex::Lock runs its
// debug-only deadlock detection: a lock-order graph behind one process-wide
// lock, updated on every acquisition and every mutex destroyed. gRPC's own
// locks are absl::Mutex, so that graph becomes a point of contention between
// all the threads that handle calls. The mains of fuseserve, fuseserve-cli
// and bench/grpc_api/grpc_api_cpu turn it off, as a release build of Abseil
// does; the unit tests, which do not run those mains, keep it.

namespace fuseserve {

void DisableMutexDeadlockDetection();

}  // namespace fuseserve
