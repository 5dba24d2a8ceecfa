// Stream compaction with warp-aggregated atomics: in the divergent branch of the positive values,
// cg::coalesced_threads() elects a leader that reserves room for the whole group with one atomicAdd and
// broadcasts the base; each thread writes at base + its rank (ffs, popc, %lanemask_lt underneath).
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k_compact(const int* x, int* out, int* count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = x[i];
  if (v > 0) {
    cg::coalesced_group g = cg::coalesced_threads();
    int base = 0;
    if (g.thread_rank() == 0) base = atomicAdd(count, (int)g.size());
    base = g.shfl(base, 0);
    out[base + g.thread_rank()] = v;
  }
}
