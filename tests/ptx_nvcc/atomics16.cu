// 16-bit and 64-bit atomics: atomicCAS on unsigned short (a 16-bit lock-free increment), atomicAdd on __half
// and __nv_bfloat162, atomicMax/atomicMin on unsigned long long and long long.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k_atomics16(unsigned short* s, __half* h, __nv_bfloat162* b, unsigned long long* u,
                                       long long* l, const int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  unsigned short old = *s, assumed;
  do {
    assumed = old;
    old = atomicCAS(s, assumed, (unsigned short)(assumed + 3));
  } while (old != assumed);
  atomicAdd(h, __float2half(0.5f));
  atomicAdd(b, __floats2bfloat162_rn(1.0f, (float)(v & 3)));
  atomicMax(u, (unsigned long long)v * 0x100000001ull);
  atomicMin(l, -(long long)v * 0x100000001ll);
}
