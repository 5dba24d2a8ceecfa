// Bit manipulation: __brev, __popc, __popcll, __clz, __ffs, __byte_perm (prmt), __funnelshift_l/_r, and field
// extraction and insertion (bfe, bfi) written as CUB's BFE/BFI write them, in inline asm.
__device__ __forceinline__ unsigned bfe_u32(unsigned x, unsigned start, unsigned len) {
  unsigned r;
  asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(start), "r"(len));
  return r;
}
__device__ __forceinline__ int bfe_s32(int x, unsigned start, unsigned len) {
  int r;
  asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(start), "r"(len));
  return r;
}
__device__ __forceinline__ unsigned bfi_b32(unsigned x, unsigned y, unsigned start, unsigned len) {
  unsigned r;
  asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(x), "r"(y), "r"(start), "r"(len));
  return r;
}
extern "C" __global__ void k_bits(const unsigned* x, const unsigned* y, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned a = x[i], b = y[i];
  unsigned* o = out + 8 * i;
  o[0] = __brev(a);
  o[1] = __popc(a) + (__popcll(((unsigned long long)a << 32) | b) << 8);
  o[2] = __clz(a) | (__ffs(b) << 8) | (__clzll((unsigned long long)b) << 16);
  o[3] = __byte_perm(a, b, 0x5140 + (i & 7));
  o[4] = __funnelshift_l(a, b, i & 31) ^ __funnelshift_r(a, b, (i * 3) & 63);
  o[5] = bfe_u32(a, b & 31, (b >> 8) & 31) ^ ((a >> (b & 15)) & 0x3ff);
  o[6] = bfi_b32(a, b, i & 31, (i >> 1) & 31) + ((a & ~(0xffu << 8)) | ((b & 0xff) << 8));
  o[7] = (unsigned)bfe_s32((int)a, (b >> 16) & 31, (b >> 24) & 31);
}
