// CUB's block-wide collectives as a library user writes them: BlockLoad (striped), BlockReduce (sum and max),
// BlockScan (exclusive sum) over 128 threads x 4 items.
#include <cub/cub.cuh>
extern "C" __global__ void k_cub_block(const int* in, int* scan, int* totals) {
  using Load = cub::BlockLoad<int, 128, 4, cub::BLOCK_LOAD_TRANSPOSE>;
  using Reduce = cub::BlockReduce<int, 128>;
  using Scan = cub::BlockScan<int, 128>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } storage;
  int items[4];
  Load(storage.load).Load(in + blockIdx.x * 512, items);
  __syncthreads();
  int sum = Reduce(storage.reduce).Sum(items);
  __syncthreads();
  int top = Reduce(storage.reduce).Reduce(items, cuda::maximum<>{});
  __syncthreads();
  Scan(storage.scan).ExclusiveSum(items, items);
  for (int k = 0; k < 4; ++k) scan[blockIdx.x * 512 + threadIdx.x * 4 + k] = items[k];
  if (threadIdx.x == 0) {
    totals[2 * blockIdx.x] = sum;
    totals[2 * blockIdx.x + 1] = top;
  }
}
