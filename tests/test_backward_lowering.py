"""The attention backward's three kernels lowered to sm_90a (`passes/convert_tile_to_sm90/backward.py`):

- ptxas accepts every kernel, head_dim 64 (block 128 x 128) and 128 (block 64 x 64), causal or not, with dQ
  added by red.global.add.f32 or cp.reduce.async.bulk: no warning, no spill, HGMMA in the main kernel;
- a representative slice runs at target level (CTA simulator) and PTX level (executor) within the backward's
  rule (`tessera.reference.check_attention_backward`): ragged lengths, seq_q != seq_k, GQA, rows that see no
  key (causal with seq_q > seq_k);
- the main kernel's CTAs run in a permuted order give dQ within the f32 reordering of its additions;
- the warp-specialized backward (a TMA producer warpgroup filling two-stage Q/dO rings: the default pipeline at
  head_dim 128) is bitwise the single-stage kernel at target level and its own PTX at PTX level,
  GQA included (the rings restart in every head of the group), and ptxas-clean;
- head_dim 128's FA3 blocks (64 x 128, the default): keys on the rows of every register tile, two consumer
  warpgroups; warp-specialized (the default pipeline, 384 threads) bitwise the single-stage kernel at target
  and PTX level, both ptxas-clean;
- what is not lowered is refused by name: two row counts (head_dim 64 with 64 x 128 blocks).
The whole issue matrix runs at Tile level in tests/test_attention_backward.py; the cases marked slow here run
with `-m slow`.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import func

import tessera
from tessera import passes, reference, reference_attention
from xdsl.utils.exceptions import DiagnosticException
from tessera.interpreters.launch import prepare_arguments
from tessera.ir.diagnostics import TesseraWarning
from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.kernel_abi import is_target_kernel
from tessera.kernels import attention_backward
from tessera.dialects import sm90
from tessera.regalloc import allocate_registers
from tessera.sass import disassemble, innermost_loop
from text_edits import checked

BF16 = ml_dtypes.bfloat16
BLOCKS = {64: 128, 128: 64}
"""block_m = block_n by head_dim: the lowering needs one row count for every register tile."""


def _pipeline(mode: str = "red", store: str = "st_shared", base: str = passes.PTX_PIPELINE) -> str:
    options = f"atomic-add={mode} store-shared={store}"
    return checked(base).replace("convert-tile-to-sm90", f"convert-tile-to-sm90{{{options}}}")


WARP_SPECIALIZED = passes.DEFAULT_PIPELINE
"""Warp-specialized with two-stage Q/dO rings where the kernel fits (the tests check that it did not fall back:
its warning is an error there)."""


DTYPES = {"bf16": BF16, "f16": np.float16}


def _kernels(head_dim: int, causal: bool, dtype: str = "bf16"):
    block = BLOCKS[head_dim]
    return attention_backward(head_dim=head_dim, causal=causal, block_m=block, block_n=block, dtype=dtype)


def _problem(head_dim, seq_q, seq_k, causal, heads=2, heads_k=1, seed=0, dtype="bf16"):
    """Rounded q, k, v, dO, the forward's O (float64, rounded) and LSE (f32)."""
    rng = np.random.default_rng(seed)
    elt = DTYPES[dtype]
    q, do = (rng.standard_normal((1, heads, seq_q, head_dim)).astype(elt) for _ in range(2))
    k, v = (rng.standard_normal((1, heads_k, seq_k, head_dim)).astype(elt) for _ in range(2))
    lse = reference_attention.attention_lse(q, k, causal)
    group = heads // heads_k
    kk, vv = (np.repeat(x.astype(np.float64), group, axis=1) for x in (k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), kk) / np.sqrt(head_dim)
    if causal:
        s = np.where(reference_attention.causal_visible(seq_q, seq_k), s, -np.inf)
    p = np.exp(s - np.where(np.isneginf(lse), 0, lse)[..., None])
    o = np.einsum("bhqk,bhkd->bhqd", p, vv).astype(elt)
    return q, k, v, o, lse.astype(np.float32), do


def _run(kernels, problem, level: str, mode: str, store: str = "st_shared", base: str = passes.PTX_PIPELINE):
    q, k, v, o, lse, do = problem
    options = dict(level=level, pipeline=_pipeline(mode, store, base))
    dpsum, lse2, _ = tessera.interpret(kernels.preprocess, o, do, lse, **options)
    dq_accum, dk, dv = tessera.interpret(kernels.main, q, k, v, do, lse2, dpsum, **options)
    return tessera.interpret(kernels.postprocess, dq_accum, seq_q=q.shape[2], **options), dk, dv


def _assert_within_rule(grads, problem, causal):
    q, k, v, o, _, do = problem
    for name, comparison in zip(("dq", "dk", "dv"), reference.check_attention_backward(grads, q, k, v, o, do, q.dtype,
                                                                                          causal)):
        assert comparison.ok, f"{name}: {comparison}"


# region ptxas


SLOW = pytest.mark.slow


@pytest.mark.parametrize("head_dim, causal, mode", [pytest.param(64, False, "red", marks=SLOW), (64, True, "bulk"),
                                                    (128, True, "red"), pytest.param(128, False, "bulk", marks=SLOW)])
def test_ptxas_accepts_the_backward_without_warning_or_spill(head_dim, causal, mode, ptxas):
    kernels = _kernels(head_dim, causal)
    for part, module in zip(("preprocess", "main", "postprocess"), kernels.modules):
        result = tessera.compile(module, target="cubin", pipeline=_pipeline(mode))
        assert not result.log.diagnostics, f"{part}: {result.text}"
        (function,) = result.log.functions.values()
        assert function.spill_store_bytes == function.spill_load_bytes == function.stack_frame_bytes == 0, result.text
        if part == "main":  # the main loop issues HGMMA, and adds dQ with RED only in "red" mode
            loop = innermost_loop(disassemble(result.cubin), containing="HGMMA")
            counts = {op: sum(n for name, n in loop.opcode_counts.items() if name.startswith(op))
                      for op in ("HGMMA", "RED")}
            assert counts["HGMMA"] > 0 and (counts["RED"] > 0) == (mode == "red"), loop.opcode_counts


@pytest.mark.parametrize("mode, store", [("red", "st_shared"), ("bulk", "stmatrix")])
def test_lowered_kernels_verify_and_read_back(mode, store):
    """The Target IR of each kernel passes the verifiers and prints and parses back to the same text."""
    from tessera.ir import parse_module, print_module, verify

    for module in _kernels(64, True, "f16").modules:
        lowered = tessera.compile(module, target="target", pipeline=_pipeline(mode, store))
        verify(lowered)
        text = print_module(lowered)
        assert print_module(parse_module(text)) == text


# endregion
# region numerics


@pytest.mark.parametrize("head_dim, seq_q, seq_k, causal, level, mode, dtype", [
    pytest.param(64, 77, 150, True, "target", "red", "bf16", marks=SLOW),  # ragged, GQA 2:1, causal bottom-right
    (64, 150, 77, True, "target", "bulk", "bf16"),                         # rows that see no key
    pytest.param(128, 65, 130, False, "target", "bulk", "bf16", marks=SLOW),
    (64, 77, 150, False, "ptx", "red", "f16"),
    (128, 90, 64, True, "ptx", "red", "bf16"),
])
def test_backward_lowered_is_within_the_rule(head_dim, seq_q, seq_k, causal, level, mode, dtype):
    problem = _problem(head_dim, seq_q, seq_k, causal, dtype=dtype)
    grads = _run(_kernels(head_dim, causal, dtype), problem, level, mode)
    _assert_within_rule(grads, problem, causal)
    if seq_q > seq_k and causal:  # the first seq_q - seq_k rows see no key: zero gradient, no NaN
        assert np.all(grads[0][:, :, : seq_q - seq_k].astype(np.float32) == 0)


@pytest.mark.parametrize("level", ["target", pytest.param("ptx", marks=SLOW)])
def test_p_and_ds_stored_by_stmatrix(level):
    """store-shared=stmatrix: each warp stores P and dS with one stmatrix.x4 per 16-column slab."""
    problem = _problem(64, 70, 140, True)
    _assert_within_rule(_run(_kernels(64, True), problem, level, "red", "stmatrix"), problem, True)
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in tessera.compile(_kernels(64, True).main,
                                                                         pipeline=_pipeline("red", "stmatrix"))


def test_api_runs_the_lowered_kernels():
    problem = _problem(64, 40, 70, True)
    _assert_within_rule(tessera.attention_backward(*problem, causal=True, level="target"), problem, True)


@pytest.mark.parametrize("mode", ["red", pytest.param("bulk", marks=SLOW)])
def test_main_kernel_ctas_in_a_permuted_order_agree(mode):
    """The key blocks add their dQ partials in another order: dq_accum changes by f32 reordering only."""
    q, k, v, o, lse, do = _problem(64, 100, 300, False, heads=1)
    kernels = _kernels(64, False)
    dpsum, lse2, _ = tessera.interpret(kernels.preprocess, o, do, lse, level="tile")
    target = next(op for op in tessera.compile(kernels.main, target="target", pipeline=_pipeline(mode)).walk()
                  if is_target_kernel(op))
    sig = tessera.find_kernel(kernels.main)
    results = []
    for order in ([0, 1, 2], [2, 0, 1]):
        arguments, sizes = prepare_arguments(sig, [q, k, v, do, lse2, dpsum])
        run_target_kernel(target, arguments, sizes, allocate_registers(target), cta_order=order)
        results.append(arguments[6])
    bound = 3 * 2.0**-24 * np.abs(results[0]).max() * 3
    assert np.abs(results[0] - results[1]).max() <= bound


# endregion
# region deterministic mode: semaphores per query block


def _deterministic_kernels(causal: bool):
    return attention_backward(head_dim=64, causal=causal, block_m=128, block_n=128, deterministic=True)


def test_deterministic_backward_lowered_is_bitwise_the_same_at_target_and_ptx():
    """Key block n waits until its query block's semaphore counts n (thread 0 spins on ld.acquire.gpu), adds
    its dQ partial, then signals (red.release.gpu.add): the adds land in key-block order at both levels, so
    dq_accum is bitwise the same in both simulators and in both atomic-add modes, and within the rule."""
    problem = _problem(64, 150, 300, True)
    kernels = _deterministic_kernels(True)
    red_target, red_ptx, bulk_target = (_run(kernels, problem, level, mode)
                                        for level, mode in (("target", "red"), ("ptx", "red"), ("target", "bulk")))
    _assert_within_rule(red_target, problem, True)
    for other in (red_ptx, bulk_target):
        for a, b in zip(red_target, other):
            assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    text = tessera.compile(kernels.main, pipeline=_pipeline("red"))
    assert "ld.acquire.gpu.global.b32" in text and "red.release.gpu.global.add.s32" in text


def test_deterministic_backward_lowered_verifies_reads_back_and_runs_from_the_api():
    from tessera.ir import parse_module, print_module, verify

    for mode in ("red", "bulk"):
        lowered = tessera.compile(_deterministic_kernels(True).main, target="target", pipeline=_pipeline(mode))
        verify(lowered)
        text = print_module(lowered)
        assert print_module(parse_module(text)) == text and "sm90.sem_try_wait" in text and "sm90.sem_signal" in text
    problem = _problem(64, 40, 70, True)
    _assert_within_rule(tessera.attention_backward(*problem, causal=True, deterministic=True, level="target"),
                        problem, True)


def test_deterministic_backward_ptxas_accepts_without_warning_or_spill(ptxas):
    for mode in ("red", "bulk"):
        result = tessera.compile(_deterministic_kernels(True).main, target="cubin", pipeline=_pipeline(mode))
        assert not result.log.diagnostics, result.text
        (function,) = result.log.functions.values()
        assert function.spill_store_bytes == function.spill_load_bytes == function.stack_frame_bytes == 0, result.text


def test_deterministic_backward_in_an_order_that_cannot_finish_is_a_deadlock():
    """The CTA simulator runs CTAs one after another: key block 1 first waits for a count of 1 that only key
    block 0, which runs later, makes. Reported at once, naming the semaphore wait."""
    from tessera.interpreters.block_batch import KernelHazardError

    q, k, v, o, lse, do = _problem(64, 100, 300, False, heads=1)
    kernels = _deterministic_kernels(False)
    dpsum, lse2, _ = tessera.interpret(kernels.preprocess, o, do, lse, level="tile")
    target = next(op for op in tessera.compile(kernels.main, target="target", pipeline=_pipeline()).walk()
                  if is_target_kernel(op))
    arguments, sizes = prepare_arguments(tessera.find_kernel(kernels.main), [q, k, v, do, lse2, dpsum])
    with pytest.raises(KernelHazardError, match=r"sm90.sem_try_wait.*waits for the semaphore .* to hold 1, but it "
                                                r"holds 0 .* deadlock in this CTA order"):
        run_target_kernel(target, arguments, sizes, allocate_registers(target), cta_order=[1, 0, 2])


def test_deterministic_backward_at_ptx_in_an_order_that_cannot_finish_is_a_deadlock(monkeypatch):
    """The PTX executor runs CTAs in batches (here one CTA each) in the launch's order: key block 1 alone first
    spins (ld.acquire, nanosleep) on a count only key block 0 can make: a deadlock naming the spin wait."""
    from tessera.interpreters.ptx import launch_setup, launcher
    from tessera.interpreters.ptx.asynchrony import PtxDeadlockError

    launch = launcher.launch
    monkeypatch.setattr(launch_setup, "LANES_PER_BATCH", 1)
    monkeypatch.setattr(launcher, "launch", lambda *args, **kwargs: launch(*args, **kwargs, cta_order=[1, 0, 2]))
    q, k, v, o, lse, do = _problem(64, 100, 300, False, heads=1)
    kernels = _deterministic_kernels(False)
    dpsum, lse2, _ = tessera.interpret(kernels.preprocess, o, do, lse, level="tile")
    with pytest.raises(PtxDeadlockError, match=r"sleep in a spin wait .*semaphore wait.* deadlock in this CTA order") as error:
        tessera.interpret(kernels.main, q, k, v, do, lse2, dpsum, level="ptx", pipeline=_pipeline())
    assert "of CTA (1, 0, 0)" in str(error.value)


# endregion
# region warp-specialized


def _main_only(kernels, problem, level: str, pipeline: str):
    """dq_accum, dK, dV of the main kernel at `level` through `pipeline` (pre- and postprocess at Tile level)."""
    q, k, v, o, lse, do = problem
    dpsum, lse2, _ = tessera.interpret(kernels.preprocess, o, do, lse, level="tile")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)  # the default pipeline named falls back, with a warning
        return tessera.interpret(kernels.main, q, k, v, do, lse2, dpsum, level=level, pipeline=pipeline)


def _bitwise(a, b) -> bool:
    return all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)) for x, y in zip(a, b))


@pytest.mark.parametrize("head_dim, causal, block, pipeline", [
    (128, True, 64, passes.DEFAULT_PIPELINE),
    pytest.param(64, False, 128, WARP_SPECIALIZED, marks=SLOW),  # two consumer warpgroups, query rows
])
def test_default_pipeline_warp_specializes_the_backward_ptxas_clean(head_dim, causal, block, pipeline, ptxas):
    """At head_dim 128 (block 64 x 64) and 64 (128 x 128, rematerialized shared addresses: 248 -> 234 registers)
    the default pipeline's first configuration fits the main kernel, without a fallback warning: a producer
    warpgroup fills the Q/dO rings by TMA (UTMALDG), setmaxnreg gives the consumers their budget (USETMAXREG), and
    ptxas takes it without a warning (no serialized wgmma) or a spill; the main loop issues HGMMA and stages dQ for
    the producer's bulk reduction (`atomic-add=auto`: no RED in the loop, UBLKRED in the kernel). (overlap-softmax
    leaves the loop alone: two accumulators, dK, dV.)"""
    main = attention_backward(head_dim=head_dim, causal=causal, block_m=block, block_n=block).main
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)
        result = tessera.compile(main, target="cubin", pipeline=pipeline)
    assert not result.log.diagnostics, result.text
    (function,) = result.log.functions.values()
    assert function.spill_store_bytes == function.spill_load_bytes == function.stack_frame_bytes == 0, result.text
    sass = disassemble(result.cubin)
    assert "UTMALDG" in sass and "USETMAXREG.DEALLOC" in sass and "USETMAXREG.TRY_ALLOC" in sass
    ops = innermost_loop(sass, containing="HGMMA").opcode_counts
    assert any(op.startswith("HGMMA") for op in ops) and not any(op.startswith("RED") for op in ops), ops
    assert "UBLKRED" in sass


@pytest.mark.parametrize("head_dim, seq_q, seq_k, causal, heads, mode, block", [
    (64, 50, 90, True, 2, "red", 64),                             # ragged, GQA 2:1, causal bottom-right
    (128, 70, 65, False, 2, "bulk", 64),                          # seq_q > seq_k, GQA, ragged keys
    pytest.param(128, 150, 77, True, 1, "red", 64, marks=SLOW),   # rows that see no key
    pytest.param(64, 200, 200, False, 3, "bulk", 64, marks=SLOW),  # GQA 3:1, four query blocks per key block
    pytest.param(64, 150, 260, True, 2, "red", 128, marks=SLOW),  # head_dim 64's 128 x 128: two consumer warpgroups
])
def test_warp_specialized_backward_is_bitwise_the_single_stage_one_at_target_level(head_dim, seq_q, seq_k, causal,
                                                                                    heads, mode, block):
    """Same Tile IR, same arithmetic in the same order per element: the warp-specialized kernel's dq_accum, dK and dV
    (dQ added by red.global.add or by bulk reduction) are bitwise the single-stage kernel's (which is within the
    backward's rule, tests above). With GQA each head of the group refills the Q/dO rings from fill 0: the ring
    barriers' parities count the earlier heads' phases."""
    kernels = attention_backward(head_dim=head_dim, causal=causal, block_m=block, block_n=block)
    problem = _problem(head_dim, seq_q, seq_k, causal, heads=heads)
    assert _bitwise(_main_only(kernels, problem, "target", _pipeline(mode, base=WARP_SPECIALIZED)),
                    _main_only(kernels, problem, "target", passes.PTX_PIPELINE))


def test_warp_specialized_backward_ptx_is_bitwise_its_target_ir():
    """The printed PTX of the warp-specialized main kernel, run by the PTX executor, computes bitwise what its
    Target IR computes in the CTA simulator (and so the single-stage kernel's result); GQA, causal, ragged."""
    kernels = attention_backward(head_dim=128, causal=True, block_m=64, block_n=64)
    problem = _problem(128, 40, 70, True, heads=2)
    assert _bitwise(_main_only(kernels, problem, "ptx", WARP_SPECIALIZED),
                    _main_only(kernels, problem, "target", WARP_SPECIALIZED))


# endregion
# region keys on the rows: FA3's 64 x 128 block at head_dim 128, two consumer warpgroups


def _key_rows(causal: bool):
    return attention_backward(head_dim=128, causal=causal, block_m=64, block_n=128)


@pytest.mark.parametrize("seq_q, seq_k, causal, heads, mode", [
    pytest.param(70, 65, False, 2, "bulk", marks=SLOW),       # seq_q > seq_k, GQA 2:1, ragged keys (bounds mask)
    pytest.param(150, 77, True, 1, "red", marks=SLOW),        # rows that see no key (LSE2 = +inf)
    pytest.param(50, 140, True, 2, "red", marks=SLOW),        # two key blocks, causal bottom-right, GQA
])
def test_key_rows_backward_lowered_is_within_the_rule(seq_q, seq_k, causal, heads, mode):
    """S^T, dP^T, dK, dV and dQ^T all have 128 rows, so two consumer warpgroups each take 64 keys; dQ^T is
    added into dq_accum transposed (red.global.add per register, or staged transposed for the bulk reduction)."""
    problem = _problem(128, seq_q, seq_k, causal, heads=heads)
    _assert_within_rule(_run(_key_rows(causal), problem, "target", mode), problem, causal)


@pytest.mark.parametrize("seq_q, seq_k, causal, heads, level", [
    (40, 150, True, 2, "ptx"),                                # two key blocks, causal, GQA: the PTX executor
    pytest.param(70, 65, False, 2, "target", marks=SLOW),     # seq_q > seq_k, ragged keys
    pytest.param(150, 77, True, 1, "target", marks=SLOW),     # rows that see no key
])
def test_key_rows_warp_specialized_is_bitwise_the_single_stage_kernel(seq_q, seq_k, causal, heads, level):
    """The default pipeline warp-specializes the keys-on-rows kernel (a TMA producer, two consumer warpgroups of
    64 keys): at `level` (its printed PTX in the executor, or its Target IR) it computes bitwise what the single-stage
    kernel computes in the CTA simulator, which is within the backward's rule."""
    kernels = _key_rows(causal)
    problem = _problem(128, seq_q, seq_k, causal, heads=heads)
    single = _main_only(kernels, problem, "target", passes.PTX_PIPELINE)
    assert _bitwise(_main_only(kernels, problem, level, WARP_SPECIALIZED), single)
    dq = tessera.interpret(kernels.postprocess, single[0], level="tile", seq_q=seq_q)
    _assert_within_rule((dq, *single[1:]), problem, causal)


@pytest.mark.parametrize("causal, mode, pipeline", [(True, "auto", WARP_SPECIALIZED),
                                                    pytest.param(False, "bulk", passes.PTX_PIPELINE, marks=SLOW),
                                                    pytest.param(True, "red", WARP_SPECIALIZED, marks=SLOW)])
def test_key_rows_backward_ptxas_clean(causal, mode, pipeline, ptxas):
    """No spill, no warning; warp-specialized (the default pipeline, dQ^T by the producer's bulk reduction as
    `atomic-add=auto` takes it, or by red: without a fallback warning) a
    producer and two consumer warpgroups (384 threads, UTMALDG, USETMAXREG), single-stage 256 threads; the main loop
    (one 64 x 128 block) issues HGMMA. bench/backward_sass.py prints its instructions per key beside FA3's."""
    main = _key_rows(causal).main
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)
        lowered = tessera.compile(main, target="target", pipeline=_pipeline(mode, base=pipeline))
        result = tessera.compile(main, target="cubin", pipeline=_pipeline(mode, base=pipeline))
    assert not result.log.diagnostics, result.text
    (function,) = result.log.functions.values()
    assert function.spill_store_bytes == function.spill_load_bytes == function.stack_frame_bytes == 0, result.text
    fn = next(op for op in lowered.walk() if is_target_kernel(op))
    threads = fn.attributes["sm90.kernel"].data["threads"].value.data
    sass = disassemble(result.cubin)
    if pipeline == WARP_SPECIALIZED:
        assert threads == 384 and "UTMALDG" in sass and "USETMAXREG.TRY_ALLOC" in sass
    else:
        assert threads == 256
    ops = innermost_loop(sass, containing="HGMMA").opcode_counts
    assert any(op.startswith("HGMMA") for op in ops), ops
    # LSE2 and dPsum come through shared memory with Q and dO: the loop reads them with LDS, never LDG
    assert any(op.startswith("LDS") for op in ops) and not any(op.startswith("LDG") for op in ops), ops
    assert not any(isinstance(op, sm90.LdGlobalOp) for op in fn.walk())


def _rows_first(main):
    """`main` with each one-row copy (LSE2, dPsum) moved to the front of its copy group (nothing to ride on)."""
    from tessera.dialects import tile

    for copy in [op for op in main.walk() if isinstance(op, tile.CpAsyncOp) and op.dest.type.get_shape()[0] == 1]:
        first = next(op for op in copy.parent_block().ops if isinstance(op, tile.CpAsyncOp))
        view = copy.source.owner
        for op in (view, copy):
            op.detach()
            first.parent_block().insert_op_before(op, first.source.owner)
    return main


def _pipelined_key_rows(rows_first: bool = False):
    """The keys-on-rows main kernel after assign-swizzle and pipeline-loops (Tile IR), optionally `_rows_first`."""
    from tessera.passes import apply_pipeline

    main = _key_rows(False).main.clone()
    apply_pipeline(_rows_first(main) if rows_first else main, "assign-swizzle,pipeline-loops{stages=2}")
    return next(op for op in main.walk() if isinstance(op, func.FuncOp))


def test_lse2_and_dpsum_ride_on_the_barriers_of_q_and_do():
    """The one-row rings of LSE2 and dPsum, each copied right after Q and dO, share their barriers (riding_rings.py):
    the Q and dO fills expect both copies' bytes, and only the later release of each pair arrives. Copied first in
    the group (nothing before them to ride on, or only the other row), they keep barriers of their own."""
    from tessera.passes.convert_tile_to_sm90.riding_rings import plan_riding_rings

    plan = plan_riding_rings(_pipelined_key_rows(), set())
    names = {ring.result.name_hint: leader.result.name_hint for ring, leader in plan.leader.items()}
    assert names == {"lse2_ring": "q_ring", "dpsum_ring": "do_ring"}
    assert sorted(plan.expect_bytes.values()) == [64 * 128 * 2 + 64 * 4] * 2
    assert sorted(r.stage.owner.source.name_hint for r in plan.silent) == ["do_ring", "q_ring"]
    assert plan_riding_rings(_pipelined_key_rows(rows_first=True), set()).leader == {}
    # a fill of Q without its LSE2 row (the prologue's): Q's expect_tx may not count the row, so LSE2 rides on nothing
    from tessera.dialects import tile

    fn = _pipelined_key_rows()
    prologue = next(op for op in fn.walk() if isinstance(op, tile.CpAsyncOp) and op.dest.type.get_shape()[0] == 1)
    prologue.detach()
    prologue.erase()
    assert {r.result.name_hint for r in plan_riding_rings(fn, set()).leader} == {"dpsum_ring"}


@SLOW
def test_rows_copied_first_keep_barriers_of_their_own_and_compute_the_same():
    """The rows copied first in their groups (own barriers: a wait and a release more per ring and trip) and the
    default order (riding) give bitwise the single-stage kernel's results at target level, several trips, GQA."""
    import dataclasses

    kernels = _key_rows(False)
    moved = dataclasses.replace(kernels, main=_rows_first(kernels.main.clone()))
    problem = _problem(128, 200, 150, False, heads=2)
    single = _main_only(kernels, problem, "target", passes.PTX_PIPELINE)
    assert _bitwise(_main_only(moved, problem, "target", WARP_SPECIALIZED), single)


# endregion
# region refusals


def test_two_row_counts_are_refused_by_name():
    """Keys on the rows at head_dim 64 (64 x 128): dQ^T has 64 rows, S^T, dK and dV 128."""
    key_rows_64 = attention_backward(head_dim=64, block_m=64, block_n=128).main
    with pytest.raises(DiagnosticException, match=r"register tiles must all have the same number of rows"):
        tessera.compile(key_rows_64, target="target", pipeline=passes.PTX_PIPELINE)


def test_a_ring_in_a_loop_nest_whose_trip_count_varies_is_refused_by_name():
    """A query loop whose trip count differs per head of the GQA group (its upper bound computed inside the loop
    over the heads): its Q/dO rings cannot count the earlier heads' barrier phases, and the lowering says so.
    (The block-sparse backward walks one work list per thread block instead, `BlockMask.backward_inputs`.)"""
    from xdsl.dialects import arith, scf

    main = attention_backward(head_dim=64, block_m=64, block_n=64).main
    heads = next(op for op in main.walk() if isinstance(op, scf.ForOp))
    queries = next(op for op in heads.body.walk() if isinstance(op, scf.ForOp))
    varying = arith.AddiOp(queries.ub, heads.body.block.args[0])  # more trips for each later head
    heads.body.block.insert_op_before(varying, queries)
    queries.operands = [queries.lb, varying.result, *queries.operands[2:]]
    with pytest.raises(DiagnosticException, match=r"tile.stage %q_ring.*a ring pipelined in a loop nest needs its "
                                                  r"loop's upper bound defined outside the nest"):
        tessera.compile(main, target="target", pipeline=passes.allocated(passes.PIPELINED_PIPELINE))


def test_unknown_atomic_add_mode_is_refused():
    """A pipeline error, before any input is read, as every pass option's (it was raised when the pass ran)."""
    with pytest.raises(ValueError, match=r"atomic-add must be one of auto, red, bulk, got 'cas'"):
        tessera.compile(_kernels(64, False).main, target="target", pipeline=_pipeline("cas"))


# endregion


# region atomic-add=auto, the default
def _window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 40)


def _softcap(score, b, h, q_idx, kv_idx):
    return 2.0 * np.tanh(score / 2.0)


def _reductions(lowered) -> tuple[int, bool]:
    """(bulk reductions, whether any red.global.add) of a lowered module."""
    from tessera.dialects import sm90_reductions

    ops = list(lowered.walk())
    return (sum(isinstance(op, sm90_reductions.BulkReduceAddOp) for op in ops),
            any(isinstance(op, sm90_reductions.RedGlobalAddOp) for op in ops))


@pytest.mark.parametrize("build, pipeline, expected", [
    (lambda: _key_rows(False), passes.DEFAULT_PIPELINE, "bulk"),  # keys on rows: dQ^T added transposed
    (lambda: _kernels(128, False), passes.DEFAULT_PIPELINE, "bulk"),  # 64 x 64: dQ added as it is
    (lambda: _key_rows(True), passes.PTX_PIPELINE, "red"),  # single-stage: no producer
    (lambda: attention_backward(head_dim=128, block_m=64, block_n=128, deterministic=True),
     passes.DEFAULT_PIPELINE, "red"),  # semaphores: only the adding thread could wait for its writes
    # the staging slots beside a mask_mod's P tile: more than 227 KiB (also tests/test_attention_mods_ws.py's
    # test_d128_window_gqa_ragged_at_target_level_takes_the_dense_kernels_blocks)
    pytest.param(lambda: attention_backward(128, mask_mod=_window, block_sparse=True, block_m=64, block_n=128),
                 passes.DEFAULT_PIPELINE, "red", marks=SLOW),
    # registers: 223 of 240 with bulk, short of AUTO_BULK_HEADROOM (27 SASS longer than red under ptxas 13.0)
    (lambda: attention_backward(64, score_mod=_softcap, block_m=128, block_n=128), passes.DEFAULT_PIPELINE, "red"),
], ids=["key-rows", "64x64", "single-stage", "deterministic", "mask-mod", "soft-cap-registers"])
def test_auto_takes_the_producers_bulk_reduction_where_it_fits(build, pipeline, expected):
    """`atomic-add=auto` (the default): the producer bulk-reduces dQ (or dQ^T) staged in its two slots wherever it
    may and the staging fits in shared memory and the registers (`tessera.lowering.fallback.AUTO_BULK_HEADROOM`);
    every other dQ is added by red.global.add, in the same configuration (no fallback warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)
        lowered = tessera.compile(build().main, target="target", pipeline=pipeline)
    assert _reductions(lowered) == ((1, False) if expected == "bulk" else (0, True))
    fn = next(op for op in lowered.walk() if is_target_kernel(op))
    assert "sm90.pipeline_note" not in fn.attributes


def test_auto_bulk_refused_for_registers_is_lowered_again_with_red():
    """Where the warp-specialized configuration with auto's bulk reduction is refused for registers, the same
    configuration is tried with dQ by red before the ladder's next rung (`tessera.lowering.fallback._takes_red`):
    a stand-in for the pipeline, which runs it up to convert-tile-to-sm90, refuses any module holding a bulk
    reduction."""
    from tessera.ir import make_context
    from tessera.lowering.fallback import apply_with_fallback
    from tessera.regalloc import RegisterBudgetError

    ran = []

    def run(spec, module):
        ran.append(spec)
        upto = spec[:spec.index("convert-tile-to-sm90")] + spec[spec.index("convert-tile-to-sm90"):].split(",")[0]
        passes.parse_pipeline(upto).apply(make_context(), module)
        if _reductions(module)[0]:
            raise RegisterBudgetError("stand-in: the consumers need 241 registers with the bulk reduction")

    module = _key_rows(False).main
    apply_with_fallback(module, passes.fallback_ladder(), run)
    first = passes.fallback_ladder()[0]
    assert ran == [first.pipeline, first.red]
    assert _reductions(module) == (0, True)
    fn = next(op for op in module.walk() if is_target_kernel(op))
    assert "sm90.pipeline_note" not in fn.attributes


# endregion


def test_each_wgmma_descriptor_has_ptx_registers_of_its_own():
    """ptxas 13.3+ take a PTX register as one unit over the kernel: a descriptor sharing its name with another value
    left the uniform datapath (the single-stage d128 loop under 13.5: 720 SASS instructions, 112 R2UR; 534 with a
    name per descriptor, docs/performance.md). No two values of which one is a descriptor share a register."""
    from tessera.regalloc.uniform import DESCRIPTOR_OPS

    lowered = tessera.compile(_key_rows(False).main, target="target", pipeline=passes.PTX_PIPELINE)
    fn = next(op for op in lowered.walk() if is_target_kernel(op))
    names = allocate_registers(fn).names
    owners: dict[str, set] = {}
    for value, registers in names.items():
        for register in registers if isinstance(registers, list) else []:
            owners.setdefault(register, set()).add(value)
    descriptors = [v for v in names if isinstance(v.owner, DESCRIPTOR_OPS)]
    assert len(descriptors) > 40
    for value in descriptors:
        for register in names[value]:
            assert owners[register] == {value}, (register, [str(v) for v in owners[register]][:3])
