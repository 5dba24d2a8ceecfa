#include <cuda_fp16.h>
// Half-precision comparisons and NaN handling: __hlt, __hge, __hisnan, __hisinf, __hmax, __hmin, __hmax_nan,
// __hmin_nan, packed __hlt2 / __hbge2 / __hmax2_nan, unordered __hltu.
extern "C" __global__ void k_half_cmp(const __half* a, const __half* b, int* flags, __half* vals, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half x = a[i], y = b[i];
  int f = __hlt(x, y) | __hge(x, y) << 1 | __hisnan(x) << 2 | (__hisinf(x) & 3) << 3 | __hltu(x, y) << 4
          | __heq(x, y) << 5 | __hneu(x, y) << 6;
  __half2 p = __halves2half2(x, y), q = __halves2half2(y, x);
  f |= (int)__hbge2(p, q) << 8;
  __half2 l = __hlt2(p, q);
  flags[i] = f | (__half2int_rz(__low2half(l)) << 12);
  vals[4 * i] = __hmax(x, y);
  vals[4 * i + 1] = __hmin_nan(x, y);
  vals[4 * i + 2] = __hmax_nan(x, y);
  vals[4 * i + 3] = __high2half(__hmax2_nan(p, q));
}
