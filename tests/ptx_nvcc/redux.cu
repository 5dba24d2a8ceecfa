// Warp reductions in one instruction (redux.sync): __reduce_add/min/max_sync on unsigned and int,
// __reduce_and/or/xor_sync, in full and in a divergent half warp.
extern "C" __global__ void k_redux(const int* a, int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = a[i];
  unsigned u = (unsigned)v;
  int* o = out + 8 * i;
  o[0] = (int)__reduce_add_sync(0xffffffffu, u);
  o[1] = __reduce_min_sync(0xffffffffu, v);
  o[2] = __reduce_max_sync(0xffffffffu, v);
  o[3] = (int)__reduce_min_sync(0xffffffffu, u);
  o[4] = (int)__reduce_max_sync(0xffffffffu, u);
  o[5] = (int)(__reduce_and_sync(0xffffffffu, u) ^ __reduce_or_sync(0xffffffffu, u));
  o[6] = (int)__reduce_xor_sync(0xffffffffu, u);
  if (threadIdx.x & 1) o[7] = __reduce_add_sync(0xaaaaaaaau, v);
  else o[7] = __reduce_min_sync(0x55555555u, v);
}
