// Rounding-mode intrinsics and integer intrinsics: __fmaf_rn, __fmul_rz, __fadd_rd, __fdiv_ru, __float2int_rn/
// rz/ru/rd, __double2float_rd/ru, __int_as_float, __umulhi, __mul64hi, __umul64hi, __sad, __usad, __byte_perm in
// its modes, __funnelshift_l/r (wrapping and clamping), __vabsdiffu4, __brevll, __clzll.
extern "C" __global__ void k_rounding(const float* x, const float* y, const double* d, const unsigned* p,
                                      const unsigned* q, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float a = x[i], b = y[i];
  unsigned u = p[i], w = q[i];
  long long s = ((long long)u << 32) | w;
  unsigned* o = out + 24 * i;
  o[0] = __float_as_uint(__fmaf_rn(a, b, 1.0f));
  o[1] = __float_as_uint(__fmul_rz(a, b));
  o[2] = __float_as_uint(__fadd_rd(a, b));
  o[3] = __float_as_uint(__fdiv_ru(a, b));
  o[4] = (unsigned)__float2int_rn(a * 1000.f);
  o[5] = (unsigned)__float2int_rz(a * 1000.f);
  o[6] = (unsigned)__float2int_ru(a * 1000.f);
  o[7] = (unsigned)__float2int_rd(a * 1000.f);
  o[8] = __float_as_uint(__double2float_rd(d[i]));
  o[9] = __float_as_uint(__double2float_ru(d[i]));
  o[10] = __float_as_uint(__int_as_float((int)u) + 0.0f);
  o[11] = __umulhi(u, w);
  o[12] = (unsigned)(__mul64hi(s, (long long)w * 3 - (1ll << 40)) >> 7);
  o[13] = (unsigned)(__umul64hi((unsigned long long)s, (unsigned long long)s ^ 0x9e3779b97f4a7c15ull));
  o[14] = __sad((int)u, (int)w, 7u);
  o[15] = __usad(u, w, 11u);
  o[16] = __byte_perm(u, w, 0x7531u) ^ __byte_perm(u, w, i & 0xffff);
  o[17] = __funnelshift_l(u, w, i) ^ __funnelshift_lc(u, w, i);
  o[18] = __funnelshift_r(u, w, i + 20) ^ __funnelshift_rc(u, w, i + 20);
  o[19] = __vabsdiffu4(u, w);
  o[20] = __vabsdiffu2(u, w) ^ __vmaxu4(u, w);
  o[21] = (unsigned)__clzll(s) | ((unsigned)__brevll(s) << 8);
  o[22] = __float_as_uint(__fsub_ru(a, b));
  o[23] = __float_as_uint(__fsqrt_rd(fabsf(b)));
}
