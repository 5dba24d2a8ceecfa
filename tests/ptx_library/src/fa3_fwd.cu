// One FlashAttention-3 forward instantiation (sm90, f16 in and out, head dim HDIM, causal IS_CAUSAL, clusters of
// CLUSTER_M query blocks sharing K/V by TMA multicast), built from
// outside Tessera by tests/ptx_library/build.py with shim/ first on the include path: FA3's own host code
// (run_flash_fwd in hopper/flash_fwd_launch_template.h) runs on the CPU and, instead of launching, prints the
// launch description as JSON (record_launch.h, shim/cutlass/kernel_launch.h); the CUDA runtime calls it
// checks fail without a driver and are ignored.
//
//   describe B H SQ SK D SMS    Q, O: [B, SQ, H, D], K, V: [B, SK, H, D] f16 (FA3's layout); LSE: [B, H, SQ] f32
#include <cmath>
#include <cstdlib>
#include "record_launch.h"
// FA3's error checks first, made to ignore what fails without a driver (cudaGetDevice, cudaFuncSetAttribute);
// its #pragma once keeps flash_fwd_launch_template.h from redefining them
#include "cuda_check.h"
#undef CHECK_CUDA
#undef CHECK_CUDA_KERNEL_LAUNCH
#define CHECK_CUDA(call) ((void)(call))
#define CHECK_CUDA_KERNEL_LAUNCH() ((void)0)
#include "cutlass/cluster_launch.hpp"

namespace record { std::vector<Array> launch_arrays; }

namespace cutlass {
// With CLUSTER_M > 1 FA3 launches through cutlass::launch_kernel_on_cluster(params, kernel, kernel_params); this
// overload (more specialised than CUTLASS's variadic one, and declared before FA3's template that calls it)
// records the launch instead.
template <class KernelParams>
Status launch_kernel_on_cluster(const ClusterLaunchParams& launch, void const*, KernelParams& params) {
  record::print_launch(launch.grid_dims, launch.block_dims, launch.cluster_dims, launch.smem_size_in_bytes, &params,
                       sizeof(params), record::launch_arrays);
  return Status::kSuccess;
}
}  // namespace cutlass

#include "flash_fwd_launch_template.h"

int main(int argc, char** argv) {
  if (argc != 7) { std::fprintf(stderr, "usage: %s B H SQ SK D SMS\n", argv[0]); return 2; }
  int B = std::atoi(argv[1]), H = std::atoi(argv[2]), SQ = std::atoi(argv[3]), SK = std::atoi(argv[4]),
      D = std::atoi(argv[5]);
  if (D != HDIM) { std::fprintf(stderr, "this build has head dim %d\n", HDIM); return 2; }
  const unsigned long long Q = 0x7a1b2c3d4000ull, K = 0x7a2b3c4d5000ull, V = 0x7a3b4c5d6000ull,
                           O = 0x7a4b5c6d7000ull, LSE = 0x7a5b6c7d8000ull, SEM = 0x7a6b7c8d9000ull;
  auto bshd = [&](int s) {
    return "f16[" + std::to_string(B) + "," + std::to_string(s) + "," + std::to_string(H) + "," + std::to_string(D) + "]";
  };
  record::launch_arrays = {{"Q", Q, bshd(SQ) + "=random"}, {"K", K, bshd(SK) + "=random"},
                           {"V", V, bshd(SK) + "=random"}, {"O", O, bshd(SQ) + "=zeros"},
                           {"LSE", LSE, "f32[" + std::to_string(B) + "," + std::to_string(H) + "," + std::to_string(SQ) + "]=zeros"},
                           {"semaphore", SEM, "s32[1]=zeros"}};
  // the fields flash_api.cpp's set_params_fprop fills for a dense, non-split, non-paged forward
  Flash_fwd_params p{};
  p.q_ptr = reinterpret_cast<void*>(Q); p.k_ptr = reinterpret_cast<void*>(K); p.v_ptr = reinterpret_cast<void*>(V);
  p.o_ptr = reinterpret_cast<void*>(O); p.softmax_lse_ptr = reinterpret_cast<void*>(LSE);
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = (long)H * D;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = D;
  p.v_dim_stride = 1;
  p.q_batch_stride = p.o_batch_stride = (long)SQ * H * D;
  p.k_batch_stride = p.v_batch_stride = (long)SK * H * D;
  p.b = p.b_k = B; p.h = p.h_k = H;
  p.seqlen_q = SQ; p.seqlen_k = SK; p.d = p.dv = D;
  p.seqlen_q_rounded = (SQ + 127) / 128 * 128; p.seqlen_k_rounded = (SK + 127) / 128 * 128;
  p.d_rounded = p.dv_rounded = D;
  p.total_q = B * SQ; p.total_k = B * SK;
  p.scale_softmax = 1.0f / std::sqrt(static_cast<float>(D));
  p.softcap = 0.0f;
  p.p_dropout = 1.0f; p.rp_dropout = 1.0f;
  p.is_causal = IS_CAUSAL;
  p.window_size_left = -1; p.window_size_right = IS_CAUSAL ? 0 : -1;
  p.num_splits = 1;
  p.tile_count_semaphore = reinterpret_cast<int*>(SEM);
  p.arch = 90; p.num_sm = std::atoi(argv[6]);
  run_flash_fwd<90, HDIM, HDIM, CLUSTER_M, cutlass::half_t, cutlass::half_t, IS_CAUSAL, false, false, false, false, false,
                false, false, false, false>(p, nullptr);
  return 0;
}
