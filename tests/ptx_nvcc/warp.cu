// nvcc -ptx -arch=sm_90a -O3 warp.cu -o warp.ptx   (CUDA 13.0)
// Warp intrinsics in a divergent branch (register member masks), match, __syncthreads_count.
extern "C" __global__ void k_warp(const int* a, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = a[i];
  int r;
  if (v & 1) {
    unsigned m = __activemask();
    r = __popc(m) + __shfl_sync(m, v, __ffs(m) - 1) * 100;
  } else {
    r = __match_any_sync(__activemask(), v & 6);
  }
  out[i] = r + __syncthreads_count(v > 50) * 100000;
}
