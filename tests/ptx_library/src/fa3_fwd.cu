// One FlashAttention-3 forward instantiation (sm90, head dim HDIM), built from outside Tessera by
// tests/ptx_library/build.py with shim/ first on the include path: FA3's own host code (run_flash_fwd in
// hopper/flash_fwd_launch_template.h) runs on the CPU and, instead of launching, prints the launch description as
// JSON (record_launch.h, shim/cutlass/kernel_launch.h); the CUDA runtime calls it checks fail without a driver and
// are ignored. The build's defines pick the template arguments run_mha_fwd_ would: IS_CAUSAL, IS_LOCAL (a sliding
// window), HAS_SOFTCAP (tanh soft-capping), PACK_GQA (the query heads of one K/V head packed into one M tile),
// IS_FP8 (e4m3 Q, K, V with per-(batch, K/V head) descale factors, bf16 out, V transposed in shared memory), and
// CLUSTER_M (clusters of query blocks sharing K/V by TMA multicast).
//
//   describe B H SQ SK D SMS [hk=HK] [wl=LEFT] [wr=RIGHT] [softcap=CAP]
//       Q, O: [B, SQ, H, D], K, V: [B, SK, HK, D] (FA3's layout; HK defaults to H); LSE: [B, H, SQ] f32;
//       with IS_FP8 also q_descale, k_descale, v_descale: [B, HK] f32. The window: key j is seen by query i when
//       i + SK - SQ - LEFT <= j <= i + SK - SQ + RIGHT (flash_api.cpp's convention: -1 is unbounded).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
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

#ifndef IS_LOCAL
#define IS_LOCAL 0
#endif
#ifndef HAS_SOFTCAP
#define HAS_SOFTCAP 0
#endif
#ifndef PACK_GQA
#define PACK_GQA 0
#endif
#ifndef IS_FP8
#define IS_FP8 0
#endif
#if IS_FP8
using Element = cutlass::float_e4m3_t;
using ElementOut = cutlass::bfloat16_t;  // run_mha_fwd_'s output type for FP8
static const char* kIn = "e4m3";
static const char* kOut = "bf16";
#else
using Element = cutlass::half_t;
using ElementOut = cutlass::half_t;
static const char* kIn = "f16";
static const char* kOut = "f16";
#endif

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s B H SQ SK D SMS [hk=HK] [wl=LEFT] [wr=RIGHT] [softcap=CAP]\n", argv[0]);
    return 2;
  }
  int B = std::atoi(argv[1]), H = std::atoi(argv[2]), SQ = std::atoi(argv[3]), SK = std::atoi(argv[4]),
      D = std::atoi(argv[5]);
  int HK = H, wl = -1, wr = IS_CAUSAL ? 0 : -1;
  float softcap = 0.0f;
  for (int i = 7; i < argc; ++i) {
    const char* eq = std::strchr(argv[i], '=');
    std::string key = eq ? std::string(argv[i], eq - argv[i]) : std::string(argv[i]);
    if (!eq) { std::fprintf(stderr, "expected KEY=VALUE: %s\n", argv[i]); return 2; }
    if (key == "hk") HK = std::atoi(eq + 1);
    else if (key == "wl") wl = std::atoi(eq + 1);
    else if (key == "wr") wr = std::atoi(eq + 1);
    else if (key == "softcap") softcap = std::strtof(eq + 1, nullptr);
    else { std::fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
  }
  if (D != HDIM) { std::fprintf(stderr, "this build has head dim %d\n", HDIM); return 2; }
  if (HK <= 0 || H % HK != 0) { std::fprintf(stderr, "H must be a multiple of hk\n"); return 2; }
  if ((softcap > 0.0f) != bool(HAS_SOFTCAP)) { std::fprintf(stderr, "softcap=CAP > 0 iff HAS_SOFTCAP\n"); return 2; }
  const unsigned long long Q = 0x7a1b2c3d4000ull, K = 0x7a2b3c4d5000ull, V = 0x7a3b4c5d6000ull,
                           O = 0x7a4b5c6d7000ull, LSE = 0x7a5b6c7d8000ull, SEM = 0x7a6b7c8d9000ull,
                           QD = 0x7a7b8c9da000ull, KD = 0x7a8b9cadb000ull, VD = 0x7a9bacbdc000ull;
  auto bshd = [&](const char* type, int s, int h) {
    return std::string(type) + "[" + std::to_string(B) + "," + std::to_string(s) + "," + std::to_string(h) + "," +
           std::to_string(D) + "]";
  };
  record::launch_arrays = {{"Q", Q, bshd(kIn, SQ, H) + "=random"}, {"K", K, bshd(kIn, SK, HK) + "=random"},
                           {"V", V, bshd(kIn, SK, HK) + "=random"}, {"O", O, bshd(kOut, SQ, H) + "=zeros"},
                           {"LSE", LSE, "f32[" + std::to_string(B) + "," + std::to_string(H) + "," + std::to_string(SQ) + "]=zeros"},
                           {"semaphore", SEM, "s32[1]=zeros"}};
  // the fields flash_api.cpp's set_params_fprop fills for a dense, non-split, non-paged forward
  Flash_fwd_params p{};
  p.q_ptr = reinterpret_cast<void*>(Q); p.k_ptr = reinterpret_cast<void*>(K); p.v_ptr = reinterpret_cast<void*>(V);
  p.o_ptr = reinterpret_cast<void*>(O); p.softmax_lse_ptr = reinterpret_cast<void*>(LSE);
  p.q_row_stride = p.o_row_stride = (long)H * D;
  p.k_row_stride = p.v_row_stride = (long)HK * D;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = D;
  p.v_dim_stride = 1;
  p.q_batch_stride = p.o_batch_stride = (long)SQ * H * D;
  p.k_batch_stride = p.v_batch_stride = (long)SK * HK * D;
  p.b = p.b_k = B; p.h = H; p.h_k = HK;
  p.seqlen_q = SQ; p.seqlen_k = SK; p.d = p.dv = D;
  p.seqlen_q_rounded = (SQ + 127) / 128 * 128; p.seqlen_k_rounded = (SK + 127) / 128 * 128;
  p.d_rounded = p.dv_rounded = D;
  p.total_q = B * SQ; p.total_k = B * SK;
  p.scale_softmax = 1.0f / std::sqrt(static_cast<float>(D));
  p.softcap = softcap;
  p.p_dropout = 1.0f; p.rp_dropout = 1.0f;
#if IS_FP8
  record::launch_arrays.push_back({"q_descale", QD, "f32[" + std::to_string(B) + "," + std::to_string(HK) + "]=ones"});
  record::launch_arrays.push_back({"k_descale", KD, "f32[" + std::to_string(B) + "," + std::to_string(HK) + "]=ones"});
  record::launch_arrays.push_back({"v_descale", VD, "f32[" + std::to_string(B) + "," + std::to_string(HK) + "]=ones"});
  p.is_e4m3 = true;
  p.q_descale_ptr = reinterpret_cast<float*>(QD); p.k_descale_ptr = reinterpret_cast<float*>(KD);
  p.v_descale_ptr = reinterpret_cast<float*>(VD);
  p.q_descale_batch_stride = p.k_descale_batch_stride = p.v_descale_batch_stride = HK;
  p.q_descale_head_stride = p.k_descale_head_stride = p.v_descale_head_stride = 1;
#endif
  // set_params_fprop's window convention: causal is (-1, 0); a bound of -1 becomes the whole sequence
  p.is_causal = IS_CAUSAL;
  p.is_local = IS_LOCAL;
  if ((wl >= 0 || wr >= 0) != (IS_CAUSAL || IS_LOCAL) || (IS_CAUSAL && (wl >= 0 || wr != 0))) {
    std::fprintf(stderr, "the window does not match this build (IS_CAUSAL %d, IS_LOCAL %d)\n", IS_CAUSAL, IS_LOCAL);
    return 2;
  }
  p.window_size_left = wl < 0 ? SK - 1 : wl;
  p.window_size_right = wr < 0 ? SQ - 1 : wr;
  p.num_splits = 1;
  p.pack_gqa = PACK_GQA;
  p.tile_count_semaphore = reinterpret_cast<int*>(SEM);
  p.arch = 90; p.num_sm = std::atoi(argv[6]);
  run_flash_fwd<90, HDIM, HDIM, CLUSTER_M, Element, ElementOut, IS_CAUSAL, IS_LOCAL, HAS_SOFTCAP, false, false, false,
                false, PACK_GQA, false, false>(p, nullptr);
  return 0;
}
