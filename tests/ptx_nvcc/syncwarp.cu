// __syncwarp with divergent lanes: even and odd lanes exchange through shared memory in separate branches,
// each branch synchronising its own half of the warp by mask, then the whole warp.
extern "C" __global__ void k_syncwarp(const int* x, int* out) {
  __shared__ int buf[64];
  int t = threadIdx.x, lane = t & 31, w = t >> 5;
  int v = x[blockIdx.x * blockDim.x + t];
  if (lane & 1) {
    buf[w * 32 + lane] = v * 3;
    __syncwarp(0xaaaaaaaau);
    v += buf[w * 32 + ((lane + 2) & 31)];
  } else {
    buf[w * 32 + lane] = v * 5;
    __syncwarp(0x55555555u);
    v -= buf[w * 32 + ((lane + 30) & 31)];
  }
  __syncwarp();
  buf[w * 32 + lane] = v;
  __syncwarp();
  out[blockIdx.x * blockDim.x + t] = v + buf[w * 32 + (lane ^ 1)];
}
