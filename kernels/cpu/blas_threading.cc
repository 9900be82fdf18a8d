#include "kernels/cpu/blas_threading.h"

#include <cblas.h>

#include <mutex>

namespace fuseserve {
namespace cpu {

void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace cpu
}  // namespace fuseserve
