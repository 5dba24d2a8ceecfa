// CUDA's full-precision math library functions (inlined polynomial code, not the fast intrinsics) and the
// rounding/classification helpers: expf, logf, sinf, tanhf, erff, powf, sqrt and division in float and double,
// fminf/fmaxf with NaN, roundf, truncf, __float2int_rn, copysignf, isnan.
extern "C" __global__ void k_mathlib(const float* x, const float* y, float* out, double* dout, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  float* o = out + 12 * i;
  o[0] = expf(a);
  o[1] = logf(b);
  o[2] = sinf(a);
  o[3] = tanhf(a);
  o[4] = erff(a);
  o[5] = powf(b, a);
  o[6] = a / b;
  o[7] = sqrtf(b);
  o[8] = fminf(a, b) + fmaxf(a, __int_as_float(0x7fc00000));
  o[9] = roundf(a * 3.0f) + truncf(a * 5.0f) + (float)__float2int_rn(a * 7.0f);
  o[10] = copysignf(b, a) + (isnan(a / 0.0f * 0.0f) ? 100.0f : 0.0f);
  o[11] = (float)i;
  dout[2 * i] = sqrt((double)b) / (double)a;
  dout[2 * i + 1] = exp((double)a);
}
