// Cache policies from libcu++: cuda::annotated_ptr with a streaming access property (createpolicy and
// ld.global.L2::cache_hint), cuda::atomic_ref with acq_rel ordering, and __ldcs/__stcs/__stwt.
#include <cuda/annotated_ptr>
#include <cuda/atomic>
extern "C" __global__ void k_annotated(const float* x, float* y, int* counter, int n) {
  cuda::annotated_ptr<const float, cuda::access_property::streaming> in{x};
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = in[i] + __ldcs(x + (n - 1 - i));
  __stcs(y + i, v);
  __stwt(y + n + i, v * 2.0f);
  cuda::atomic_ref<int, cuda::thread_scope_device> c(*counter);
  c.fetch_add(1, cuda::memory_order_acq_rel);
}
