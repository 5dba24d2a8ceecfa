// Device function pointers: a table of operations chosen per element at run time (an indirect call through a
// .callprototype), as interpreters and functors-by-pointer write them.
typedef float (*unary_op)(float);
__device__ float twice(float x) { return 2.0f * x; }
__device__ float square(float x) { return x * x; }
__device__ float negate(float x) { return -x; }
__device__ unary_op table[3] = {twice, square, negate};
extern "C" __global__ void k_func_ptr(const float* x, const int* which, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = table[which[i] % 3](x[i]);
}
