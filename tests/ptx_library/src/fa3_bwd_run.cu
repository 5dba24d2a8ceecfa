// FlashAttention-3's Hopper backward (f16, head dim HDIM, not causal) as FA3's host code launches it, built from
// outside Tessera by tests/ptx_library/build.py with shim/ first on the include path. It instantiates exactly the
// run_flash_bwd that FA3's own dispatch picks for the head dim (run_mha_bwd_hdimN in
// hopper/flash_bwd_launch_template.h: hdim 128 80 x 128 with dQ_swapAB, hdim 64 128 x 128; two consumer
// warpgroups; dense, not deterministic, no GQA), so the PTX holds three entries: the preprocess (dPsum =
// rowsum(dO * O), LSE * log2 e, dQaccum zeroed), the main kernel (dK, dV; dQ added into dQaccum by a bulk
// reduction) and the postprocess (dQ = dQaccum * scale, to f16). FA3's host code runs on the CPU and, instead
// of launching, prints one launch description (JSON) per kernel in launch order (record_launch.h,
// shim/cutlass/kernel_launch.h).
//
//   describe B H SQ SK D SMS    Q, O, dO, dQ: [B, SQ, H, D], K, V, dK, dV: [B, SK, H, D] f16 (FA3's layout);
//                               LSE: [B, H, SQ] f32 (natural log, the forward's)
#include <cmath>
#include <cstdlib>
#include "record_launch.h"
#include "cuda_check.h"
#undef CHECK_CUDA
#undef CHECK_CUDA_KERNEL_LAUNCH
#define CHECK_CUDA(call) ((void)(call))
#define CHECK_CUDA_KERNEL_LAUNCH() ((void)0)

namespace record { std::vector<Array> launch_arrays; }

#include "flash_bwd_launch_template.h"

int main(int argc, char** argv) {
  if (argc != 7) { std::fprintf(stderr, "usage: %s B H SQ SK D SMS\n", argv[0]); return 2; }
  int B = std::atoi(argv[1]), H = std::atoi(argv[2]), SQ = std::atoi(argv[3]), SK = std::atoi(argv[4]),
      D = std::atoi(argv[5]);
  if (D != HDIM) { std::fprintf(stderr, "this build has head dim %d\n", HDIM); return 2; }
  // FA3's tiles for the head dim (flash_api.cpp's kBlockM_sm90 / kBlockN_sm90, dense, no softcap)
  constexpr int kBlockM = HDIM == 64 ? 128 : 80, kBlockN = 128;
  const int SQR = (SQ + kBlockM - 1) / kBlockM * kBlockM, SKR = (SK + kBlockN - 1) / kBlockN * kBlockN;
  const unsigned long long Q = 0x7a1b2c3d4000ull, K = 0x7a2b3c4d5000ull, V = 0x7a3b4c5d6000ull,
                           O = 0x7a4b5c6d7000ull, LSE = 0x7a5b6c7d8000ull, DO = 0x7a6b7c8d9000ull,
                           DQ = 0x7a7b8c9da000ull, DK = 0x7a8b9cadb000ull, DV = 0x7a9bacbdc000ull,
                           DQACC = 0x7aabbccdd000ull, DPSUM = 0x7abbccdde000ull, LSE2 = 0x7acbdceef000ull,
                           SEM = 0x7adbecff0000ull;
  auto dims = [](std::initializer_list<int> d) {
    std::string s = "[";
    for (int v : d) s += (s.size() > 1 ? "," : "") + std::to_string(v);
    return s + "]";
  };
  record::launch_arrays = {
      {"Q", Q, "f16" + dims({B, SQ, H, D}) + "=random"}, {"K", K, "f16" + dims({B, SK, H, D}) + "=random"},
      {"V", V, "f16" + dims({B, SK, H, D}) + "=random"}, {"O", O, "f16" + dims({B, SQ, H, D}) + "=zeros"},
      {"LSE", LSE, "f32" + dims({B, H, SQ}) + "=zeros"}, {"dO", DO, "f16" + dims({B, SQ, H, D}) + "=random"},
      {"dQ", DQ, "f16" + dims({B, SQ, H, D}) + "=zeros"}, {"dK", DK, "f16" + dims({B, SK, H, D}) + "=zeros"},
      {"dV", DV, "f16" + dims({B, SK, H, D}) + "=zeros"},
      {"dQaccum", DQACC, "f32" + dims({B, H, SQR * D}) + "=random"},  // the preprocess zeroes it
      {"dPsum", DPSUM, "f32" + dims({B, H, SQR}) + "=zeros"}, {"LSE_log2", LSE2, "f32" + dims({B, H, SQR}) + "=zeros"},
      {"dq_semaphore", SEM, "s32" + dims({(SQ + kBlockM - 1) / kBlockM, B, H}) + "=zeros"}};
  // the fields flash_api.cpp's set_params_fprop / set_params_dgrad and mha_bwd fill for a dense backward
  Flash_bwd_params p{};
  p.q_ptr = reinterpret_cast<void*>(Q); p.k_ptr = reinterpret_cast<void*>(K); p.v_ptr = reinterpret_cast<void*>(V);
  p.o_ptr = reinterpret_cast<void*>(O); p.softmax_lse_ptr = reinterpret_cast<void*>(LSE);
  p.do_ptr = reinterpret_cast<void*>(DO); p.dq_ptr = reinterpret_cast<void*>(DQ);
  p.dk_ptr = reinterpret_cast<void*>(DK); p.dv_ptr = reinterpret_cast<void*>(DV);
  p.dq_accum_ptr = reinterpret_cast<void*>(DQACC); p.dsoftmax_sum = reinterpret_cast<void*>(DPSUM);
  p.softmax_lse_log2_ptr = reinterpret_cast<void*>(LSE2); p.dq_semaphore = reinterpret_cast<int*>(SEM);
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = (long)H * D;
  p.do_row_stride = p.dq_row_stride = p.dk_row_stride = p.dv_row_stride = (long)H * D;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = D;
  p.do_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = D;
  p.v_dim_stride = 1;
  p.q_batch_stride = p.o_batch_stride = p.do_batch_stride = p.dq_batch_stride = (long)SQ * H * D;
  p.k_batch_stride = p.v_batch_stride = p.dk_batch_stride = p.dv_batch_stride = (long)SK * H * D;
  p.b = p.b_k = B; p.h = p.h_k = H;
  p.seqlen_q = SQ; p.seqlen_k = SK; p.d = p.dv = D;
  p.seqlen_q_rounded = SQR; p.seqlen_k_rounded = SKR;
  p.d_rounded = p.dv_rounded = D;
  p.total_q = B * SQ; p.total_k = B * SK;
  p.scale_softmax = 1.0f / std::sqrt(static_cast<float>(D));
  p.softcap = 0.0f;
  p.p_dropout = 1.0f; p.rp_dropout = 1.0f;
  p.is_causal = false; p.is_local = false;
  p.window_size_left = -1; p.window_size_right = -1;
  p.deterministic = false;
  p.arch = 90; p.num_sm = std::atoi(argv[6]);
#if HDIM == 64
  run_flash_bwd<90, 64, 128, 128, cutlass::half_t, false, false, false, false, false, false, 2, 2, true, false, false, 2,
                1, 2, 2, false>(p, nullptr);
#elif HDIM == 128
  run_flash_bwd<90, 128, 80, 128, cutlass::half_t, false, false, false, false, false, false, 2, 2, true, false, true, 2,
                1, 2, 1, false>(p, nullptr);
#else
#error "HDIM must be 64 or 128"
#endif
  return 0;
}
