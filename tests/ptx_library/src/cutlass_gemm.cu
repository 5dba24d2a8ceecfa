// One CUTLASS 3 sm90 GEMM instantiation (D = A * B^T, f16 inputs, f32 accumulator and output), built from
// outside Tessera by tests/ptx_library/build.py, which defines SCHEDULE (Cooperative | Pingpong) and the
// tile shape TILE_M/TILE_N/TILE_K and cluster CLUSTER_M/CLUSTER_N.
//
// The host part runs CUTLASS's own host code (GemmKernel::to_underlying_arguments) on the CPU and prints the
// launch description as JSON (record_launch.h): the Params bytes, where the tensor maps and pointers lie in
// them, and each map's cuTensorMapEncodeTiled arguments.
//
//   describe M N K L SMS    A: [L, M, K] f16, B: [L, N, K] f16, C, D: [L, M, N] f32; SMS: the SM count the
//                           persistent tile scheduler sizes its grid by
#include <cstdlib>
#include <string>
#include "record_launch.h"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using ElementC = float;
using ElementD = float;
using LayoutA = cutlass::layout::RowMajor;     // A: M x K, K contiguous
using LayoutB = cutlass::layout::ColumnMajor;  // B: K x N stored N x K, K contiguous
using LayoutC = cutlass::layout::RowMajor;     // C, D: M x N, N contiguous
using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, Int<TILE_K>>;
using ClusterShape = Shape<Int<CLUSTER_M>, Int<CLUSTER_N>, _1>;

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
using MainloopSchedule = cutlass::gemm::CAT(KernelTmaWarpSpecialized, SCHEDULE);
#if SCHEDULE_IS_COOPERATIVE
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#else
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    ElementC, LayoutC, 4, ElementD, LayoutC, 4, EpilogueSchedule>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, 8, ElementB, LayoutB, 8, float,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    MainloopSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;

// the device entry this file exists for (its address, taken in main, instantiates it)
static void* volatile kernel_entry = nullptr;

int main(int argc, char** argv) {
  kernel_entry = reinterpret_cast<void*>(&cutlass::device_kernel<GemmKernel>);
  if (argc != 6) { std::fprintf(stderr, "usage: %s M N K L sm_count\n", argv[0]); return 2; }
  int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]), L = std::atoi(argv[4]);
  // fake device addresses: the description names each array by the address the host code saw
  const unsigned long long a = 0x7a1b2c3d4000ull, b = 0x7a2b3c4d5000ull, c = 0x7a3b4c5d6000ull, d = 0x7a4b5c6d7000ull;
  auto shape = [L](int rows, int cols) {
    return "[" + std::to_string(L) + "," + std::to_string(rows) + "," + std::to_string(cols) + "]";
  };
  std::vector<record::Array> arrays = {{"A", a, "f16" + shape(M, K) + "=random"}, {"B", b, "f16" + shape(N, K) + "=random"},
                                       {"C", c, "f32" + shape(M, N) + "=zeros"}, {"D", d, "f32" + shape(M, N) + "=zeros"}};
  auto sA = cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{}, make_shape(M, K, L));
  auto sB = cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{}, make_shape(N, K, L));
  auto sC = cutlass::make_cute_packed_stride(typename GemmKernel::StrideC{}, make_shape(M, N, L));
  auto sD = cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{}, make_shape(M, N, L));
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = std::atoi(argv[5]);
  typename GemmKernel::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm, {M, N, K, L},
                                      {reinterpret_cast<ElementA*>(a), sA, reinterpret_cast<ElementB*>(b), sB},
                                      {{1.0f, 0.0f}, reinterpret_cast<ElementC*>(c), sC, reinterpret_cast<ElementD*>(d), sD},
                                      hw};
  if (!GemmKernel::can_implement(args)) { std::fprintf(stderr, "CUTLASS cannot implement this problem\n"); return 1; }
  if (GemmKernel::get_workspace_size(args) != 0) { std::fprintf(stderr, "this problem needs a workspace\n"); return 1; }
  typename GemmKernel::Params params = GemmKernel::to_underlying_arguments(args, nullptr);
  record::print_launch(GemmKernel::get_grid_shape(params), GemmKernel::get_block_shape(), dim3(CLUSTER_M, CLUSTER_N, 1),
                       GemmKernel::SharedStorageSize, &params, sizeof(params), arrays);
  return 0;
}
