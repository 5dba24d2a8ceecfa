// Butterfly reductions with __shfl_xor_sync: a full warp sum and a max over the low half-warp's partial mask.
extern "C" __global__ void k_shfl_xor(const float* x, float* sum_out, int* max_out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  float v = x[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  sum_out[i] = v;
  int m = __float_as_int(x[i]) & 0xffff;
  if (lane < 16) {
    for (int o = 8; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0x0000ffffu, m, o, 16));
  } else {
    m = -1;
  }
  max_out[i] = m;
}
