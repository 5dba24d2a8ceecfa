"""Uniform descriptors (tessera.regalloc.uniform): warp-uniform wgmma descriptors held over a loop cost no
per-thread registers in the allocator's count while the uniform file has room, and the full count otherwise;
the uniform register file's size checked against ptxas' SASS."""

from __future__ import annotations

import re

import pytest
from xdsl.dialects import func

from tessera.ir import parse_module
from tessera.regalloc import allocate_registers
from tessera.regalloc.uniform import UNIFORM_DESCRIPTOR_REGISTERS, uniform_descriptors, warp_uniform_values
from tessera.sm90.warp import UNIFORM_REGISTERS_PER_WARP
from tessera.toolchain import find_nvdisasm, find_ptxas


def _kernel(steps: int, address: str = "%wgu") -> func.FuncOp:
    """A loop of `steps + 1` SS wgmmas reading A descriptors made before it from `address` (%wgu: the
    warpgroup index broadcast from lane 0, uniform; %wgi: the same from tid.x, not provably uniform)."""
    advances = "\n".join(f"    %da{k} = sm90.descriptor_advance %da0, {32 * k} : i64" for k in range(1, steps + 1))
    chain = "\n".join(f"      %d{k} = sm90.wgmma_mma_async %d{k - 1}, %da{k}, %db n 64 type \"bf16\" trans 0, 1"
                      f" : vector<32xf32>, i64" for k in range(1, steps + 1))
    text = f"""builtin.module {{
  func.func @k(%out: i64, %n: index) {{
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c128 = arith.constant 128 : index
    %wg = arith.divui %tid, %c128 : index
    %wgi = arith.index_cast %wg : index to i32
    %wgu = sm90.shfl_sync "idx" %wgi, 0, 31 : i32
    %c8192 = arith.constant 8192 : i32
    %sa = sm90.shared_buffer "a" offset 0 size 16384 align 1024 swizzle 128 : i32
    %sb = sm90.shared_buffer "b" offset 16384 size 8192 align 1024 swizzle 128 : i32
    %slot = arith.muli {address}, %c8192 : i32
    %addr = arith.addi %sa, %slot : i32
    %da0 = sm90.make_descriptor %addr lbo 16 sbo 1024 swizzle 128 : i64
{advances}
    %db = sm90.make_descriptor %sb lbo 16 sbo 1024 swizzle 128 : i64
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    %all = arith.constant dense<true> : vector<32xi1>
    %off = arith.constant dense<4> : vector<32xi64>
    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %acc0) -> (vector<32xf32>) {{
      sm90.wgmma_fence
      %d0 = sm90.wgmma_mma_async %acc, %da0, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, i64
{chain}
      sm90.wgmma_commit_group
      sm90.wgmma_wait_group 0
      scf.yield %d{steps} : vector<32xf32>
    }}
    sm90.st_global %out[%off], %r, %all : vector<32xi64>, vector<32xf32>, vector<32xi1>
    func.return
  }}
}}"""
    return next(op for op in parse_module(text).walk() if isinstance(op, func.FuncOp))


def _named(fn: func.FuncOp, values) -> set[str]:
    return {v.name_hint for v in values}


def test_uniform_sources():
    """tid.x is not uniform; a full-warp idx shuffle of it, shared buffers, constants, arguments and what
    integer arithmetic makes of them are."""
    fn = _kernel(2)
    names = _named(fn, warp_uniform_values(fn))
    assert {"wgu", "sa", "slot", "addr", "da0", "da1", "da2", "db", "c8192", "out", "n"} <= names
    assert not {"tid", "wg", "wgi"} & names
    assert _named(fn, uniform_descriptors(fn)) == {"da0", "da1", "da2", "db"}
    lane_derived = _kernel(2, "%wgi")
    assert _named(lane_derived, uniform_descriptors(lane_derived)) == {"db"}


@pytest.mark.parametrize("steps", [3, 7])
def test_uniform_descriptors_cost_no_per_thread_registers(steps):
    """The same kernel with the A descriptors' address from the shuffled index and from tid.x: the pressure
    differs by the 2 registers of each A descriptor (the B descriptor is uniform in both); the PTX register
    names stay .b64 %rd ones."""
    uniform, lane = allocate_registers(_kernel(steps)), allocate_registers(_kernel(steps, "%wgi"))
    assert lane.peak - uniform.peak == 2 * (steps + 1)
    fn = _kernel(steps)
    names = allocate_registers(fn).names
    assert all(names[v][0].startswith("%rd") for v in uniform_descriptors(fn))


def test_too_many_for_the_uniform_file_are_all_counted():
    """More descriptors live at once than `UNIFORM_DESCRIPTOR_REGISTERS` allow: every one is counted as 2
    per-thread registers, as if none were uniform (never a fit that depends on uniform registers ptxas may not
    have)."""
    steps = UNIFORM_DESCRIPTOR_REGISTERS // 2  # steps + 1 A descriptors and B: over the uniform file's share
    assert 2 * (steps + 2) > UNIFORM_DESCRIPTOR_REGISTERS
    uniform, lane = allocate_registers(_kernel(steps)), allocate_registers(_kernel(steps, "%wgi"))
    assert uniform.peak == lane.peak + 2  # B too is counted now


@pytest.mark.skipif(find_ptxas() is None or find_nvdisasm() is None, reason="needs ptxas and nvdisasm")
def test_uniform_register_file_against_sass():
    """ptxas names uniform registers UR0-UR62 and the zero register URZ (never UR63) on sm_90a, and a GEMM's
    wgmma descriptors live there (HGMMA reads them from uniform registers)."""
    import tessera.kernels
    from tessera.passes import SPECIALIZED_PIPELINE, apply_pipeline
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers
    from tessera.toolchain import compile_ptx
    from tessera.sass import disassemble

    module = tessera.kernels.gemm()
    apply_pipeline(module, SPECIALIZED_PIPELINE + ",allocate-registers")
    result = compile_ptx(print_ptx(module, registers=allocated_registers, comments=False))
    sass = disassemble(result.cubin)
    numbers = {int(n) for n in re.findall(r"\bUR(\d+)\b", sass)}
    assert numbers and max(numbers) < UNIFORM_REGISTERS_PER_WARP == 63
    assert "URZ" in sass
    assert re.search(r"HGMMA\.\S+ R\d+, gdesc\[UR\d+\]", sass), "HGMMA reads its descriptors from URx"
