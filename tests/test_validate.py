"""Per-level validation (`tessera.validate`): the full pipeline validates clean, a miscompilation injected into
any pass is caught and named with its pass (and, where values can be compared, the first diverging op), the
attention intermediates per K/V tile match a float64 golden, and `tessera-opt --validate` reports both."""

from __future__ import annotations

import importlib.util

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, IndexType, IntegerAttr
from xdsl.rewriter import InsertPoint, Rewriter

from tessera.dialects import sm90, tile
from tessera.passes import SPECIALIZED_PIPELINE, all_passes
from tessera.validate import (
    attention_trace,
    compare_traces,
    first_loss,
    golden_attention_trace,
    validate,
)
from tessera.validation.levels import generate_inputs

from conftest import build_kernel

FULL = SPECIALIZED_PIPELINE + ",allocate-registers"
PASS_NAMES = [p.split("{")[0] for p in FULL.split(",")]
HAS_PTX_EXECUTOR = importlib.util.find_spec("tessera.interpreters.ptx.launcher") is not None


def flash():
    return build_kernel("flash_attention", head_dim=64, causal=True, dtype="bf16")


# region clean pipelines
@pytest.mark.parametrize("variant", ["flash", "gemm"])
def test_full_pipeline_validates_clean(variant):
    module = flash() if variant == "flash" else build_kernel("gemm", dtype="bf16")
    report = validate(module, FULL)
    assert report.ok, str(report)
    assert [c.pass_name for c in report.checks[1:len(PASS_NAMES) + 1]] == PASS_NAMES
    levels = [c.level for c in report.checks]
    tile_passes = 1 + PASS_NAMES.index("convert-tile-to-sm90")  # the input and the passes before the lowering
    assert levels[:tile_passes] == ["tile"] * tile_passes
    assert levels[tile_passes:-1] == ["target"] * (len(levels) - 1 - tile_passes)
    # within a level the passes are bit-exact; across Tile -> Target only the reference tolerance holds
    assert all(c.vs_previous == 0 for c in report.checks[1:tile_passes] + report.checks[tile_passes + 1:-1])
    ptx = report.checks[-1]
    assert ptx.level == "ptx"
    if HAS_PTX_EXECUTOR:
        assert ptx.ok and not ptx.note and ptx.vs_previous == 0
    else:
        assert ptx.note.startswith("skipped")
    assert "every level agrees" in str(report)


def test_default_pipeline_validates_the_configuration_it_falls_back_to():
    """Regression: a kernel too big for warp specialization (266 registers a thread) compiles with the default
    pipeline single-stage spilling (`tessera.lowering.fallback`), but `validate` walked the default pipeline's
    own passes and stopped at warp-specialize ("the consumer warpgroups need 266 registers"), and
    `tessera-opt -p default-pipeline --validate` exited 1 for a kernel that `-p default-pipeline` compiles. It
    walks the configuration the fallback keeps, and says which."""
    from pathlib import Path

    import tessera
    from tessera.passes import DEFAULT_PIPELINE

    path = Path(__file__).parent / "user_kernels" / "gemm_residual_layernorm.mlir"
    module = tessera.parse_module(path.read_text(), path.name)
    report = validate(module, DEFAULT_PIPELINE, sizes={"M": 1, "K": 16}, ptx=False)
    assert report.ok, str(report)
    assert report.configuration == "single-stage spilling past 255 registers"
    names = [c.pass_name for c in report.checks]
    assert "warp-specialize" not in names and "pipeline-loops" not in names and names[-1] == "allocate-registers"
    assert "(the default pipeline compiles it single-stage spilling past 255 registers)" in report.table()


# endregion
# region injected miscompilations: each corrupts the module right after its pass ran
def _named(module, cls, name=None):
    return [op for op in module.walk()
            if isinstance(op, cls) and (name is None or (op.results and op.results[0].name_hint == name))]


def _index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


def swizzle_64(module):
    """assign-swizzle gives Q's 128-byte rows a 16-byte "swizzle", a width the hardware does not have (32, 64 or
    128): the verifier after the pass refuses it. (A 64-byte swizzle on 128-byte rows, this test's seed until
    the 32- and 64-byte swizzles landed, is now a correct choice, not a miscompilation.)"""
    op = _named(module, tile.AllocSharedOp)[0]
    new = tile.AllocSharedOp(op.result.type.with_(swizzle=16), 1024)
    new.result.name_hint = op.result.name_hint
    Rewriter.replace_op(op, new)


def next_ring_slot(module):
    """pipeline-loops reads ring slot (j + 1) % 2 instead of j % 2: the slot still being filled."""
    op = next(o for o in _named(module, arith.RemUIOp, "use_slot") if isinstance(o.parent_op(), scf.ForOp))
    one = _index(1)
    bumped = arith.AddiOp(op.lhs, one.result)
    Rewriter.insert_op([one, bumped], InsertPoint.before(op))
    op.operands[0] = bumped.result


def drop_rescale(module):
    """overlap-softmax forgets to rescale the accumulator by alpha."""
    for op in _named(module, tile.MulRowsOp):
        op.result.replace_all_uses_with(op.operands[0])


def split_one_later(module):
    """peel-masked-iterations moves the split between unmasked and masked trips one trip later."""
    (mid,) = _named(module, arith.AddiOp, "mid")
    one = _index(1)
    later = arith.AddiOp(mid.result, one.result)
    Rewriter.insert_op([one, later], InsertPoint.after(mid))
    for use in list(mid.result.uses):
        if use.operation is not later:
            use.operation.operands[use.index] = later.result


def max_to_min(module):
    """convert-tile-to-sm90 selects minimumf for the running max."""
    op = _named(module, arith.MaximumfOp, "m_new")[0]
    new = arith.MinimumfOp(op.lhs, op.rhs)
    new.result.name_hint = "m_new"
    Rewriter.replace_op(op, new)


def perturb_scale_constant(module):
    """A constant folded or merged wrongly: the softmax scale feeding %s_max becomes 1.001 times larger."""
    mul = _named(module, arith.MulfOp, "s_max")[0]
    constant = mul.rhs.owner
    values = [x * 1.001 for x in constant.value.get_values()]
    new = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(constant.value.get_type(), values))
    Rewriter.insert_op(new, InsertPoint.before(mul))
    mul.operands[1] = new.result


def flip_parity(module):
    """warp-specialize waits on the wrong phase parity of a ring mbarrier."""
    op = _named(module, sm90.MBarrierTryWaitParityOp)[0]
    parity = op.operands[1]
    one = arith.ConstantOp(IntegerAttr(1, parity.type))
    flipped = arith.XOrIOp(parity, one.result)
    Rewriter.insert_op([one, flipped], InsertPoint.before(op))
    op.operands[1] = flipped.result


INJECTIONS = {
    "assign-swizzle": (swizzle_64, None),
    "pipeline-loops": (next_ring_slot, None),
    "overlap-softmax": (drop_rescale, "acc_next"),
    "peel-masked-iterations": (split_one_later, None),
    "convert-tile-to-sm90": (max_to_min, "m_new"),
    "canonicalize": (perturb_scale_constant, "s_max"),
    "cse": (perturb_scale_constant, "s_max"),
    "rematerialize-constants": (perturb_scale_constant, "s_max"),
    "warp-specialize": (flip_parity, None),
}


@pytest.mark.parametrize("pass_name", list(INJECTIONS))
def test_injected_miscompilation_is_named(pass_name, monkeypatch):
    corrupt, diverging = INJECTIONS[pass_name]
    cls = all_passes()[pass_name]()
    original = cls.apply

    def apply(self, ctx, module):
        original(self, ctx, module)
        corrupt(module)

    monkeypatch.setattr(cls, "apply", apply)
    report = validate(flash(), FULL)
    mismatch = report.mismatch
    assert mismatch is not None, str(report)
    assert (mismatch.position, mismatch.pass_name) == (PASS_NAMES.index(pass_name) + 1, pass_name), str(mismatch)
    assert f"pass {mismatch.position} '{pass_name}'" in str(mismatch)
    if diverging is not None:
        assert mismatch.kind == "result" and mismatch.divergence is not None, str(mismatch)
        assert mismatch.divergence.new.name == diverging, str(mismatch)
        assert f"first diverging op: %{diverging} = " in str(mismatch)


def test_injected_register_aliasing_is_named(monkeypatch):
    """allocate-registers gives %l_new the registers of %m_new, which is still live: the CTA simulator's
    register file check (or, failing that, the PTX) catches it, at the allocate-registers level."""
    import tessera.regalloc as regalloc

    allocate = regalloc.allocate_registers

    def aliasing(fn, *args, **kwargs):
        allocation = allocate(fn, *args, **kwargs)
        values = {v.name_hint: v for v in allocation.names if v.name_hint in ("m_new", "l_new")}
        allocation.names[values["l_new"]] = list(allocation.names[values["m_new"]])
        return allocation

    monkeypatch.setattr(regalloc, "allocate_registers", aliasing)
    mismatch = validate(flash(), FULL).mismatch
    assert mismatch is not None and mismatch.pass_name == "allocate-registers", str(mismatch)
    assert "register" in mismatch.message


def test_result_mismatch_message_names_element_values_and_op(monkeypatch):
    cls = all_passes()["cse"]()
    original = cls.apply
    monkeypatch.setattr(cls, "apply", lambda self, ctx, m: (original(self, ctx, m), perturb_scale_constant(m)))
    text = str(validate(flash(), FULL).mismatch)
    position = [name.split("{")[0] for name in FULL.split(",")].index("cse") + 1  # the pipeline's first cse
    assert text.startswith(f"validate: pass {position} 'cse' changed the result: O[0,0,")
    assert "(was " in text and "reference " in text
    assert "first diverging op: %s_max = arith.mulf" in text


def test_a_level_that_raises_is_failed_not_a_mismatch(monkeypatch):
    """A kernel that raises at a level (a hazard the CTA simulator finds, a refusal) has no numbers to compare:
    its row says FAILED, not MISMATCH, which reads as numbers off (found by unseen24k)."""
    from tessera.validation import levels
    from tessera.interpreters.block_batch import KernelHazardError

    original = levels.run_level

    def hazard_at_target(module, level, *args, **kwargs):
        if level == "target":
            raise KernelHazardError("tile.load reads past its table (block 3)")
        return original(module, level, *args, **kwargs)

    monkeypatch.setattr(levels, "run_level", hazard_at_target)
    report = validate(build_kernel("gemm", dtype="bf16"), FULL)
    assert not report.ok and report.mismatch.kind == "failure"
    row = report.checks[-1]
    assert row.level == "target" and row.failed and row.verdict == "FAILED"
    last_line = report.table().splitlines()[-1]
    assert last_line.endswith("FAILED") and "MISMATCH" not in report.table()
    assert "KernelHazardError: tile.load reads past its table" in str(report)


# endregion
# region attention intermediates per K/V tile
def _qkv():
    from tessera import find_kernel

    return generate_inputs(find_kernel(flash()), {"batch": 1, "heads": 1, "seq_q": 150, "seq_k": 150}, seed=0)


@pytest.mark.parametrize("level", ["tile", "target"])
def test_attention_trace_matches_golden(level):
    q, k, v = _qkv()
    block = (0, 0, 1)  # rows 128..149: two K/V tiles, the second partial and causally masked
    trace = attention_trace(flash(), q, k, v, level=level, block=block)
    golden = golden_attention_trace(q, k, v, True, 0.125, 128, 128, block=block, dtype=ml_dtypes.bfloat16)
    assert trace.tiles == golden.tiles == 2
    errors = compare_traces(trace, golden, rows=22)
    assert first_loss(errors) is None, errors
    assert all(e.errors["m"] < 1e-6 and e.errors["l"] < 1e-5 for e in errors)


def test_attention_trace_shows_where_a_perturbation_loses_precision():
    """Without the rescale of the accumulator, tile 0 is still right (acc starts at zero); the error first
    appears in acc after tile 1, while m, alpha and l stay right."""
    module = flash().clone()
    drop_rescale(module)
    q, k, v = _qkv()
    block = (0, 0, 1)
    errors = compare_traces(attention_trace(module, q, k, v, level="tile", block=block),
                            golden_attention_trace(q, k, v, True, 0.125, 128, 128, block=block,
                                                   dtype=ml_dtypes.bfloat16), rows=22)
    assert first_loss(errors) == (1, "acc"), errors


def test_attention_trace_refuses_the_ptx_level():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="PTX executor keeps no per-op values"):
        attention_trace(flash(), q, k, v, level="ptx")


def test_attention_trace_refuses_an_fp8_kernel_by_name():
    """Regression (unseen23f): the FP8 kernel's descale inputs cannot be passed to attention_trace, whose
    refusal was the launch's "takes 6 inputs, got 3"; it now says the FP8 kernel is not traced and what to use."""
    q, k, v = (x.astype(ml_dtypes.float8_e4m3fn) for x in _qkv())
    with pytest.raises(ValueError, match=r"takes inputs \(Q, K, V, DescaleQ, DescaleK, DescaleV\); .* FP8 kernel "
                                         r"\(flash_attention\(dtype='e4m3'\)\) is not traced; .*\.check_attention_fp8"):
        attention_trace(build_kernel("flash_attention", head_dim=64, causal=True, dtype="e4m3"), q, k, v)


@pytest.mark.parametrize("block", [(0, 1, 0), (0, 3, 1)])
def test_the_golden_trace_of_a_grouped_kernel_reads_its_key_head(block):
    """Regression (unseen24s): the golden read K's head h for query head h, the wrong head for GQA 4:2 (errors
    of O(1) at block (0, 1, 0)) and past K's heads at (0, 3, 1) (an IndexError from inside the golden)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 130, 64))
    k, v = (rng.standard_normal((1, 2, 300, 64)) for _ in range(2))
    trace = attention_trace(build_kernel("flash_attention", head_dim=64, grouped=True), q, k, v, level="target",
                            block=block)
    golden = golden_attention_trace(q, k, v, False, None, 128, 128, block=block, dtype=ml_dtypes.bfloat16)
    assert trace.tiles == golden.tiles == 3
    errors = compare_traces(trace, golden, rows=128 if block[2] == 0 else 2)
    assert first_loss(errors) is None, errors


def test_attention_trace_refuses_a_split_kernel_by_name():
    """Regression (unseen24s): block (0, 0, 0) of a split-KV kernel is part 0 of the key range, which the whole
    row's golden does not describe (errors of inf at its last tile); it is refused, naming what to trace."""
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"grid #tile.dims<ceildiv\(seq_q, 128\), 2 \* heads, batch>; .* a split-KV "
                                         r"kernel \(flash_attention\(num_splits > 1\)\) is not traced"):
        attention_trace(build_kernel("flash_attention", head_dim=64, num_splits=2), q, k, v)


# endregion
# region tessera-opt --validate
def _kernel_file(tmp_path):
    import tessera

    path = tmp_path / "gemm.mlir"
    path.write_text(tessera.print_module(build_kernel("gemm", dtype="bf16")))
    return str(path)


def test_tessera_opt_validate_clean(tmp_path, capsys):
    from tessera.tools.tessera_opt import main

    code = main([_kernel_file(tmp_path), "-p", "assign-swizzle,convert-tile-to-sm90,canonicalize", "--validate",
                 "-d", "M=130", "-d", "N=136", "-d", "K=200"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "validate @gemm_bf16 [M=130 K=200 N=136]" in err
    assert "convert-tile-to-sm90" in err and "MISMATCH" not in err and "(ptx)" in err
    assert "sm90.kernel" in out  # the normal output follows


def test_tessera_opt_validate_names_a_broken_pass(tmp_path, capsys, monkeypatch):
    from dataclasses import dataclass

    from xdsl.passes import ModulePass

    import tessera.passes
    from tessera.tools.tessera_opt import main

    @dataclass(frozen=True)
    class CorruptConstantPass(ModulePass):
        """Test only: the accumulator's initial value 0.0 becomes 1.0."""

        name = "corrupt-constant"

        def apply(self, ctx, module):
            for op in _named(module, arith.ConstantOp, "acc_init"):
                values = [1.0 for _ in op.value.get_values()]
                op.properties["value"] = DenseIntOrFPElementsAttr.from_list(op.value.get_type(), values)

    monkeypatch.setitem(tessera.passes.PASSES, "corrupt-constant", lambda: CorruptConstantPass)
    code = main([_kernel_file(tmp_path), "-p", "assign-swizzle,convert-tile-to-sm90,corrupt-constant", "--validate"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "tessera-opt: error: validate: pass 3 'corrupt-constant' changed the result: C[" in err
    assert "Traceback" not in err


# endregion


# region kernels with an additive bias
def biased():
    return build_kernel("flash_attention", head_dim=64, causal=True, dtype="bf16", bias=True)


def test_biased_kernel_validates_clean():
    """`validate` generates the Bias input of a biased kernel with Q, K, V and checks every level against the
    float64 reference with that bias."""
    from tessera import find_kernel

    sig = find_kernel(biased())
    inputs = generate_inputs(sig, {"batch": 1, "heads": 1, "seq_q": 150, "seq_k": 150}, seed=0)
    assert [x.shape for x in inputs] == [(1, 1, 150, 64)] * 3 + [(1, 1, 150, 150)]
    report = validate(biased(), FULL)
    assert report.ok, str(report)
    assert [c.level for c in report.checks][-1] == "ptx" and "every level agrees" in str(report)


def drop_bias(module):
    """A Tile pass loses the bias: the score mma's accumulator starts at zero instead of Bias / scale."""
    for op in _named(module, tile.SaturatingScaleOp):
        zero = tile.FillOp(0.0, op.result.type)
        Rewriter.insert_op(zero, InsertPoint.before(op))
        op.result.replace_all_uses_with(zero.result)


def scale_bias_twice(module):
    """convert-tile-to-sm90 multiplies the bias by 1/scale**2 instead of 1/scale."""
    for mul in _named(module, arith.MulfOp):
        if mul.lhs.name_hint is not None and mul.lhs.name_hint.startswith("bias"):
            constant = mul.rhs.owner
            values = [x * x for x in constant.value.get_values()]
            new = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(constant.value.get_type(), values))
            Rewriter.insert_op(new, InsertPoint.before(mul))
            mul.operands[1] = new.result


BIAS_INJECTIONS = {"pipeline-loops": (drop_bias, "s"), "convert-tile-to-sm90": (scale_bias_twice, "bias_unscaled")}
"""pass -> (corruption right after it, the first diverging value: the score mma without its bias, or the
wrongly scaled bias itself)."""


@pytest.mark.parametrize("pass_name", list(BIAS_INJECTIONS))
def test_injected_bias_miscompilation_is_named(pass_name, monkeypatch):
    corrupt, diverging = BIAS_INJECTIONS[pass_name]
    cls = all_passes()[pass_name]()
    original = cls.apply
    monkeypatch.setattr(cls, "apply", lambda self, ctx, m: (original(self, ctx, m), corrupt(m)))
    mismatch = validate(biased(), FULL).mismatch
    assert mismatch is not None and mismatch.pass_name == pass_name, str(mismatch)
    assert mismatch.kind == "result" and "reference " in str(mismatch), str(mismatch)
    assert mismatch.divergence is not None and mismatch.divergence.new.name == diverging, str(mismatch)
    assert f"first diverging op: %{diverging} = " in str(mismatch)


def _biased_inputs():
    from tessera import find_kernel

    q, k, v, bias = generate_inputs(find_kernel(biased()), {"batch": 1, "heads": 1, "seq_q": 150, "seq_k": 150},
                                    seed=0)
    bias[..., 130:140, :] = float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)  # padded rows: every key has the fill
    bias[..., 140:, ::2] = -float("inf")  # rows that see half their keys
    return q, k, v, bias


@pytest.mark.parametrize("level", ["tile", "target"])
def test_biased_attention_trace_matches_golden(level):
    """The trace of a biased kernel takes its bias; the float64 golden adds it (saturated as the kernel does:
    rows 130..139 hold bf16's lowest value on every key) and agrees tile by tile."""
    q, k, v, bias = _biased_inputs()
    block = (0, 0, 1)
    trace = attention_trace(biased(), q, k, v, level=level, block=block, bias=bias)
    golden = golden_attention_trace(q, k, v, True, 0.125, 128, 128, block=block, dtype=ml_dtypes.bfloat16,
                                    bias=bias)
    assert trace.tiles == golden.tiles == 2
    assert first_loss(compare_traces(trace, golden, rows=22)) is None
    # without its bias the golden is far off: the trace does see the bias
    assert first_loss(compare_traces(trace, golden_attention_trace(q, k, v, True, 0.125, 128, 128, block=block,
                                                                   dtype=ml_dtypes.bfloat16), rows=22))


def test_attention_trace_asks_for_the_bias_by_name():
    q, k, v, bias = _biased_inputs()
    with pytest.raises(ValueError, match=r"@flash_attention_d64_bf16_causal_bias takes 4 inputs \(Q, K, V, Bias\): "
                                         r"pass bias="):
        attention_trace(biased(), q, k, v)
    with pytest.raises(ValueError, match=r"@flash_attention_d64_bf16_causal takes no bias"):
        attention_trace(flash(), q, k, v, bias=bias)


def test_tessera_opt_validate_a_biased_kernel(tmp_path, capsys, monkeypatch):
    """`tessera-opt --validate` on a biased kernel: clean through the lowering, and a pass that drops the bias
    named (exit status 1)."""
    from dataclasses import dataclass

    from xdsl.passes import ModulePass

    import tessera
    import tessera.passes
    from tessera.tools.tessera_opt import main

    path = tmp_path / "biased.mlir"
    path.write_text(tessera.print_module(biased()))
    pipeline = "assign-swizzle,convert-tile-to-sm90,canonicalize"
    code = main([str(path), "-p", pipeline, "--validate", "-d", "seq_q=130", "-d", "seq_k=200"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "validate @flash_attention_d64_bf16_causal_bias [batch=1 heads=1 seq_q=130 seq_k=200]" in err
    assert "MISMATCH" not in err and "(ptx)" in err and "sm90.kernel" in out

    @dataclass(frozen=True)
    class DropBiasPass(ModulePass):
        """Test only: the score accumulator starts at zero instead of Bias / scale."""

        name = "drop-bias"

        def apply(self, ctx, module):
            drop_bias(module)

    monkeypatch.setitem(tessera.passes.PASSES, "drop-bias", lambda: DropBiasPass)
    code = main([str(path), "-p", "drop-bias," + pipeline, "--validate"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "tessera-opt: error: validate: pass 1 'drop-bias' changed the result: O[" in err
    assert "Traceback" not in err


# endregion
