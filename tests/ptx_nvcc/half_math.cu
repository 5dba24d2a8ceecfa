// Half-precision math from cuda_fp16.h / cuda_bf16.h: h2exp, h2log, h2sqrt, h2rcp, hrsqrt, __hmul2_sat,
// __habs2, __hisnan, and bf16 h2exp2 and __hmax.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k_half_math(const __half2* h, const __nv_bfloat162* b, __half2* hout,
                                       __nv_bfloat162* bout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half2 x = h[i];
  __half2 a = __habs2(x);
  hout[4 * i] = h2exp(x);
  hout[4 * i + 1] = h2log(a);
  hout[4 * i + 2] = __hmul2_sat(h2sqrt(a), h2rcp(a));
  hout[4 * i + 3] = __halves2half2(hrsqrt(__low2half(a)), __hisnan(__high2half(x)) ? __float2half(1.0f) : __float2half(0.0f));
  __nv_bfloat162 y = b[i];
  bout[2 * i] = h2exp2(y);
  bout[2 * i + 1] = __halves2bfloat162(__hmax(__low2bfloat16(y), __high2bfloat16(y)), __low2bfloat16(y));
}
