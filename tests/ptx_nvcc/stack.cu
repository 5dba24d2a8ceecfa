// A device function call with a local array passed by pointer (the stack frame): each thread sorts eight values
// in a local array by insertion sort in a __noinline__ function and writes their weighted sum.
__device__ __noinline__ void insertion_sort(float* v, int n) {
  for (int i = 1; i < n; ++i) {
    float key = v[i];
    int j = i - 1;
    while (j >= 0 && v[j] > key) { v[j + 1] = v[j]; --j; }
    v[j + 1] = key;
  }
}
extern "C" __global__ void k_stack(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v[8];
  for (int k = 0; k < 8; ++k) v[k] = x[8 * i + k];
  insertion_sort(v, 8);
  float s = 0.0f;
  for (int k = 0; k < 8; ++k) s += v[k] * (float)(k + 1);
  out[i] = s + v[x[8 * i] > 0.0f ? 7 : 0];
}
