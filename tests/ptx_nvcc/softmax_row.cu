// A softmax over rows, one warp per row: max and sum by __shfl_down_sync (lane 0 broadcasts), __expf.
extern "C" __global__ void k_softmax_row(const float* x, float* y, int rows, int cols) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= rows) return;
  const float* r = x + warp * cols;
  float m = -INFINITY;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, r[c]);
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
  m = __shfl_sync(0xffffffffu, m, 0);
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += __expf(r[c] - m);
  for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
  s = __shfl_sync(0xffffffffu, s, 0);
  for (int c = lane; c < cols; c += 32) y[warp * cols + c] = __expf(r[c] - m) / s;
}
