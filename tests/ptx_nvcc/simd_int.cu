// Integer dot products and SIMD-within-a-word intrinsics: __dp4a, __dp2a_lo, __vabsdiffu4, __vadd4, __vcmpgtu4,
// __sad, __hadd, __rhadd, __usad, and lop3 and %laneid in inline asm as CUTLASS writes them.
extern "C" __global__ void k_simd_int(const int* a, const int* b, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  int* o = out + 8 * i;
  o[0] = __dp4a(x, y, i);
  o[1] = __dp2a_lo(x, y, -i);
  o[2] = (int)__vabsdiffu4((unsigned)x, (unsigned)y);
  o[3] = (int)(__vadd4((unsigned)x, (unsigned)y) ^ __vcmpgtu4((unsigned)x, (unsigned)y));
  o[4] = (int)__sad(x, y, 7u) + (int)__usad((unsigned)x, (unsigned)y, 3u);
  o[5] = __hadd(x, y) ^ __rhadd(x, y);
  unsigned r, lane;
  asm("lop3.b32 %0, %1, %2, %3, 0xE8;" : "=r"(r) : "r"(x), "r"(y), "r"(i));  // majority(x, y, i)
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  o[6] = (int)r;
  o[7] = (int)lane;
}
