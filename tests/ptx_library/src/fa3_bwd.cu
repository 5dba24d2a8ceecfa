// One FlashAttention-3 Hopper backward instantiation (sm90, f16 in and out, head dim HDIM), device code only: built
// by tests/ptx_library/build.py from outside Tessera for bench/backward_sass.py, which compares the SASS of FA3's
// main backward loop with Tessera's. It instantiates FA3's own dispatch for the head dim (run_mha_bwd_hdimN in
// hopper/flash_bwd_launch_template.h: its tile sizes, stages and warpgroups; causal and not, both compiled), as
// FA3's hopper/instantiations/flash_bwd_hdimN_fp16_sm90.cu does. Its host code is not run: the launch of a
// backward is not described (`describe` says so and exits 2).
#include <cstdio>
#include "cuda_check.h"
#undef CHECK_CUDA
#undef CHECK_CUDA_KERNEL_LAUNCH
#define CHECK_CUDA(call) ((void)(call))
#define CHECK_CUDA_KERNEL_LAUNCH() ((void)0)
#include "flash_bwd_launch_template.h"

#if HDIM == 64
template void run_mha_bwd_hdim64<90, cutlass::half_t, false>(Flash_bwd_params &, cudaStream_t);
#elif HDIM == 128
template void run_mha_bwd_hdim128<90, cutlass::half_t, false>(Flash_bwd_params &, cudaStream_t);
#else
#error "HDIM must be 64 or 128"
#endif

int main() {
  std::fprintf(stderr, "FA3's backward is built for its device code only; its launch is not described\n");
  return 2;
}
