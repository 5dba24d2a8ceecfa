// A 3-D grid of 3-D blocks: the global index from gridDim/blockIdx.z math, under __launch_bounds__ (nvcc
// writes .maxntid and .minnctapersm), plus an assert() on the sizes.
#include <cassert>
extern "C" __global__ void __launch_bounds__(64, 4)
k_grid3d(int* out, int nx, int ny, int nz) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  assert(nx > 0 && ny > 0 && nz > 0);
  if (x >= nx || y >= ny || z >= nz) return;
  int linear_block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  int linear_thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  out[(z * ny + y) * nx + x] = linear_block * 1000 + linear_thread;
}
