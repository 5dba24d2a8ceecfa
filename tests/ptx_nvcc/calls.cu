// nvcc -ptx -arch=sm_90a -O3 calls.cu -o calls.ptx   (CUDA 13.0)
// Non-inlined device functions: .func with .param arguments and return values, call.uni, a pointer
// argument into the caller's local stack frame (__local_depot, cvta.local).
__device__ __noinline__ int addmul(int a, int b) { return a * 3 + b; }
__device__ __noinline__ int sum(const int* p, int k) { int s = 0; for (int j = 0; j < k; ++j) s += p[j]; return s; }
extern "C" __global__ void k_calls(const int* a, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int loc[4];
  for (int j = 0; j < 4; ++j) loc[j] = a[(i + j) % n];
  out[i] = addmul(a[i], sum(loc, a[i] & 3));
}
