// Dynamic shared memory (extern __shared__, sized at launch): a block tree reduction with __syncthreads between
// levels, then each thread writes x - mean of its block.
extern "C" __global__ void k_dyn_smem(const float* x, float* out, float* sums) {
  extern __shared__ float s[];
  unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  float v = x[i];
  s[t] = v;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
    if (t < h) s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = s[0];
  out[i] = v - s[0] / blockDim.x;
}
