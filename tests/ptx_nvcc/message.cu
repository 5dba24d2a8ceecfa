// Message passing between two warps of a block through shared memory: warp 0
// writes a payload, __syncwarp, then its lane 0 fences with __threadfence_block and raises a volatile flag;
// warp 1 spins on the flag, fences, and reads the payload.
extern "C" __global__ void k_message(const int* a, int* out) {
  __shared__ int payload[32];
  __shared__ volatile int flag;
  int t = threadIdx.x, lane = t % 32;
  if (t == 0) flag = 0;
  __syncthreads();
  if (t < 32) {
    payload[lane] = a[blockIdx.x * 32 + lane] * 2;
    __syncwarp();
    if (lane == 0) {
      __threadfence_block();
      flag = 1;
    }
  } else if (t < 64) {
    while (flag == 0) { }
    __threadfence_block();
    out[blockIdx.x * 32 + lane] = payload[31 - lane] + 1;
  }
}
