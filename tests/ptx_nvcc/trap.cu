// Checking input on the device: k_trap prints what it found (printf) and traps; k_trap_quiet only traps.
#include <cstdio>
extern "C" __global__ void k_trap(const int* x, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  if (v < 0) {
    printf("negative value %d at %d\n", v, i);
    __trap();
  }
  out[i] = v * 2;
}
extern "C" __global__ void k_trap_quiet(const int* x, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  if (v < 0) __trap();
  out[i] = v * 2;
}
