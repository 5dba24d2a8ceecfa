"""The FP8 wgmma in Target IR: `sm90.wgmma_mma_async ... type "e4m3"` (m64nNk32, K-major operands only), run in
the CTA simulator and, printed, in the PTX executor and through ptxas: a 64 x 64 x 128 e4m3 GEMM through TMA
(the bytes of a UINT8 tensor map) into 128-byte-swizzled buffers, four k32 steps of 32 bytes each, exactly
like bf16's k16 steps, and an RS form whose A registers hold four bytes each."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import parse_module

from test_sm90_simulator import SS_GEMM, _kernel, _seed

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def fp8_gemm(atype: str = "e4m3") -> str:
    """SS_GEMM with 8-bit A and B [64, 128]: the same 128-byte rows and 32-byte K steps, type `atype`."""
    text = SS_GEMM.replace("sm90.box = [64 : i64, 64 : i64]", "sm90.box = [128 : i64, 64 : i64]")
    text = text.replace("tile.dims = #tile.dims<64, 64>},\n      %b_map", "tile.dims = #tile.dims<64, 128>},\n      %b_map")
    text = text.replace("tile.dims = #tile.dims<64, 64>},\n      %c_ptr", "tile.dims = #tile.dims<64, 128>},\n      %c_ptr")
    element = {"e4m3": "f8E4M3FN", "e5m2": "f8E5M2"}[atype]
    for name in ("a_map", "b_map"):  # the tensors' element type, for the host description of the PTX launch
        text = text.replace(f"%{name}: !sm90.tensormap {{", f"%{name}: !sm90.tensormap {{sm90.element_type = {element}, ")
    text = text.replace("%c_ptr: i64 {", "%c_ptr: i64 {sm90.element_type = f32, ")
    return _seed(text, 'type "bf16" trans 0, 0', f'type "{atype}" trans 0, 0')


def _operands(rng, dtype=E4M3):
    a = (rng.standard_normal((64, 128)) * 4).astype(dtype)
    b = (rng.standard_normal((64, 128)) * 4).astype(dtype)
    return a, b, a.astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("atype, dtype", [("e4m3", E4M3), ("e5m2", E5M2)])
def test_fp8_ss_wgmma_in_the_cta_simulator(atype, dtype, rng):
    a, b, reference = _operands(rng, dtype)
    c = np.zeros((64, 64), np.float32)
    run_target_kernel(_kernel(fp8_gemm(atype)), [a, b, c], {})
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-6)


def test_fp8_ss_wgmma_printed_runs_in_the_ptx_executor_and_ptxas_takes_it(rng):
    from tessera import toolchain
    from tessera.host import describe
    from tessera.interpreters.ptx.launcher import launch_described
    from tessera.interpreters.ptx.printed import ptx_text

    a, b, reference = _operands(rng)
    c = np.zeros((64, 64), np.float32)
    text, printed = ptx_text(parse_module(fp8_gemm()))
    launch_described(text, describe(printed)[0], [a, b, c], {})
    np.testing.assert_allclose(c, reference, rtol=2**-22, atol=1e-6)
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3" in text
    if toolchain.find_ptxas() is not None:
        toolchain.compile_ptx(text)


@pytest.mark.parametrize("trans, operand", [("1, 0", "A"), ("0, 1", "B")])
def test_fp8_wgmma_refuses_mn_major_operands(trans, operand):
    with pytest.raises(VerifyException, match=f"an MN-major {operand} .* needs .f16 or .bf16 multiplicands, got .e4m3"):
        parse_module(_seed(fp8_gemm(), 'type "e4m3" trans 0, 0', f'type "e4m3" trans {trans}'))


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
