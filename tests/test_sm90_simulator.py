"""The CTA simulator runs hand-written Target IR: TMA into swizzled shared memory, wgmma with descriptors or
register A, shuffles, warp-specialized pipelines (FlashAttention-3's 384-thread split: setmaxnreg budgets,
named-barrier ping-pong, mbarrier phases) and per-thread control flow match NumPy; every seeded asynchrony
bug is reported as a KernelHazardError naming the op and the thread, never computed, and so is, with a
register allocation, a write into the registers of an in-flight wgmma."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import func

from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90 import DeadlockError, run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel
from tessera.regalloc import allocate_registers
from text_edits import checked, planted

BF16 = ml_dtypes.bfloat16


def _kernel(text: str) -> func.FuncOp:
    return next(op for op in parse_module(text).walk() if is_target_kernel(op))


# region kernels

# C = A x B^T for one 64 x 64 x 64 bf16 tile: one warpgroup, TMA into 128B-swizzled buffers, four k16 steps
# of SS wgmma advancing both descriptors by 32 bytes.
SS_GEMM = """\
builtin.module {
  func.func @gemm_tile(
      %a_map: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [64 : i64, 64 : i64], sm90.swizzle = 128 : i64, tile.dims = #tile.dims<64, 64>},
      %b_map: !sm90.tensormap {sm90.source = 1 : i64, sm90.box = [64 : i64, 64 : i64], sm90.swizzle = 128 : i64, tile.dims = #tile.dims<64, 64>},
      %c_ptr: i64 {sm90.source = 2 : i64, tile.dims = #tile.dims<64, 64>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 128 : i64, smem_bytes = 16392 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %zero_i32 = arith.constant 0 : i32
    %true = arith.constant true
    %leader = arith.cmpi eq, %tid, %c0 : index
    %sa = sm90.shared_buffer "a" offset 0 size 8192 align 1024 swizzle 128 : i32
    %sb = sm90.shared_buffer "b" offset 8192 size 8192 align 1024 swizzle 128 : i32
    %bar = sm90.shared_buffer "full" offset 16384 size 8 align 8 swizzle 0 : i32
    scf.if %leader {
      sm90.mbarrier_init %bar, 1
      sm90.fence_mbarrier_init
    }
    sm90.bar_sync 0, 128
    scf.if %leader {
      sm90.mbarrier_arrive_expect_tx %bar, 16384
      sm90.tma_load %a_map[%zero_i32, %zero_i32], %sa, %bar : i32, i32
      sm90.tma_load %b_map[%zero_i32, %zero_i32], %sb, %bar : i32, i32
    }
    scf.while () : () -> () {
      %ok = sm90.mbarrier_try_wait_parity %bar, %zero_i32 : i32
      %again = arith.xori %ok, %true : i1
      scf.condition(%again)
    } do {
      scf.yield
    }
    %da0 = sm90.make_descriptor %sa lbo 16 sbo 1024 swizzle 128 : i64
    %db0 = sm90.make_descriptor %sb lbo 16 sbo 1024 swizzle 128 : i64
    %step = arith.constant 2 : i64
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    sm90.wgmma_fence
    %acc, %da, %db = scf.for %k = %c0 to %c4 step %c1 iter_args(%d = %acc0, %a = %da0, %b = %db0) -> (vector<32xf32>, i64, i64) {
      %d2 = sm90.wgmma_mma_async %d, %a, %b n 64 type "bf16" trans 0, 0 : vector<32xf32>, i64
      %a2 = arith.addi %a, %step : i64
      %b2 = arith.addi %b, %step : i64
      scf.yield %d2, %a2, %b2 : vector<32xf32>, i64, i64
    }
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
    // thread t owns rows 16w+g (+8) and columns 2c (+1) of each 8-column block: facts.accumulator_coords
    %c32 = arith.constant 32 : index
    %c4i = arith.constant 4 : index
    %c16 = arith.constant 16 : index
    %c2 = arith.constant 2 : index
    %c64 = arith.constant 64 : index
    %w = arith.divui %tid, %c32 : index
    %lane = arith.remui %tid, %c32 : index
    %g = arith.divui %lane, %c4i : index
    %c = arith.remui %lane, %c4i : index
    %row0 = arith.muli %w, %c16 : index
    %row = arith.addi %row0, %g : index
    %rowoff = arith.muli %row, %c64 : index
    %coloff = arith.muli %c, %c2 : index
    %elem = arith.addi %rowoff, %coloff : index
    %elem64 = arith.index_cast %elem : index to i64
    %base = vector.broadcast %elem64 : i64 to vector<32xi64>
    %pattern = arith.constant dense<[0, 1, 512, 513, 8, 9, 520, 521, 16, 17, 528, 529, 24, 25, 536, 537, 32, 33, 544, 545, 40, 41, 552, 553, 48, 49, 560, 561, 56, 57, 568, 569]> : vector<32xi64>
    %four = arith.constant dense<4> : vector<32xi64>
    %elems = arith.addi %base, %pattern : vector<32xi64>
    %offsets = arith.muli %elems, %four : vector<32xi64>
    %mask = arith.constant dense<true> : vector<32xi1>
    sm90.st_global %c_ptr[%offsets], %acc, %mask : vector<32xi64>, vector<32xf32>, vector<32xi1>
    sm90.bar_sync 0, 128
    scf.if %leader {
      sm90.mbarrier_inval %bar
    }
    func.return
  }
}
"""

# C = A x B with A packed from registers (cvt_pack) and B [16, 64] MN-major (trans_b = 1): the P x V form.
RS_GEMM = """\
builtin.module {
  func.func @rs_tile(
      %a_ptr: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64, 16>},
      %b_map: !sm90.tensormap {sm90.source = 1 : i64, sm90.box = [64 : i64, 16 : i64], sm90.swizzle = 128 : i64, tile.dims = #tile.dims<16, 64>},
      %c_ptr: i64 {sm90.source = 2 : i64, tile.dims = #tile.dims<64, 64>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 128 : i64, smem_bytes = 2056 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c16 = arith.constant 16 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %zero_i32 = arith.constant 0 : i32
    %true = arith.constant true
    %leader = arith.cmpi eq, %tid, %c0 : index
    %sb = sm90.shared_buffer "b" offset 0 size 2048 align 1024 swizzle 128 : i32
    %bar = sm90.shared_buffer "full" offset 2048 size 8 align 8 swizzle 0 : i32
    scf.if %leader {
      sm90.mbarrier_init %bar, 1
      sm90.fence_mbarrier_init
    }
    sm90.bar_sync 0, 128
    scf.if %leader {
      sm90.mbarrier_arrive_expect_tx %bar, 2048
      sm90.tma_load %b_map[%zero_i32, %zero_i32], %sb, %bar : i32, i32
    }
    // thread t (warp w, lane 4g + c) holds A[16w + g + 8(i & 1)][2c + 8(i >> 1) + h] in half h of register i
    %w = arith.divui %tid, %c32 : index
    %lane = arith.remui %tid, %c32 : index
    %g = arith.divui %lane, %c4 : index
    %c = arith.remui %lane, %c4 : index
    %r16 = arith.muli %w, %c16 : index
    %row = arith.addi %r16, %g : index
    %a_row = arith.muli %row, %c16 : index
    %a_col = arith.muli %c, %c2 : index
    %a_elem = arith.addi %a_row, %a_col : index
    %a_elem64 = arith.index_cast %a_elem : index to i64
    %a_base = vector.broadcast %a_elem64 : i64 to vector<8xi64>
    %a_pattern = arith.constant dense<[0, 1, 128, 129, 8, 9, 136, 137]> : vector<8xi64>
    %four8 = arith.constant dense<4> : vector<8xi64>
    %a_elems = arith.addi %a_base, %a_pattern : vector<8xi64>
    %a_offsets = arith.muli %a_elems, %four8 : vector<8xi64>
    %all8 = arith.constant dense<true> : vector<8xi1>
    %a_f32 = sm90.ld_global %a_ptr[%a_offsets], %all8 : vector<8xi64>, vector<8xi1> -> vector<8xf32>
    %a_regs = sm90.cvt_pack %a_f32 type "bf16" : vector<8xf32> -> vector<4xi32>
    scf.while () : () -> () {
      %ok = sm90.mbarrier_try_wait_parity %bar, %zero_i32 : i32
      %again = arith.xori %ok, %true : i1
      scf.condition(%again)
    } do {
      scf.yield
    }
    // B is K x N with N contiguous: MN-major (trans_b = 1), 128-byte rows, 8-row K groups 1024 bytes apart
    %db = sm90.make_descriptor %sb lbo 8192 sbo 1024 swizzle 128 : i64
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    sm90.wgmma_fence
    %d = sm90.wgmma_mma_async %acc0, %a_regs, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, vector<4xi32>
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
    %rowoff = arith.muli %row, %c64 : index
    %elem = arith.addi %rowoff, %a_col : index
    %elem64 = arith.index_cast %elem : index to i64
    %base = vector.broadcast %elem64 : i64 to vector<32xi64>
    %pattern = arith.constant dense<[0, 1, 512, 513, 8, 9, 520, 521, 16, 17, 528, 529, 24, 25, 536, 537, 32, 33, 544, 545, 40, 41, 552, 553, 48, 49, 560, 561, 56, 57, 568, 569]> : vector<32xi64>
    %four = arith.constant dense<4> : vector<32xi64>
    %elems = arith.addi %base, %pattern : vector<32xi64>
    %offsets = arith.muli %elems, %four : vector<32xi64>
    %mask = arith.constant dense<true> : vector<32xi1>
    sm90.st_global %c_ptr[%offsets], %d, %mask : vector<32xi64>, vector<32xf32>, vector<32xi1>
    sm90.bar_sync 0, 128
    scf.if %leader {
      sm90.mbarrier_inval %bar
    }
    func.return
  }
}
"""

# C = A x B^T over K in two pipeline stages: warpgroup 1 produces (one thread issues TMA after waiting on the
# stage's empty barrier), warpgroup 0 consumes (waits on full, wgmma, arrives on empty).
WS_GEMM = """\
builtin.module {
  func.func @gemm_ws(
      %a_map: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [64 : i64, 64 : i64], sm90.swizzle = 128 : i64, tile.dims = #tile.dims<64, K>},
      %b_map: !sm90.tensormap {sm90.source = 1 : i64, sm90.box = [64 : i64, 64 : i64], sm90.swizzle = 128 : i64, tile.dims = #tile.dims<64, K>},
      %c_ptr: i64 {sm90.source = 2 : i64, tile.dims = #tile.dims<64, 64>, tile.role = "out"},
      %k_size: index {sm90.size = "K"})
      attributes {sm90.kernel = {threads = 256 : i64, smem_bytes = 32800 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c16 = arith.constant 16 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %i1 = arith.constant 1 : i32
    %i8 = arith.constant 8 : i32
    %i8192 = arith.constant 8192 : i32
    %z = arith.constant 0 : i32
    %d2 = arith.constant 2 : i64
    %true = arith.constant true
    %sa = sm90.shared_buffer "a" offset 0 size 16384 align 1024 swizzle 128 : i32
    %sb = sm90.shared_buffer "b" offset 16384 size 16384 align 1024 swizzle 128 : i32
    %full = sm90.shared_buffer "full" offset 32768 size 16 align 8 swizzle 0 : i32
    %empty = sm90.shared_buffer "empty" offset 32784 size 16 align 8 swizzle 0 : i32
    %leader = arith.cmpi eq, %tid, %c0 : index
    %producer = arith.cmpi sge, %tid, %c128 : index
    %steps = arith.divui %k_size, %c64 : index
    scf.if %leader {
      %full1 = arith.addi %full, %i8 : i32
      %empty1 = arith.addi %empty, %i8 : i32
      sm90.mbarrier_init %full, 1
      sm90.mbarrier_init %full1, 1
      sm90.mbarrier_init %empty, 128
      sm90.mbarrier_init %empty1, 128
      sm90.fence_mbarrier_init
    }
    sm90.bar_sync 0, 256
    %acc = scf.if %producer -> (vector<32xf32>) {
      sm90.setmaxnreg "dec" 40
      %issuer = arith.cmpi eq, %tid, %c128 : index
      scf.if %issuer {
        scf.for %k = %c0 to %steps step %c1 {
          %s = arith.remui %k, %c2 : index
          %round = arith.divui %k, %c2 : index
          %s32 = arith.index_cast %s : index to i32
          %r32 = arith.index_cast %round : index to i32
          %phase = arith.andi %r32, %i1 : i32
          %parity = arith.xori %phase, %i1 : i32
          %bar_off = arith.muli %s32, %i8 : i32
          %empty_s = arith.addi %empty, %bar_off : i32
          %full_s = arith.addi %full, %bar_off : i32
          scf.while () : () -> () {
            %ok = sm90.mbarrier_try_wait_parity %empty_s, %parity : i32
            %again = arith.xori %ok, %true : i1
            scf.condition(%again)
          } do {
            scf.yield
          }
          sm90.mbarrier_arrive_expect_tx %full_s, 16384
          %buf_off = arith.muli %s32, %i8192 : i32
          %a_dst = arith.addi %sa, %buf_off : i32
          %b_dst = arith.addi %sb, %buf_off : i32
          %kx = arith.muli %k, %c64 : index
          sm90.tma_load %a_map[%kx, %c0], %a_dst, %full_s : index, index
          sm90.tma_load %b_map[%kx, %c0], %b_dst, %full_s : index, index
        }
      }
      %unused = arith.constant dense<0.0> : vector<32xf32>
      scf.yield %unused : vector<32xf32>
    } else {
      sm90.setmaxnreg "inc" 232
      %acc0 = arith.constant dense<0.0> : vector<32xf32>
      %accf = scf.for %k = %c0 to %steps step %c1 iter_args(%acc_k = %acc0) -> (vector<32xf32>) {
        %s = arith.remui %k, %c2 : index
        %round = arith.divui %k, %c2 : index
        %s32 = arith.index_cast %s : index to i32
        %r32 = arith.index_cast %round : index to i32
        %phase = arith.andi %r32, %i1 : i32
        %bar_off = arith.muli %s32, %i8 : i32
        %empty_s = arith.addi %empty, %bar_off : i32
        %full_s = arith.addi %full, %bar_off : i32
        scf.while () : () -> () {
          %ok = sm90.mbarrier_try_wait_parity %full_s, %phase : i32
          %again = arith.xori %ok, %true : i1
          scf.condition(%again)
        } do {
          scf.yield
        }
        %buf_off = arith.muli %s32, %i8192 : i32
        %a_src = arith.addi %sa, %buf_off : i32
        %b_src = arith.addi %sb, %buf_off : i32
        %da0 = sm90.make_descriptor %a_src lbo 16 sbo 1024 swizzle 128 : i64
        %db0 = sm90.make_descriptor %b_src lbo 16 sbo 1024 swizzle 128 : i64
        sm90.wgmma_fence
        %acc_n, %da, %db = scf.for %kk = %c0 to %c4 step %c1 iter_args(%d = %acc_k, %a = %da0, %b = %db0) -> (vector<32xf32>, i64, i64) {
          %dn = sm90.wgmma_mma_async %d, %a, %b n 64 type "bf16" trans 0, 0 : vector<32xf32>, i64
          %an = arith.addi %a, %d2 : i64
          %bn = arith.addi %b, %d2 : i64
          scf.yield %dn, %an, %bn : vector<32xf32>, i64, i64
        }
        sm90.wgmma_commit_group
        sm90.wgmma_wait_group 0
        sm90.mbarrier_arrive %empty_s
        scf.yield %acc_n : vector<32xf32>
      }
      scf.yield %accf : vector<32xf32>
    }
    %consumer = arith.xori %producer, %true : i1
    scf.if %consumer {
      %w = arith.divui %tid, %c32 : index
      %lane = arith.remui %tid, %c32 : index
      %g = arith.divui %lane, %c4 : index
      %c = arith.remui %lane, %c4 : index
      %row0 = arith.muli %w, %c16 : index
      %row = arith.addi %row0, %g : index
      %rowoff = arith.muli %row, %c64 : index
      %coloff = arith.muli %c, %c2 : index
      %elem = arith.addi %rowoff, %coloff : index
      %elem64 = arith.index_cast %elem : index to i64
      %base = vector.broadcast %elem64 : i64 to vector<32xi64>
      %pattern = arith.constant dense<[0, 1, 512, 513, 8, 9, 520, 521, 16, 17, 528, 529, 24, 25, 536, 537, 32, 33, 544, 545, 40, 41, 552, 553, 48, 49, 560, 561, 56, 57, 568, 569]> : vector<32xi64>
      %four = arith.constant dense<4> : vector<32xi64>
      %elems = arith.addi %base, %pattern : vector<32xi64>
      %offsets = arith.muli %elems, %four : vector<32xi64>
      %mask = arith.constant dense<true> : vector<32xi1>
      sm90.st_global %c_ptr[%offsets], %acc, %mask : vector<32xi64>, vector<32xf32>, vector<32xi1>
    }
    sm90.bar_sync 0, 256
    func.return
  }
}
"""

# A written into an unswizzled K-major buffer by st_shared (each thread 4 words of its image), B by TMA.
ST_SHARED_GEMM = """\
builtin.module {
  func.func @st_shared_tile(
      %a_img: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<512>},
      %b_map: !sm90.tensormap {sm90.source = 1 : i64, sm90.box = [64 : i64, 16 : i64], sm90.swizzle = 128 : i64, tile.dims = #tile.dims<16, 64>},
      %c_ptr: i64 {sm90.source = 2 : i64, tile.dims = #tile.dims<64, 64>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 128 : i64, smem_bytes = 4104 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c16 = arith.constant 16 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %zero_i32 = arith.constant 0 : i32
    %true = arith.constant true
    %leader = arith.cmpi eq, %tid, %c0 : index
    %sb = sm90.shared_buffer "b" offset 0 size 2048 align 1024 swizzle 128 : i32
    %sa = sm90.shared_buffer "a" offset 2048 size 2048 align 128 swizzle 0 : i32
    %bar = sm90.shared_buffer "full" offset 4096 size 8 align 8 swizzle 0 : i32
    scf.if %leader {
      sm90.mbarrier_init %bar, 1
      sm90.fence_mbarrier_init
    }
    sm90.bar_sync 0, 128
    scf.if %leader {
      sm90.mbarrier_arrive_expect_tx %bar, 2048
      sm90.tma_load %b_map[%zero_i32, %zero_i32], %sb, %bar : i32, i32
    }
    // each thread copies 4 words of A's shared-memory image (K-major, no swizzle) from global memory
    %t4 = arith.muli %tid, %c4 : index
    %t4_64 = arith.index_cast %t4 : index to i64
    %t4_32 = arith.index_cast %t4 : index to i32
    %words64 = vector.broadcast %t4_64 : i64 to vector<4xi64>
    %words32 = vector.broadcast %t4_32 : i32 to vector<4xi32>
    %seq64 = arith.constant dense<[0, 1, 2, 3]> : vector<4xi64>
    %seq32 = arith.constant dense<[0, 1, 2, 3]> : vector<4xi32>
    %four64 = arith.constant dense<4> : vector<4xi64>
    %four32 = arith.constant dense<4> : vector<4xi32>
    %w64 = arith.addi %words64, %seq64 : vector<4xi64>
    %g_off = arith.muli %w64, %four64 : vector<4xi64>
    %all4 = arith.constant dense<true> : vector<4xi1>
    %img = sm90.ld_global %a_img[%g_off], %all4 : vector<4xi64>, vector<4xi1> -> vector<4xi32>
    %w32 = arith.addi %words32, %seq32 : vector<4xi32>
    %s_off = arith.muli %w32, %four32 : vector<4xi32>
    %sa_v = vector.broadcast %sa : i32 to vector<4xi32>
    %s_addr = arith.addi %sa_v, %s_off : vector<4xi32>
    sm90.st_shared %s_addr, %img : vector<4xi32>, vector<4xi32>
    sm90.fence_proxy_async
    sm90.bar_sync 1, 128
    scf.while () : () -> () {
      %ok = sm90.mbarrier_try_wait_parity %bar, %zero_i32 : i32
      %again = arith.xori %ok, %true : i1
      scf.condition(%again)
    } do {
      scf.yield
    }
    // no swizzle, K-major: (m/8)*SBO + (m%8)*16 + (k/8)*LBO + (k%8)*2
    %da = sm90.make_descriptor %sa lbo 1024 sbo 128 swizzle 0 : i64
    %db = sm90.make_descriptor %sb lbo 8192 sbo 1024 swizzle 128 : i64
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    sm90.wgmma_fence
    %d = sm90.wgmma_mma_async %acc0, %da, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, i64
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
    %w = arith.divui %tid, %c32 : index
    %lane = arith.remui %tid, %c32 : index
    %g = arith.divui %lane, %c4 : index
    %c = arith.remui %lane, %c4 : index
    %r16 = arith.muli %w, %c16 : index
    %row = arith.addi %r16, %g : index
    %rowoff = arith.muli %row, %c64 : index
    %coloff = arith.muli %c, %c2 : index
    %elem = arith.addi %rowoff, %coloff : index
    %elem64 = arith.index_cast %elem : index to i64
    %base = vector.broadcast %elem64 : i64 to vector<32xi64>
    %pattern = arith.constant dense<[0, 1, 512, 513, 8, 9, 520, 521, 16, 17, 528, 529, 24, 25, 536, 537, 32, 33, 544, 545, 40, 41, 552, 553, 48, 49, 560, 561, 56, 57, 568, 569]> : vector<32xi64>
    %four = arith.constant dense<4> : vector<32xi64>
    %elems = arith.addi %base, %pattern : vector<32xi64>
    %offsets = arith.muli %elems, %four : vector<32xi64>
    %mask = arith.constant dense<true> : vector<32xi1>
    sm90.st_global %c_ptr[%offsets], %d, %mask : vector<32xi64>, vector<32xf32>, vector<32xi1>
    func.return
  }
}
"""

# The row max of an accumulator fragment: a row lives in 4 lanes, two butterfly shuffles.
QUAD_ROW_MAX = """\
builtin.module {
  func.func @quad_row_max(
      %x_ptr: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 2>},
      %m_ptr: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c8 = arith.constant 8 : index
    %byte = arith.muli %tid, %c8 : index
    %byte64 = arith.index_cast %byte : index to i64
    %base = vector.broadcast %byte64 : i64 to vector<2xi64>
    %regs = arith.constant dense<[0, 4]> : vector<2xi64>
    %offsets = arith.addi %base, %regs : vector<2xi64>
    %all = arith.constant dense<true> : vector<2xi1>
    %x = sm90.ld_global %x_ptr[%offsets], %all : vector<2xi64>, vector<2xi1> -> vector<2xf32>
    // a row of the accumulator lives in lanes 4g .. 4g+3: butterfly over lane bits 0 and 1
    %o1 = sm90.shfl_sync "bfly" %x, 1, 31 : vector<2xf32>
    %m1 = arith.maximumf %x, %o1 : vector<2xf32>
    %o2 = sm90.shfl_sync "bfly" %m1, 2, 31 : vector<2xf32>
    %m2 = arith.maximumf %m1, %o2 : vector<2xf32>
    sm90.st_global %m_ptr[%offsets], %m2, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>
    func.return
  }
}
"""

# Per-thread integer semantics and divergent loops: i32 wrap, truncating division, a loop with a per-thread
# trip count, a while loop with a divergent if inside; ex2/rcp.
PER_THREAD = """\
builtin.module {
  func.func @per_thread(
      %out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 4>, tile.role = "out"},
      %fout: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c5 = arith.constant 5 : index
    %zero = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %two = arith.constant 2 : i32
    %three = arith.constant 3 : i32
    %true = arith.constant true
    %t = arith.index_cast %tid : index to i32
    %big = arith.constant 2147483647 : i32
    %wrapped = arith.muli %t, %big : i32
    %minus7 = arith.constant -7 : i32
    %neg = arith.subi %minus7, %t : i32
    %quotient = arith.divsi %neg, %three : i32
    %trips = arith.remui %tid, %c5 : index
    %sum = scf.for %i = %c0 to %trips step %c1 iter_args(%s = %zero) -> (i32) {
      %i32 = arith.index_cast %i : index to i32
      %term = arith.addi %i32, %one : i32
      %s2 = arith.addi %s, %term : i32
      scf.yield %s2 : i32
    }
    %start = arith.addi %t, %one : i32
    %end:2 = scf.while (%x = %start, %n = %zero) : (i32, i32) -> (i32, i32) {
      %at_one = arith.cmpi eq, %x, %one : i32
      %go = arith.xori %at_one, %true : i1
      scf.condition(%go) %x, %n : i32, i32
    } do {
    ^bb0(%x: i32, %n: i32):
      %r = arith.remui %x, %two : i32
      %even = arith.cmpi eq, %r, %zero : i32
      %next = scf.if %even -> (i32) {
        %half = arith.divui %x, %two : i32
        scf.yield %half : i32
      } else {
        %x3 = arith.muli %x, %three : i32
        %x31 = arith.addi %x3, %one : i32
        scf.yield %x31 : i32
      }
      %n1 = arith.addi %n, %one : i32
      scf.yield %next, %n1 : i32, i32
    }
    %v0 = arith.constant dense<0> : vector<4xi32>
    %v1 = vector.insert %wrapped, %v0[0] : i32 into vector<4xi32>
    %v2 = vector.insert %quotient, %v1[1] : i32 into vector<4xi32>
    %v3 = vector.insert %sum, %v2[2] : i32 into vector<4xi32>
    %v4 = vector.insert %end#1, %v3[3] : i32 into vector<4xi32>
    %c16 = arith.constant 16 : index
    %row = arith.muli %tid, %c16 : index
    %row64 = arith.index_cast %row : index to i64
    %base = vector.broadcast %row64 : i64 to vector<4xi64>
    %cols = arith.constant dense<[0, 4, 8, 12]> : vector<4xi64>
    %offsets = arith.addi %base, %cols : vector<4xi64>
    %all = arith.constant dense<true> : vector<4xi1>
    sm90.st_global %out[%offsets], %v4, %all : vector<4xi64>, vector<4xi32>, vector<4xi1>
    %tf = arith.sitofp %t : i32 to f32
    %twenty = arith.constant 20.0 : f32
    %half_f = arith.constant 0.5 : f32
    %e_in = arith.subf %tf, %twenty : f32
    %r_in = arith.addf %tf, %half_f : f32
    %e = sm90.ex2_approx %e_in : f32
    %rc = sm90.rcp_approx %r_in : f32
    %f0 = vector.broadcast %e : f32 to vector<2xf32>
    %f1 = vector.insert %rc, %f0[1] : f32 into vector<2xf32>
    %c8 = arith.constant 8 : index
    %frow = arith.muli %tid, %c8 : index
    %frow64 = arith.index_cast %frow : index to i64
    %fbase = vector.broadcast %frow64 : i64 to vector<2xi64>
    %fcols = arith.constant dense<[0, 4]> : vector<2xi64>
    %foffsets = arith.addi %fbase, %fcols : vector<2xi64>
    %all2 = arith.constant dense<true> : vector<2xi1>
    sm90.st_global %fout[%foffsets], %f1, %all2 : vector<2xi64>, vector<2xf32>, vector<2xi1>
    func.return
  }
}
"""

# endregion


def _gemm_inputs(rng, m: int = 64, n: int = 64, k: int = 64):
    return rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((n, k)).astype(BF16)


def _run_c(text: str, inputs: list, reference: np.ndarray, sizes: dict | None = None,
           registers=None) -> tuple[np.ndarray, np.ndarray]:
    """Run the Target IR kernel of `text` in the CTA simulator on `inputs` and its f32 [64, 64] output C (zeroed)
    with the named `sizes`; `registers(kernel)` gives a register allocation for the register-file check.
    Returns (C, reference)."""
    kernel = _kernel(text)
    c = np.zeros((64, 64), np.float32)
    run_target_kernel(kernel, [*inputs, c], sizes or {}, registers(kernel) if registers else None)
    return c, reference


def _run_ss(text: str, rng) -> tuple[np.ndarray, np.ndarray]:
    a, b = _gemm_inputs(rng)
    return _run_c(text, [a, b], a.astype(np.float64) @ b.astype(np.float64).T)


def _run_ws(text: str, rng, k: int = 256) -> tuple[np.ndarray, np.ndarray]:
    a, b = _gemm_inputs(rng, k=k)
    return _run_c(text, [a, b], a.astype(np.float64) @ b.astype(np.float64).T, {"K": k})


def _run_rs(text: str, rng, registers=None) -> tuple[np.ndarray, np.ndarray]:
    """Run an RS_GEMM variant (f32 A rounded to bf16 in registers by cvt.rn, then exact products)."""
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((16, 64)).astype(BF16)
    return _run_c(text, [a, b], a.astype(BF16).astype(np.float64) @ b.astype(np.float64), registers=registers)


def _k_major_image(a: np.ndarray) -> np.ndarray:
    """A [64, 16] bf16 tile as the unswizzled K-major canonical layout stores it, as int32 words: element
    (m, k) at (m / 8) * SBO + (m % 8) * 16 + (k / 8) * LBO + (k % 8) * 2 with SBO 128, LBO 1024
    [P#asynchronous-warpgroup-level-canonical-layouts]."""
    m, k = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
    address = (m // 8) * 128 + (m % 8) * 16 + (k // 8) * 1024 + (k % 8) * 2
    image = np.zeros(2048, np.uint8)
    bits = a.view(np.uint16)
    image[address], image[address + 1] = bits & 0xFF, bits >> 8
    return image.view(np.int32)


def _run_st_shared(text: str, rng) -> tuple[np.ndarray, np.ndarray]:
    a = rng.standard_normal((64, 16)).astype(BF16)
    b = rng.standard_normal((16, 64)).astype(BF16)
    return _run_c(text, [_k_major_image(a), b], a.astype(np.float64) @ b.astype(np.float64))


def _thread(t: int) -> str:
    return rf"in thread {t} \(warp {t // 32}, lane {t % 32}\) of CTA \(0, 0, 0\)"


_WAIT_LOOP = """\
    scf.while () : () -> () {
      %ok = sm90.mbarrier_try_wait_parity %bar, %zero_i32 : i32
      %again = arith.xori %ok, %true : i1
      scf.condition(%again)
    } do {
      scf.yield
    }
"""

# region kernels that compute


def test_ss_gemm_through_tma_and_swizzled_descriptors_matches_numpy(rng):
    c, reference = _run_ss(SS_GEMM, rng)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


SLOT_OFFSETS = ("      %a2 = arith.addi %a, %step : i64\n      %b2 = arith.addi %b, %step : i64\n",
                "      %k1 = arith.addi %k, %c1 : index\n      %kb = arith.index_cast %k1 : index to i32\n"
                "      %kstep = arith.constant 32 : i32\n      %bytes = arith.muli %kb, %kstep : i32\n"
                "      %a2 = sm90.descriptor_offset %da0, %bytes : i64\n      %b2 = sm90.descriptor_offset %db0, %bytes : i64\n")
"""SS_GEMM with each trip's descriptors made from the first ones moved by a run-time byte count (as
hoist-invariant-descriptors reaches a ring's slots), not advanced from the previous trip's."""


def test_descriptors_moved_by_a_run_time_offset_match_numpy(rng):
    c, reference = _run_ss(planted(SS_GEMM, *SLOT_OFFSETS), rng)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("step, message", [
    (24, r"sm90.descriptor_offset .*the descriptor offset must be a non-negative multiple of 16 bytes"),
    (262144, r"sm90.descriptor_offset .*the descriptor's start address field overflows"),
])
def test_a_descriptor_offset_off_the_16_byte_grid_or_past_the_start_field_is_reported(step, message, rng):
    kernel = planted(planted(SS_GEMM, *SLOT_OFFSETS), "%kstep = arith.constant 32 : i32",
                     f"%kstep = arith.constant {step} : i32")
    with pytest.raises(KernelHazardError, match=message):
        _run_ss(kernel, rng)


def test_tma_box_partly_outside_the_tensor_reads_zeros(rng):
    # A has 40 rows and its box starts at row -8: box rows 0-7 and 48-63 are outside and land as zeros.
    kernel = planted(SS_GEMM, "tile.dims = #tile.dims<64, 64>},\n      %b_map",
                     "tile.dims = #tile.dims<40, 64>},\n      %b_map")
    kernel = planted(kernel, "sm90.tma_load %a_map[%zero_i32, %zero_i32]",
                     "%minus8 = arith.constant -8 : i32\n      sm90.tma_load %a_map[%zero_i32, %minus8]")
    a, b = rng.standard_normal((40, 64)).astype(BF16), rng.standard_normal((64, 64)).astype(BF16)
    padded = np.zeros((64, 64))
    padded[8:48] = a.astype(np.float64)
    c, reference = _run_c(kernel, [a, b], padded @ b.astype(np.float64).T)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


def test_rs_gemm_with_a_packed_from_registers_matches_numpy(rng):
    c, reference = _run_rs(RS_GEMM, rng)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


def test_a_written_by_st_shared_unswizzled_matches_numpy(rng):
    c, reference = _run_st_shared(ST_SHARED_GEMM, rng)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [64, 256, 320])
def test_warp_specialized_pipeline_matches_numpy(k, rng):
    # From k = 256 on, the producer waits for the consumer's first release: the consumer branch runs as a
    # strand of its own while the producer is blocked.
    c, reference = _run_ws(WS_GEMM, rng, k)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-4)


def test_quad_row_max_by_butterfly_shuffles(rng):
    x = rng.standard_normal((32, 2)).astype(np.float32)
    out = np.zeros_like(x)
    run_target_kernel(_kernel(QUAD_ROW_MAX), [x, out], {})
    np.testing.assert_array_equal(out, np.repeat(x.reshape(8, 4, 2).max(axis=1), 4, axis=0))


def _collatz_steps(x: int) -> int:
    steps = 0
    while x != 1:
        x, steps = (x // 2 if x % 2 == 0 else 3 * x + 1), steps + 1
    return steps


def test_per_thread_integers_wrap_and_loops_diverge():
    out, fout = np.zeros((32, 4), np.int32), np.zeros((32, 2), np.float32)
    run_target_kernel(_kernel(PER_THREAD), [out, fout], {})
    t = np.arange(32)
    expected = np.stack([(t * 2147483647 % 2**32).astype(np.uint32).view(np.int32),
                         -((7 + t) // 3),
                         (t % 5) * (t % 5 + 1) // 2,
                         [_collatz_steps(x + 1) for x in t]], axis=1)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(fout[:, 0], np.exp2(t - 20.0).astype(np.float32))
    np.testing.assert_array_equal(fout[:, 1], (1 / (t + 0.5)).astype(np.float32))


GRID_FILL = """\
builtin.module {
  func.func @fill(
      %out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<N>, tile.role = "out"},
      %n: index {sm90.size = "N"})
      attributes {sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(N, 32)>} {
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %c32 = arith.constant 32 : index
    %c4 = arith.constant 4 : index
    %first = arith.muli %cta, %c32 : index
    %i = arith.addi %first, %tid : index
    %inside = arith.cmpi slt, %i, %n : index
    %byte = arith.muli %i, %c4 : index
    %byte64 = arith.index_cast %byte : index to i64
    %offsets = vector.broadcast %byte64 : i64 to vector<1xi64>
    %mask = vector.broadcast %inside : i1 to vector<1xi1>
    %i32 = arith.index_cast %i : index to i32
    %values = vector.broadcast %i32 : i32 to vector<1xi32>
    sm90.st_global %out[%offsets], %values, %mask : vector<1xi64>, vector<1xi32>, vector<1xi1>
    func.return
  }
}
"""


def test_grid_of_ctas_with_masked_stores():
    out = np.full(70, -1, np.int32)
    run_target_kernel(_kernel(GRID_FILL), [out], {"N": 70})
    np.testing.assert_array_equal(out, np.arange(70))


def test_store_outside_the_tensor_is_reported():
    out = np.full(70, -1, np.int32)
    kernel = planted(GRID_FILL, "%inside = arith.cmpi slt, %i, %n : index", "%inside = arith.constant true")
    with pytest.raises(KernelHazardError, match=r"sm90.st_global .*: stores 4 bytes at global address 0x[0-9a-f]+, "
                                                r"outside tensor %out \(280 bytes\) at byte offset 280 "
                                                r"in thread 6 \(warp 0, lane 6\) of CTA \(2, 0, 0\)"):
        run_target_kernel(_kernel(kernel), [out], {"N": 70})


# endregion
# region 1. shared memory read before the TMA signalled


def test_wgmma_by_threads_that_did_not_wait_is_reported(rng):
    kernel = planted(SS_GEMM, _WAIT_LOOP, "    scf.if %leader {\n" + _WAIT_LOOP + "    }\n")
    with pytest.raises(KernelHazardError, match=r"sm90.wgmma_mma_async .*: reads wgmma operand A at shared address "
                                                r"0x0 \(buffer 'a' \+ 0\) before the TMA signalled: this thread has "
                                                r"not observed phase 0 .* " + _thread(1)):
        _run_ss(kernel, rng)


def test_wgmma_reading_a_copy_still_in_flight_is_reported(rng):
    kernel = planted(SS_GEMM, "%ok = sm90.mbarrier_try_wait_parity %bar, %zero_i32 : i32", "%ok = arith.constant true")
    with pytest.raises(KernelHazardError, match=r"sm90.wgmma_mma_async .* before the TMA signalled: the copy into "
                                                r"it has not completed on the mbarrier at shared address 0x4000 .*"
                                                + _thread(0)):
        _run_ss(kernel, rng)


def test_ld_shared_before_the_wait_is_reported(rng):
    kernel = planted(SS_GEMM, _WAIT_LOOP, "    %peek = sm90.ld_shared %sb : i32 -> i32\n" + _WAIT_LOOP)
    with pytest.raises(KernelHazardError, match=r"%peek = sm90.ld_shared %sb : i32 -> i32: reads at shared address "
                                                r"0x2000 \(buffer 'b' \+ 0\) before the TMA signalled: the copy .*"
                                                + _thread(0)):
        _run_ss(kernel, rng)


def test_arrive_without_expect_tx_completes_the_phase_before_the_data(rng):
    kernel = planted(SS_GEMM, "sm90.mbarrier_arrive_expect_tx %bar, 16384", "sm90.mbarrier_arrive %bar")
    with pytest.raises(KernelHazardError, match=r"sm90.wgmma_mma_async .* before the TMA signalled: this thread has "
                                                r"not observed phase 1 .*" + _thread(0)):
        _run_ss(kernel, rng)


# endregion
# region 2. wgmma results and A registers touched before wgmma_wait_group


def test_result_used_before_wait_group_is_reported(rng):
    kernel = planted(SS_GEMM, "    sm90.wgmma_wait_group 0\n", "")
    with pytest.raises(KernelHazardError, match=r"sm90.st_global %c_ptr.*: reads the result of `%d2 = "
                                                r"sm90.wgmma_mma_async .*` before a wgmma_wait_group covers its group "
                                                r"\(group 0 of warpgroup 0 is still pending\) " + _thread(0)):
        _run_ss(kernel, rng)


def test_uncommitted_group_is_not_covered_by_wait_group(rng):
    kernel = planted(SS_GEMM, "    sm90.wgmma_commit_group\n", "")
    with pytest.raises(KernelHazardError, match=r"sm90.st_global .* still pending"):
        _run_ss(kernel, rng)


def test_wait_group_1_leaves_the_newest_group_pending(rng):
    # One group per k-step (groups 0..3); waiting with 1 pending leaves the last one, which produced %acc.
    kernel = planted(SS_GEMM, "      %a2 = arith.addi", "      sm90.wgmma_commit_group\n      %a2 = arith.addi")
    kernel = planted(kernel, "    sm90.wgmma_commit_group\n    sm90.wgmma_wait_group 0\n",
                     "    sm90.wgmma_wait_group 1\n")
    with pytest.raises(KernelHazardError, match=r"sm90.st_global .* \(group 3 of warpgroup 0 is still pending\)"):
        _run_ss(kernel, rng)
    c, reference = _run_ss(planted(kernel, "sm90.wgmma_wait_group 1", "sm90.wgmma_wait_group 0"), rng)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


def test_a_registers_of_a_pending_rs_wgmma_are_not_readable(rng):
    kernel = planted(RS_GEMM, "    sm90.wgmma_commit_group\n",
                     "    %peek = vector.extract %a_regs[0] : i32 from vector<4xi32>\n    sm90.wgmma_commit_group\n")
    with pytest.raises(KernelHazardError, match=r"%peek = vector.extract %a_regs\[0\] .*: reads the A registers of "
                                                r"`%d = sm90.wgmma_mma_async .*` before a wgmma_wait_group "
                                                r"covers its group .*" + _thread(0)):
        _run_rs(kernel, rng)


def test_a_read_of_the_a_registers_through_another_value_is_reported_by_the_register_check(rng):
    """The wgmma takes a view of A's registers (a shuffle, as convert-tile-to-sm90 takes each k-step's A); a read
    of the original vector before the wait reads the same registers, which the SSA check (by value) misses and the
    register-file check (by register, with an allocation) reports, as the PTX executor does."""
    kernel = planted(RS_GEMM, "    %d = sm90.wgmma_mma_async %acc0, %a_regs,",
                     "    %a_view = vector.shuffle %a_regs, %a_regs [0, 1, 2, 3] : vector<4xi32>, vector<4xi32>\n"
                     "    %d = sm90.wgmma_mma_async %acc0, %a_view,")
    kernel = planted(kernel, "    sm90.wgmma_commit_group\n", "    sm90.wgmma_commit_group\n"
                     '    %a_f = sm90.cvt_unpack %a_regs type "bf16" : vector<4xi32> -> vector<8xf32>\n')
    with pytest.raises(KernelHazardError, match=r"%a_f = sm90.cvt_unpack %a_regs .*: reads register %\w+ while "
                                                r"`%d = sm90.wgmma_mma_async .*` of warpgroup 0 still reads it as its "
                                                r"A fragment \(group 0 is pending: .*" + _thread(0)):
        _run_rs(kernel, rng, allocate_registers)


def test_tma_into_a_stage_a_pending_wgmma_still_reads_is_reported(rng):
    # The consumer releases the stage (arrive on empty) before waiting for the wgmma that reads it.
    kernel = planted(WS_GEMM, "        sm90.wgmma_commit_group\n        sm90.wgmma_wait_group 0\n"
                              "        sm90.mbarrier_arrive %empty_s\n",
                     "        sm90.wgmma_commit_group\n        sm90.mbarrier_arrive %empty_s\n"
                     "        sm90.wgmma_wait_group 1\n")
    kernel = planted(kernel, "      scf.yield %accf : vector<32xf32>",
                     "      sm90.wgmma_wait_group 0\n      scf.yield %accf : vector<32xf32>")
    with pytest.raises(KernelHazardError, match=r"sm90.tma_load %a_map.*: the TMA copy overwrites shared address "
                                                r"0x[0-9a-f]+ \(buffer 'a' \+ \d+\) while `%dn = "
                                                r"sm90.wgmma_mma_async .*` of warpgroup 0 may still read it "
                                                r".*" + _thread(128)):
        _run_ws(kernel, rng)


# RS_GEMM with %x and %y computed between the commit and the wait (dead values: only their writes matter).
RS_GEMM_OVERLAP = planted(RS_GEMM, "    sm90.wgmma_commit_group\n",
                          "    sm90.wgmma_commit_group\n    %w32 = arith.index_cast %w : index to i32\n"
                          "    %wv = vector.broadcast %w32 : i32 to vector<4xi32>\n"
                          "    %x = arith.muli %wv, %wv : vector<4xi32>\n    %y = arith.sitofp %w32 : i32 to f32\n")


def _value(kernel: func.FuncOp, name: str):
    return next(r for op in kernel.walk() for r in op.results if r.name_hint == name)


def test_values_made_while_a_wgmma_is_in_flight_get_registers_of_their_own(rng):
    """tessera.regalloc keeps the A fragment and the accumulator allocated until the wait: the register-file
    check, which reports writes to the registers of in-flight wgmma groups, passes."""
    c, reference = _run_rs(RS_GEMM_OVERLAP, rng, allocate_registers)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value,held,role", [("x", "a_regs", "reads it as its A fragment"),
                                             ("y", "d", "writes its accumulator into it")])
def test_write_to_a_register_of_an_in_flight_wgmma_is_reported(value, held, role, rng):
    """A seeded allocation bug: %x (or %y) gets a register of the pending wgmma's A fragment (or result)."""

    def seeded(kernel):
        allocation = allocate_registers(kernel)
        victim = _value(kernel, value)
        allocation.names[victim] = allocation.names[_value(kernel, held)][:len(allocation.names[victim])]
        return allocation

    with pytest.raises(KernelHazardError, match=rf"%{value} = arith\.\w+ .*: writes register %\w+ \(%{value}\) while "
                                                rf"`%d = sm90.wgmma_mma_async .*` of warpgroup 0 still {role} \(group 0 "
                                                rf"is pending: a wgmma_wait_group must complete it first\) " + _thread(0)):
        _run_rs(RS_GEMM_OVERLAP, rng, seeded)


_FENCE_THEN_ACC = planted(RS_GEMM, """    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    sm90.wgmma_fence
    %d = sm90.wgmma_mma_async %acc0, %a_regs, %db n 64""", """    sm90.wgmma_fence
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    %false = arith.constant false
    %d = sm90.wgmma_mma_async %acc0, %a_regs, %db scale_d %false n 64""")


def test_a_zero_accumulator_under_scale_d_0_needs_no_fence_in_the_registers_the_ptx_has(rng):
    """memory_model.WGMMA_FENCE on registers: the printer folds the zero (scale-d 0), so no instruction writes
    the accumulator's registers after the fence; with the allocation checked the kernel runs clean, as in PTX,
    and without one too (SSA values: a constant is an immediate the scale-d 0 wgmma does not read)."""
    for registers in (allocate_registers, None):
        c, reference = _run_rs(_FENCE_THEN_ACC, rng, registers)
        np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


def test_an_accumulator_an_instruction_writes_after_the_fence_is_reported_under_scale_d_0(rng):
    """memory_model.WGMMA_FENCE_SCALE_D without a register allocation: scale-d 0 reads no accumulator, but its
    registers are written, and an instruction wrote them after the fence."""
    negate = "    %acc1 = arith.negf %acc0 : vector<32xf32>\n"
    kernel = (checked(_FENCE_THEN_ACC).replace("    %false = arith.constant false\n",
                                               negate + "    %false = arith.constant false\n")
              .replace("sm90.wgmma_mma_async %acc0,", "sm90.wgmma_mma_async %acc1,"))
    with pytest.raises(KernelHazardError, match=r"writes its accumulator registers, written by `%acc1 = arith.negf "
                                                r".*` after warpgroup 0's latest wgmma_fence"):
        _run_rs(kernel, rng)


def test_an_a_fragment_written_after_the_fence_is_reported_by_register(rng):
    pack = '    %a_regs = sm90.cvt_pack %a_f32 type "bf16" : vector<8xf32> -> vector<4xi32>\n'
    kernel = checked(planted(_FENCE_THEN_ACC, pack, "")).replace("    sm90.wgmma_fence\n",
                                                                 "    sm90.wgmma_fence\n" + pack)
    with pytest.raises(KernelHazardError, match=r"^%d = sm90.wgmma_mma_async .*: accesses register %\w+ \(its "
                                                r"accumulator or A fragment\), which `%a_regs = sm90.cvt_pack .*` "
                                                r"accessed after warpgroup 0's latest wgmma_fence \(race: missing "
                                                r"wgmma_fence between the access and the wgmma\) " + _thread(0)):
        _run_rs(kernel, rng, allocate_registers)


# endregion
# region 3. st_shared data read by wgmma without fence_proxy_async (and bar_sync)


def test_missing_fence_proxy_async_is_reported(rng):
    kernel = planted(ST_SHARED_GEMM, "    sm90.fence_proxy_async\n", "")
    with pytest.raises(KernelHazardError, match=r"sm90.wgmma_mma_async .*: reads wgmma operand A at shared address "
                                                r"0x800 \(buffer 'a' \+ 0\), which thread 0 stored with st_shared and "
                                                r"has not made visible to the async proxy \(missing "
                                                r"fence_proxy_async after the store\) " + _thread(0)):
        _run_st_shared(kernel, rng)


def test_a_store_between_two_reads_of_a_checked_operand_is_reported_at_the_second(rng):
    """The wgmma operand check runs once per epoch of the operand's shared-memory lines: the first wgmma finds
    B's lines readable; a later st_shared into them (after a bar_sync that orders the first wgmma's completion
    before it, but no fence_proxy_async) starts a new epoch, so the second
    wgmma reading B checks its bytes again and reports the store."""
    second = """    sm90.wgmma_wait_group 0
    sm90.bar_sync 2, 128
    %sb_v = vector.broadcast %sb : i32 to vector<4xi32>
    %b_addr = arith.addi %sb_v, %s_off : vector<4xi32>
    sm90.st_shared %b_addr, %img : vector<4xi32>, vector<4xi32>
    sm90.wgmma_fence
    %d2 = sm90.wgmma_mma_async %acc0, %da, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, i64
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
"""
    kernel = planted(ST_SHARED_GEMM, "    sm90.wgmma_wait_group 0\n", second)
    with pytest.raises(KernelHazardError, match=r"%d2 = sm90.wgmma_mma_async .*: reads wgmma operand B at shared "
                                                r"address 0x0 \(buffer 'b' \+ 0\), which thread 0 stored with st_shared "
                                                r"and has not made visible to the async proxy"):
        _run_st_shared(kernel, rng)
    c, reference = _run_st_shared(planted(ST_SHARED_GEMM, "    sm90.wgmma_wait_group 0\n", checked(second).replace(
          "    sm90.wgmma_fence\n", "    sm90.fence_proxy_async\n    sm90.bar_sync 3, 128\n    sm90.wgmma_fence\n")),
                                  rng)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


def test_a_fenced_table_of_stores_is_checked_once_until_a_store_changes_it(rng, monkeypatch):
    """A's buffer holds only generic stores, fenced for the warpgroup: after the first wgmma's full check, its
    lines count as verified (`SharedMemory.fenced_lines`), so a second read of it takes no check of its bytes;
    a store into it without fence_proxy_async (after a bar_sync ordering the first wgmma's completion) changes
    its lines, and the next wgmma reading A checks them again and reports the store."""
    from tessera.interpreters.sm90.shared_memory import SharedMemory

    checks = []
    full_check = SharedMemory.check_async_read

    def counted(self, op, addresses, readers, what):
        checks.append(what)
        return full_check(self, op, addresses, readers, what)

    monkeypatch.setattr(SharedMemory, "check_async_read", counted)
    again = """    sm90.wgmma_wait_group 0
    sm90.wgmma_fence
    %d2 = sm90.wgmma_mma_async %acc0, %da, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, i64
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
"""
    c, reference = _run_st_shared(planted(ST_SHARED_GEMM, "    sm90.wgmma_wait_group 0\n", again), rng)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)
    assert checks == ["wgmma operand A"]  # B landed by TMA: its lines' tags; A checked once, at the first wgmma
    stored = again.replace("    sm90.wgmma_fence\n", "    sm90.bar_sync 2, 128\n    sm90.st_shared %s_addr, %img : "
                           "vector<4xi32>, vector<4xi32>\n    sm90.wgmma_fence\n")
    with pytest.raises(KernelHazardError, match=r"%d2 = sm90.wgmma_mma_async .*: reads wgmma operand A at shared "
                                                r"address 0x800 \(buffer 'a' \+ 0\), which thread 0 stored with "
                                                r"st_shared and has not made visible to the async proxy"):
        _run_st_shared(planted(ST_SHARED_GEMM, "    sm90.wgmma_wait_group 0\n", stored), rng)


def test_other_warps_stores_need_a_bar_sync_after_the_fence(rng):
    kernel = planted(ST_SHARED_GEMM, "    sm90.bar_sync 1, 128\n", "")
    with pytest.raises(KernelHazardError, match=r"sm90.wgmma_mma_async .* which thread 0 stored and fenced with no "
                                                r"bar_sync since then ordering it before this warp " + _thread(32)):
        _run_st_shared(kernel, rng)


def test_ld_shared_of_another_threads_store_without_bar_sync_is_a_race(rng):
    kernel = planted(ST_SHARED_GEMM, "    sm90.fence_proxy_async\n",
                     "    %peek = sm90.ld_shared %sa : i32 -> i32\n    sm90.fence_proxy_async\n")
    with pytest.raises(KernelHazardError, match=r"%peek = sm90.ld_shared %sa .*: reads shared address 0x800 "
                                                r"\(buffer 'a' \+ 0\), which `sm90.st_shared .*` \(thread 0 .*\) "
                                                r"wrote, and no synchronisation orders the two \(race: .*\) "
                                                + _thread(1)):
        _run_st_shared(kernel, rng)


# endregion
# region 4. deadlocks


def test_wrong_parity_deadlocks(rng):
    kernel = planted(SS_GEMM, "%ok = sm90.mbarrier_try_wait_parity %bar, %zero_i32 : i32",
                     "%one = arith.constant 1 : i32\n      %ok = sm90.mbarrier_try_wait_parity %bar, %one : i32")
    with pytest.raises(DeadlockError, match=r"%ok = sm90.mbarrier_try_wait_parity %bar, %one : i32: deadlock: every "
                                            r"active thread spins on the mbarrier at shared address 0x4000 \(buffer "
                                            r"'full' \+ 0\) waiting for parity 1, but the barrier is in phase 1 "
                                            r"\(parity 1\) .* " + _thread(0)):
        _run_ss(kernel, rng)


def test_missing_expect_tx_deadlocks(rng):
    kernel = planted(SS_GEMM, "      sm90.mbarrier_arrive_expect_tx %bar, 16384\n", "")
    with pytest.raises(DeadlockError, match=r"phase 0 \(parity 0\) with 1 of 1 arrivals pending and tx-count -16384"):
        _run_ss(kernel, rng)


def test_consumers_that_never_release_a_stage_deadlock_both_sides(rng):
    kernel = planted(WS_GEMM, "        sm90.mbarrier_arrive %empty_s\n", "")
    with pytest.raises(DeadlockError, match=r"try_wait_parity %full_s, %phase : i32: deadlock: .*buffer 'full' \+ 0.*"
                                            + _thread(0) + r"; meanwhile .*try_wait_parity %empty_s, %parity : "
                                            r"i32: .*buffer 'empty' \+ 0\) waiting for parity 0, .* 128 of 128 "
                                            r"arrivals pending .*" + _thread(128)):
        _run_ws(kernel, rng)


def test_named_barrier_the_other_warpgroup_never_reaches_deadlocks(rng):
    kernel = planted(WS_GEMM, '      sm90.setmaxnreg "dec" 40\n',
                     '      sm90.setmaxnreg "dec" 40\n      sm90.bar_sync 2, 256\n')
    # The consumers block first (the producer never issues), so their wait leads the message.
    with pytest.raises(DeadlockError, match=r"%full_s, %phase : i32: deadlock: .*; meanwhile sm90.bar_sync 2, 256: "
                                            r"waits at named barrier 2 for 256 threads, but only 128 arrive "
                                            + _thread(128)):
        _run_ws(kernel, rng, k=64)


# endregion
# region 5. out-of-bounds shared memory and broken mbarrier rules


def test_out_of_bounds_shared_load_is_reported(rng):
    kernel = planted(SS_GEMM, "    %da0 =", "    %far = arith.constant 16392 : i32\n"
                                           "    %peek = sm90.ld_shared %far : i32 -> i32\n    %da0 =")
    with pytest.raises(KernelHazardError, match=r"%peek = sm90.ld_shared %far : i32 -> i32: loads 4 bytes at shared "
                                                r"address 0x4008, outside the CTA's 16392 bytes of shared memory "
                                                + _thread(0)):
        _run_ss(kernel, rng)


def test_ld_shared_address_off_its_promised_alignment_is_reported(rng):
    """`aligned` is a promise the printer's ld.shared.v2 relies on: an address off it stops the run."""
    kernel = planted(SS_GEMM, "    %da0 =", "    %odd = arith.constant 4 : i32\n"
                                           "    %peek = sm90.ld_shared %odd {column_bytes = array<i32: 0, 4>, "
                                           "aligned = 8 : i64} : i32 -> vector<2xi32>\n    %da0 =")
    with pytest.raises(KernelHazardError, match=r"%peek = sm90.ld_shared %odd .*: the address promised aligned at "
                                                r"shared address 0x4 .*which is not 8-byte aligned " + _thread(0)):
        _run_ss(kernel, rng)

def test_tx_count_overflow_is_reported(rng):
    kernel = planted(SS_GEMM, "sm90.mbarrier_arrive_expect_tx %bar, 16384",
                     "sm90.mbarrier_arrive_expect_tx %bar, 1048575\n      sm90.mbarrier_arrive_expect_tx %bar, 1048575")
    with pytest.raises(KernelHazardError, match=r"sm90.mbarrier_arrive_expect_tx %bar, 1048575: mbarrier expect_tx "
                                                r"takes tx-count to 2097150, outside \+-1048575 .*" + _thread(0)):
        _run_ss(kernel, rng)


def test_more_arrivals_than_the_phase_expects_are_reported(rng):
    kernel = planted(SS_GEMM, "    scf.if %leader {\n      sm90.mbarrier_arrive_expect_tx",
                     "    sm90.mbarrier_arrive %bar\n    scf.if %leader {\n      sm90.mbarrier_arrive_expect_tx")
    with pytest.raises(KernelHazardError, match=r"sm90.mbarrier_arrive %bar: arrives on the mbarrier at shared address "
                                                r"0x4000 .* more threads arrive than the 1 the barrier expects "
                                                + _thread(1)):
        _run_ss(kernel, rng)


def test_use_before_init_is_reported(rng):
    kernel = planted(SS_GEMM, "      sm90.mbarrier_init %bar, 1\n", "")
    with pytest.raises(KernelHazardError, match=r"sm90.mbarrier_arrive_expect_tx %bar, 16384: uses the mbarrier at "
                                                r"shared address 0x4000 \(buffer 'full' \+ 0\) before mbarrier_init "
                                                + _thread(0)):
        _run_ss(kernel, rng)


def test_init_not_yet_visible_to_other_threads_is_reported(rng):
    kernel = planted(SS_GEMM, "    sm90.bar_sync 0, 128\n    scf.if %leader {\n      sm90.mbarrier_arrive_expect_tx",
                     "    scf.if %leader {\n      sm90.mbarrier_arrive_expect_tx")
    with pytest.raises(KernelHazardError, match=r"try_wait_parity %bar, %zero_i32 : i32: uses the mbarrier at shared "
                                                r"address 0x4000 .*, which thread 0 initialised with no bar_sync since "
                                                r".*" + _thread(1)):
        _run_ss(kernel, rng)


def test_init_by_every_thread_reinitialises_a_live_barrier(rng):
    kernel = planted(SS_GEMM,
                     "    scf.if %leader {\n      sm90.mbarrier_init %bar, 1\n      sm90.fence_mbarrier_init\n    }",
                     "    sm90.mbarrier_init %bar, 1")
    with pytest.raises(KernelHazardError, match=r"sm90.mbarrier_init %bar, 1: initialises the mbarrier at shared "
                                                r"address 0x4000 .* again while it is live \(mbarrier_inval it "
                                                r"first\) " + _thread(1)):
        _run_ss(kernel, rng)


# endregion
# region warp- and warpgroup-collective ops executed by part of their group; tensor-map rules


def test_bar_sync_in_a_divergent_warp_is_reported(rng):
    kernel = planted(SS_GEMM, "      sm90.fence_mbarrier_init\n",
                     "      sm90.fence_mbarrier_init\n      sm90.bar_sync 1, 32\n")
    with pytest.raises(KernelHazardError, match=r"sm90.bar_sync 1, 32: divergent barrier: warp 0 executes it with only "
                                                r"some of its threads active \(thread 1 is not\) " + _thread(0)):
        _run_ss(kernel, rng)


def test_shuffle_by_half_a_warp_is_reported(rng):
    kernel = planted(QUAD_ROW_MAX, '    %o1 = sm90.shfl_sync "bfly" %x, 1, 31 : vector<2xf32>\n',
                     '    %c16 = arith.constant 16 : index\n    %low = arith.cmpi ult, %tid, %c16 : index\n'
                     '    %o1 = scf.if %low -> (vector<2xf32>) {\n'
                     '      %s = sm90.shfl_sync "bfly" %x, 1, 31 : vector<2xf32>\n      scf.yield %s : vector<2xf32>\n'
                     '    } else {\n      scf.yield %x : vector<2xf32>\n    }\n')
    x = rng.standard_normal((32, 2)).astype(np.float32)
    with pytest.raises(KernelHazardError, match=r"sm90.shfl_sync .*: divergent shfl_sync .*: warp 0 executes it with "
                                                r"only some of its threads active \(thread 16 is not\) " + _thread(0)):
        run_target_kernel(_kernel(kernel), [x, np.zeros_like(x)], {})


def test_setmaxnreg_by_part_of_a_warpgroup_is_reported(rng):
    kernel = planted(WS_GEMM, '      sm90.setmaxnreg "dec" 40\n      %issuer = arith.cmpi eq, %tid, %c128 : index\n'
                              '      scf.if %issuer {\n',
                     '      %issuer = arith.cmpi eq, %tid, %c128 : index\n      scf.if %issuer {\n'
                     '        sm90.setmaxnreg "dec" 40\n')
    with pytest.raises(KernelHazardError, match=r'sm90.setmaxnreg "dec" 40: divergent setmaxnreg: warpgroup 1 '
                                                r"executes it with only some of its threads active"):
        _run_ws(kernel, rng)


def test_tma_box_wider_than_its_swizzle_is_refused_at_launch(rng):
    kernel = checked(SS_GEMM).replace("sm90.swizzle = 128 : i64", "sm90.swizzle = 64 : i64")
    with pytest.raises(ValueError, match=r"argument 0 \(%a_map\): cuTensorMapEncodeTiled would refuse this map: with "
                                         r"swizzle 64B the inner box dimension .* must be <= 64 bytes, got 128"):
        _run_ss(kernel, rng)


def test_tma_into_a_buffer_of_another_swizzle_is_reported(rng):
    kernel = planted(SS_GEMM, 'sm90.shared_buffer "a" offset 0 size 8192 align 1024 swizzle 128',
                     'sm90.shared_buffer "a" offset 0 size 8192 align 1024 swizzle 64')
    with pytest.raises(KernelHazardError, match=r"sm90.tma_load %a_map.*: tensor map a_map swizzles 128B but its "
                                                r"destination, buffer 'a', is declared with swizzle 64 " + _thread(0)):
        _run_ss(kernel, rng)


# endregion
# region 6. FlashAttention-3's warp specialization: mbarrier phases, named-barrier ping-pong, setmaxnreg

# 384 threads: warpgroup 0 is the producer (setmaxnreg.dec 24), warpgroups 1 and 2 consume (setmaxnreg.inc 240)
# and take turns through named barriers 1 and 2 (bar.sync on their own, bar.arrive on the other's; warpgroup 2
# lets warpgroup 1 go first), each turn appending the warpgroup's id to a log through a shared counter. The
# consumers' 256 threads then arrive once each on the mbarrier "consumed" (expected count 256), which
# completes its phase 0 for the producer. The producer first tests parity 1 on the fresh barrier "fresh"
# (phase 0): the phase before the first counts as completed, so it passes at once. flags = [that test, 1].
PINGPONG = """\
builtin.module {
  func.func @pingpong(
      %log_ptr: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<8>, tile.role = "out"},
      %flag_ptr: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<2>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 384 : i64, smem_bytes = 24 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c128 = arith.constant 128 : index
    %zero = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %four = arith.constant 4 : i32
    %true = arith.constant true
    %m1 = arith.constant dense<true> : vector<1xi1>
    %consumed = sm90.shared_buffer "consumed" offset 0 size 8 align 8 swizzle 0 : i32
    %fresh = sm90.shared_buffer "fresh" offset 8 size 8 align 8 swizzle 0 : i32
    %turn = sm90.shared_buffer "turn" offset 16 size 8 align 8 swizzle 0 : i32
    %leader = arith.cmpi eq, %tid, %c0 : index
    scf.if %leader {
      sm90.mbarrier_init %consumed, 256
      sm90.mbarrier_init %fresh, 1
      sm90.fence_mbarrier_init
      sm90.st_shared %turn, %zero : i32, i32
    }
    sm90.bar_sync 0, 384
    %wg = arith.divui %tid, %c128 : index
    %wl = arith.remui %tid, %c128 : index
    %wg_leader = arith.cmpi eq, %wl, %c0 : index
    %producer = arith.cmpi eq, %wg, %c0 : index
    scf.if %producer {
      sm90.setmaxnreg "dec" 24
      %passed = sm90.mbarrier_try_wait_parity %fresh, %one : i32
      scf.while () : () -> () {
        %ok = sm90.mbarrier_try_wait_parity %consumed, %zero : i32
        %again = arith.xori %ok, %true : i1
        scf.condition(%again)
      } do {
        scf.yield
      }
      scf.if %leader {
        %p32 = arith.extui %passed : i1 to i32
        %p32v = vector.broadcast %p32 : i32 to vector<2xi32>
        %flags = vector.insert %one, %p32v[1] : i32 into vector<2xi32>
        %flag_offsets = arith.constant dense<[0, 4]> : vector<2xi64>
        %m2 = arith.constant dense<true> : vector<2xi1>
        sm90.st_global %flag_ptr[%flag_offsets], %flags, %m2 : vector<2xi64>, vector<2xi32>, vector<2xi1>
      }
    } else {
      sm90.setmaxnreg "inc" 240
      %wg32 = arith.index_cast %wg : index to i32
      %wg_v = vector.broadcast %wg32 : i32 to vector<1xi32>
      %first = arith.cmpi eq, %wg, %c1 : index
      scf.if %first {
        scf.for %k = %c0 to %c4 step %c1 {
          sm90.bar_sync 1, 256
          scf.if %wg_leader {
            %n = sm90.ld_shared %turn : i32 -> i32
            %n1 = arith.addi %n, %one : i32
            sm90.st_shared %turn, %n1 : i32, i32
            %n4 = arith.muli %n, %four : i32
            %n64 = arith.extsi %n4 : i32 to i64
            %slot = vector.broadcast %n64 : i64 to vector<1xi64>
            sm90.st_global %log_ptr[%slot], %wg_v, %m1 : vector<1xi64>, vector<1xi32>, vector<1xi1>
          }
          sm90.bar_arrive 2, 256
        }
        sm90.bar_sync 1, 256
      } else {
        sm90.bar_arrive 1, 256
        scf.for %k = %c0 to %c4 step %c1 {
          sm90.bar_sync 2, 256
          scf.if %wg_leader {
            %n = sm90.ld_shared %turn : i32 -> i32
            %n1 = arith.addi %n, %one : i32
            sm90.st_shared %turn, %n1 : i32, i32
            %n4 = arith.muli %n, %four : i32
            %n64 = arith.extsi %n4 : i32 to i64
            %slot = vector.broadcast %n64 : i64 to vector<1xi64>
            sm90.st_global %log_ptr[%slot], %wg_v, %m1 : vector<1xi64>, vector<1xi32>, vector<1xi1>
          }
          sm90.bar_arrive 1, 256
        }
      }
      sm90.mbarrier_arrive %consumed
    }
    func.return
  }
}
"""

# The consumers arrive on "consumed" where they are one strand (256 threads, one op) or, in each branch, as two
# strands of 128 arrivals each.
_ARRIVE_AFTER_THE_BRANCHES = "      }\n      sm90.mbarrier_arrive %consumed\n    }\n    func.return"
_ARRIVE_IN_EACH_BRANCH = ("        sm90.mbarrier_arrive %consumed\n      }\n    }\n    func.return")


def _pingpong(arrive_in_each_branch: bool = False) -> str:
    if not arrive_in_each_branch:
        return PINGPONG
    text = planted(PINGPONG, "        sm90.bar_sync 1, 256\n      } else {",
                   "        sm90.bar_sync 1, 256\n        sm90.mbarrier_arrive %consumed\n      } else {")
    return planted(text, _ARRIVE_AFTER_THE_BRANCHES, _ARRIVE_IN_EACH_BRANCH)


def _run_pingpong(text: str) -> tuple[np.ndarray, np.ndarray]:
    log, flags = np.full(8, -1, np.int32), np.zeros(2, np.int32)
    run_target_kernel(_kernel(text), [log, flags], {})
    return log, flags


@pytest.mark.parametrize("arrive_in_each_branch", [False, True], ids=["one_arrive_of_256", "two_arrives_of_128"])
def test_fa3_consumers_ping_pong_and_release_the_producer(arrive_in_each_branch):
    log, flags = _run_pingpong(_pingpong(arrive_in_each_branch))
    np.testing.assert_array_equal(log, [1, 2] * 4)
    np.testing.assert_array_equal(flags, [1, 1])


def test_parity_0_on_a_fresh_barrier_waits_for_its_first_phase():
    kernel = planted(PINGPONG, "%passed = sm90.mbarrier_try_wait_parity %fresh, %one",
                     "%passed = sm90.mbarrier_try_wait_parity %fresh, %zero")
    with pytest.raises(DeadlockError, match=r"try_wait_parity %fresh, %zero : i32: deadlock: every active thread spins on "
                                            r"the mbarrier at shared address 0x8 \(buffer 'fresh' \+ 0\) waiting for parity "
                                            r"0, but the barrier is in phase 0 \(parity 0\) with 1 of 1 arrivals pending"):
        _run_pingpong(kernel)


def test_an_expected_count_the_consumers_do_not_reach_deadlocks_the_producer():
    kernel = planted(PINGPONG, "sm90.mbarrier_init %consumed, 256", "sm90.mbarrier_init %consumed, 384")
    with pytest.raises(DeadlockError, match=r"try_wait_parity %consumed, %zero : i32: deadlock: .* phase 0 \(parity 0\) "
                                            r"with 128 of 384 arrivals pending .*" + _thread(0)):
        _run_pingpong(kernel)


def test_a_consumer_that_never_hands_over_the_first_turn_deadlocks_both():
    kernel = planted(PINGPONG, "        sm90.bar_arrive 1, 256\n        scf.for", "        scf.for")
    # Warpgroup 1 blocks first; warpgroup 2, started then, blocks last and leads the message.
    with pytest.raises(DeadlockError, match=r"sm90.bar_sync 2, 256: deadlock: waits at named barrier 2 for 256 threads, "
                                            r"but only 128 arrive " + _thread(256) + r"; meanwhile .*%consumed.*; "
                                            r"sm90.bar_sync 1, 256: waits at named barrier 1 for 256 threads, but only "
                                            r"128 arrive " + _thread(128)):
        _run_pingpong(kernel)


def test_a_turn_taken_before_the_barrier_is_a_shared_memory_race():
    # Warpgroup 2 logs, then waits for its turn: warpgroup 1 reads the counter warpgroup 2 stored unordered.
    kernel = planted(PINGPONG, "          sm90.bar_sync 2, 256\n          scf.if %wg_leader {",
                     "          scf.if %wg_leader {")
    kernel = planted(kernel, "          }\n          sm90.bar_arrive 1, 256",
                     "          }\n          sm90.bar_sync 2, 256\n          sm90.bar_arrive 1, 256")
    with pytest.raises(KernelHazardError, match=r"%n = sm90.ld_shared %turn : i32 -> i32: reads shared address 0x10 "
                                                r"\(buffer 'turn' \+ 0\), which `sm90.st_shared .*` \(thread 256 .*\) "
                                                r"wrote, and no synchronisation orders the two \(race: .*\) "
                                                + _thread(128)):
        _run_pingpong(kernel)


def test_a_named_barrier_arrival_with_another_thread_count_is_reported():
    kernel = planted(PINGPONG, "        sm90.bar_arrive 1, 256\n        scf.for",
                     "        sm90.bar_arrive 1, 384\n        scf.for")
    with pytest.raises(KernelHazardError, match=r"sm90.bar_arrive 1, 384: named barrier 1 expects 256 threads from "
                                                r"earlier arrivals, this one says 384 " + _thread(256)):
        _run_pingpong(kernel)


def test_a_register_split_past_the_ctas_registers_deadlocks():
    """The CTA owns 384 x 168 = 64512 registers (ptxas's count at entry): 24 + 2 x 240 per 128 threads fill them;
    with 248 for the consumers the second one's setmaxnreg.inc waits forever for registers no warpgroup gives
    back, as on the GPU (the 65536 of the SM are not the CTA's)."""
    kernel = planted(PINGPONG, 'sm90.setmaxnreg "inc" 240', 'sm90.setmaxnreg "inc" 248')
    with pytest.raises(KernelHazardError, match=r'sm90.setmaxnreg "inc" 248: deadlock: setmaxnreg.inc in warpgroup 2 '
                                                r"waits for 10240 registers of the CTA's pool, which holds 8192 .* the "
                                                r"CTA owns 384 x 168 = 64512 registers"):
        _run_pingpong(kernel)


# endregion


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_wgmma_operand_records_marked_by_chunk_are_those_marked_by_byte(swizzle):
    """A wgmma operand's per-byte read records are written by 16-byte chunk where its bytes fill whole chunks
    (`wgmma_operands.OperandBytes.mark`): the same records as byte by byte, for both majors, bf16 and 8-bit k-steps."""
    from tessera.interpreters.sm90.wgmma_operands import operand_addresses
    from tessera.sm90.descriptor import encode_descriptor

    descriptor = encode_descriptor(1024, 2048 if swizzle else 128, 1024 if swizzle else 256, swizzle)
    for major in ("K", "MN"):
        for extent, k, element_bytes in ((64, 16, 2), (176, 16, 2), (128, 32, 1)):
            operand = operand_addresses(descriptor, major, extent, k, element_bytes)
            by_chunk, by_byte = np.full(1 << 16, -1, np.int64), np.full(1 << 16, -1, np.int64)
            operand.mark(by_chunk, 7)
            by_byte[operand.byte_addresses] = 7
            assert np.array_equal(by_chunk, by_byte)
            assert swizzle == 0 or operand.chunks is not None  # swizzled k-steps read whole chunks
