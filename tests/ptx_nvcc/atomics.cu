// atomicAdd on f32, __half2 and __nv_bfloat16, and a float atomic max built from an atomicCAS loop.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ float atomic_max_float(float* address, float value) {
  int* as_int = (int*)address;
  int old = *as_int, assumed;
  do {
    assumed = old;
    if (__int_as_float(assumed) >= value) break;
    old = atomicCAS(as_int, assumed, __float_as_int(value));
  } while (assumed != old);
  return __int_as_float(old);
}
extern "C" __global__ void k_atomics(const float* x, int n, float* f_sum, __half2* h_sum, __nv_bfloat16* b_sum,
                                     float* f_max, int* hist) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  atomicAdd(f_sum, v);
  atomicAdd(h_sum, __floats2half2_rn(v, 1.0f));
  atomicAdd(b_sum + (i & 3), __float2bfloat16(v));
  atomic_max_float(f_max, v);
  atomicAdd(hist + (__float_as_int(v) & 7), 1);
}
