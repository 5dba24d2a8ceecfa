// A global mutex: one thread per block takes the lock with an atomicCAS spin (with __nanosleep back-off),
// fences, updates a two-word record with plain loads and stores, fences and releases with atomicExch.
extern "C" __global__ void k_spin_lock(int* mutex, int* record, const int* x) {
  if (threadIdx.x != 0) return;
  int v = x[blockIdx.x];
  while (atomicCAS(mutex, 0, 1) != 0) __nanosleep(32);
  __threadfence();
  int count = record[0], best = record[1];
  record[0] = count + 1;
  record[1] = v > best ? v : best;
  __threadfence();
  atomicExch(mutex, 0);
}
