// half2 and bf16x2 arithmetic and conversions: packed fma/mul/add, cvt.rn.bf16x2.f32, cvt.rn.f16x2.f32, and back.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k_packed(const float2* x, const float2* y, __half2* h_out, __nv_bfloat162* b_out,
                                    float2* f_out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float2 a = x[i], b = y[i];
  __half2 ha = __float22half2_rn(a), hb = __float22half2_rn(b);
  __nv_bfloat162 ba = __float22bfloat162_rn(a), bb = __float22bfloat162_rn(b);
  h_out[i] = __hfma2(ha, hb, __hmul2(ha, ha));
  __nv_bfloat162 bc = __hfma2(ba, bb, __hadd2(ba, bb));
  b_out[i] = __hmax2(bc, __hneg2(bb));
  float2 back = __bfloat1622float2(bc);
  float2 hback = __half22float2(__hsub2(ha, hb));
  f_out[i] = make_float2(back.x + hback.x, back.y * hback.y);
}
