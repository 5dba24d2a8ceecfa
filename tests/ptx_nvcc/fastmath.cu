// Fast-math intrinsics: __expf, __logf, rsqrtf, __fdividef, __sinf, __cosf, __frcp_rn, __fsqrt_rn.
extern "C" __global__ void k_fastmath(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  float* o = out + 8 * i;
  o[0] = __expf(a);
  o[1] = __logf(b);
  o[2] = rsqrtf(b);
  o[3] = __fdividef(a, b);
  o[4] = __sinf(a);
  o[5] = __cosf(a);
  o[6] = __frcp_rn(b);
  o[7] = __fsqrt_rn(b);
}
