"""The FP8 wgmma in Target IR: `sm90.wgmma_mma_async ... type "e4m3"` (m64nNk32, K-major operands only), run in
the CTA simulator and, printed, in the PTX executor and through ptxas: a 64 x 64 x 128 e4m3 GEMM through TMA
(the bytes of a UINT8 tensor map) into 128-byte-swizzled buffers, four k32 steps of 32 bytes each, exactly
like bf16's k16 steps, and an RS form whose A registers hold four bytes each."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

from tessera.ir import parse_module

from test_sm90_simulator import _run_c
from text_edits import planted

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def warpgroup_kernel(name: str, inputs: list[str], buffers: list[tuple[str, int, int]], loads: list[tuple[str, str]],
                     prepare: str, mma: str) -> str:
    """The Target IR text of a one-CTA, one-warpgroup wgmma kernel @`name`: parameters `inputs` (sources 0..,
    each a `%name: type {attrs}` line) and the f32 [64, 64] output %c_ptr after them; shared `buffers` (name,
    bytes, swizzle) laid out in order, 1024-aligned, as %s<name>, then the mbarrier "full" (%bar); the leader
    initialises it and TMA-loads each (map, buffer) of `loads` at (0, 0) expecting their bytes; every thread
    runs `prepare` (its coordinates %w, %lane, %g, %c, %row = 16 %w + %g and %col = 2 %c are defined), waits
    for phase 0, runs `mma` (which leaves the m64n64 f32 accumulator in %d) and stores %d in the accumulator
    layout (row 16w + g (+8), columns 2c (+1) of each 8-column block: facts.accumulator_coords)."""
    offsets, offset = {}, 0
    for buffer, size, _ in buffers:
        offsets[buffer], offset = offset, offset + size
    params = ",\n".join(f"      {line}" for line in inputs)
    shared = "\n".join(f'    %s{b} = sm90.shared_buffer "{b}" offset {offsets[b]} size {size} align 1024 '
                        f'swizzle {sw} : i32' for b, size, sw in buffers)
    tma = "\n".join(f"      sm90.tma_load %{m}[%zero_i32, %zero_i32], %s{b}, %bar : i32, i32" for m, b in loads)
    expect = sum(size for b, size, _ in buffers if b in {b for _, b in loads})
    return f"""\
builtin.module {{
  func.func @{name}(
{params},
      %c_ptr: i64 {{sm90.source = {len(inputs)} : i64, sm90.element_type = f32, tile.dims = #tile.dims<64, 64>, tile.role = "out"}})
      attributes {{sm90.kernel = {{threads = 128 : i64, smem_bytes = {offset + 8} : i64}},
                  tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c16 = arith.constant 16 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %zero_i32 = arith.constant 0 : i32
    %true = arith.constant true
    %leader = arith.cmpi eq, %tid, %c0 : index
{shared}
    %bar = sm90.shared_buffer "full" offset {offset} size 8 align 8 swizzle 0 : i32
    scf.if %leader {{
      sm90.mbarrier_init %bar, 1
      sm90.fence_mbarrier_init
    }}
    sm90.bar_sync 0, 128
    scf.if %leader {{
      sm90.mbarrier_arrive_expect_tx %bar, {expect}
{tma}
    }}
    %w = arith.divui %tid, %c32 : index
    %lane = arith.remui %tid, %c32 : index
    %g = arith.divui %lane, %c4 : index
    %c = arith.remui %lane, %c4 : index
    %r16 = arith.muli %w, %c16 : index
    %row = arith.addi %r16, %g : index
    %col = arith.muli %c, %c2 : index
{prepare}    scf.while () : () -> () {{
      %ok = sm90.mbarrier_try_wait_parity %bar, %zero_i32 : i32
      %again = arith.xori %ok, %true : i1
      scf.condition(%again)
    }} do {{
      scf.yield
    }}
{mma}    %rowoff = arith.muli %row, %c64 : index
    %elem = arith.addi %rowoff, %col : index
    %elem64 = arith.index_cast %elem : index to i64
    %base = vector.broadcast %elem64 : i64 to vector<32xi64>
    %pattern = arith.constant dense<[0, 1, 512, 513, 8, 9, 520, 521, 16, 17, 528, 529, 24, 25, 536, 537, 32, 33, 544, 545, 40, 41, 552, 553, 48, 49, 560, 561, 56, 57, 568, 569]> : vector<32xi64>
    %four = arith.constant dense<4> : vector<32xi64>
    %elems = arith.addi %base, %pattern : vector<32xi64>
    %offsets = arith.muli %elems, %four : vector<32xi64>
    %mask = arith.constant dense<true> : vector<32xi1>
    sm90.st_global %c_ptr[%offsets], %d, %mask : vector<32xi64>, vector<32xf32>, vector<32xi1>
    sm90.bar_sync 0, 128
    scf.if %leader {{
      sm90.mbarrier_inval %bar
    }}
    func.return
  }}
}}
"""


def fp8_gemm(atype: str = "e4m3") -> str:
    """C = A B^T for 8-bit A and B [64, 128] of type `atype` (the bf16 GEMM of test_sm90_simulator with 8-bit
    operands): TMA (UINT8 maps) into 128-byte-swizzled buffers, four k32 steps of 32 bytes each."""
    element = {"e4m3": "f8E4M3FN", "e5m2": "f8E5M2"}[atype]
    inputs = [f"%{m}: !sm90.tensormap {{sm90.element_type = {element}, sm90.source = {i} : i64, sm90.box = [128 : i64, "
              f"64 : i64], sm90.swizzle = 128 : i64, tile.dims = #tile.dims<64, 128>}}"
              for i, m in enumerate(("a_map", "b_map"))]
    mma = f"""    %da0 = sm90.make_descriptor %sa lbo 16 sbo 1024 swizzle 128 : i64
    %db0 = sm90.make_descriptor %sb lbo 16 sbo 1024 swizzle 128 : i64
    %step = arith.constant 2 : i64
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    sm90.wgmma_fence
    %d, %da, %db = scf.for %k = %c0 to %c4 step %c1 iter_args(%acc = %acc0, %a = %da0, %b = %db0) -> (vector<32xf32>, i64, i64) {{
      %acc2 = sm90.wgmma_mma_async %acc, %a, %b n 64 type "{atype}" trans 0, 0 : vector<32xf32>, i64
      %a2 = arith.addi %a, %step : i64
      %b2 = arith.addi %b, %step : i64
      scf.yield %acc2, %a2, %b2 : vector<32xf32>, i64, i64
    }}
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
"""
    return warpgroup_kernel("gemm_fp8", inputs, [("a", 8192, 128), ("b", 8192, 128)],
                            [("a_map", "a"), ("b_map", "b")], "", mma)


def _operands(rng, dtype=E4M3):
    a = (rng.standard_normal((64, 128)) * 4).astype(dtype)
    b = (rng.standard_normal((64, 128)) * 4).astype(dtype)
    return a, b, a.astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("atype, dtype", [("e4m3", E4M3), ("e5m2", E5M2)])
def test_fp8_ss_wgmma_in_the_cta_simulator(atype, dtype, rng):
    a, b, reference = _operands(rng, dtype)
    c, _ = _run_c(fp8_gemm(atype), [a, b], reference)
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-6)


def test_fp8_ss_wgmma_printed_runs_in_the_ptx_executor_and_ptxas_takes_it(rng):
    a, b, reference = _operands(rng)
    c, text = _run_ptx(fp8_gemm(), [a, b])
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-6)
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3" in text
    _assert_ptxas_clean(text)


@pytest.mark.parametrize("trans, operand", [("1, 0", "A"), ("0, 1", "B")])
def test_fp8_wgmma_refuses_mn_major_operands(trans, operand):
    with pytest.raises(VerifyException, match=f"an MN-major {operand} .* needs .f16 or .bf16 multiplicands, got .e4m3"):
        parse_module(planted(fp8_gemm(), 'type "e4m3" trans 0, 0', f'type "e4m3" trans {trans}'))


def test_rs_fp8_a_registers_are_read_by_figure_88():
    """The simulator's register A for 8-bit types: byte i % 4 of register i / 4 of thread t is A[16w + row, k]
    with (row, k) from Figure 88's formulas (groupID + 8 for 4 <= i < 8 and i >= 12; 4 threadID_in_group +
    (i & 3), + 16 for i >= 8)."""
    from tessera.interpreters.sm90.wgmma import WgmmaUnit

    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 32)).astype(E4M3)
    registers = np.zeros((128, 16), np.uint8)
    for t in range(128):
        lane, w = t % 32, t // 32
        for i in range(16):
            row = lane // 4 + (8 if (4 <= i < 8 or i >= 12) else 0)
            k = 4 * (lane % 4) + (i & 3) + (16 if i >= 8 else 0)
            registers[t, i] = a[16 * w + row, k].view(np.uint8)
    tile = WgmmaUnit._register_a(registers.view(np.uint32).view(np.int32), "e4m3", 64, 32)
    np.testing.assert_array_equal(tile, a.astype(np.float32))


# P.V with an 8-bit P in registers: each thread loads its 16 elements of a [64, 32] f32 P tile in the m64n32
# accumulator layout, packs them with sm90.cvt_pack_fp8, and multiplies by V^T [64, 32] (K-major, 32-byte rows,
# 32-byte swizzle) whose keys are in P8_KEY_ORDER: C = e4m3(P) V.
RS_FP8 = warpgroup_kernel(
    "pv_fp8",
    ["%p_ptr: i64 {sm90.source = 0 : i64, sm90.element_type = f32, tile.dims = #tile.dims<64, 32>}",
     "%vt_map: !sm90.tensormap {sm90.element_type = f8E4M3FN, sm90.source = 1 : i64, sm90.box = [32 : i64, 64 : i64], "
     "sm90.swizzle = 32 : i64, tile.dims = #tile.dims<64, 32>}"],
    [("vt", 2048, 32)], [("vt_map", "vt")],
    prepare="""\
    %p_row = arith.muli %row, %c32 : index
    %p_elem = arith.addi %p_row, %col : index
    %p_elem64 = arith.index_cast %p_elem : index to i64
    %p_base = vector.broadcast %p_elem64 : i64 to vector<16xi64>
    %p_pattern = arith.constant dense<[0, 1, 256, 257, 8, 9, 264, 265, 16, 17, 272, 273, 24, 25, 280, 281]> : vector<16xi64>
    %four16 = arith.constant dense<4> : vector<16xi64>
    %p_elems = arith.addi %p_base, %p_pattern : vector<16xi64>
    %p_offsets = arith.muli %p_elems, %four16 : vector<16xi64>
    %all16 = arith.constant dense<true> : vector<16xi1>
    %p_f32 = sm90.ld_global %p_ptr[%p_offsets], %all16 : vector<16xi64>, vector<16xi1> -> vector<16xf32>
    %a_regs = sm90.cvt_pack_fp8 %p_f32 type "e4m3" : vector<16xf32> -> vector<4xi32>
""",
    mma="""\
    %db = sm90.make_descriptor %svt lbo 16 sbo 256 swizzle 32 : i64
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    sm90.wgmma_fence
    %d = sm90.wgmma_mma_async %acc0, %a_regs, %db n 64 type "e4m3" trans 0, 0 : vector<32xf32>, vector<4xi32>
    sm90.wgmma_commit_group
    sm90.wgmma_wait_group 0
""")


def _pv(rng, key_order: bool):
    """(P f32 [64, 32] with values beyond e4m3's 448 (saturated), V e4m3 [32 keys, 64] (as V^T [64, 32] with
    its keys in P8_KEY_ORDER where `key_order`), e4m3(P) V in float64)."""
    from tessera.sm90 import facts

    p = (rng.random((64, 32)) * 500).astype(np.float32)
    v = rng.standard_normal((32, 64)).astype(E4M3)
    given = np.ascontiguousarray(v[list(facts.P8_KEY_ORDER), :].T) if key_order else v  # k-position k: key order[k]
    return p, given, np.clip(p, -448, 448).astype(E4M3).astype(np.float64) @ v.astype(np.float64)


def _run_ptx(kernel_text: str, inputs: list) -> tuple[np.ndarray, str]:
    """Print the Target IR kernel and run the PTX text in the PTX executor on `inputs` and its f32 [64, 64]
    output C (zeroed), as the runtime would launch it; (C, the PTX text)."""
    from tessera.host import describe
    from tessera.interpreters.ptx.launcher import launch_described
    from tessera.interpreters.ptx.printed import ptx_text

    text, printed = ptx_text(parse_module(kernel_text))
    c = np.zeros((64, 64), np.float32)
    launch_described(text, describe(printed)[0], [*inputs, c], {})
    return c, text


def _assert_ptxas_clean(text: str) -> None:
    """Every installed ptxas (12.x and 13.x where found) assembles `text` without a diagnostic or a spill."""
    from tessera import toolchain

    for ptxas in toolchain.find_all_ptxas():
        result = toolchain.compile_ptx(text, ptxas=ptxas.path)
        entry = result.entry()
        assert not result.log.diagnostics and entry.spill_store_bytes == entry.spill_load_bytes == 0, ptxas.release


def test_p_packed_by_cvt_pack_fp8_times_permuted_vt_in_the_cta_simulator(rng):
    p, vt, reference = _pv(rng, key_order=True)
    c, _ = _run_c(RS_FP8, [p, vt], reference)
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-5)


def test_p_packed_by_cvt_pack_fp8_printed_runs_in_the_ptx_executor_and_ptxas_takes_it(rng):
    p, vt, reference = _pv(rng, key_order=True)
    c, text = _run_ptx(RS_FP8, [p, vt])
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-5)
    assert "cvt.rn.satfinite.e4m3x2.f32" in text and "m64n64k32.f32.e4m3.e4m3" in text
    _assert_ptxas_clean(text)


# The producer's V transpose: V [32 keys, 64] e4m3 arrives by TMA (unswizzled, 64-byte rows); each thread
# transposes one 4 x 4 byte block with 4 ld.shared.b32, 8 prmt and 4 st.shared.b32 into V^T [64, 32] in the
# unswizzled K-major canonical layout (8 x 16-byte core matrices: LBO 128 along K, SBO 256 along N), writing
# k-positions 4kg .. 4kg + 3 with keys 16h + 2c + {0, 1, 8, 9} (kg = 4h + c: P8_KEY_ORDER); then
# fence.proxy.async and a barrier before the wgmma reads it.
TRANSPOSE = """
    %kg = arith.remui %tid, %c8 : index
    %dg = arith.divui %tid, %c8 : index
    %h = arith.divui %kg, %c4 : index
    %hc = arith.remui %kg, %c4 : index
    %key16 = arith.muli %h, %c16 : index
    %key2c = arith.muli %hc, %c2 : index
    %key0 = arith.addi %key16, %key2c : index
    %krow = arith.muli %key0, %c64 : index
    %dcol = arith.muli %dg, %c4 : index
    %src_i = arith.addi %krow, %dcol : index
    %src_off = arith.index_cast %src_i : index to i32
    %src = arith.addi %sv, %src_off : i32
    %o64 = arith.constant 64 : i32
    %o512 = arith.constant 512 : i32
    %o576 = arith.constant 576 : i32
    %s1 = arith.addi %src, %o64 : i32
    %s8 = arith.addi %src, %o512 : i32
    %s9 = arith.addi %src, %o576 : i32
    %w0 = sm90.ld_shared %src : i32 -> i32
    %w1 = sm90.ld_shared %s1 : i32 -> i32
    %w2 = sm90.ld_shared %s8 : i32 -> i32
    %w3 = sm90.ld_shared %s9 : i32 -> i32
    %t0 = sm90.prmt %w0, %w1 selector 20800 : i32
    %t1 = sm90.prmt %w0, %w1 selector 29538 : i32
    %t2 = sm90.prmt %w2, %w3 selector 20800 : i32
    %t3 = sm90.prmt %w2, %w3 selector 29538 : i32
    %y0 = sm90.prmt %t0, %t2 selector 21520 : i32
    %y1 = sm90.prmt %t0, %t2 selector 30258 : i32
    %y2 = sm90.prmt %t1, %t3 selector 21520 : i32
    %y3 = sm90.prmt %t1, %t3 selector 30258 : i32
    %dg2 = arith.divui %dg, %c2 : index
    %dgm = arith.remui %dg, %c2 : index
    %n_sbo = arith.muli %dg2, %c256 : index
    %n_row = arith.muli %dgm, %c64 : index
    %k_lbo = arith.muli %h, %c128 : index
    %k_byte = arith.muli %hc, %c4 : index
    %dst_a = arith.addi %n_sbo, %n_row : index
    %dst_b = arith.addi %k_lbo, %k_byte : index
    %dst_i = arith.addi %dst_a, %dst_b : index
    %dst_off = arith.index_cast %dst_i : index to i32
    %dst = arith.addi %svt, %dst_off : i32
    %o16 = arith.constant 16 : i32
    %o32 = arith.constant 32 : i32
    %o48 = arith.constant 48 : i32
    %d1 = arith.addi %dst, %o16 : i32
    %d2 = arith.addi %dst, %o32 : i32
    %d3 = arith.addi %dst, %o48 : i32
    sm90.st_shared %dst, %y0 : i32, i32
    sm90.st_shared %d1, %y1 : i32, i32
    sm90.st_shared %d2, %y2 : i32, i32
    sm90.st_shared %d3, %y3 : i32, i32
    sm90.fence_proxy_async
    sm90.bar_sync 0, 128
"""


def transposing_kernel() -> str:
    """RS_FP8 with V (not V^T) from global, transposed in shared memory by TRANSPOSE."""
    text = planted(RS_FP8, "sm90.box = [32 : i64, 64 : i64], sm90.swizzle = 32 : i64, tile.dims = #tile.dims<64, 32>}",
                   "sm90.box = [64 : i64, 32 : i64], sm90.swizzle = 0 : i64, tile.dims = #tile.dims<32, 64>}")
    text = planted(text, 'smem_bytes = 2056 : i64', 'smem_bytes = 4104 : i64')
    text = planted(text, '%svt = sm90.shared_buffer "vt" offset 0 size 2048 align 1024 swizzle 32 : i32\n'
                         '    %bar = sm90.shared_buffer "full" offset 2048 size 8 align 8 swizzle 0 : i32',
                   '%sv = sm90.shared_buffer "v" offset 0 size 2048 align 1024 swizzle 0 : i32\n'
                   '    %svt = sm90.shared_buffer "vt" offset 2048 size 2048 align 1024 swizzle 0 : i32\n'
                   '    %bar = sm90.shared_buffer "full" offset 4096 size 8 align 8 swizzle 0 : i32\n'
                   '    %c8 = arith.constant 8 : index\n    %c128 = arith.constant 128 : index\n'
                   '    %c256 = arith.constant 256 : index')
    text = planted(text, "sm90.tma_load %vt_map[%zero_i32, %zero_i32], %svt, %bar",
                   "sm90.tma_load %vt_map[%zero_i32, %zero_i32], %sv, %bar")
    text = planted(text, "      scf.yield\n    }\n    %db = sm90.make_descriptor %svt lbo 16 sbo 256 swizzle 32 : i64",
                   "      scf.yield\n    }\n" + TRANSPOSE + "    %db = sm90.make_descriptor %svt lbo 128 sbo 256 swizzle 0 : i64")
    return text


def test_v_transposed_in_shared_memory_by_prmt_in_the_cta_simulator_and_the_ptx_executor(rng):
    p, v, reference = _pv(rng, key_order=False)
    c, _ = _run_c(transposing_kernel(), [p, v], reference)
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-5)
    c, text = _run_ptx(transposing_kernel(), [p, v])
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-5)
    assert "prmt.b32" in text
    _assert_ptxas_clean(text)


def test_wgmma_reading_vt_before_the_transpose_is_fenced_is_reported_by_both_simulators(rng):
    """Seeded: the transpose's stores are not followed by fence.proxy.async: the wgmma (async proxy) would read
    stale bytes; the CTA simulator and the PTX executor both refuse it."""
    from tessera.interpreters.block_batch import KernelHazardError
    from tessera.interpreters.ptx import PtxHazardError

    p, v, _ = _pv(rng, key_order=False)
    text = planted(transposing_kernel(), "    sm90.fence_proxy_async\n    sm90.bar_sync 0, 128\n",
                   "    sm90.bar_sync 0, 128\n")
    with pytest.raises(KernelHazardError, match="missing fence_proxy_async after the store"):
        _run_c(text, [p, v], None)
    with pytest.raises(PtxHazardError, match="missing fence.proxy.async after the store"):
        _run_ptx(text, [p, v])


def test_wgmma_reading_vt_before_every_warp_finished_the_transpose_is_reported(rng):
    """Seeded: no barrier between the transpose and the wgmma: warp 1's wgmma reads V^T bytes warp 0 wrote with
    nothing ordering them; the CTA simulator reports it by happens-before, whatever order it ran the warps in."""
    from tessera.interpreters.block_batch import KernelHazardError

    p, v, _ = _pv(rng, key_order=False)
    text = planted(transposing_kernel(), "    sm90.fence_proxy_async\n    sm90.bar_sync 0, 128\n",
                   "    sm90.fence_proxy_async\n")
    with pytest.raises(KernelHazardError, match="with no bar_sync since then ordering it before this warp"):
        _run_c(text, [p, v], None)


def test_the_next_tma_racing_the_transpose_is_reported_by_the_ptx_executor(rng):
    """Seeded: the producer refills V's staging buffer right after its own transpose loads, with nothing
    ordering the other warps' loads of that buffer before the copy (the empty barrier or a bar.sync is
    missing): the PTX executor reports the race by happens-before even though, in the order it ran the warps,
    the data came out right."""
    from tessera.interpreters.ptx import PtxHazardError

    p, v, _ = _pv(rng, key_order=False)
    text = planted(transposing_kernel(), "    sm90.wgmma_wait_group 0\n", """    sm90.wgmma_wait_group 0
    %one_i32 = arith.constant 1 : i32
    scf.while () : () -> () {
      %ok1 = sm90.mbarrier_try_wait_parity %bar, %one_i32 : i32
      %again1 = arith.xori %ok1, %true : i1
      scf.condition(%again1)
    } do {
      scf.yield
    }
""")
    text = planted(text, "    %w3 = sm90.ld_shared %s9 : i32 -> i32\n", """    %w3 = sm90.ld_shared %s9 : i32 -> i32
    scf.if %leader {
      sm90.mbarrier_arrive_expect_tx %bar, 2048
      sm90.tma_load %vt_map[%zero_i32, %zero_i32], %sv, %bar : i32, i32
    }
""")
    with pytest.raises(PtxHazardError, match=r"the TMA load writes shared address .* which the instruction at line "
                                             r"\d+ \(thread \(\d+, 0, 0\).*\) read, and no synchronisation orders"):
        _run_ptx(text, [p, v])
