// More atomics: a shared-memory histogram flushed to global memory, atomicExch, atomicMin/Max on signed
// integers, atomicInc/atomicDec with wrap-around, atomicAnd/Or/Xor, and atomicAdd on double.
extern "C" __global__ void k_atomics_more(const int* x, int n, unsigned* hist, int* minmax, unsigned* counters,
                                          unsigned* bits, double* dsum, int* last) {
  __shared__ unsigned local_hist[16];
  unsigned t = threadIdx.x;
  if (t < 16) local_hist[t] = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + t;
  if (i < n) {
    int v = x[i];
    atomicAdd(&local_hist[v & 15], 1u);
    atomicMin(minmax, v);
    atomicMax(minmax + 1, v);
    atomicInc(counters, 9u);
    atomicDec(counters + 1, 6u);
    atomicAnd(bits, ~(1u << (v & 31)));
    atomicOr(bits + 1, 1u << (v & 31));
    atomicXor(bits + 2, (unsigned)v);
    atomicAdd(dsum, (double)v * 0.25);
    atomicExch(last, 1);
  }
  __syncthreads();
  if (t < 16) atomicAdd(&hist[t], local_hist[t]);
}
