// Hopper's vector atomics: atomicAdd on float2 and float4 (sm_90), and __hfma2_relu / __hmax2_nan on half2.
#include <cuda_fp16.h>
extern "C" __global__ void k_vector_atomics(const float4* x, float2* acc2, float4* acc4, const __half2* h,
                                            __half2* hout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 v = x[i];
  atomicAdd(acc2 + (i & 1), make_float2(v.x, v.y));
  atomicAdd(acc4, v);
  __half2 a = h[i], b = h[n - 1 - i];
  hout[i] = __hadd2(__hfma2_relu(a, b, a), __hmax2_nan(a, b));
}
