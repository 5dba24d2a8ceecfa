// TMA from CUDA C++ as the programming guide writes it: a __grid_constant__ CUtensorMap, a cuda::barrier in
// shared memory, cp_async_bulk_tensor_2d_global_to_shared and barrier_arrive_tx, then out = 2 * tile.
#include <cuda.h>
#include <cuda/barrier>
using barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;
extern "C" __global__ void k_tma_cxx(const __grid_constant__ CUtensorMap map, float* out, int width) {
  __shared__ alignas(128) float tile[16][32];
#pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ barrier bar;
  int x0 = blockIdx.x * 32, y0 = blockIdx.y * 16;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    cde::fence_proxy_async_shared_cta();
  }
  __syncthreads();
  barrier::arrival_token token;
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_global_to_shared(&tile, &map, x0, y0, bar);
    token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(tile));
  } else {
    token = bar.arrive();
  }
  bar.wait(std::move(token));
  for (int e = threadIdx.x; e < 16 * 32; e += blockDim.x)
    out[(y0 + e / 32) * width + x0 + e % 32] = 2.0f * tile[e / 32][e % 32];
}
