// Conversions with explicit rounding: float to half and bfloat16 toward zero/down/up, float to integers in
// every mode, 64-bit integers to float and double, double to float toward zero, and half subnormals back.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k_convert(const float* x, const double* d, const long long* l, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i];
  unsigned* o = out + 12 * i;
  o[0] = __half_as_ushort(__float2half_rz(a)) | (__half_as_ushort(__float2half_rd(a)) << 16);
  o[1] = __half_as_ushort(__float2half_ru(a)) | (__bfloat16_as_ushort(__float2bfloat16_rz(a)) << 16);
  o[2] = (unsigned)__float2int_rz(a * 1000.0f);
  o[3] = (unsigned)__float2int_rd(a * 1000.0f) ^ (unsigned)__float2int_ru(a * 1000.0f);
  o[4] = __float2uint_rn(fabsf(a) * 1e9f);
  o[5] = __float_as_uint(__ll2float_rn(l[i])) ^ __float_as_uint(__ll2float_rz(l[i]));
  double e = __ll2double_rn(l[i]) + __ull2double_rz((unsigned long long)l[i]);
  o[6] = (unsigned)(__double_as_longlong(e) >> 32);
  o[7] = __float_as_uint(__double2float_rz(d[i])) ^ __float_as_uint(__double2float_rd(d[i]));
  o[8] = __float_as_uint(__half2float(__ushort_as_half((unsigned short)(i + 1))));  // subnormal halves
  o[9] = (unsigned)__float2ll_rn(a * 3e9f);
  o[10] = __float_as_uint(__int2float_rz(0x7fffffc1 - i)) ^ __float_as_uint(__uint2float_ru(0xfffffe01u + i));
  o[11] = __float_as_uint(__frcp_rz(a)) ^ __float_as_uint(__fsqrt_ru(fabsf(a)));
}
