// Read-only loads through the non-coherent cache (__ldg: ld.global.nc) at vector widths v2 and v4.
extern "C" __global__ void k_ldg(const float4* __restrict__ a, const float2* __restrict__ b,
                                 const int2* __restrict__ c, float4* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 p = __ldg(a + i);
  float2 q = __ldg(b + i);
  int2 r = __ldg(c + (n - 1 - i));
  out[i] = make_float4(p.x * q.x + r.x, p.y * q.y - r.y, p.z + q.x, p.w - q.y);
}
