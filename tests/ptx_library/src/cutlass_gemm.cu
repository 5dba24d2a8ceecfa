// One CUTLASS 3 sm90 GEMM instantiation, D = epilogue(alpha * A B^T + beta * C), built from outside Tessera by
// tests/ptx_library/build.py, which defines SCHEDULE (Cooperative | Pingpong), the tile shape TILE_M/TILE_N/TILE_K,
// the cluster CLUSTER_M/CLUSTER_N and optionally:
//   ELEMENT_AB  0: f16 (default), 1: bf16, 2: e4m3 (the FP8 collective, promoting the wgmma accumulator to f32
//               every few k-blocks as CUTLASS's non-"FastAccum" FP8 schedule does)
//   ELEMENT_D   0: f32 (default), 1: bf16 (C and D)
//   BIAS_RELU   1: D = ReLU(alpha A B^T + beta C + bias[m]) (the epilogue visitor tree LinCombPerRowBiasEltAct)
//   STREAM_K    1: the stream-K tile scheduler (split-K / stream-K with fix-up through a global workspace)
//   CPASYNC     1: the cp.async warp-specialized GMMA mainloop (KernelCpAsyncWarpSpecialized<SCHEDULE>, what
//               KernelScheduleAuto picks when A or B is not 16-byte aligned for TMA) with the epilogue that stores
//               from registers (NoSmemWarpSpecialized): producers copy with cp.async and complete the stage through
//               cp.async.mbarrier.arrive, consumers wait on the stage's mbarrier and issue wgmma
//
// The host part runs CUTLASS's own host code (GemmKernel::to_underlying_arguments) on the CPU and prints the
// launch description as JSON (record_launch.h): the Params bytes, where the tensor maps and pointers lie in
// them, and each map's cuTensorMapEncodeTiled arguments.
//
//   describe M N K L SMS [alpha=X] [beta=X] [splits=N] [decomposition=heuristic|splitk|streamk|dataparallel]
//            [reduction=deterministic|nondeterministic]
//       A: [L, M, K], B: [L, N, K], C, D: [L, M, N]; bias: [M] (one vector for every batch); workspace: the
//       stream-K scheduler's bytes (zeros, as initialize_workspace leaves its locks). SMS: the SM count the
//       persistent tile scheduler sizes its grid by. C is random when beta != 0.
#include <cstdlib>
#include <cstring>
#include <string>
#include "record_launch.h"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

#ifndef ELEMENT_AB
#define ELEMENT_AB 0
#endif
#ifndef ELEMENT_D
#define ELEMENT_D 0
#endif
#ifndef BIAS_RELU
#define BIAS_RELU 0
#endif
#ifndef STREAM_K
#define STREAM_K 0
#endif
#ifndef CPASYNC
#define CPASYNC 0
#endif

#if ELEMENT_AB == 0
using ElementA = cutlass::half_t;
static const char* kAB = "f16";
#elif ELEMENT_AB == 1
using ElementA = cutlass::bfloat16_t;
static const char* kAB = "bf16";
#else
using ElementA = cutlass::float_e4m3_t;
static const char* kAB = "e4m3";
#endif
using ElementB = ElementA;
#if ELEMENT_D == 0
using ElementD = float;
static const char* kD = "f32";
#else
using ElementD = cutlass::bfloat16_t;
static const char* kD = "bf16";
#endif
using ElementC = ElementD;
constexpr int kAlignAB = 16 / sizeof(ElementA);
constexpr int kAlignCD = 16 / sizeof(ElementD);

using LayoutA = cutlass::layout::RowMajor;     // A: M x K, K contiguous
using LayoutB = cutlass::layout::ColumnMajor;  // B: K x N stored N x K, K contiguous
using LayoutC = cutlass::layout::RowMajor;     // C, D: M x N, N contiguous
using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, Int<TILE_K>>;
using ClusterShape = Shape<Int<CLUSTER_M>, Int<CLUSTER_N>, _1>;

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#if CPASYNC
using MainloopSchedule = cutlass::gemm::CAT(KernelCpAsyncWarpSpecialized, SCHEDULE);
using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
#else
using MainloopSchedule = cutlass::gemm::CAT(KernelTmaWarpSpecialized, SCHEDULE);
#if SCHEDULE_IS_COOPERATIVE
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#else
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#endif
#endif

#if BIAS_RELU
using Fusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<cutlass::epilogue::thread::ReLu, ElementD, float,
                                                                   ElementD, ElementC>;
#else
using Fusion = cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementC, float>;
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    ElementC, LayoutC, kAlignCD, ElementD, LayoutC, kAlignCD, EpilogueSchedule, Fusion>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB,
    float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    MainloopSchedule>::CollectiveOp;

#if STREAM_K
using Scheduler = cutlass::gemm::StreamKScheduler;
#else
using Scheduler = void;
#endif
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                        Scheduler>;

// the device entry this file exists for (its address, taken in main, instantiates it)
static void* volatile kernel_entry = nullptr;

int main(int argc, char** argv) {
  kernel_entry = reinterpret_cast<void*>(&cutlass::device_kernel<GemmKernel>);
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s M N K L sm_count [alpha=X] [beta=X] [splits=N] [decomposition=D] [reduction=R]\n",
                 argv[0]);
    return 2;
  }
  int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]), L = std::atoi(argv[4]);
  float alpha = 1.0f, beta = 0.0f;
  int splits = 1;
  std::string decomposition = "heuristic", reduction = "deterministic";
  for (int i = 6; i < argc; ++i) {
    const char* eq = std::strchr(argv[i], '=');
    if (!eq) { std::fprintf(stderr, "expected KEY=VALUE: %s\n", argv[i]); return 2; }
    std::string key(argv[i], eq - argv[i]);
    if (key == "alpha") alpha = std::strtof(eq + 1, nullptr);
    else if (key == "beta") beta = std::strtof(eq + 1, nullptr);
    else if (STREAM_K && key == "splits") splits = std::atoi(eq + 1);
    else if (STREAM_K && key == "decomposition") decomposition = eq + 1;
    else if (STREAM_K && key == "reduction") reduction = eq + 1;
    else { std::fprintf(stderr, "unknown option %s for this build\n", argv[i]); return 2; }
  }
  // fake device addresses: the description names each array by the address the host code saw
  const unsigned long long a = 0x7a1b2c3d4000ull, b = 0x7a2b3c4d5000ull, c = 0x7a3b4c5d6000ull, d = 0x7a4b5c6d7000ull,
                           bias = 0x7a5b6c7d8000ull, workspace = 0x7a6b7c8d9000ull;
  auto shape = [L](int rows, int cols) {
    return "[" + std::to_string(L) + "," + std::to_string(rows) + "," + std::to_string(cols) + "]";
  };
  std::vector<record::Array> arrays = {{"A", a, kAB + shape(M, K) + "=random"}, {"B", b, kAB + shape(N, K) + "=random"},
                                       {"C", c, kD + shape(M, N) + (beta != 0.0f ? "=random" : "=zeros")},
                                       {"D", d, kD + shape(M, N) + "=zeros"}};
  auto sA = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{}, make_shape(M, K, L));
  auto sB = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{}, make_shape(N, K, L));
  auto sC = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{}, make_shape(M, N, L));
  auto sD = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{}, make_shape(M, N, L));
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = std::atoi(argv[5]);
  typename GemmKernel::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {M, N, K, L},
                                      {reinterpret_cast<ElementA*>(a), sA, reinterpret_cast<ElementB*>(b), sB},
                                      {{}, reinterpret_cast<ElementC*>(c), sC, reinterpret_cast<ElementD*>(d), sD},
                                      hw};
  args.epilogue.thread.alpha = alpha;
  args.epilogue.thread.beta = beta;
#if BIAS_RELU
  arrays.push_back({"bias", bias, std::string(kD) + "[" + std::to_string(M) + "]=random"});
  args.epilogue.thread.bias_ptr = reinterpret_cast<ElementD*>(bias);
#endif
#if STREAM_K
  using Decomposition = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::DecompositionMode;
  using Reduction = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::ReductionMode;
  args.scheduler.splits = splits;
  if (decomposition == "heuristic") args.scheduler.decomposition_mode = Decomposition::Heuristic;
  else if (decomposition == "splitk") args.scheduler.decomposition_mode = Decomposition::SplitK;
  else if (decomposition == "streamk") args.scheduler.decomposition_mode = Decomposition::StreamK;
  else if (decomposition == "dataparallel") args.scheduler.decomposition_mode = Decomposition::DataParallel;
  else { std::fprintf(stderr, "unknown decomposition %s\n", decomposition.c_str()); return 2; }
  if (reduction == "deterministic") args.scheduler.reduction_mode = Reduction::Deterministic;
  else if (reduction == "nondeterministic") args.scheduler.reduction_mode = Reduction::Nondeterministic;
  else { std::fprintf(stderr, "unknown reduction %s\n", reduction.c_str()); return 2; }
#endif
  if (!GemmKernel::can_implement(args)) { std::fprintf(stderr, "CUTLASS cannot implement this problem\n"); return 1; }
  size_t workspace_bytes = GemmKernel::get_workspace_size(args);
  if (workspace_bytes != 0) {
    // initialize_workspace zeroes the scheduler's locks (it would run cudaMemsetAsync): the array starts as zeros
    arrays.push_back({"workspace", workspace, "u8[" + std::to_string(workspace_bytes) + "]=zeros"});
  }
  typename GemmKernel::Params params =
      GemmKernel::to_underlying_arguments(args, workspace_bytes ? reinterpret_cast<void*>(workspace) : nullptr);
  record::print_launch(GemmKernel::get_grid_shape(params), GemmKernel::get_block_shape(), dim3(CLUSTER_M, CLUSTER_N, 1),
                       GemmKernel::SharedStorageSize, &params, sizeof(params), arrays);
  return 0;
}
