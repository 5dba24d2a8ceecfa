"""Integer `//` and `%` in score_mod / mask_mod (issue 29): Python's floor division and a modulus with the
divisor's sign, as `tile.floordiv` / `tile.mod`, against NumPy at every level (negative dividends and
divisors, powers of two lowered to shifts and masks, a divisor known only at run time, a zero divisor), the
refusals at trace time, and the variants FlexAttention users write with them (block-diagonal, chunked-local,
dilated, strided) forward and backward through `tessera.attention` / `tessera.attention_backward`."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.ir import parse_module
from tessera.numerics import BF16, round_to
from tessera.variants import ModTraceError, trace_mod
from text_edits import filled

# region tile.floordiv and tile.mod at every level

I = "!tile.tile<64x64xi32, register>"
T = "!tile.tile<64x64xf32, register>"
COL = "!tile.tile<1x64xi32, register>"
ROW = "!tile.tile<64xi32, register>"
KERNEL = f"""\
builtin.module {{
  func.func @integer_division(
      %X: !tile.tile<?x64xf32, global> {{tile.dims = #tile.dims<M, 64>}},
      %O: !tile.tile<?xWIDTHxf32, global> {{tile.dims = #tile.dims<M, WIDTH>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, 64)>}} {{
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %i = tile.iota rows offset %m0 : {I}
    %j = tile.iota cols : {COL}
    %k37 = arith.constant 37 : i32
    %s37 = tile.splat %k37 : i32 -> {I}
    %k101 = arith.constant 101 : i32
    %s101 = tile.splat %k101 : i32 -> {COL}
    %i37 = tile.mul %i, %s37 : {I}
    %j101 = tile.mul %j, %s101 : {COL}
    %a = tile.sub %i37, %j101 : {I}, {COL}
    %k32 = arith.constant 32 : i32
    %s32 = tile.splat %k32 : i32 -> {COL}
    %rt = tile.sub %j, %s32 : {COL}
BODY
    func.return
  }}
}}
"""
"""a = 37 i - 101 j (from -6363 up, both signs); the run-time divisor rt = j - 32 (negative, zero, positive)."""


def integer_division_kernel(cases):
    """One kernel computing `a OP d` for each (op, d) of `cases` (d None: the run-time divisor), each case
    cast to f32 (exact: |a| < 2^24) into its own 64 columns."""
    lines = []
    for k, (op, d) in enumerate(cases):
        if d is None:
            lines.append(f"%q{k} = tile.{op} %a, %rt : {I}, {COL}")
        else:
            lines += [f"%d{k} = arith.constant {d} : i32", f"%t{k} = tile.splat %d{k} : i32 -> {ROW}",
                      f"%q{k} = tile.{op} %a, %t{k} : {I}, {ROW}"]
        lines += [f"%r{k} = tile.cast %q{k} : {I} -> {T}", f"%col{k} = arith.constant {64 * k} : index",
                  f"%ow{k} = tile.view %O[%m0, %col{k}] : !tile.tile<?xWIDTHxf32, global> -> "
                  "!tile.tile<64x64xf32, global>",
                  f"tile.store_global %r{k}, %ow{k} : {T}, !tile.tile<64x64xf32, global>"]
    text = filled(KERNEL, BODY="\n".join("    " + line for line in lines))
    return parse_module(filled(text, WIDTH=str(64 * len(cases))))


CASES = [(op, d) for d in (64, -3, None) for op in ("floordiv", "mod")]
"""A power of two (shift, mask), a negative general divisor and a run-time divisor (0 in one column)."""


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_floordiv_and_mod_against_numpy(level):
    """Python's // and % (NumPy's floor_divide and remainder, 0 for a zero divisor) on 100 rows (a partial
    second block), negative dividends and divisors, at each level."""
    m = 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tessera.interpret(integer_division_kernel(CASES), np.zeros((m, 64), np.float32), level=level)
    i, j = np.arange(m)[:, None], np.arange(64)[None, :]
    a = 37 * i - 101 * j
    for k, (op, d) in enumerate(CASES):
        divisor = np.broadcast_to(j - 32 if d is None else d, a.shape)
        with np.errstate(divide="ignore"):
            expected = (np.floor_divide if op == "floordiv" else np.remainder)(a, divisor)
        np.testing.assert_array_equal(out[:, 64 * k: 64 * k + 64], expected.astype(np.float32), err_msg=f"{op} {d}")


def test_tile_interpreter_edges():
    """-2^31 // -1 wraps to -2^31 and -2^31 % -1 = 0 (as the hardware's div.s32 / rem.s32); x // 0 = x % 0 = 0."""
    from tessera.interpreters.tile_elementwise import integer_division

    a = np.array([-2**31, -2**31, 7, -7, 5], np.int32)
    b = np.array([-1, 1, 0, 0, -2], np.int32)
    assert integer_division(a, b, False).tolist() == [-2**31, -2**31, 0, 0, -3]
    assert integer_division(a, b, True).tolist() == [0, 0, 0, 0, -1]


@pytest.mark.usefixtures("ptxas")
def test_ptxas_accepts_integer_division_without_spills():
    from tessera.toolchain import compile_ptx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ptx = tessera.compile(integer_division_kernel([("floordiv", 128), ("mod", -3), ("mod", None)]), target="ptx")
    result = compile_ptx(ptx, source_name="integer_division")
    assert result.warnings == ()
    assert not any(entry.spills for entry in result.entries.values())

@pytest.mark.slow
@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_more_divisors_against_numpy(level):
    cases = [(op, d) for d in (1, 2, 3, 7, 48, -1, -4, -64, 2**30, 0) for op in ("floordiv", "mod")]
    m = 70
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tessera.interpret(integer_division_kernel(cases), np.zeros((m, 64), np.float32), level=level)
    a = 37 * np.arange(m)[:, None] - 101 * np.arange(64)[None, :]
    for k, (op, d) in enumerate(cases):
        with np.errstate(divide="ignore"):
            expected = (np.floor_divide if op == "floordiv" else np.remainder)(a, np.full_like(a, d))
        np.testing.assert_array_equal(out[:, 64 * k: 64 * k + 64], expected.astype(np.float32), err_msg=f"{op} {d}")


# endregion
# region tracing


def test_traced_graph_and_dtypes():
    trace = trace_mod(lambda b, h, q, k: q // 128 == k // 128, "mask_mod")
    assert trace.result.op == "eq" and [a.op for a in trace.result.args] == ["floordiv", "floordiv"]
    trace = trace_mod(lambda s, b, h, q, k: s + np.remainder(k - q, 4) + divmod(q, 3)[0], "score_mod")
    assert trace.uses("mod") and trace.uses("floordiv")


def _refusal(fn, kind="mask_mod") -> str:
    with pytest.raises(ModTraceError) as error:
        trace_mod(fn, kind)
    return str(error.value)


@pytest.mark.parametrize("fn,kind,construct", [
    (lambda b, h, q, k: q // 0 == k, "mask_mod", "'//' by the constant 0 (division by zero)"),
    (lambda b, h, q, k: q % 0 == k, "mask_mod", "'%' by the constant 0"),
    (lambda s, b, h, q, k: s // 0.0, "score_mod", "'//' by the constant 0"),
    (lambda b, h, q, k: (q > k) // (k > 0) == 0, "mask_mod", "'floordiv' of a boolean"),  # of two booleans only + and *
])
def test_refusals_name_the_construct(fn, kind, construct):
    message = _refusal(fn, kind)
    assert construct in message and "test_attention_mods_integer.py" in message


def test_float_floor_division_and_modulus_are_float_nodes():
    """`//` and `%` with a float operand are f32 floordiv / mod nodes, emitted as NumPy computes them
    (tests/test_attention_mods_float_division.py checks the bits at every level)."""
    from tessera.variants.nodes import F32
    from tessera.variants.trace import trace_mod

    def floored(score, b, h, q_idx, kv_idx):
        return np.where(q_idx // 2.0 == kv_idx, score // 0.75, score % -1.25) + 7 % (q_idx - kv_idx + 0.5)

    trace = trace_mod(floored, "score_mod")
    assert trace.uses("floordiv") and trace.uses("mod") and not trace.uses("floor")
    assert trace.result.dtype == F32

# endregion
# region variants users write with // and %

CHUNK = 48
PERIOD = np.array([4, 3])  # per head: a run-time divisor (a gathered table)


def block_diagonal(b, h, q_idx, kv_idx):
    return q_idx // 64 == kv_idx // 64


def chunked_local(b, h, q_idx, kv_idx):
    """Llama 4's chunked attention: causal within chunks of 48 (no power of two)."""
    return (q_idx // CHUNK == kv_idx // CHUNK) & (kv_idx <= q_idx)


def dilated(b, h, q_idx, kv_idx):
    return ((q_idx - kv_idx) % 4 == 0) & (q_idx >= kv_idx)


def strided(b, h, q_idx, kv_idx):
    """Sparse Transformer's strided pattern: a local band plus every key of the head's period."""
    return (np.abs(q_idx - kv_idx) < 8) | ((kv_idx - q_idx) % PERIOD[h] == 0)


def negated_chunks(b, h, q_idx, kv_idx):
    """Floor division of negative indices: chunks of 7 counted from the other end."""
    return (-q_idx) // 7 <= (-kv_idx) // 7


def constant_dividend(b, h, q_idx, kv_idx):
    """A run-time divisor (kv_idx + 1) of a constant, and a negative constant divisor."""
    return 200 // (kv_idx + 1) >= q_idx % -3 + 3


DIVISORS = np.array([0, 5])  # head 0 divides by zero at run time: 0, as NumPy's integer division gives


def per_head_residues(score, b, h, q_idx, kv_idx):
    return score + 0.1 * (q_idx // DIVISORS[h]) - 0.2 * (kv_idx % DIVISORS[h])


def within_period(b, h, q_idx, kv_idx):
    return q_idx % 128 >= kv_idx % 128


def periodic_bias(score, b, h, q_idx, kv_idx):
    """A bias of the signed distance's residue and floored quotient (negative both ways)."""
    return score + 0.25 * ((kv_idx - q_idx) % 5) - 0.125 * ((kv_idx - q_idx) // -3)


VARIANTS = {
    "block-diagonal": (None, block_diagonal),
    "dilated": (None, dilated),
    "strided(per-head period)": (None, strided),
    "negated-chunks": (None, negated_chunks),
    "constant-dividend": (None, constant_dividend),
    "periodic-bias+chunked-local": (periodic_bias, chunked_local),
    "per-head-residues(zero divisor)+within-period": (per_head_residues, within_period),
}


def inputs(seq_q, seq_k, heads, heads_k, seed=0):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((1, heads, seq_q, 64)), BF16)
    k, v = (round_to(rng.standard_normal((1, heads_k, seq_k, 64)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16)


SLOW_VARIANTS = ("dilated", "negated-chunks")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_VARIANTS else n
                                  for n in VARIANTS])
def test_variant_forward_and_backward_at_tile_level(name):
    """seq_q != seq_k, neither a multiple of a block, GQA (2 query heads per key head)."""
    score_mod, mask_mod = VARIANTS[name]
    q, k, v, do = inputs(130, 170, 2, 1, seed=list(VARIANTS).index(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the reference's NumPy divides by zero (and gives 0)
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
        check = reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse)
        assert check.ok, check
        _backward_checked(q, k, v, do, o, lse, score_mod, mask_mod)


def _backward_checked(q, k, v, do, o, lse, score_mod, mask_mod):
    grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level="tile")
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod, mask_mod)
    assert all(c.ok for c in checks), [str(c) for c in checks]


def residue_bias(score, b, h, q_idx, kv_idx):
    return score + 0.25 * ((kv_idx - q_idx) % 5)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_forward_below_tile_level(level):
    """A per-head run-time divisor (PERIOD[h], a gather) and a bias of negative residues and quotients, with
    the block lists, GQA, BN 64."""
    from tessera.kernels import flash_attention
    from tessera.variants import create_block_mask

    q, k, v, _ = inputs(100, 150, 2, 1, seed=3)
    module = flash_attention(64, block_n=64, return_lse=True, grouped=True, score_mod=periodic_bias,
                             mask_mod=strided, block_sparse=True)
    lists = create_block_mask(strided, 1, 2, 100, 150, 128, 64).inputs()
    o, lse = tessera.interpret(module, q, k, v, PERIOD, *lists, level=level)
    check = reference.check_attention_mods(o, q, k, v, BF16, periodic_bias, strided, lse=lse)
    assert check.ok, check


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_zero_divisor_at_run_time_below_tile_level(level):
    """DIVISORS[h] is 0 for head 0: the kernel's guard gives 0 there (no division by zero executes, which the
    CTA simulator and the PTX executor would report), as the NumPy reference does."""
    from tessera.kernels import flash_attention
    from tessera.variants import create_block_mask

    q, k, v, _ = inputs(150, 170, 2, 2, seed=5)
    module = flash_attention(64, block_n=64, return_lse=True, score_mod=per_head_residues, mask_mod=within_period,
                             block_sparse=True)
    lists = create_block_mask(within_period, 1, 2, 150, 170, 128, 64).inputs()
    o, lse = tessera.interpret(module, q, k, v, DIVISORS, *lists, level=level)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check = reference.check_attention_mods(o, q, k, v, BF16, per_head_residues, within_period, lse=lse)
    assert check.ok, check


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_backward_below_tile_level(level):
    """The score_mod's `(kv_idx - q_idx) % 5` and the mask_mod's `(kv_idx - q_idx) % PERIOD[h]` (CSE merges
    their `kv_idx - q_idx`; rematerialize-constants re-creates it at each use, or the kernel needs 257
    registers), with the transposed block lists."""
    q, k, v, do = inputs(70, 90, 2, 1, seed=4)
    o, lse = tessera.attention(q, k, v, score_mod=residue_bias, mask_mod=strided, return_lse=True, level="tile")
    grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=residue_bias, mask_mod=strided, level=level)
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, residue_bias, strided)
    assert all(c.ok for c in checks), [str(c) for c in checks]


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
def test_ptxas_accepts_the_variant_kernels_without_spills():
    from tessera import passes
    from tessera.kernels import attention_backward, flash_attention

    forward = flash_attention(64, block_n=64, score_mod=periodic_bias, mask_mod=chunked_local, block_sparse=True)
    backward = attention_backward(64, score_mod=residue_bias, mask_mod=strided, block_sparse=True).main
    for module, pipeline in ((forward, None), (backward, passes.PTX_PIPELINE)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = tessera.compile(module, target="cubin", pipeline=pipeline)
        assert result.warnings == ()
        assert not any(entry.spills for entry in result.entries.values())


def test_block_diagonal_skips_off_diagonal_blocks():
    from tessera.variants import create_block_mask

    mask = create_block_mask(block_diagonal, 1, 1, 256, 256, 64, 64)
    assert (mask.kinds[0, 0] == np.diag([2, 2, 2, 2])).all()  # full on the diagonal, empty elsewhere

# endregion
