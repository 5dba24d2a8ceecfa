"""Round 27's findings beside its kernels (`tests/test_unseen_kernels27.py`): a sum read back in the launch that adds
it up, judged by happens-before at every level, and what is refused by name where it is written."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from xdsl.utils.exceptions import ParseError, VerifyException

import tessera
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.ptx import PtxHazardError
from tessera.passes.convert_tile_to_sm90 import LoweringError
from unseen_rounds import KERNELS, LEVELS

# A sum read back in the launch that adds it up. `global_moments.mlir` reads it in its last block after a semaphore
# every other block signalled after adding: clean at every level (the CTA simulator and the PTX executor reported
# it, by a rule that read no happens-before: any load of a word other CTAs add into). Without that order it is a
# race everywhere, the Tile interpreter included (it ran such kernels in its own block order, silently).
MOMENTS = (KERNELS / "global_moments.mlir").read_text()
ADDS = """    tile.atomic_add %t, %s0w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
    %s1w = tile.view %S[%c1] : !tile.tile<2xf32, global> -> !tile.tile<1xf32, global>
    tile.atomic_add %t2, %s1w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>
"""
WAIT = "      tile.sem_wait %cnt, %last : !tile.tile<1xi32, global>\n"
SIGNAL = "    } else {\n      tile.sem_signal %cnt : !tile.tile<1xi32, global>\n    }\n"
UNORDERED = {
    # no semaphore at all: the last block reads while the others add
    "no semaphore": MOMENTS.replace(WAIT, "").replace(SIGNAL, "    }\n"),
    # the others signal before they add: the wait orders nothing of theirs
    "signal first": MOMENTS.replace(ADDS, ADDS.splitlines(keepends=True)[1]).replace(
        SIGNAL, SIGNAL.replace("    }\n", "") + "".join("  " + line for line in ADDS.splitlines(keepends=True)
                                                       if "atomic_add" in line) + "    }\n"),
}
HAZARDS = {"tile": "reads S\\[0\\], which several other blocks add into",
           "target": "reads the reduction target tensor %S_ptr at byte offset 0, which (several other CTAs|CTA)",
           "ptx": "reads global address 0x[0-9a-f]+, which (several other CTAs|CTA .*) adds? into in this launch"}


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("variant", UNORDERED)
def test_a_sum_read_before_every_addition_is_ordered_is_reported(variant, level):
    """Each variant changes the kernel it names (and still parses); a semaphore kernel's Tile level is not
    checked (docs/interpreters.md), so "signal first" is reported below it only."""
    text = UNORDERED[variant]
    assert text != MOMENTS and text.count("tile.atomic_add %") == 2
    module = tessera.parse_module(text, "moments.mlir")
    x = np.random.default_rng(0).standard_normal((200, 33)).astype(np.float32)
    if variant == "signal first" and level == "tile":
        tessera.launch(module, x, level=level)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((KernelHazardError, PtxHazardError), match=HAZARDS[level]):
            tessera.launch(module, x, level=level)


SUMS = """
builtin.module {{
  func.func @sums(%X: !tile.tile<?xf32, global> {{tile.dims = #tile.dims<M>}},
      %S: !tile.tile<64xf32, global> {{tile.dims = #tile.dims<64>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, 64)>}} {{
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %x = tile.load %xw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %sw = tile.view %S[%c0] : !tile.tile<64xf32, global> -> !tile.tile<64xf32, global>
{body}
    func.return
  }}
}}
"""
ADD = "    tile.atomic_add %x, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>"


@pytest.mark.parametrize("body, message", [
    # every block reads the running sum, then adds: another block's addition may come before or after the read
    ("    %s = tile.load %sw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>\n" + ADD,
     r"tile.atomic_add .*: adds into S\[0\], which several other blocks read too: blocks run in no order"),
    # block 0 stores the zeros the others add into
    ("    %z = tile.fill 0.0 : !tile.tile<64xf32, register>\n    %first = arith.cmpi eq, %b, %c0 : index\n"
     "    scf.if %first {\n      tile.store_global %z, %sw : !tile.tile<64xf32, register>, "
     "!tile.tile<64xf32, global>\n    }\n" + ADD,
     r"adds into S\[0\], which block \(0, 0, 0\) stores too"),
    ("    %z = tile.fill 0.0 : !tile.tile<64xf32, register>\n" + ADD + "\n    %last = arith.cmpi eq, %b, %c64 : index\n"
     "    scf.if %last {\n      tile.store_global %z, %sw : !tile.tile<64xf32, register>, "
     "!tile.tile<64xf32, global>\n    }\n",
     r"tile.store_global .*: writes S\[0\], which several other blocks add into"),
])
def test_tile_level_orders_reads_and_stores_against_additions(body, message):
    """A tensor some block adds into is judged at Tile level as below it: another block's read or store of an
    element and the addition are unordered (blocks of one batch run each op together: the read comes first)."""
    module = tessera.parse_module(SUMS.format(body=body), "sums.mlir")
    with pytest.raises(KernelHazardError, match=message):
        tessera.launch(module, np.ones(65 * 64, np.float32), level="tile")


def test_a_block_reads_back_its_own_additions():
    """One block adding and reading the sum is ordered by its own program order: no hazard, the sum."""
    body = ADD + "\n    %s = tile.load %sw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>"
    module = tessera.parse_module(SUMS.format(body=body), "sums.mlir")
    np.testing.assert_array_equal(tessera.launch(module, np.arange(64, dtype=np.float32), level="tile"),
                                  np.arange(64, dtype=np.float32))


@pytest.mark.parametrize("old, new, message", [
    # an i32 count added across blocks: atomics add f32 (count in f32, exact below 2^24)
    ("    tile.atomic_add %t, %s0w : !tile.tile<1x1xf32, register>, !tile.tile<1xf32, global>",
     "    %ti = tile.cast %t : !tile.tile<1x1xf32, register> -> !tile.tile<1x1xi32, register>\n"
     "    tile.atomic_add %ti, %cnt0 : !tile.tile<1x1xi32, register>, !tile.tile<1xi32, global>",
     r"moments.mlir:\d+:\d+: kernel @global_moments: 'tile.atomic_add' op value must be f32 \(additions are f32\), got i32"),
    # a one-element window read into a [1, 1] tile by tile.load: the op that broadcasts is named
    ("%s0 = tile.load_broadcast %s0w", "%s0 = tile.load %s0w",
     r"moments.mlir:\d+:\d+: kernel @global_moments: 'tile.load' op source and result shapes must match "
     r"\(tile.load_broadcast reads the 1-D window into \[1, 1\]\)"),
    # an output sized by a size no input has and the kernel does not take at launch (tile.launch_sizes)
    ("      %S: !tile.tile<2xf32, global>", '      %E: !tile.tile<?xf32, global> {tile.dims = #tile.dims<K>, tile.role = "out"},\n'
     "      %S: !tile.tile<2xf32, global>",
     r"moments.mlir:\d+:\d+: kernel @global_moments: out argument %E uses sizes no input defines: \['K'\]"),
])
def test_refused_by_name_where_written(old, new, message):
    """Ops outside their documented domain and a kernel that cannot be sized are refused at their line."""
    first = "    %m0 = arith.muli %b, %c64 : index\n"
    text = MOMENTS.replace(first, first + "    %cnt0 = tile.view %CNT[%c0] : !tile.tile<1xi32, global> -> "
                           "!tile.tile<1xi32, global>\n").replace(old, new)
    assert old in MOMENTS
    with pytest.raises(VerifyException, match=message):
        tessera.parse_module(text, "moments.mlir")


def test_a_rank_8_adapter_is_refused_below_tile_level_by_name():
    """lora_gemm at rank 8: the [64, 8] bf16 tile of LA has rows of 16 bytes, narrower than any swizzle
    (docs/any-shape.md): it runs at Tile level and is refused at its allocation below it, exit status 1."""
    text = (KERNELS / "lora_gemm.mlir").read_text()
    for wide, narrow in (("x16xbf16", "x8xbf16"), ("<16x", "<8x"), ("swizzle 32", "swizzle 0"), ("64x16xf32", "64x8xf32"),
                         ("#tile.dims<K, 16>", "#tile.dims<K, 8>"), ("#tile.dims<16, N>", "#tile.dims<8, N>")):
        assert wide in text
        text = text.replace(wide, narrow)
    module = tessera.parse_module(text, "lora8.mlir")
    x = np.ones((70, 64), np.float32)
    arrays = (x, np.ones((64, 64), np.float32), np.ones((64, 8), np.float32), np.ones((8, 64), np.float32))
    assert tessera.launch(module, *arrays, level="tile").shape == (70, 64)
    with pytest.raises(LoweringError, match=r"lora8.mlir:\d+:\d+: kernel @lora_gemm: convert-tile-to-sm90: .*shared "
                                              r"tiles need rows of a multiple of 32 bytes .* got rows of 8 x 2 = 16 bytes"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tessera.launch(module, *arrays, level="target")


SPARSE = (KERNELS / "block_sparse_gemm.mlir").read_text()
MMA_BRANCH = """        %p = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
        scf.yield %p : !tile.tile<64x64xf32, register>
"""
SKIP_BRANCH = "        scf.yield %s : !tile.tile<64x64xf32, register>\n"
HALF = "        %h = tile.scale %s by 0.5 : !tile.tile<64x64xf32, register>\n        scf.yield %h : !tile.tile<64x64xf32, register>\n"


@pytest.mark.parametrize("then, otherwise, scale", [
    (MMA_BRANCH, SKIP_BRANCH, 1.0),  # the kernel: the mma in the then-branch (it is lowered last)
    (SKIP_BRANCH, MMA_BRANCH, 1.0),  # the condition's other sense: the mma's branch already last
    (MMA_BRANCH, "        scf.yield %zero : !tile.tile<64x64xf32, register>\n", 0.0),  # not the accumulator
    (HALF, MMA_BRANCH, 0.5),  # an op on the accumulator in the other branch
])
def test_an_mma_under_a_branch_yields_its_result_safely_at_ptx_level(then, otherwise, scale):
    """The mma's result leaves its branch in flight only where the other branch yields the accumulator, and from
    the branch the register allocator lowers last (else the PTX copied it out of registers its wgmma group still
    wrote, reported by the PTX executor; on a GPU, garbage); otherwise its group is retired in the branch. K = 200
    and N = 40 take the pipelined TMA path: the ring stages the mma reads are waited for before the branch, as
    the path that skips it releases them too (the producer refilled a stage still landing: an mbarrier phase
    error in both simulators). The skipped block contributes `scale` times the sum so far (0: none, 0.5: half)."""
    text = SPARSE.replace(MMA_BRANCH + "      } else {\n" + SKIP_BRANCH, then + "      } else {\n" + otherwise)
    assert text != SPARSE or then == MMA_BRANCH
    keep_then = then == MMA_BRANCH
    module = tessera.parse_module(text, "sparse.mlir")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((130, 200)).astype(np.float32), rng.standard_normal((200, 40)).astype(np.float32)
    mask = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]], np.int32)
    a16, b16 = (x.astype(ml_dtypes.bfloat16).astype(np.float64) for x in (a, b))
    expected = np.zeros((130, 40))
    for kb in range(4):
        block = a16[:, 64 * kb:64 * kb + 64] @ b16[64 * kb:64 * kb + 64]
        kept = np.repeat((mask[:, kb] != 0) == keep_then, 64)[:130, None]
        expected = np.where(kept, expected + block, expected * scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for level in ("target", "ptx"):
            got = tessera.launch(module, a, b, mask, level=level)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_fma_takes_one_type_and_says_where():
    """tile.fma does not broadcast (docs/tile-ir.md): a [1, 1] addend beside [64, 64] factors is a parse error at
    its line, not a traceback; tile.mul then tile.add broadcast it."""
    text = (KERNELS / "swiglu_bwd.mlir").read_text().replace(
        "    %goms = tile.mul %g, %oms : !tile.tile<64x64xf32, register>\n"
        "    %t = tile.add %goms, %one : !tile.tile<64x64xf32, register>, !tile.tile<1x1xf32, register>\n",
        "    %t = tile.fma %g, %oms, %one : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, register>, "
        "!tile.tile<1x1xf32, register>\n")
    assert "tile.fma" in text
    with pytest.raises(ParseError, match=r"fma.mlir:\d+:\d+"):
        tessera.parse_module(text, "fma.mlir")


def _flagged_lora() -> str:
    """lora_gemm with the adapter applied only to the row blocks a flag table FLAG marks (multi-LoRA serving)."""
    text = (KERNELS / "lora_gemm.mlir").read_text()
    mma = ("    %lora = tile.mma %xa, %lb_smem, %zero : !tile.tile<64x16xbf16, register>, "
           "!tile.tile<16x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>\n")
    out = '      %Y: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})'
    assert mma in text and out in text
    text = text.replace(out, "      %FLAG: !tile.tile<?xi32, global> {tile.dims = #tile.dims<ceildiv(M, 64)>},\n" + out)
    text = text.replace(mma, "    %flag = tile.load_index %FLAG[%bm] : !tile.tile<?xi32, global>\n"
                             "    %use = arith.cmpi ne, %flag, %c0 : index\n"
                             "    %lora = scf.if %use -> (!tile.tile<64x64xf32, register>) {\n  "
                             + mma.replace("%lora =", "%l =") +
                             "      scf.yield %l : !tile.tile<64x64xf32, register>\n    } else {\n"
                             "      scf.yield %zero : !tile.tile<64x64xf32, register>\n    }\n")
    return text


def test_an_mma_on_a_zero_fill_under_a_branch_retires_in_its_branch():
    """The flagged adapter's mma accumulates onto a zero fill, which the lowering makes a constant (scale-d = 0)
    with no registers the branch's result could share, so its group retires in its branch (the PTX copied the
    result out of the wgmma's registers while its group was in flight, K = 136 on the pipelined path)."""
    module = tessera.parse_module(_flagged_lora(), "lora_flag.mlir")
    rng = np.random.default_rng(0)
    bf16 = ml_dtypes.bfloat16
    x, w = rng.standard_normal((130, 136)).astype(bf16), (rng.standard_normal((136, 72)) / 12).astype(bf16)
    la, lb = (rng.standard_normal((136, 16)) / 12).astype(bf16), (rng.standard_normal((16, 72)) / 4).astype(bf16)
    flag = np.array([1, 0, 1], np.int32)
    f = [a.astype(np.float64) for a in (x, w, la, lb)]
    xa = (f[0] @ f[2]).astype(np.float32).astype(bf16).astype(np.float64)
    expected = f[0] @ f[1] + 2 * np.repeat(flag != 0, 64)[:130, None] * (xa @ f[3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tessera.launch(module, x, w, la, lb, flag, level="ptx")
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2**-8, atol=1e-2)


def test_the_printer_refuses_a_branch_copying_a_wgmma_result_in_flight(monkeypatch):
    """Were the zero-fill mma lowered as an update branch again (its group in flight across the join), the
    PTX printer refuses the copy out of its registers by name rather than print a race."""
    from tessera.passes.convert_tile_to_sm90 import control
    from tessera.ptx.kernel import PtxPrintError

    monkeypatch.setattr(control.ControlFlowLowering, "_update_branch", lambda self, op: control.update_branch_mma(op))
    module = tessera.parse_module(_flagged_lora(), "lora_flag.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(PtxPrintError, match=r"lora_gemm: '%lora = scf.if .*': a branch yields a wgmma result in "
                                                r"flight into other registers"):
            tessera.compile(module)
