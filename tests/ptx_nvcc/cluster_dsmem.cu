// Thread block clusters from CUDA C++: each block of a cluster of 2 builds a histogram of its slice in its own
// shared memory, then every block adds its bins into the cluster's first block through distributed shared
// memory (map_shared_rank, atomicAdd on the remote bins), with cluster.sync() around it.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void __cluster_dims__(2, 1, 1) k_cluster_dsmem(const int* x, int* out) {
  __shared__ int bins[32];
  cg::cluster_group cluster = cg::this_cluster();
  unsigned t = threadIdx.x;
  if (t < 32) bins[t] = 0;
  cluster.sync();
  int v = x[blockIdx.x * blockDim.x + t];
  int* leader = cluster.map_shared_rank(bins, 0);
  atomicAdd(&leader[v & 31], 1);
  cluster.sync();
  if (cluster.block_rank() == 0 && t < 32) out[blockIdx.x / 2 * 32 + t] = bins[t];
}
