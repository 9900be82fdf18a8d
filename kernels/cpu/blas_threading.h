#pragma once

// How the CPU kernels share the machine with OpenBLAS.
//
// Debian's OpenBLAS is the pthread build: left alone, every sgemm call fans
// out to its own thread pool of one thread per core. The CPU kernels already
// split their work over fuseserve's ThreadPool (and several model instances
// may run at once), so letting OpenBLAS add its own threads inside each of
// those chunks would oversubscribe the cores quadratically. The choice made
// here: OpenBLAS runs single-threaded, each sgemm on the thread that calls
// it, and the ThreadPool is the one and only source of parallelism.

namespace fuseserve {
namespace cpu {

// Pins OpenBLAS to one thread (once per process; cheap afterwards). Every
// kernel calls this before its first sgemm.
void UseSingleThreadedBlas();

}  // namespace cpu
}  // namespace fuseserve
