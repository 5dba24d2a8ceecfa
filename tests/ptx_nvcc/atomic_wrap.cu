// atomicInc / atomicDec wrap at their limit, atomicExch on float, atomicMin / atomicMax on signed and
// unsigned 64-bit, the old values recorded per thread.
extern "C" __global__ void k_atomic_wrap(unsigned* counters, float* slot, long long* smin, unsigned long long* umin,
                                         unsigned* olds, float* swapped, const long long* v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  olds[2 * i] = atomicInc(&counters[0], 9u);
  olds[2 * i + 1] = atomicDec(&counters[1], 6u);
  swapped[i] = atomicExch(slot, (float)i * 0.5f);
  atomicMin(&smin[0], v[i]);
  atomicMax(&smin[1], v[i]);
  atomicMin(&umin[0], (unsigned long long)v[i]);
  atomicMax(&umin[1], (unsigned long long)v[i]);
}
