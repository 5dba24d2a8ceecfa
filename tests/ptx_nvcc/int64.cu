// 64-bit integer math, high halves of products (__umulhi, __mul64hi, __umul64hi) and division and remainder by
// divisors known only at run time (32- and 64-bit, signed and unsigned).
extern "C" __global__ void k_int64(const long long* a, const long long* b, const int* c, const int* d,
                                   long long* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long x = a[i], y = b[i];
  unsigned long long ux = (unsigned long long)x, uy = (unsigned long long)y;
  int s = c[i], t = d[i];
  long long* o = out + 8 * i;
  o[0] = x * y + (x >> 7) - (long long)(ux >> 9);
  o[1] = __mul64hi(x, y);
  o[2] = (long long)__umul64hi(ux, uy);
  o[3] = (long long)__umulhi((unsigned)s, (unsigned)t) + (long long)__mulhi(s, t) * 3;
  o[4] = x / y;
  o[5] = (long long)(ux % uy);
  o[6] = (long long)(s / t) * 1000003 + s % t;
  o[7] = (long long)((unsigned)s / (unsigned)t) + ((unsigned)s % (unsigned)t);
}
