"""What users write that used to be refused (issue 29): np.floor / np.ceil / np.rint / np.round / np.trunc
(the `tile.floor` family), `//` and `%` of float scores, np.fmod, `x ** y` of two traced values with NumPy's
sign rules, and math.* on numbers in the hook's body (math.floor / round() of a traced value are refused,
naming np.floor / np.round). Each is traced,
run through `tessera.attention` / `tessera.attention_backward` at Tile level against the float64 reference
(whose derivative of a step function is 0 almost everywhere, as the traced one), and a slice runs at target
and PTX level."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mods_checks import check_variant_forward_and_backward

from tessera.numerics import BF16, round_to
from tessera.variants import ModTraceError, trace_mod
from tessera.variants.derivative import score_derivative

SEQ_Q, SEQ_K = 70, 100
EXPONENT = np.array([1.5, 3.0, 2.0, 2.5])  # per-head powers: non-integer, odd, even
HEADS = 4


def log_buckets(score, b, h, q_idx, kv_idx):
    """A penalty per log2 bucket of the distance: floor of a logarithm."""
    return score - 0.25 * np.floor(np.log2(np.abs(q_idx - kv_idx) + 1.0))


def quantized(score, b, h, q_idx, kv_idx):
    """The score quantized to eighths (truncation and half-even rounding), plus a small linear term so the
    gradient is not 0."""
    return np.trunc(score * 8) / 8 + np.round(score, 1) * 0.5 + 0.25 * score


def float_floor_division(score, b, h, q_idx, kv_idx):
    """`//` of a float distance and `%` of the score (the modulus's derivative is 1 almost everywhere)."""
    return score - 0.1 * ((kv_idx - q_idx) * 0.5 // 4.0) + 0.5 * (score % 1.5)


def head_power(score, b, h, q_idx, kv_idx):
    """A signed power of the score with a per-head exponent read from an array: x ** y of two traced values,
    negative bases with integer exponents keep NumPy's signs; 1.5 and 2.5 are taken of |x|."""
    x = score / 2.0
    return np.where(EXPONENT[h] == np.floor(EXPONENT[h]), x ** EXPONENT[h], np.abs(x) ** EXPONENT[h])


def python_math(score, b, h, q_idx, kv_idx):
    """math on numbers in the body (a width from math.sqrt and math.log), np.round of a traced value."""
    width = math.sqrt(64.0) * math.log(math.e)  # 8.0
    return score * math.cos(0.0) - 0.05 * np.floor(np.abs(q_idx - kv_idx) / width) + 0.125 * np.round(score * 2)


def c_remainders(score, b, h, q_idx, kv_idx):
    """np.fmod (C's remainder, the dividend's sign) of the score and of a distance."""
    return score - 0.1 * np.fmod(score * 3, 1.25) + 0.01 * np.fmod(q_idx - kv_idx, 7)


def fmod_mask(b, h, q_idx, kv_idx):
    return np.fmod(q_idx - kv_idx, 5) != np.fmod(kv_idx - 40, -3)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


VARIANTS = {
    "log-buckets": (log_buckets, None),
    "quantized+causal": (quantized, causal),
    "float-floordiv": (float_floor_division, None),
    "head-power+causal": (head_power, causal),
    "python-math": (python_math, None),
    "fmod": (c_remainders, fmod_mask),
}


def everything(score, b, h, q_idx, kv_idx):
    """The default run's one variant: each construct above in one hook."""
    return (quantized(score, b, h, q_idx, kv_idx) + float_floor_division(score, b, h, q_idx, kv_idx)
            + c_remainders(score, b, h, q_idx, kv_idx) + 0.25 * head_power(score, b, h, q_idx, kv_idx))


def everything_mask(b, h, q_idx, kv_idx):
    return fmod_mask(b, h, q_idx, kv_idx) & causal(b, h, q_idx, kv_idx)


EVERYTHING = (everything, everything_mask)


def inputs(seed, heads=HEADS, seq_q=SEQ_Q, seq_k=SEQ_K):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((1, heads, seq_q, 64)), BF16)
    k, v = (round_to(rng.standard_normal((1, heads // 2, seq_k, 64)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16)


def _check(name, level, **shape):
    score_mod, mask_mod = EVERYTHING if name == "everything" else VARIANTS[name]
    q, k, v, do = inputs(sorted(VARIANTS).index(name) if name in VARIANTS else len(VARIANTS), **shape)
    check_variant_forward_and_backward(q, k, v, do, score_mod, mask_mod, level)


def test_rounding_variants_forward_and_backward():
    """All of them in one hook, on one query block of GQA heads (each alone: -m slow)."""
    _check("everything", "tile", heads=2, seq_q=40, seq_k=70)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_rounding_variant_forward_and_backward(name):
    _check(name, "tile")


@pytest.mark.slow  # 15 s at target level; the rounding ops are checked bit for bit at every level by default
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_rounding_variants_below_tile_level(name, level):
    """The same variants in the CTA simulator and the PTX executor (cvt.rmi/rpi/rni/rzi.f32.f32), forward and
    backward, on one head pair and one query block."""
    _check(name, level, heads=2, seq_q=40, seq_k=50)


def test_rounding_ops_trace_to_the_tile_family_and_derivative_zero():
    def f(score, b, h, q_idx, kv_idx):
        return np.floor(score) + np.ceil(score) + np.rint(score) + np.trunc(score) + np.fix(score)

    trace = trace_mod(f, "score_mod")
    ops = set()
    stack = [trace.result]
    while stack:
        n = stack.pop()
        ops.add(n.op)
        stack.extend(n.args)
    assert {"floor", "ceil", "rint", "trunc"} <= ops
    derivative = score_derivative(trace).result
    assert derivative.op == "const" and derivative.value == 0.0  # step functions: 0 almost everywhere


def test_integer_rounding_keeps_integers_as_numpy_does():
    """NumPy 2 keeps integers through floor/ceil/trunc/round (np.rint gives floats); np.round(x, 2) of a float
    is rint(x * 100) / 100 as NumPy computes it."""
    def ints(b, h, q_idx, kv_idx):
        return (np.floor(q_idx) == q_idx) & (np.round(kv_idx) == kv_idx) & (np.rint(q_idx) >= 0.0)

    trace = trace_mod(ints, "mask_mod")
    assert not trace.uses("floor") and trace.uses("to_f32")
    grid = np.arange(5)
    assert np.floor(grid).dtype.kind == "i" and np.rint(grid).dtype.kind == "f"

    def rounded(score, b, h, q_idx, kv_idx):
        return score + np.round(score) + np.round(score, 2) + np.around(q_idx, -1)

    trace = trace_mod(rounded, "score_mod")
    assert trace.uses("rint") and trace.uses("to_i32")  # np.around(int, -1) rounds to tens, an integer


@pytest.mark.parametrize("x,y", [(-2.0, 3.0), (-2.0, 2.0), (-2.0, 0.5), (0.0, -1.0), (0.0, 2.0), (1.0, np.nan),
                                 (np.nan, 0.0), (3.0, -2.5), (-0.5, -3.0)])
def test_traced_power_follows_numpy_signs(x, y):
    """x ** y of two traced values (here from two arrays) on the Tile interpreter's exact ops: NumPy's value
    and sign, NaN for a negative base with a non-integer exponent, 1 for y = 0 and for x = 1."""
    from tessera.variants.nodes import F32, Node
    from tessera.variants.powers import traced_power

    def evaluate(n: Node):
        if n.op == "const":
            return np.float64(n.value)
        if n.op == "x":
            return np.float64(x)
        if n.op == "y":
            return np.float64(y)
        a = [evaluate(m) for m in n.args]
        with np.errstate(all="ignore"):
            return {"abs": np.abs, "log2": np.log2, "exp2": np.exp2, "floor": np.floor, "neg": np.negative,
                    "sqrt": np.sqrt}.get(
                n.op, lambda *v: {"mul": lambda: v[0] * v[1], "sub": lambda: v[0] - v[1],
                                  "eq": lambda: v[0] == v[1], "lt": lambda: v[0] < v[1],
                                  "or": lambda: v[0] | v[1],
                                  "select": lambda: v[1] if v[0] else v[2]}[n.op]())(*a)

    got = evaluate(traced_power(Node("x", (), F32), Node("y", (), F32)))
    with np.errstate(all="ignore"):
        expected = np.float64(x) ** np.float64(y)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.signbit(got) == np.signbit(expected) or np.isnan(expected)


@pytest.mark.parametrize("fn,construct", [
    (lambda s, b, h, q, k: math.sqrt(s), "float\\(\\) of a traced value \\(math.sqrt"),
    (lambda s, b, h, q, k: s + math.floor(s), "math.floor of a traced value"),
    (lambda s, b, h, q, k: s + round(s), "round\\(\\) of a traced value"),
    (lambda s, b, h, q, k: s + q ** k, "'\\*\\*' of a traced integer base by a traced integer exponent"),
    (lambda s, b, h, q, k: s // 0.0, "'//' by the constant 0"),
    (lambda s, b, h, q, k: np.round(s, q), "np.round with decimals="),
    (lambda s, b, h, q, k: np.floor(q > k), "np.floor of a boolean value"),
])
def test_what_stays_refused_is_named(fn, construct):
    with pytest.raises(ModTraceError, match=f"score_mod '<lambda>' at .*: cannot trace {construct}"):
        trace_mod(fn, "score_mod")
