"""cp.async bytes read by wgmma (the async proxy) [memory_model.CP_ASYNC_PROXY]: the PTX ISA calls cp.async a
generic-proxy write, so by its letter a fence.proxy.async must lie between the copy's completion and the wgmma;
NVIDIA's kernels (CUTLASS's cp.async GMMA mainloop, FlashAttention-3's packed-GQA Q) complete the copies with
cp.async.mbarrier.arrive and issue the wgmma after the mbarrier wait with no fence. The executor accepts that by
default and reports it with `strict_proxy=True`; copies completed by cp.async.wait_group and a barrier need the fence
either way. The kernel: gemm_tn of tests/ptx_kernels/tma_wgmma_gemm.ptx (one 64 x 64 x 64 tile, TMA loads) with
thread 0 copying 16 bytes over row 32 of the landed B tile before the wgmmas read it."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError, TensorMapArg, launch

_GEMM = Path(__file__).parent / "ptx_kernels" / "tma_wgmma_gemm.ptx"
_WAIT_ON_COPY = """\t@%p1 cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r60];
\t{
\t.reg .pred P2;
\tCP_WAIT:
\tmbarrier.try_wait.parity.shared::cta.b64 P2, [%r60], 0;
\t@P2 bra CP_DONE;
\tbra.uni CP_WAIT;
\tCP_DONE:
\t}
"""
_WAIT_GROUP = "\t@%p1 cp.async.wait_all;\n\tbar.sync 0;\n"
_FENCE = "\tfence.proxy.async.shared::cta;\n"
_FENCE_BEFORE_BARRIER = "\t@%p1 cp.async.wait_all;\n\t@%p1 fence.proxy.async.shared::cta;\n\tbar.sync 0;\n"


def _copying_into_b(completion: str) -> str:
    """gemm_tn with a sixth parameter (16 bytes in global memory) that thread 0 copies with cp.async into bytes
    4096..4111 of the B tile (row 32, chunk 0 of the 128B swizzle) after the TMA wait, then `completion`."""
    text = _GEMM.read_text()
    text = text[:text.index(".visible .entry gemm_nn(")]
    text = text.replace("\t.param .u32 gemm_tn_param_5\n)",
                        "\t.param .u32 gemm_tn_param_5,\n\t.param .u64 gemm_tn_param_6\n)")
    text = text.replace("\t.shared .align 8 .b64 full_bar;",
                        "\t.shared .align 8 .b64 full_bar;\n\t.shared .align 8 .b64 cp_bar;")
    text = text.replace("\t@%p1 mbarrier.init.shared::cta.b64 [%r13], 1;",
                        "\tmov.u32 \t%r60, cp_bar;\n\t@%p1 mbarrier.init.shared::cta.b64 [%r13], 1;\n"
                        "\t@%p1 mbarrier.init.shared::cta.b64 [%r60], 1;")
    copy = ("\tld.param.u64 \t%rd20, [gemm_tn_param_6];\n\tcvta.to.global.u64 \t%rd20, %rd20;\n"
            "\t@%p1 cp.async.ca.shared.global [%r12+4096], [%rd20], 16;\n")
    anchor = "\tsetp.ne.s32 \t%p2, %r16, 0;"
    return text.replace(anchor, copy + completion + anchor, 1)


def _run(completion: str, strict_proxy: bool = False):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    row = rng.standard_normal(8).astype(ml_dtypes.bfloat16)
    maps = [TensorMapArg.tiled(a, (64, 64), 128), TensorMapArg.tiled(bt, (64, 64), 128)]
    args = [*maps, np.zeros((64, 64), np.float32), 64, 64, 64, row]
    out = launch(_copying_into_b(completion), "gemm_tn", (1, 1, 1), (128, 1, 1), args, shared_bytes=16384 + 1024,
                 strict_proxy=strict_proxy)
    c = out[2]
    copied = bt.copy()
    copied[32, :8] = row  # byte 4096 of the 128B-swizzled tile: row 32, chunk 0 ^ (32 % 8) = 0
    a64, b64 = a.astype(np.float64), copied.astype(np.float64)
    assert np.abs(c - a64 @ b64.T).max() <= 2.0**-14 * (np.abs(a64) @ np.abs(b64).T).max()


_REPORTED = (r"wgmma operand B reads shared address 0x[0-9a-f]+, which thread \(0, 0, 0\) of CTA \(0, 0, 0\) stored "
             r"through the generic proxy and has not made visible to the async proxy \(missing fence.proxy.async "
             r"after the store at line \d+")


def test_cp_async_completed_on_an_mbarrier_reaches_wgmma_without_a_fence():
    """What CUTLASS's and FA3's cp.async mainloops do: clean, and the wgmmas read the copied row."""
    _run(_WAIT_ON_COPY)


def test_strict_proxy_reports_the_missing_fence_after_an_mbarrier_completion():
    with pytest.raises(PtxHazardError, match=_REPORTED):
        _run(_WAIT_ON_COPY, strict_proxy=True)
    _run(_WAIT_ON_COPY + _FENCE, strict_proxy=True)  # every thread fences after its wait: clean under the letter


@pytest.mark.parametrize("strict_proxy", [False, True], ids=["default", "strict"])
def test_cp_async_completed_by_wait_group_needs_the_fence(strict_proxy):
    """A wait_group completes the copies as the issuing thread's generic writes: a fence.proxy.async on the path to
    the wgmma (here thread 0's, carried by the bar.sync) is needed in either mode."""
    with pytest.raises(PtxHazardError, match=_REPORTED):
        _run(_WAIT_GROUP, strict_proxy=strict_proxy)
    _run(_FENCE_BEFORE_BARRIER, strict_proxy=strict_proxy)
