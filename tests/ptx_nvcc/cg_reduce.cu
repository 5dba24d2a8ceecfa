// Cooperative groups: a thread_block_tile<16> sum with cg::reduce, a tile<8> max by shfl_down, and the block's
// total through shared memory with block.sync().
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k_cg_reduce(const int* x, int* tile_sum, int* tile_max, int* block_sum) {
  __shared__ int partial[16];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<16> t16 = cg::tiled_partition<16>(block);
  cg::thread_block_tile<8> t8 = cg::tiled_partition<8>(block);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = x[i];
  int s = cg::reduce(t16, v, cg::plus<int>());
  int m = v;
  for (int o = t8.size() / 2; o > 0; o /= 2) m = max(m, t8.shfl_down(m, o));
  m = t8.shfl(m, 0);
  tile_sum[i] = s;
  tile_max[i] = m;
  if (t16.thread_rank() == 0) partial[t16.meta_group_rank()] = s;
  block.sync();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int k = 0; k < (int)t16.meta_group_size(); ++k) total += partial[k];
    block_sum[blockIdx.x] = total;
  }
}
