"""The check every attention-variant test makes (issue 29): a score_mod/mask_mod pair forward and backward
through `tessera.attention` / `tessera.attention_backward` at a level, against the float64 reference
(`reference.check_attention_mods`, `check_attention_mods_backward`); rows that see no key give O = 0 and
dQ = 0. Warnings naming a rung taken below Tile level are ignored."""

from __future__ import annotations

import warnings

import numpy as np

import tessera
from tessera import reference
from tessera.numerics import BF16, round_to
from tessera.variants.block_mask import EMPTY, FULL, PARTIAL


def variant_inputs(shape, seed, head_dim=64):
    """bf16 q, k, v, dO of (batch, heads, heads_k, seq_q, seq_k) from a seeded generator."""
    batch, heads, heads_k, seq_q, seq_k = shape
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((batch, heads, seq_q, head_dim)), BF16)
    k, v = (round_to(rng.standard_normal((batch, heads_k, seq_k, head_dim)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16)


def check_variant_forward_and_backward(q, k, v, do, score_mod, mask_mod, level):
    """Assert the forward (O and LSE) and the backward right at `level`, and O and dQ zero on rows whose LSE is
    -inf; returns those rows."""
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):  # the reference's -inf - -inf differences
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level=level)
        check = reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse)
        assert check.ok, check
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod,
                                           level=level)
        checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]
    empty = np.isneginf(np.asarray(lse))
    assert not np.asarray(o, np.float32)[empty].any() and not np.asarray(grads[0], np.float32)[empty].any()
    return empty


def assert_variant_kernels_assemble(score_mod, mask_mod):
    """The forward (BN 64, the default pipeline) and the backward's main kernel (single-stage) of the variant
    at head_dim 64, block-sparse with a mask_mod, through ptxas without a warning or a spill."""
    from tessera import passes
    from tessera.kernels import attention_backward, flash_attention

    sparse = mask_mod is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forward = flash_attention(64, block_n=64, score_mod=score_mod, mask_mod=mask_mod, block_sparse=sparse)
        backward = attention_backward(64, score_mod=score_mod, mask_mod=mask_mod, block_sparse=sparse).main
        for module, pipeline in ((forward, None), (backward, passes.PTX_PIPELINE)):
            result = tessera.compile(module, target="cubin", **({"pipeline": pipeline} if pipeline else {}))
            assert result.warnings == ()
            for entry in result.entries.values():
                assert not entry.spills, entry


def brute_block_kinds(mask_mod, batch, heads, seq_q, seq_k, bm, bn):
    """Each block's class by looping over the blocks of the whole mask, evaluated once on the full grid."""
    grid = np.broadcast_to(mask_mod(np.arange(batch)[:, None, None, None], np.arange(heads)[None, :, None, None],
                                    np.arange(seq_q)[None, None, :, None], np.arange(seq_k)[None, None, None, :]),
                           (batch, heads, seq_q, seq_k))
    n_q, n_k = -(-seq_q // bm), -(-seq_k // bn)
    kinds = np.zeros((batch, heads, n_q, n_k), int)
    for b in range(batch):
        for h in range(heads):
            for i in range(n_q):
                for j in range(n_k):
                    block = grid[b, h, i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
                    whole = (j + 1) * bn <= seq_k  # a block reaching past seq_k is never full
                    kinds[b, h, i, j] = FULL if block.all() and whole else PARTIAL if block.any() else EMPTY
    return kinds


def score_mod_kernel(score_mods, rows=64):
    """One custom kernel evaluating score_mods as attention kernels emit them (`ScoreContext`): X [M, 64] f32
    is the score of query rows m0.. (q_idx) and keys 0..63 (kv_idx), b = h = 0; each score_mod's result fills
    its own 64 columns of O [M, 64 * len(score_mods)]. Returns the module and the captured arrays, the inputs
    after X (`tessera.interpret(module, x, *arrays)`)."""
    from xdsl.dialects.builtin import StringAttr, i32

    from tessera.kernels.attention_mods import ScoreContext, apply_score_mod
    from tessera.kernels.common import ArgSpec, ceildiv_dim, f32, finish_kernel, global_tensor, kernel_function
    from tessera.variants.nodes import F32
    from tessera.variants.trace import trace_mod

    traces = [trace_mod(fn, "score_mod") for fn in score_mods]
    arrays = {a.name: a for t in traces for a in t.arrays}
    width = 64 * len(traces)
    args = [ArgSpec("X", global_tensor([None, 64], f32), ["M", 64])]
    args += [ArgSpec(name, global_tensor(list(a.array.shape), f32 if a.dtype == F32 else i32), list(a.array.shape))
             for name, a in arrays.items()]
    args.append(ArgSpec("O", global_tensor([None, width], f32), ["M", width], role="out"))
    fn, b = kernel_function("score_mods", args, {"kind": StringAttr("custom")}, [ceildiv_dim("M", rows)])
    values = dict(zip([a.name for a in args], fn.body.blocks.first.args))
    m0 = b.muli(b.program_id("x", "pid"), b.const(rows), "m0")
    zero = b.const(0)
    x = b.load(b.view(values["X"], [m0, zero], [rows, 64], "xw"), "x")
    for k, trace in enumerate(traces):
        ctx = ScoreContext(b, rows, 64, m0, zero, zero, zero, {name: values[name] for name in arrays})
        out = apply_score_mod(ctx, trace, x)
        b.store_global(out, b.view(values["O"], [m0, b.const(64 * k)], [rows, 64], f"ow{k}"))
    return finish_kernel(fn, b), [np.asarray(a.array, np.float32 if a.dtype == F32 else np.int32)
                                  for a in arrays.values()]


def check_named_variant(variants, name, shape, level, head_dim=64, mods=None):
    """`check_variant_forward_and_backward` for the variant `name` of `variants` (name -> (score_mod, mask_mod);
    `mods` instead where given) on `variant_inputs(shape, seed)`, the seed its index among the sorted names;
    returns the rows that see no key."""
    score_mod, mask_mod = variants[name] if mods is None else mods
    q, k, v, do = variant_inputs(shape, sorted(variants).index(name), head_dim)
    return check_variant_forward_and_backward(q, k, v, do, score_mod, mask_mod, level)
