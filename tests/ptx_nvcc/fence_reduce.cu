// The CUDA samples' threadFenceReduction: each block writes its partial sum, __threadfence(), then takes a
// ticket with atomicInc; the block that takes the last ticket sums the partials (read through volatile) and
// resets the counter. One fence more than the sample: the PTX memory model orders the partials before the last
// block's reads only if that block acquires too (the ticket's atomic read, then a fence); the sample's reader
// has no fence, which the executor reports (tests/test_ptx_nvcc_races.py deletes this one to show it).
__device__ unsigned int retirement_count = 0;
extern "C" __global__ void k_fence_reduce(const float* x, float* partial, float* total, int n) {
  __shared__ float s[128];
  __shared__ bool last;
  unsigned t = threadIdx.x;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) v += x[i];
  s[t] = v;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
    if (t < h) s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0) {
    partial[blockIdx.x] = s[0];
    __threadfence();
    unsigned ticket = atomicInc(&retirement_count, gridDim.x);
    __threadfence();  // acquire: the partials the other blocks released before their tickets
    last = (ticket == gridDim.x - 1);
  }
  __syncthreads();
  if (last && t == 0) {
    float sum = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += ((volatile float*)partial)[b];
    *total = sum;
    retirement_count = 0;
  }
}
