// A layernorm row kernel, one block per row: Welford's mean and M2 in double per thread, merged pairwise in
// shared memory (Chan's formula), then y = (x - mean) * rsqrt(var + eps) * gamma + beta.
extern "C" __global__ void k_welford(const float* x, const float* gamma, const float* beta, float* y,
                                     double* stats, int cols) {
  __shared__ double mean_s[128], m2_s[128];
  __shared__ int n_s[128];
  int t = threadIdx.x, row = blockIdx.x;
  const float* r = x + row * cols;
  double mean = 0.0, m2 = 0.0;
  int n = 0;
  for (int c = t; c < cols; c += blockDim.x) {
    double v = r[c];
    n += 1;
    double d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
  }
  mean_s[t] = mean; m2_s[t] = m2; n_s[t] = n;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (t < h && n_s[t + h] > 0) {
      int na = n_s[t], nb = n_s[t + h];
      double d = mean_s[t + h] - mean_s[t];
      int nn = na + nb;
      mean_s[t] = mean_s[t] + d * nb / nn;
      m2_s[t] = m2_s[t] + m2_s[t + h] + d * d * ((double)na * nb / nn);
      n_s[t] = nn;
    }
    __syncthreads();
  }
  double mu = mean_s[0], var = m2_s[0] / cols;
  if (t == 0) { stats[2 * row] = mu; stats[2 * row + 1] = var; }
  float inv = (float)(1.0 / sqrt(var + 1e-5));
  for (int c = t; c < cols; c += blockDim.x)
    y[row * cols + c] = ((float)(r[c] - mu)) * inv * gamma[c] + beta[c];
}
