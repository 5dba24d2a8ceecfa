"""Whole kernels from PTX text through the PTX executor: Tessera's own GEMM and flash attention (printed from
register-allocated Target IR, launched as `tessera.host` describes them) against NumPy, and hand-written
Hopper PTX (TMA + mbarrier + wgmma) as other compilers emit it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tessera import find_kernel, reference
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import TensorMapArg, launch
from tessera.interpreters.ptx.launcher import launch_described
from tessera.passes import PTX_PIPELINE, SPECIALIZED_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers

from conftest import build_kernel

SPECIALIZED_PTX = SPECIALIZED_PIPELINE + ",allocate-registers"


def run_from_ptx(module, inputs, pipeline):
    """Lower `module` with `pipeline`, print PTX, run it in the executor; returns (outputs, Tile arguments)."""
    sig = find_kernel(module)
    lowered = module.clone()
    apply_pipeline(lowered, pipeline)
    text = print_ptx(lowered, registers=allocated_registers)
    arrays, sizes = prepare_arguments(sig, inputs)
    launch_described(text, describe(lowered)[0], arrays, sizes)
    return [a for a, arg in zip(arrays, sig.args) if arg.role == "out"], arrays


@pytest.mark.parametrize("pipeline", [PTX_PIPELINE, SPECIALIZED_PTX], ids=["single-stage", "specialized"])
def test_gemm_from_ptx(pipeline, rng):
    a, b = rng.standard_normal((256, 128)), rng.standard_normal((128, 256))
    (c,), arrays = run_from_ptx(build_kernel("gemm", dtype="bf16"), [a, b], pipeline)
    check = reference.check_gemm(c, arrays[0], arrays[1], arrays[0].dtype)
    assert check.ok, check


@pytest.mark.parametrize("head_dim,causal,seq_k", [(64, False, 256), (128, True, 192)])
def test_flash_attention_from_ptx(head_dim, causal, seq_k, rng):
    q = rng.standard_normal((1, 2, 128, head_dim))
    k, v = (rng.standard_normal((1, 2, seq_k, head_dim)) for _ in range(2))
    module = build_kernel("flash_attention", head_dim=head_dim, causal=causal, dtype="bf16")
    (o,), arrays = run_from_ptx(module, [q, k, v], SPECIALIZED_PTX)
    check = reference.check_attention(o, *arrays[:3], arrays[0].dtype, causal=causal)
    assert check.ok, check


def test_hand_written_tma_wgmma_tile():
    """tests/ptx_samples/gemm_tile_sanity.ptx (notes section 10): C = A B^T for one 64x64x64 bf16 tile."""
    import ml_dtypes

    text = (Path(__file__).parent / "ptx_samples" / "gemm_tile_sanity.ptx").read_text()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    c = np.zeros((64, 64), np.float32)
    maps = [TensorMapArg.tiled(x, box=(64, 64), swizzle=128) for x in (a, bt)]
    _, _, out = launch(text, "gemm_tile_sanity", 1, 128, maps + [c], shared_bytes=16384 + 1023)
    expected = a.astype(np.float64) @ bt.astype(np.float64).T
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def test_tessera_run_executes_ptx_files(tmp_path, capsys):
    from tessera.tools.tessera_run import main

    text = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry scale(.param .u64 x, .param .f32 s)
.reqntid 32, 1, 1
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    .reg .f32 %f<3>;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [x];
    ld.param.f32 %f1, [s];
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd2, %rd0, %rd1;
    ld.global.f32 %f0, [%rd2];
    mul.rn.f32 %f0, %f0, %f1;
    st.global.f32 [%rd2], %f0;
    ret;
}
"""
    path = tmp_path / "scale.ptx"
    path.write_text(text)
    assert main([str(path), "--arg", "f32[32]=arange", "--arg", "f32=0.5", "--save",
                 str(tmp_path / "out")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "arg0_x.npy"), np.arange(32) * 0.5)
    assert main([str(path), "--arg", "f32[16]=zeros", "--arg", "f32=1"]) == 1
    assert "out of bounds" in capsys.readouterr().err


KERNELS = Path(__file__).parent / "ptx_kernels"


def test_hand_written_kernels_from_other_compilers_styles(rng):
    """CUTLASS-style TMA + mbarrier wait loop + wgmma GEMM with ragged M, and an Ampere cp.async pipeline
    with zero-filled partial copies (tests/ptx_kernels, specifications in their headers)."""
    import ml_dtypes

    text = (KERNELS / "tma_wgmma_gemm.ptx").read_text()
    m, n, k = 100, 64, 128
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    maps = [TensorMapArg.tiled(x, (64, 64), 128) for x in (a, bt)]
    c = launch(text, "gemm_tn", (2, 1), 128, maps + [np.zeros((m, n), np.float32), m, n, k],
               shared_bytes=16384 + 1024)[2]
    np.testing.assert_allclose(c, a.astype(np.float64) @ bt.astype(np.float64).T, rtol=1e-5, atol=1e-4)

    text = (KERNELS / "cp_async_pipeline.ptx").read_text()
    rows, cols, ld = 3, 600, 604
    x = rng.standard_normal((rows, ld)).astype(np.float32)
    kernel_name = text.split(".entry")[1].split("(")[0].strip()
    _, y, rowsum = launch(text, kernel_name, rows, 64, [x, np.zeros_like(x), np.zeros(rows, np.float32), cols, ld,
                                                        np.float32(0.5)])[:3]
    np.testing.assert_array_equal(y[:, :cols], x[:, :cols] * np.float32(0.5))
    np.testing.assert_allclose(rowsum, (x[:, :cols] * np.float32(0.5)).sum(axis=1), rtol=1e-5)


def test_straight_runs_keep_the_min_pc_schedule(monkeypatch, rng):
    """The scheduler runs straight-line plain steps without a full pick each (`Scheduler._straight`): the same
    results bitwise, the same counts, and a step budget that stops at the same place as one full pick per step,
    on kernels with mbarrier wakes, TMA, wgmma, cp.async and divergent branches."""
    import ml_dtypes

    from tessera.interpreters.ptx.state import PtxExecutionError
    from tessera.interpreters.ptx.schedule import Scheduler

    m, n, k = 100, 64, 128
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((3, 604)).astype(np.float32)
    values = rng.integers(0, 3000, 100).astype(np.uint32)
    cp_text = (KERNELS / "cp_async_pipeline.ptx").read_text()
    cases = [
        ("tma_wgmma_gemm.ptx", "gemm_tn", (2, 1), 128,
         lambda: [TensorMapArg.tiled(y, (64, 64), 128) for y in (a, bt)] + [np.zeros((m, n), np.float32), m, n, k],
         16384 + 1024),
        ("cp_async_pipeline.ptx", cp_text.split(".entry")[1].split("(")[0].strip(), 3, 64,
         lambda: [x, np.zeros_like(x), np.zeros(3, np.float32), 600, 604, np.float32(0.5)], None),
        ("divergent_branches.ptx", "divergent_branches", 2, 96,
         lambda: [values, np.zeros((100, 4), np.uint32), np.zeros(100, np.uint32), 100], None),
    ]

    def run_all(max_steps=None):
        runs = []
        for name, kernel, grid, block, args, shared in cases:
            stats: dict = {}
            options = {} if shared is None else {"shared_bytes": shared}
            text = (KERNELS / name).read_text()
            try:
                out = launch(text, kernel, grid, block, args(), stats=stats,
                             max_steps=max_steps or 1_000_000, **options)
                runs.append(([np.asarray(o).tobytes() for o in out if o is not None], stats))
            except PtxExecutionError as error:
                runs.append((str(error), stats))
        return runs

    # Tessera's warp-specialized GEMM: a producer's arrives wake consumers parked at lower pcs mid-run
    module = build_kernel("gemm", dtype="bf16")
    lowered = module.clone()
    apply_pipeline(lowered, SPECIALIZED_PTX)
    text = print_ptx(lowered, registers=allocated_registers)
    gemm_inputs = [rng.standard_normal((128, 256)), rng.standard_normal((256, 128))]

    def run_gemm():
        runs = []
        for budget in (1_000_000, 100, 200, 300):
            arrays, sizes = prepare_arguments(find_kernel(module), gemm_inputs)
            try:
                launch_described(text, describe(lowered)[0], arrays, sizes, max_steps=budget)
                runs.append([np.asarray(o).tobytes() for o in arrays])
            except PtxExecutionError as error:
                runs.append(str(error))
        return runs

    straight, gemm = run_all(), run_gemm()
    budget = [run_all(max_steps=s) for s in (40, 157)]
    monkeypatch.setattr(Scheduler, "_straight", lambda *args: None)
    assert run_all() == straight
    assert [run_all(max_steps=s) for s in (40, 157)] == budget
    assert all("max_steps" in r[0] for r in budget[0])  # the budgets stop every kernel midway
    assert run_gemm() == gemm
    assert all("max_steps" in r for r in gemm[1:])


WAKE_PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry wake(.param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<6>;
  .shared .align 8 .b64 bar;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared.b64 [bar], 32;
  bar.sync 0;
  setp.ge.u32 %p2, %r1, 32;
  @%p2 bra ARRIVE;
WAIT:
  mbarrier.try_wait.parity.shared.b64 %p3, [bar], 0;
  @!%p3 bra WAIT;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
  ret;
ARRIVE:
  add.u32 %r6, %r1, 7;
  mbarrier.arrive.shared.b64 %rd4, [bar];
  add.u32 %r2, %r1, 1;
  add.u32 %r3, %r2, 1;
  add.u32 %r4, %r3, 1;
  add.u32 %r5, %r4, 1;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  ret;
}
"""


def test_straight_runs_stop_at_a_wake(monkeypatch):
    """Warp 1's arrive wakes warp 0, parked at a lower pc: the released warp runs next (as with one full pick
    per step), not warp 1's straight-line adds after the arrive; every step budget stops at the same place."""
    from tessera.interpreters.ptx.state import PtxExecutionError
    from tessera.interpreters.ptx.schedule import Scheduler

    def where(budget):
        try:
            return launch(WAKE_PTX, "wake", 1, 64, [np.zeros(64, np.uint32)], max_steps=budget)[0].tolist()
        except PtxExecutionError as error:
            return str(error)

    straight = [where(s) for s in range(8, 27)]
    assert "warp 0 of CTA (0, 0, 0): running at line 19" in straight[3]  # woken right after the arrive
    assert "warp 1 of CTA (0, 0, 0): running at line 28 (add.u32)" in straight[3]
    assert straight[-1] == list(range(32)) + list(range(36, 68))
    monkeypatch.setattr(Scheduler, "_straight", lambda *args: None)
    assert [where(s) for s in range(8, 27)] == straight
