"""sm_90a facts, each with the documentation section it comes from: the one place the compiler, the simulators
and the PTX printer take them from (DESIGN.md section 6).

The facts live in one module per topic; this module re-exports them all:
  swizzle     shared-memory swizzle functions and banks          [P#tensor-swizzling-modes]
  cp_async    cp.async sizes, zero fill and its completion       [P#...-cp-async, -cp-async-mbarrier-arrive]
  wgmma       warpgroups, wgmma shapes/types, register fragments [P#asynchronous-warpgroup-level-*]
  mma         warp-level mma.sync shapes, types, fragments       [P#warp-level-matrix-fragment-mma-*]
  descriptor  the 64-bit matrix descriptor, canonical layouts    [P#...-matrix-shared-memory-layout-*]
  tma         tensor maps (cuTensorMapEncodeTiled)               [DRV; P#tensor-*]
  mbarrier    the mbarrier state machine                         [P#...-mbarrier]
  warp        shfl.sync, named barriers, registers, setmaxnreg  [P#...-shfl-sync, -bar, -setmaxnreg]
  packing     cvt/mov packing orders of 16-bit pairs, prmt        [P#...-cvt, -mov-2, -prmt]
  fp8         e4m3/e5m2, cvt.rn.satfinite, the k32 A fragment    [P#alternate-floating-point-data-formats, -cvt]
  launch      grid and block limits of a launch                   [CCG]
  approx      error bounds of lg2.approx                          [P#floating-point-instructions-lg2]
  throughput  per-SM rates: tensor FLOP, ex2, FP32, issue a clock     [H100 whitepaper; CPG]
  wgmma_numerics  Hopper's tensor-core block FMA (measured model)  [KM25: Khattak & Mikaitis 2025]

Sources: [P#x] = PTX ISA 9.1, https://docs.nvidia.com/cuda/parallel-thread-execution/#x;
[DRV] = CUDA driver API, cuTensorMapEncodeTiled (group__CUDA__TENSOR__MEMORY); [CCG] = CUDA C++ Programming
Guide, technical specifications of compute capability 9.0.
See also ../shared/notes/ptx-sm90a.md, where each fact was checked with ptxas.
"""

from tessera.sm90.approx import LG2_APPROX_ABSOLUTE_RANGE, LG2_APPROX_ERROR, lg2_approx_error_bound
from tessera.sm90.wgmma_numerics import HOPPER_BLOCK_FMA, block_fma
from tessera.sm90.descriptor import (
    DESCRIPTOR_ADDRESS_MASK,
    MatrixDescriptor,
    Major,
    canonical_layout_offset,
    decode_descriptor,
    descriptor_base_offset,
    descriptor_element_address,
    descriptor_encode,
    descriptor_start_delta,
    descriptor_swizzle_code,
    encode_descriptor,
    swizzled_buffer_alignment,
)
from tessera.sm90.cp_async import (
    CP_ASYNC_CG_BYTES,
    CP_ASYNC_NOINC_ARRIVALS,
    CP_ASYNC_SIZES,
    cp_async_zero_fill,
)
from tessera.sm90.cluster import (
    MULTICAST_MASK_BITS,
    CLUSTER_SPECIAL_REGISTERS,
    multicast_sizes,
    multicast_slice_problem,
)
from tessera.sm90.launch import (
    MAX_BLOCK_DIMS,
    MAX_GRID_DIMS,
    MAX_NONPORTABLE_CLUSTER_SIZE,
    MAX_PORTABLE_CLUSTER_SIZE,
    MAX_THREADS_PER_BLOCK,
    check_cluster,
    check_launch,
)
from tessera.sm90.fp8 import (
    FP8_A_ELEMENTS,
    FP8_CVT_NARROW,
    FP8_CVT_WIDEN,
    FP8_FORMATS,
    FP8_MAX_FINITE,
    P8_KEY_ORDER,
    P8_QUAD_KEYS,
    TRANSPOSE_4X4_PRMT,
    a8_fragment_coords,
    cvt_rn_satfinite_x2,
    fp8_bits_to_f32,
    fp8_dtype,
    p8_register_sources,
    satfinite_f32,
    transpose_4x4_words,
)
from tessera.sm90.mbarrier import MBARRIER_BYTES, MBARRIER_MAX_COUNT, MBARRIER_TX_LIMIT, MBarrierState
from tessera.sm90.mma import (
    MMA_SYNC_ELEMENT_BITS,
    MMA_SYNC_LAYOUT,
    MMA_SYNC_M,
    MMA_SYNC_N,
    MMA_SYNC_TYPES,
    mma_a_fragment_coords,
    mma_b_fragment_coords,
)
from tessera.sm90.packing import (cvt_rn_bits, cvt_rn_pairs, cvt_rn_x2, half_bits_to_f32, mov_pack_b32, mov_unpack_b32,
                                  prmt_b32)
from tessera.sm90.swizzle import (
    BANK_BYTES,
    SHARED_BANKS,
    SWIZZLE_CHUNK_BYTES,
    SWIZZLE_LINE_BYTES,
    SWIZZLE_MODES,
    bank_of,
    swizzle_address,
    swizzle_bits,
    swizzle_period_bytes,
)
from tessera.sm90.tma import (
    TENSOR_MAP_ALIGNMENT,
    TENSOR_MAP_BYTES,
    TENSOR_MAP_GLOBAL_ALIGNMENT,
    TENSOR_MAP_ELEMENT_BYTES,
    TENSOR_MAP_MAX_BOX,
    TENSOR_MAP_MAX_RANK,
    TENSORMAP_REPLACE_ELEMTYPE,
    TENSORMAP_REPLACE_FILL,
    TENSORMAP_REPLACE_INTERLEAVE,
    TENSORMAP_REPLACE_SWIZZLE,
    TMA_SMEM_ALIGNMENT,
    TensorMapDataType,
    TensorMapFloatOOBFill,
    TensorMapInterleave,
    TensorMapL2Promotion,
    TensorMapSpec,
    TensorMapSwizzle,
    tensor_map_swizzle,
    tensor_map_swizzle_bytes,
)
from tessera.sm90.throughput import (
    CLOCK_HZ,
    EX2_PER_CLOCK,
    FP32_FMA_PER_CLOCK,
    SCHEDULERS,
    TENSOR_BF16_FLOP_PER_CLOCK,
    TENSOR_PEAK_BF16_FLOPS,
)
from tessera.sm90.warp import (
    MAX_SHARED_MEMORY_PER_BLOCK,
    MAX_REGISTERS_PER_THREAD,
    NAMED_BARRIERS,
    REGISTERS_PER_SM,
    REGISTER_ALLOCATION_UNIT,
    SETMAXNREG_MAX,
    SETMAXNREG_MIN,
    SETMAXNREG_STEP,
    SHFL_MODES,
    WARP_SIZE,
    check_named_barrier,
    check_register_budget,
    check_setmaxnreg,
    registers_at_entry,
    shfl_source_lane,
    shfl_sync,
)
from tessera.sm90.wgmma import (
    ACCUMULATOR_THREAD_TERMS,
    accumulator_thread_base,
    A_FRAGMENT_REGISTERS,
    WGMMA_PTXAS_EXTRA_REGISTERS,
    wgmma_instruction_registers,
    WARPGROUP_SIZE,
    WARPS_PER_WARPGROUP,
    WGMMA_ACCUMULATOR_TYPES,
    WGMMA_ELEMENT_BITS,
    WGMMA_K_BYTES,
    WGMMA_M,
    WGMMA_MIXED_TYPES,
    WGMMA_ROWS_PER_WARP,
    WGMMA_TRANSPOSE_TYPES,
    a_fragment_coords,
    a_register_sources,
    accumulator_coords,
    accumulator_registers,
    warp_rank,
    warpgroup_warps,
    wgmma_n_values,
    wgmma_multiplicand_types,
    wgmma_shape,
    wgmma_transpose_immediate,
)

__all__ = sorted(name for name in globals() if not name.startswith("_"))
