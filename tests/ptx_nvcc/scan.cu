// A block-wide inclusive prefix sum as the CUDA samples write it: __shfl_up_sync within each warp (lanes below
// the offset keep their value), the warps' totals through shared memory, scanned by the first warp.
extern "C" __global__ void k_scan(const int* x, int* out) {
  __shared__ int warp_sums[32];
  int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  int v = x[blockIdx.x * blockDim.x + t];
  for (int o = 1; o < 32; o <<= 1) {
    int up = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += up;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int s = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      int up = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += up;
    }
    warp_sums[lane] = s;
  }
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = v + (warp > 0 ? warp_sums[warp - 1] : 0);
}
