// A texture object fetch and an assert: textures are refused by name; an assert that holds runs, one that
// fails stops the run naming __assertfail.
#include <cassert>
extern "C" __global__ void k_tex(cudaTextureObject_t tex, float* out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(tex, i);
}
extern "C" __global__ void k_assert(const int* x, int* out, int n) {
  int i = threadIdx.x;
  assert(x[i] >= 0);
  if (i < n) out[i] = x[i] + 1;
}
