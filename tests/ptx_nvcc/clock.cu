// clock64(), clock() and __nanosleep: each thread sleeps, spins in a delay loop on clock64() until `wait`
// cycles have passed, and records how far its clock moved; what it computes does not depend on the times.
extern "C" __global__ void k_clock(const int* a, int* out, long long* ticks, long long wait) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  long long t0 = clock64();
  unsigned c0 = clock();
  __nanosleep(100 + i);
  while (clock64() - t0 < wait) { }
  int v = a[i] * 3 + 1;
  long long t1 = clock64();
  ticks[2 * i] = t1 - t0;
  ticks[2 * i + 1] = (long long)(clock() - c0);
  out[i] = v;
}
