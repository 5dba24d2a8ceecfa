"""Users' own pass pipelines (round 24): `tessera.passes.apply_pipeline` and `tessera-opt -p` with the passes of
docs/passes.md alone, repeated, in other orders and with bad options, on the builders' kernels (flash forward,
backward, GEMM), a gallery kernel and a hand-written one.

Each case ends one of two ways: the right numbers (the Tile IR passes bit for bit against the kernel run without
them, and against a float64 NumPy reference written here; a small slice in the CTA simulator and the PTX
executor), or a refusal by name (a PipelineError for a bad spec, the pass's own diagnostic, a PassInputError for a
pass given the other level, at every entry point). Every Tile IR pass run twice gives the text it gives once."""

from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from xdsl.utils.exceptions import DiagnosticException

import inprocess
import tessera
import tessera.kernels
from tessera.ir.diagnostics import PassInputError, TesseraWarning
from tessera.passes import PipelineError, apply_pipeline
from tessera.validate import validate

ROOT = Path(__file__).resolve().parents[1]
LOWER = "convert-tile-to-sm90,canonicalize,cse,rematerialize-constants"
GALLERY = ROOT / "examples" / "kernels"

ROW_SCALE = """
builtin.module {
  func.func @row_scale(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
                       %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
                       %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %block = tile.program_id x : index
    %c64 = arith.constant 64 : index
    %c0 = arith.constant 0 : index
    %m0 = arith.muli %block, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
    %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %sw = tile.view %S[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %s = tile.load %sw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %y = tile.mul_rows %x, %s : !tile.tile<64x32xf32, register>, !tile.tile<64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, global>
    func.return
  }
}
"""
"""A hand-written kernel without loops: Y = X * S[:, None] (f32, exact)."""

KERNELS = {
    "flash-causal": lambda: tessera.kernels.flash_attention(head_dim=64, causal=True),
    "flash-full": lambda: tessera.kernels.flash_attention(head_dim=64),
    "backward": lambda: tessera.kernels.attention_backward_main(head_dim=64, causal=True),
    "gemm": lambda: tessera.kernels.gemm(),
    "gallery-window": lambda: tessera.parse_module((GALLERY / "sliding_window_attention.mlir").read_text()),
    "row-scale": lambda: tessera.parse_module(ROW_SCALE),
}


def _apply(module, spec: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a pass with nothing to do on this kernel warns; that is not the point
        apply_pipeline(module, spec)
    return module


# --- bad options: a PipelineError naming the spec and the reason, from Python and (exit 1) from tessera-opt ---

OPTION_REFUSALS = [
    ("pipeline-loops{stages=0}", "pipeline-loops: stages must be an integer from 1 to 4, got 0"),
    ("pipeline-loops{stages=7}", "pipeline-loops: stages must be an integer from 1 to 4, got 7"),
    ("pipeline-loops{stages=abc}", "Incompatible types"),
    ("pipeline-loops{stages=2.5}", "Incompatible types"),
    ("assign-swizzle,pipeline-loops{depth=2}", 'not found in expected arguments ["stages"]'),
    ("peel-masked-iterations{branch=maybe}", "Incompatible types"),
    ("form-clusters{x=0}", "form-clusters: x must be an integer >= 1, got 0"),
    ("convert-tile-to-sm90{atomic-add=foo}", "atomic-add must be one of auto, red, bulk, got 'foo'"),
    ("allocate-registers{spill=1}", "Incompatible types"),
    ("pipelined-pipeline{stages=3}", "the named pipeline 'pipelined-pipeline' takes no options"),
]


@pytest.mark.parametrize("spec, reason", OPTION_REFUSALS, ids=[s for s, _ in OPTION_REFUSALS])
def test_a_bad_option_is_refused_by_name(spec, reason, tmp_path):
    with pytest.raises(PipelineError, match="invalid pass pipeline") as caught:
        apply_pipeline(KERNELS["row-scale"](), spec)
    assert spec in str(caught.value) and reason in str(caught.value)
    (tmp_path / "k.mlir").write_text(ROW_SCALE)
    done = inprocess.run(["tessera-opt", "k.mlir", "-p", spec], cwd=tmp_path, env={"TESSERA_DEBUG": None})
    assert done.returncode == 1 and reason in done.stderr and "Traceback" not in done.stderr


# --- a pass given the other level: refused by name at every entry point, not run as a no-op ---

WRONG_LEVEL = [  # (kernel, spec, entry point, words)
    ("row-scale", "warp-specialize", "apply_pipeline", "pass 'warp-specialize' transforms Target IR"),
    ("row-scale", "allocate-registers,assign-swizzle,convert-tile-to-sm90", "compile",
     "pass 'allocate-registers' transforms Target IR, but the input (@row_scale) is Tile IR"),
    ("gemm", "hoist-invariant-descriptors,assign-swizzle,convert-tile-to-sm90", "compile",
     "pass 'hoist-invariant-descriptors' transforms Target IR"),
    ("row-scale", "rematerialize-constants,assign-swizzle,convert-tile-to-sm90", "launch-target",
     "pass 'rematerialize-constants' transforms Target IR"),
    ("row-scale", "assign-swizzle,convert-tile-to-sm90,convert-tile-to-sm90", "compile",
     "pass 'convert-tile-to-sm90' transforms Tile IR, but the input (@row_scale) is Target IR"),
    ("flash-full", "assign-swizzle,convert-tile-to-sm90,pipeline-loops{stages=2}", "compile",
     "pass 'pipeline-loops' transforms Tile IR"),
    ("row-scale", "assign-swizzle,convert-tile-to-sm90,peel-masked-iterations", "apply_pipeline",
     "pass 'peel-masked-iterations' transforms Tile IR"),
    ("row-scale", "multicast-cluster-copies", "validate", "pass 'multicast-cluster-copies' transforms Target IR"),
]


@pytest.mark.parametrize("kernel, spec, entry, words", WRONG_LEVEL, ids=[f"{e}-{s}" for _, s, e, _ in WRONG_LEVEL])
def test_a_pass_of_the_other_level_is_refused_by_name(kernel, spec, entry, words, rng):
    module = KERNELS[kernel]()
    if entry == "validate":  # the verdict names the pass that refused, at the level it was given
        report = validate(module, spec, sizes={"M": 70, "N": 20})
        assert not report.ok and report.mismatch.pass_name == spec and words in report.mismatch.message
        return
    with pytest.raises(PassInputError, match="kernel @") as caught:
        if entry == "apply_pipeline":
            apply_pipeline(module, spec)
        elif entry == "compile":
            tessera.compile(module, pipeline=spec)
        else:
            x = rng.standard_normal((70, 20)).astype(np.float32)
            tessera.launch(module, x, np.ones(70, np.float32), level="target", pipeline=spec)
    assert words in str(caught.value)


# --- every Tile IR pass run twice gives the text it gives once ---

IDEMPOTENT = [  # (kernel, passes before, the pass run once and twice)
    *((k, "", p) for k in ("flash-causal", "flash-full", "gemm", "backward", "gallery-window", "row-scale")
      for p in ("assign-swizzle", "pipeline-loops{stages=3}", "peel-masked-iterations",
                "peel-masked-iterations{branch=true}")),
    # regression: peel-masked-iterations split the masked loop it had left again (and branched inside its own
    # branch), at a trip it never reaches: the flash kernels' text grew on every run
    ("flash-causal", "assign-swizzle,pipeline-loops,overlap-softmax", "peel-masked-iterations{branch=true}"),
    ("flash-full", "assign-swizzle,pipeline-loops,overlap-softmax", "peel-masked-iterations"),
    ("flash-causal", "assign-swizzle,pipeline-loops", "overlap-softmax"),
    ("flash-full", "peel-masked-iterations{branch=true}", "mask-by-mma"),
    ("gemm", "assign-swizzle", "form-clusters{x=2}"),
    ("flash-full", "assign-swizzle", "form-clusters{x=2}"),
]


@pytest.mark.parametrize("kernel, before, pass_", IDEMPOTENT, ids=[f"{k}-{b}-{p}" for k, b, p in IDEMPOTENT])
def test_a_tile_pass_twice_is_the_pass_once(kernel, before, pass_):
    spec = ",".join(filter(None, [before, pass_]))
    once = str(_apply(KERNELS[kernel](), spec))
    twice = str(_apply(KERNELS[kernel](), f"{spec},{pass_}"))
    assert twice == once


# --- orders a user tries: Tile IR bit for bit the same as without the passes, and right against float64 ---

def _attention_reference(q, k, v, causal: bool, window: int | None = None) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v in float64, bottom-right causal, `window` keys back from the diagonal."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    i = np.arange(q.shape[-2])[:, None] + k.shape[-2] - q.shape[-2]
    j = np.arange(k.shape[-2])[None, :]
    if causal:
        s = np.where(j <= i, s, -np.inf)
    if window is not None:
        s = np.where(i - j < window, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


ORDERS = [  # (kernel, a user's Tile IR pipeline)
    ("flash-causal", "peel-masked-iterations,assign-swizzle,pipeline-loops{stages=3},overlap-softmax"),
    ("flash-causal", "assign-swizzle,pipeline-loops,pipeline-loops,overlap-softmax,overlap-softmax,"
                     "peel-masked-iterations{branch=true},peel-masked-iterations{branch=true},mask-by-mma,mask-by-mma"),
    ("flash-full", "mask-by-mma"),
    ("flash-full", "peel-masked-iterations{branch=true},mask-by-mma,pipeline-loops{stages=4},assign-swizzle"),
    ("flash-full", "pipeline-loops{stages=1},peel-masked-iterations,peel-masked-iterations"),
    ("gemm", "form-clusters{x=2},pipeline-loops{stages=4},assign-swizzle,overlap-softmax,peel-masked-iterations"),
    ("gallery-window", "peel-masked-iterations{branch=true},pipeline-loops{stages=2},mask-by-mma"),
    ("row-scale", "pipeline-loops{stages=4},overlap-softmax,peel-masked-iterations,mask-by-mma,assign-swizzle"),
]


def _inputs_and_reference(kernel: str, rng):
    bf16 = ml_dtypes.bfloat16
    if kernel.startswith("flash"):
        q, k, v = ((rng.standard_normal((1, 2, n, 64))).astype(bf16) for n in (70, 200, 200))
        return (q, k, v), _attention_reference(q, k, v, causal=kernel == "flash-causal"), 2e-2
    if kernel == "gallery-window":
        q, k, v = (rng.standard_normal((150, 64)).astype(bf16) for _ in range(3))
        return (q, k, v), _attention_reference(q, k, v, causal=True, window=32), 2e-2
    if kernel == "gemm":
        a, b = rng.standard_normal((200, 136)).astype(bf16), rng.standard_normal((136, 72)).astype(bf16)
        return (a, b), np.asarray(a, np.float64) @ np.asarray(b, np.float64), 0.05
    x, s = rng.standard_normal((100, 20)).astype(np.float32), np.linspace(-2, 2, 100, dtype=np.float32)
    return (x, s), x.astype(np.float64) * s[:, None], 1e-6  # one f32 rounding of values below 5


@pytest.mark.parametrize("kernel, spec", ORDERS, ids=[f"{k}-{s}" for k, s in ORDERS])
def test_a_users_tile_pipeline_keeps_the_numbers(kernel, spec, rng):
    module = KERNELS[kernel]()
    inputs, reference, tolerance = _inputs_and_reference(kernel, rng)
    plain = tessera.launch(module, *inputs, level="tile")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tessera.launch(module, *inputs, level="tile", pipeline=spec)
    assert np.array_equal(np.asarray(out), np.asarray(plain), equal_nan=True), "a Tile IR pass changed the bits"
    assert np.abs(np.asarray(out, np.float64) - reference).max() <= tolerance


SIZES = {"flash-causal": {"seq_q": 70, "seq_k": 200}, "flash-full": {"seq_q": 70, "seq_k": 200},
         "gemm": {"M": 130, "N": 136, "K": 200}, "gallery-window": {"L": 150}}
LOWERED = [ORDERS[0], ORDERS[3], ORDERS[5], ORDERS[6]]


@pytest.mark.parametrize("kernel, spec", LOWERED, ids=[f"{k}-{s}" for k, s in LOWERED])
def test_a_users_tile_pipeline_lowered_validates_in_the_cta_simulator(kernel, spec):
    """The same orders, then lowered and warp-specialized: every level within the builders' tolerance (the
    kernel's kind's float64 reference), each Target IR pass bit for bit."""
    lowered = f"{spec},{LOWER},warp-specialize,hoist-invariant-descriptors,allocate-registers"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = validate(KERNELS[kernel](), lowered, sizes=SIZES[kernel], ptx=False)
    assert report.ok, report.table()


# --- orders that cannot work: the pass that refuses says so, by name ---

REFUSED_ORDERS = [  # (kernel, spec, words)
    ("flash-causal", "overlap-softmax,assign-swizzle,pipeline-loops",
     "overlap-softmax: %acc_next = tile.mma"),
    ("flash-full", "pipeline-loops{stages=1},overlap-softmax", "a 1-stage ring"),
    ("flash-causal", "assign-swizzle,form-clusters{x=2}", "the members' loops differ"),
    ("gemm", "form-clusters{x=3}", "a cluster of 3 blocks cannot multicast this copy's TMA box"),
    ("row-scale", "form-clusters{y=2}", "form-clusters: no copy of the kernel is the same for the blocks"),
    # regression: a second form-clusters of another shape kept the first one's marks: B, shared along x, stayed
    # cluster_shared in a cluster along y, whose members need different B windows (the Tile interpreter's
    # KernelHazardError at best, TMA multicasting one block's B to both on the GPU)
    ("gemm", "form-clusters{x=2},form-clusters{y=2}", "the kernel is clustered already, 2 x 1 x 1 blocks"),
    ("gemm", "assign-swizzle,form-clusters{y=2},pipeline-loops,form-clusters{x=2}", "not 2 x 1 x 1 over it"),
    # regression: the backward's barrier that publishes dS lies inside a ping-pong turn; the consumer warpgroups
    # deadlocked (the CTA simulator's DeadlockError; a hang on the GPU) instead of the pass refusing
    ("backward", "pingpong-pipeline", "ping-pong: `sm90.bar_sync 0, 256` waits for 256 threads inside a consumer"),
    ("backward", "assign-swizzle,pipeline-loops{stages=3},convert-tile-to-sm90,warp-specialize{pingpong=true}",
     "warp-specialize: ping-pong:"),
]


@pytest.mark.parametrize("kernel, spec, words", REFUSED_ORDERS, ids=[f"{k}-{s}" for k, s, _ in REFUSED_ORDERS])
def test_an_order_that_cannot_work_is_refused_by_the_pass(kernel, spec, words):
    with pytest.raises(DiagnosticException, match="kernel @") as caught:
        apply_pipeline(KERNELS[kernel](), spec)
    assert words in str(caught.value)


# --- a slice lowered: the CTA simulator and the PTX executor on users' pipelines to Target IR ---


def test_a_users_pipeline_peeling_twice_runs_right_in_the_cta_simulator(rng):
    spec = ("assign-swizzle,peel-masked-iterations,pipeline-loops{stages=3},peel-masked-iterations,"
            f"{LOWER},warp-specialize,hoist-invariant-descriptors,hoist-invariant-descriptors,allocate-registers")
    q, k, v = (rng.standard_normal((1, 1, n, 64)).astype(ml_dtypes.bfloat16) for n in (70, 200, 200))
    out = tessera.launch(KERNELS["flash-causal"](), q, k, v, level="target", pipeline=spec)
    assert np.abs(np.asarray(out, np.float64) - _attention_reference(q, k, v, causal=True)).max() <= 2e-2


def test_a_users_clustered_gemm_pipeline_runs_right_in_the_cta_simulator(rng):
    spec = (f"assign-swizzle,form-clusters{{x=2}},pipeline-loops{{stages=3}},{LOWER},warp-specialize,"
            "multicast-cluster-copies,multicast-cluster-copies,allocate-registers")
    a, b = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((256, 128), (128, 64)))
    out = tessera.launch(KERNELS["gemm"](), a, b, level="target", pipeline=spec)
    reference = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert np.abs(np.asarray(out, np.float64) - reference).max() <= 0.05


def test_a_users_pipeline_with_repeated_target_passes_validates_at_every_level():
    spec = f"assign-swizzle,assign-swizzle,{LOWER},rematerialize-constants,compute-distinct-lanes,allocate-registers"
    report = validate(KERNELS["row-scale"](), spec, sizes={"M": 100, "N": 20})
    assert report.ok, report.table()
    assert [c.level for c in report.checks][-1] == "ptx" and all(c.vs_previous == 0 for c in report.checks[1:])


def test_tessera_opt_validates_a_users_pipeline_that_peels_twice(tmp_path):
    (tmp_path / "w.mlir").write_text((GALLERY / "sliding_window_attention.mlir").read_text())
    spec = "peel-masked-iterations{branch=true},assign-swizzle,peel-masked-iterations{branch=true},pipeline-loops"
    done = inprocess.run(["tessera-opt", "w.mlir", "-p", spec, "--validate", "-d", "L=100"], cwd=tmp_path,
                         env={"TESSERA_DEBUG": None})
    assert done.returncode == 0, done.stderr
    assert "pipeline-loops" in done.stderr and "MISMATCH" not in done.stderr


def test_tessera_run_refuses_a_lowering_with_a_pass_of_the_other_level(tmp_path):
    """Located at the kernel, exit 1; the example pipeline of the hint does not name the pass twice."""
    (tmp_path / "k.mlir").write_text(ROW_SCALE)
    done = inprocess.run(["tessera-run", "k.mlir", "--level", "target", "--lower",
                          "rematerialize-constants,assign-swizzle,convert-tile-to-sm90", "-d", "M=70", "-d", "N=20"],
                         cwd=tmp_path, env={"TESSERA_DEBUG": None})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert ("k.mlir:3:3: kernel @row_scale: pass 'rematerialize-constants' transforms Target IR, but the input "
            "(@row_scale) is Tile IR; lower it first: convert-tile-to-sm90 (e.g. -p 'assign-swizzle,"
            "convert-tile-to-sm90,canonicalize,cse,rematerialize-constants')") in done.stderr


def test_a_gallery_kernel_through_a_users_pipeline_runs_right_in_the_ptx_executor(rng):
    """The online softmax (two loops over column blocks) through rings of 3, peeled before and after (nothing
    to peel: its masks are selects), to PTX, against softmax and log-sum-exp in float64."""
    spec = (f"assign-swizzle,peel-masked-iterations{{branch=true}},pipeline-loops{{stages=3}},"
            f"peel-masked-iterations{{branch=true}},{LOWER},allocate-registers,allocate-registers")
    module = tessera.parse_module((GALLERY / "online_softmax.mlir").read_text())
    x = rng.standard_normal((70, 150)).astype(np.float32) * 4
    y, lse = tessera.launch(module, x, level="ptx", pipeline=spec)
    x64 = x.astype(np.float64)
    reference_lse = np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1)) + x64.max(1)
    np.testing.assert_allclose(y, np.exp(x64 - reference_lse[:, None]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, reference_lse, rtol=1e-5, atol=1e-5)


def test_a_second_pipeline_loops_of_another_depth_says_it_changes_nothing(tmp_path):
    """The pipelined loop is left as it is (idempotent), and a depth asked for that it does not get is warned
    of, located at the loop (once for the backward's loop nest), from Python and from tessera-opt (exit 0)."""
    with pytest.warns(TesseraWarning, match="pipelined already over 2-stage rings; stages=4 changes nothing") \
            as caught:
        twice = _apply_loud(KERNELS["backward"](), "pipeline-loops,pipeline-loops{stages=4}")
    assert len(caught) == 1 and str(twice) == str(_apply(KERNELS["backward"](), "pipeline-loops"))
    (tmp_path / "w.mlir").write_text((GALLERY / "sliding_window_attention.mlir").read_text())
    done = inprocess.run(["tessera-opt", "w.mlir", "-p", "pipeline-loops{stages=3},pipeline-loops{stages=2}"],
                         cwd=tmp_path, env={"TESSERA_DEBUG": None})
    assert done.returncode == 0
    assert "tessera-opt: warning: w.mlir:" in done.stderr and "stages=2 changes nothing" in done.stderr


def _apply_loud(module, spec: str):
    apply_pipeline(module, spec)
    return module
