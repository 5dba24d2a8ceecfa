#include <cuda/atomic>
// libcu++'s cuda::atomic_ref with explicit orders: a producer block publishes data with a release store, the
// consumer spins with acquire loads; a relaxed counter read back, after a
// barrier and a thread fence, by an acq_rel fetch_add.
extern "C" __global__ void k_atomic_ref(int* data, int* flag, int* counter, int* out, int n) {
  int t = threadIdx.x;
  cuda::atomic_ref<int, cuda::thread_scope_device> f(*flag);
  cuda::atomic_ref<int, cuda::thread_scope_device> c(*counter);
  if (blockIdx.x == 0) {
    if (t < n) data[t] = t * t + 5;
    __syncthreads();
    if (t == 0) f.store(1, cuda::memory_order_release);
  } else {
    if (t == 0) {
      while (f.load(cuda::memory_order_acquire) == 0) { }
    }
    __syncthreads();
    if (t < n) out[t] = data[n - 1 - t];
    c.fetch_add(1, cuda::memory_order_relaxed);
    __syncthreads();
    cuda::atomic_thread_fence(cuda::memory_order_acq_rel, cuda::thread_scope_device);
    if (t < n) out[n + t] = c.fetch_add(0, cuda::memory_order_acq_rel);  // every thread's increment: blockDim.x
  }
}
