// Stands in for cutlass/kernel_launch.h (tests/ptx_library/build.py): cutlass::kernel_launch prints the launch
// description (record_launch.h) instead of launching; taking the kernel's address instantiates its device code.
#pragma once
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "record_launch.h"

namespace record { extern std::vector<Array> launch_arrays; }

namespace cutlass {
template <typename Kernel, typename Params>
Status kernel_launch(dim3 const grid, dim3 const block, size_t const smem, cudaStream_t, const Params& params, bool) {
  static void* volatile entry = nullptr;
  entry = reinterpret_cast<void*>(&device_kernel<Kernel>);
  record::print_launch(grid, block, dim3(1, 1, 1), smem, &params, sizeof(Params), record::launch_arrays);
  return Status::kSuccess;
}
}  // namespace cutlass
