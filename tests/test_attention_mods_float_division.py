"""Float `//`, `%`, divmod and np.fmod in score_mod (issue 29): NumPy's values bit for bit at every level
(`tessera.variants.float_division`: npy_divmod from an exact fmod), where floor(a / b) is not: quotients that
round onto an integer (1.0 // 0.1 is 9.0), negative divisors, signed zeros, infinities and NaN, subnormals,
quotients past 2^24 and up to 2^277, a zero divisor read at run time, constant divisors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from xdsl.dialects.builtin import StringAttr

import tessera
from tessera.kernels.attention_mods import ScoreContext, apply_score_mod
from tessera.kernels.common import ArgSpec, ceildiv_dim, f32, finish_kernel, global_tensor, kernel_function
from tessera.variants import float_division
from tessera.variants.derivative import score_derivative
from tessera.variants.trace import trace_mod

SPECIAL = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.1, -0.1, 3.0, 1e-45, -1e-45, 3.4e38,
                      -3.4e38, 1.17e-38, 0.5, 2.5, 7.0])


def operands(seed: int = 0):
    """Dividends and divisors [64, 64]: magnitudes over the whole f32 range, the special values, quotients
    one unit in the last place off an integer (where floor(a / b) rounds onto it), 1.0 and 0.1, a row of
    zero divisors."""
    rng = np.random.default_rng(seed)

    def sample():
        with np.errstate(over="ignore"):
            x = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-150, 128, (64, 64)))).astype(np.float32)
        special = rng.random((64, 64)) < 0.3
        x[special] = rng.choice(SPECIAL, special.sum())
        return x

    a, b = sample(), sample()
    near = rng.random((64, 64)) < 0.25  # a = k b, one ulp off either way
    k = rng.integers(1, 1000, (64, 64)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        off = np.nextafter(k * b, np.where(rng.random((64, 64)) < 0.5, np.inf, -np.inf)).astype(np.float32)
    a = np.where(near & np.isfinite(b), off, a)
    a[0, :2], b[0, :2] = [1.0, -1.0], [0.1, 0.1]
    b[1] = 0.0
    return a, b


DIVISORS = None  # the captured [64, 64] divisor table, set by `kernel`


def floor_divide(score, b, h, q_idx, kv_idx):
    return score // DIVISORS[q_idx, kv_idx]


def remainder(score, b, h, q_idx, kv_idx):
    return np.remainder(score, DIVISORS[q_idx, kv_idx])


def quotient_of_divmod(score, b, h, q_idx, kv_idx):
    return divmod(score, DIVISORS[q_idx, kv_idx])[0]


def c_fmod(score, b, h, q_idx, kv_idx):
    return np.fmod(score, DIVISORS[q_idx, kv_idx])


CASES = [
    (floor_divide, np.floor_divide),
    (remainder, np.remainder),
    (quotient_of_divmod, np.floor_divide),
    (c_fmod, np.fmod),
    (lambda score, b, h, q_idx, kv_idx: score // 0.1, lambda a, d: np.floor_divide(a, np.float32(0.1))),
    (lambda score, b, h, q_idx, kv_idx: score % -1.5, lambda a, d: np.remainder(a, np.float32(-1.5))),
    (lambda score, b, h, q_idx, kv_idx: np.fmod(score, 3e-39), lambda a, d: np.fmod(a, np.float32(3e-39))),
    # powers of two: floor of the exact quotient (`power_of_two_floordiv`), a folded ladder
    (lambda score, b, h, q_idx, kv_idx: score // 0.5, lambda a, d: np.floor_divide(a, np.float32(0.5))),
    (lambda score, b, h, q_idx, kv_idx: score // -4.0, lambda a, d: np.floor_divide(a, np.float32(-4.0))),
    (lambda score, b, h, q_idx, kv_idx: score % 0.5, lambda a, d: np.remainder(a, np.float32(0.5))),
]


def kernel(cases, divisors):
    """One custom kernel: X [M, 64] is the score, each case's score_mod (its captured table `divisors`) in its
    own 64 columns of O, emitted as attention kernels emit them (`ScoreContext`)."""
    global DIVISORS
    DIVISORS = divisors
    traces = [trace_mod(fn, "score_mod") for fn, _ in cases]
    arrays = {a.name: a for t in traces for a in t.arrays}
    width = 64 * len(cases)
    args = [ArgSpec("X", global_tensor([None, 64], f32), ["M", 64])]
    args += [ArgSpec(name, global_tensor(list(a.array.shape), f32), list(a.array.shape)) for name, a in arrays.items()]
    args.append(ArgSpec("O", global_tensor([None, width], f32), ["M", width], role="out"))
    fn, b = kernel_function("float_division", args, {"kind": StringAttr("custom")}, [ceildiv_dim("M", 64)])
    values = dict(zip([a.name for a in args], fn.body.blocks.first.args))
    m0 = b.muli(b.program_id("x", "pid"), b.const(64), "m0")
    zero = b.const(0)
    x = b.load(b.view(values["X"], [m0, zero], [64, 64], "xw"), "x")
    for k, trace in enumerate(traces):
        ctx = ScoreContext(b, 64, 64, m0, zero, zero, zero, {name: values[name] for name in arrays})
        out = apply_score_mod(ctx, trace, x)
        b.store_global(out, b.view(values["O"], [m0, b.const(64 * k)], [64, 64], f"ow{k}"))
    return finish_kernel(fn, b), len(arrays)


def _check(level, cases):
    a, d = operands()
    module, captured = kernel(cases, d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tessera.interpret(module, a, *[d] * captured, level=level)
    for k, (fn, reference) in enumerate(cases):
        got = out[:, 64 * k: 64 * k + 64]
        with np.errstate(all="ignore"):
            expected = reference(a, d)
        same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
        where = np.argwhere(~same)[:3]
        assert same.all(), f"case {k}: {[(a[tuple(i)], d[tuple(i)], got[tuple(i)], expected[tuple(i)]) for i in where]}"


def test_numpy_values_bit_for_bit_at_tile_level():
    _check("tile", CASES)


@pytest.mark.parametrize("level", ["target", pytest.param("ptx", marks=pytest.mark.slow)])
def test_numpy_values_bit_for_bit_below_tile_level(level):
    """The CTA simulator and the PTX executor (fma.rn.f32, div.rn.f32, cvt.rzi/rmi.f32.f32): the same bits."""
    _check(level, CASES[:1] if level == "target" else CASES)


WIDTHS = np.float32([1.5, 0.3])  # per head


def remainder_by_head(score, b, h, q_idx, kv_idx):
    return score % WIDTHS[h]


def floor_and_fmod(score, b, h, q_idx, kv_idx):
    return score - 0.1 * ((kv_idx - q_idx) * 0.5 // 4.0) + 0.5 * np.fmod(score, 1.5)


def floor_halves(score, b, h, q_idx, kv_idx):
    return score // 0.5


def floor_tenths(score, b, h, q_idx, kv_idx):
    return score // 0.1


@pytest.mark.slow  # ptxas, 30 s
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("score_mod,block_n", [(remainder_by_head, 128), (floor_halves, 128), (floor_and_fmod, 128),
                                               (floor_and_fmod, 64), (floor_tenths, 128)])
def test_ptxas_accepts_attention_with_float_division_without_spills(score_mod, block_n):
    """A remainder by a per-head divisor and a `//` by a power of two (no fmod) fit the 128 x 128
    warp-specialized forward at head_dim 64; so do a float `//` of indices with an fmod of the score, and
    `score // 0.1`, their ladders computed 8 registers at a time (`slab-elementwise-chains`; op by op they
    fit only 128 x 64, the forward's BN 64 rung)."""
    from tessera.kernels import flash_attention

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        result = tessera.compile(flash_attention(64, block_n=block_n, score_mod=score_mod), target="cubin")
    assert result.warnings == () and not any(entry.spills for entry in result.entries.values())


def test_python_and_numpy_values_where_floor_of_the_quotient_is_not():
    """1.0 // 0.1 is 9.0 in Python and NumPy (0.1 is a little more than a tenth), floor(1.0 / 0.1) is 10."""
    a, d = np.float32([1.0, -1.0, 1.0]), np.float32([0.1, 0.1, np.inf])
    assert 1.0 // 0.1 == 9.0 and np.floor(a[0] / d[0]) == 10.0
    assert list(np.floor_divide(a, d)) == [9.0, -10.0, 0.0]


def test_trace_keeps_the_operations_and_their_derivatives():
    """The trace keeps f32 floordiv / mod / fmod nodes (expanded when emitted); d(a // b) = 0,
    d(a % b) / da = 1, d(a % b) / db = -(a // b), d fmod(a, b) / da = 1."""
    def f(score, b, h, q_idx, kv_idx):
        return score // 0.75 + score % 1.25 + np.fmod(score, -2.0) + divmod(score, 3.0)[1]

    trace = trace_mod(f, "score_mod")
    assert trace.uses("floordiv") and trace.uses("mod") and trace.uses("fmod") and not trace.uses("floor")
    derivative = score_derivative(trace).result
    assert derivative.op == "add"  # 0 + 1 + 1 + 1, folded to sums of constants 1
    ops, stack = set(), [derivative]
    while stack:
        n = stack.pop()
        ops.add(n.op)
        stack.extend(n.args)
    assert ops == {"add", "const"}

    def by_score(score, b, h, q_idx, kv_idx):
        return 1.0 % (score + 4.0)

    derivative = score_derivative(trace_mod(by_score, "score_mod")).result
    assert derivative.op == "neg" and derivative.args[0].op == "floordiv"


def test_divmod_shares_one_fmod():
    """divmod(a, b) emits one fmod ladder for both results (`float_division.expand`'s cache)."""
    from tessera.variants.nodes import F32, Node

    a, b = Node("score", (), F32), Node("const", (), F32, 0.75)
    cache: dict = {}
    quotient = float_division.expand(Node("floordiv", (a, b), F32), cache)
    modulus = float_division.expand(Node("mod", (a, b), F32), cache)
    fmods = [n for n in _nodes(quotient) if n.op == "fma"]
    assert fmods and {id(n) for n in fmods} <= {id(n) for n in _nodes(modulus)}
    assert len(fmods) == 6  # 0.75 * 2^(24 j) is finite for j <= 5


def test_power_of_two_divisors_take_no_ladder_or_a_folded_one():
    """A // b by +-2^k is floor(a / b) from fma(a, 0, a), which reads the score once (nothing stays live beside
    it); a % 2^k folds the ladder to the steps whose quotient could overflow: one for |b| >= 1 or a bounded
    dividend, two for `score % 0.5` (C = 2^119, then 0.5), where 0.75 takes six."""
    from tessera.variants.nodes import F32, I32, Node

    score = Node("score", (), F32)

    def ops(op, a, divisor):
        return [n.op for n in _nodes(float_division.expand(Node(op, (a, Node("const", (), F32, divisor)), F32), {}))]

    half = ops("floordiv", score, 0.5)
    assert sorted(half) == ["const", "const", "div", "floor", "fma", "score"]
    assert sorted(ops("floordiv", score, -4.0)) == sorted(half + ["ceil"])
    assert ops("mod", score, 1.0).count("fma") == 1 and ops("mod", score, 0.5).count("fma") == 2
    index = Node("to_f32", (Node("q_idx", (), I32),), F32)
    assert ops("fmod", index, 0.5).count("fma") == 1 and ops("mod", score, 0.75).count("fma") == 6


def _nodes(root):
    seen, stack, out = set(), [root], []
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            out.append(n)
            stack.extend(n.args)
    return out
