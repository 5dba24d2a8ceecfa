"""Attention variants as a demanding user writes them next (issue 29, round 4), none of which the earlier rounds
(`test_attention_mods_unseen.py`, `_unseen3.py`, `_users.py`, `_torch_users.py`) have: modifiers written as
callable objects (a class with `__call__` holding its tables as attributes, a bound method, a method calling
another method), `functools.partial` with array and integer keywords and a user-given block table indexed by
`(q_idx // 64, kv_idx // 64)`, module-level and nested helpers, a lambda whose default argument captures an
array, `math.log(2)` and `math.pi`, integer bit ops with constants (`kv_idx & 7`, `>>`, `<<`, `^ 1`, `~`),
`%`-based dilation, nested `np.where`, `np.logical_*` of numbers, `np.sign`/`np.floor`/`np.ceil` on index math,
`np.sqrt`/`np.log1p`/`np.expm1`/`np.power` in a score_mod, a 2-D table indexed by (b, h), a boolean table,
per-batch lengths with padding queries and keys, head-dependent scales, a mask_mod returning a Python bool, and
`*args`. Each runs forward and backward through `tessera.attention` / `tessera.attention_backward` at Tile level
against the float64 reference, over seq_q != seq_k both ways, lengths 1, 17, 129, 1000, GQA and batch 2
(`mods_checks`).

The default run takes a slice (`FAST`); `-m slow` runs every variant over the shapes at Tile level, at target
and PTX level at one shape, every supported head_dim at target level, and ptxas on each variant's forward and
backward kernels (no spill). Then `create_block_mask` against a brute force, integer arithmetic past i32 refused
by name before it wraps, captured arrays that change between calls, and bad input through the public calls."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from mods_checks import (assert_variant_kernels_assemble, brute_block_kinds, check_named_variant,
                         check_variant_forward_and_backward, variant_inputs)

import tessera
from tessera import reference
from tessera.numerics import BF16
from tessera.variants import ModTraceError, create_block_mask, trace_mod
from tessera.variants.index_ranges import check_index_ranges

H = 4
_rng = np.random.default_rng(10)
BH_BIAS = _rng.standard_normal((2, H)).astype(np.float32)          # by (batch, head)
BLOCK_TABLE = _rng.random((16, 16)) > 0.5                           # by (query block, key block) of 64
np.fill_diagonal(BLOCK_TABLE, True)
HEAD_SCALE = np.array([0.5, 1.0, 1.5, 2.0], np.float32)
HEAD_ON = np.array([True, False, True, False])
Q_LEN = np.array([1000, 11])                                        # per batch: real queries
K_LEN = np.array([1000, 19])                                        # per batch: real keys
DOCS = np.stack([np.repeat([0, 1, 3], [5, 40, 955]), np.repeat([2, 7, -1], [8, 32, 960])])  # -1: padding


# region modifiers written as objects

class BatchHeadBias:
    """A learned bias per (batch, head), held by the object."""

    def __init__(self, table):
        self.table = table

    def __call__(self, score, b, h, q_idx, kv_idx):
        return score + self.table[b, h]


class DocumentMask:
    """Per-batch documents with padding: the object's table, a method helper, a class-level constant."""

    PAD = -1

    def __init__(self, docs, lengths):
        self.docs, self.lengths = docs, lengths

    def same_document(self, b, q_idx, kv_idx):
        return self.docs[b, q_idx] == self.docs[b, kv_idx]

    def __call__(self, b, h, q_idx, kv_idx):
        return self.same_document(b, q_idx, kv_idx) & (kv_idx < self.lengths[b]) & (self.docs[b, kv_idx] != self.PAD)


class Windows:
    """Two modifiers as methods of one object: a bound method is a modifier too."""

    def __init__(self, width):
        self.width = width

    def causal_window(self, b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < self.width)


# endregion
# region functions, partials, helpers, lambdas

def block_table_window(b, h, q_idx, kv_idx, *, table, reach):
    """A user-given block table over 64 x 64 blocks, and-ed with a band of `reach`."""
    return table[q_idx // 64, kv_idx // 64] & (np.abs(q_idx - kv_idx) <= reach)


def _distance(q_idx, kv_idx):
    return np.abs(q_idx - kv_idx).astype(np.float32)


def helper_decay(score, b, h, q_idx, kv_idx):
    """A module-level helper and a nested one."""
    def decay(d):
        return np.log1p(d) * 0.05
    return score - decay(_distance(q_idx, kv_idx))


head_scale_lambda = lambda score, b, h, q_idx, kv_idx, s=HEAD_SCALE: score * s[h]  # noqa: E731


def math_constants(score, b, h, q_idx, kv_idx):
    return score * math.log(2) + math.pi * 0.01 * np.sign(q_idx - kv_idx)


def bit_ops(b, h, q_idx, kv_idx):
    """Every eighth key off (`& 7`), blocks of 16 causal (`>>`), pairs swapped (`^ 1`), and `~`, `<<`."""
    return ((kv_idx & 7) != 3) & ((q_idx >> 4) >= (kv_idx >> 4)) | ((q_idx ^ 1) == kv_idx) \
        | ((~kv_idx) == -1) | ((kv_idx << 2) == q_idx)


def dilated(b, h, q_idx, kv_idx):
    return ((q_idx - kv_idx) % 3 == 0) & (q_idx >= kv_idx) & (q_idx - kv_idx < 60)


def nested_where(score, b, h, q_idx, kv_idx):
    return np.where(q_idx >= kv_idx, np.where(kv_idx % 2 == 0, score, score * 0.5), np.where(h > 1, score - 1.0, 0.0))


def logicals(b, h, q_idx, kv_idx):
    """np.logical_* of booleans and of numbers (their truth: `kv_idx % 5` is true off multiples of 5)."""
    return np.logical_or(np.logical_and(q_idx >= kv_idx, np.logical_not(kv_idx == 5)),
                         np.logical_xor(q_idx < 3, np.logical_and(kv_idx % 5, kv_idx < 9)))


def floor_ceil(b, h, q_idx, kv_idx):
    return np.floor(q_idx / 8) >= np.ceil(kv_idx / 8) - np.sign(h)


def roots_and_powers(score, b, h, q_idx, kv_idx):
    return (score + 0.1 * np.sqrt(np.abs(q_idx - kv_idx)) - 0.01 * np.power(np.abs(score), 1.5)
            + 0.05 * np.expm1(score * 0.1))


def boolean_table(b, h, q_idx, kv_idx):
    return HEAD_ON[h] | (q_idx >= kv_idx)


def padded_lengths(b, h, q_idx, kv_idx):
    """Per-batch lengths with padding queries and keys (batch 1 has 11 queries and 19 keys)."""
    return (q_idx < Q_LEN[b]) & (kv_idx < K_LEN[b])


def head_scale(score, b, h, q_idx, kv_idx):
    return score * HEAD_SCALE[h]


def always(b, h, q_idx, kv_idx):
    return True


def never(b, h, q_idx, kv_idx):
    return False


def star_args(*args):
    b, h, q_idx, kv_idx = args
    return q_idx >= kv_idx


# endregion

VARIANTS = {
    "object-bias": (BatchHeadBias(BH_BIAS), None),
    "object-documents": (None, DocumentMask(DOCS, K_LEN)),
    "bound-method": (None, Windows(37).causal_window),
    "partial-block-table": (None, functools.partial(block_table_window, table=BLOCK_TABLE, reach=150)),
    "helpers+padding": (helper_decay, padded_lengths),
    "lambda-default+bits": (head_scale_lambda, bit_ops),
    "math+dilated": (math_constants, dilated),
    "nested-where+logicals": (nested_where, logicals),
    "roots+floor-ceil": (roots_and_powers, floor_ceil),
    "head-scale+boolean-table": (head_scale, boolean_table),
    "always+star-args": (head_scale, always),
    "star-args": (None, star_args),
    "nested-where+never": (nested_where, never),
}
SHAPES = [  # (batch, heads, heads_k, seq_q, seq_k)
    (2, H, 2, 70, 45),
    (1, H, 4, 1, 1),
    (2, H, 1, 17, 129),
    (2, H, 4, 129, 17),
    (2, H, 2, 1000, 1000),
]
FAST = ["object-documents", "partial-block-table", "lambda-default+bits", "helpers+padding"]


@pytest.mark.parametrize("name", FAST)
def test_variant_at_tile_level(name):
    empty = check_named_variant(VARIANTS, name, SHAPES[0], "tile")
    # batch 1's padding queries see no key; document 3's queries (45 on) no key of the 45
    assert empty.any() == (name in ("helpers+padding", "object-documents"))


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_over_shapes_at_tile_level(name, shape):
    check_named_variant(VARIANTS, name, shape, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_below_tile_level(name, level):
    check_named_variant(VARIANTS, name, SHAPES[0], level)


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_every_head_dim_at_tile_and_target_level(head_dim):
    """A callable object and bit ops at each head_dim the dense kernel takes: forward and backward at 64 and
    128 at Tile and target level; at 256 the forward at Tile level, the backward refused by name."""
    from tessera.runtime.attention_base import UnsupportedKernel

    if head_dim == 256:
        for name in ("object-documents", "lambda-default+bits"):
            score_mod, mask_mod = VARIANTS[name]
            q, k, v, do = variant_inputs(SHAPES[0], 20, head_dim)
            o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
            assert reference.check_attention_mods(o, q, k, v, BF16, score_mod, mask_mod, lse=lse).ok
            with pytest.raises(UnsupportedKernel, match="head_dim 256 is not supported by the backward kernels"):
                tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod,
                                           level="tile")
        return
    for level in ("tile", "target"):
        for name in ("object-documents", "lambda-default+bits"):
            check_named_variant(VARIANTS, name, SHAPES[0], level, head_dim)


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_kernels_assemble_without_spills(name):
    """Every variant's forward and backward kernels assemble without spills. roots+floor-ceil's backward (two
    [BM, BN] differences of the score's powers, its magnitude, exp2 and exp beside dK and dV) held 289 registers
    single-stage at 64 x 64 and spilled until slab-elementwise-chains emitted its chain 8 registers at a time."""
    assert_variant_kernels_assemble(*VARIANTS[name])


# region what the tracer makes of them

def test_objects_and_partials_capture_their_arrays_by_attribute_name():
    """An object's arrays are kernel inputs named by their attributes (a class-level constant is a number);
    a partial's keywords by their names; the bound method is named by its function."""
    trace = trace_mod(VARIANTS["object-documents"][1], "mask_mod")
    assert [a.name for a in trace.arrays] == ["mask_mod_docs", "mask_mod_lengths"]
    assert trace.arrays[0].array is DOCS and trace.name == "DocumentMask.__call__"
    trace = trace_mod(VARIANTS["partial-block-table"][1], "mask_mod")
    assert [a.name for a in trace.arrays] == ["mask_mod_table"] and trace.arrays[0].boolean
    assert trace_mod(Windows(5).causal_window, "mask_mod").name == "Windows.causal_window"


def test_torch_modules_are_modifiers():
    """A torch module (`nn.Module` with a buffer and a parameter read in `forward`) was refused ("a tensor the
    function makes", at torch's `Module._wrapped_call_impl`); it is traced as its class's `forward`, its buffers
    and parameters kernel inputs by name, and the reference calls it on tensors. Forward and backward."""
    torch = pytest.importorskip("torch")

    class HeadBias(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("bias", torch.from_numpy(BH_BIAS[0].copy()))
            self.scale = torch.nn.Parameter(torch.from_numpy(HEAD_SCALE.copy()))

        def forward(self, score, b, h, q_idx, kv_idx):
            return score * self.scale[h] + self.bias[h]

    class Window(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.width = width

        def forward(self, b, h, q_idx, kv_idx):
            return (q_idx - kv_idx).abs() < self.width

    bias = HeadBias()
    trace = trace_mod(bias, "score_mod")
    assert trace.name.endswith("HeadBias.forward")
    assert [a.name for a in trace.arrays] == ["score_mod_scale", "score_mod_bias"]
    q, k, v, do = variant_inputs((2, H, 2, 45, 70), 16)
    check_variant_forward_and_backward(q, k, v, do, bias, Window(9), "tile")


def test_bit_ops_are_the_kernels_arithmetic():
    """`& 7` is `% 8`, `>> 4` is `// 16`; each bit op of a difference of either sign (a boolean beside an
    integer is 1 or 0, as NumPy promotes it) at Tile level against the reference's int64 NumPy."""
    trace = trace_mod(bit_ops, "mask_mod")
    assert trace.uses("mod") and trace.uses("floordiv") and trace.uses("mul")
    q, k, v, _ = variant_inputs((1, 1, 1, 100, 100), 1)
    for fn in (lambda d: d & 7, lambda d: d & 0b1011010, lambda d: d & ~7, lambda d: d | 5, lambda d: d ^ 6,
               lambda d: ~d, lambda d: d >> 3, lambda d: d << 3, lambda d: np.right_shift(d, 2),
               lambda d: True & d, lambda d: (d >= 0) & 3, lambda d: np.bitwise_xor(d, 1)):

        def score_mod(score, b, h, q_idx, kv_idx, fn=fn):
            return score + 0.01 * fn(q_idx - kv_idx)
        o = tessera.attention(q, k, v, score_mod=score_mod, level="tile")
        assert reference.check_attention_mods(o, q, k, v, BF16, score_mod).ok  # over differences of both signs


@pytest.mark.parametrize("fn,construct", [
    (lambda b, h, q, k: (q & k) > 0, "'&' of two traced integers"),
    (lambda b, h, q, k: (q ^ k) > 0, "'^' of two traced integers"),
    (lambda b, h, q, k: (1 << h) > k, "'<<' by a traced amount"),
    (lambda b, h, q, k: (q >> 31) > k, "'>>' by 31 (shifts of 0 to 30 are traced)"),
    (lambda b, h, q, k: (q & (2**31 - 1)) > 0, "'&' with the constant 2147483647 (bit 30 or above set"),
    (lambda b, h, q, k: (q | -2**31) > 0, "'&' with the constant 2147483647 (bit 30 or above set"),
    (lambda b, h, q, k: (q * 0.5) & 1 > 0, "'&' of a float value"),
])
def test_bit_ops_refused_by_name(fn, construct):
    with pytest.raises(ModTraceError, match="mask_mod '<lambda>' at .*: cannot trace") as caught:
        trace_mod(fn, "mask_mod")
    assert construct in str(caught.value)

# endregion


@pytest.mark.parametrize("name", ["object-documents", "partial-block-table", "lambda-default+bits",
                                  "helpers+padding", "nested-where+logicals", "always+star-args"])
def test_block_classes_match_a_brute_force_evaluation(name):
    batch, heads, seq_q, seq_k, bm, bn = 2, H, 200, 150, 64, 32
    mask_mod = VARIANTS[name][1]
    mask = create_block_mask(mask_mod, batch, heads, seq_q, seq_k, bm, bn)
    np.testing.assert_array_equal(mask.kinds, brute_block_kinds(mask_mod, batch, heads, seq_q, seq_k, bm, bn))


# region integer arithmetic past i32: refused before it wraps

def hashed_keys(b, h, q_idx, kv_idx):
    return (q_idx * 50_000_000 + kv_idx) % 7 != 0


def product_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx * kv_idx % 3) * 0.5


BIG_OFFSETS = np.array([2**31 - 50, 0])  # positions offset near the top of i32


def big_offsets(b, h, q_idx, kv_idx):
    return BIG_OFFSETS[b] + kv_idx * 2 > BIG_OFFSETS[b] + q_idx


def test_index_arithmetic_past_i32_is_refused_before_it_wraps():
    """`q_idx * 50_000_000` wraps in the kernel's i32 and not on NumPy's int64 grids: the kernel masked other
    keys than the reference (max error 3.4 at 70 x 45). Refused, forward and backward, naming the function,
    the expression and the sizes."""
    q, k, v, do = variant_inputs((2, H, 2, 70, 45), 11)
    with pytest.raises(ModTraceError, match=r"mask_mod 'hashed_keys' at .*test_attention_mods_unseen4.py:\d+: "
                                            r"cannot trace the integer value q_idx \* 50000000: it reaches "
                                            r"3450000000 at batch 2, heads 4, seq_q 70, seq_k 45, outside i32"):
        tessera.attention(q, k, v, mask_mod=hashed_keys, level="tile")
    o, lse = tessera.attention(q, k, v, return_lse=True, level="tile")
    with pytest.raises(ModTraceError, match="BIG_OFFSETS"):
        tessera.attention_backward(q, k, v, o, lse, do, mask_mod=big_offsets, level="tile")


def test_a_hand_built_kernel_is_checked_at_launch():
    """`flash_attention(mask_mod=)` launched by hand through `tessera.interpret` is checked for the launch's
    sizes as `tessera.attention` is: the wrap refused before the kernel runs."""
    from tessera.kernels import flash_attention

    q, k, v, _ = variant_inputs((2, H, H, 70, 45), 21)
    module = flash_attention(64, mask_mod=hashed_keys, block_n=64, block_sparse=True)
    lists = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= 0, 2, H, 70, 45, 128, 64).inputs()
    with pytest.raises(ModTraceError, match=r"q_idx \* 50000000: it reaches 3450000000 at batch 2, heads 4"):
        tessera.interpret(module, q, k, v, *lists, level="tile")


@pytest.mark.parametrize("seq,refused", [(46341, False), (46342, True), (70, False)])
def test_a_product_of_indices_is_bounded_by_the_lengths(seq, refused):
    """`q_idx * kv_idx` fits i32 up to 46,341 tokens (46,340^2 < 2^31); one more and it is refused."""
    if refused:
        with pytest.raises(ModTraceError, match=r"q_idx \* kv_idx: it reaches 2147488281"):
            check_index_ranges(score_mod=product_bias, batch=1, heads=1, seq_q=seq, seq_k=seq)
    else:
        check_index_ranges(score_mod=product_bias, batch=1, heads=1, seq_q=seq, seq_k=seq)


def test_a_conversion_past_i32_is_refused():
    """`(q_idx * 1e9).astype(int)` saturates in the kernel (cvt.rzi.s32.f32) and not in NumPy: refused; the
    float bound follows + - * / and the roundings of bounded values."""
    def hashed(b, h, q_idx, kv_idx):
        return (np.floor(q_idx / 3.0 + 0.5) * 1e9).astype(int) % 7 != kv_idx % 7

    with pytest.raises(ModTraceError, match=r"mask_mod '.*hashed' .*\(np.floor\(q_idx / 3.0 \+ 0.5\) \* "
                                            r"1000000000.0\).astype\(int\): it reaches 24000000000 at batch 1, "
                                            r"heads 1, seq_q 70, .*the kernel's conversion saturates"):
        check_index_ranges(mask_mod=hashed, batch=1, heads=1, seq_q=70, seq_k=70)
    check_index_ranges(mask_mod=hashed, batch=1, heads=1, seq_q=3, seq_k=70)  # 2e9 fits


def test_what_stays_inside_i32_is_not_refused():
    """A modulus bounds what follows (`(q_idx * 1000) % 7 * 10**6`), a value made from the score has no bound
    (and is not refused), and every variant above passes at 1000 tokens."""
    check_index_ranges(mask_mod=lambda b, h, q, k: (q * 1000) % 7 * 10**6 > k, batch=2, heads=H, seq_q=1000,
                       seq_k=1000)
    check_index_ranges(score_mod=lambda s, b, h, q, k: s + (s * 1e9).astype(int) % 3, batch=2, heads=H, seq_q=1000,
                       seq_k=1000)
    for score_mod, mask_mod in VARIANTS.values():
        for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
            if fn is not None:
                check_index_ranges(**{kind: fn}, batch=2, heads=H, seq_q=1000, seq_k=1000)

# endregion
# region captured arrays that change between calls

WINDOW_TABLE = np.array([4, 4, 4, 4])
SHIFT = np.array([0.0, 0.0])


def per_head_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW_TABLE[h])


def shifted(score, b, h, q_idx, kv_idx):
    return score + SHIFT[b] + SHIFT[1] * 0.5  # a gather, and a read at a constant index (a kernel constant)


def test_changed_captured_arrays_are_read_afresh():
    """An array changed in place between two calls, a global rebound to a new array, and an object's attribute
    replaced: each call's kernel, block lists and reference see the new values (the arrays are inputs, read at
    each call; a read at a constant index is a constant of the kernel's text, so a changed value is a new
    kernel for the GPU's cache, not a stale one)."""
    global WINDOW_TABLE
    q, k, v, _ = variant_inputs((2, H, 2, 70, 45), 12)
    bias = BatchHeadBias(BH_BIAS.copy())
    outputs = []
    for step in range(3):
        o = tessera.attention(q, k, v, score_mod=shifted, mask_mod=per_head_window, level="tile")
        assert reference.check_attention_mods(o, q, k, v, BF16, shifted, per_head_window).ok
        o2 = tessera.attention(q, k, v, score_mod=bias, level="tile")
        assert reference.check_attention_mods(o2, q, k, v, BF16, bias).ok
        outputs.append((o, o2))
        WINDOW_TABLE[:] = [1, 20, 50, 70] if step == 0 else WINDOW_TABLE
        SHIFT[:] = [0.5, -2.0]
        bias.table = bias.table * 3.0
        if step == 1:
            WINDOW_TABLE = np.array([70, 1, 1, 1])
    for (a, a2), (b, b2) in zip(outputs, outputs[1:]):
        assert not np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
        assert not np.array_equal(np.asarray(a2, np.float32), np.asarray(b2, np.float32))
    from tessera.kernels import flash_attention

    texts = []
    for value in (1.0, 2.0):
        SHIFT[1] = value
        texts.append(str(flash_attention(64, score_mod=shifted)))
    assert texts[0] != texts[1]

# endregion
# region bad input through the public calls

def mutates(b, h, q_idx, kv_idx):
    DOCS[0, 0] = 9
    return DOCS[b, q_idx] == DOCS[b, kv_idx]


def yields(b, h, q_idx, kv_idx):
    yield q_idx >= kv_idx


async def awaits(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def recurses(b, h, q_idx, kv_idx):
    return recurses(b, h, q_idx, kv_idx)


def counts_down(b, h, q_idx, kv_idx, n=3):
    """Recursion on a Python number unrolls: the window of 3."""
    return q_idx - kv_idx < 3 if n == 0 else counts_down(b, h, q_idx, kv_idx, n - 1) & (q_idx >= kv_idx)


@pytest.mark.parametrize("mask_mod,message", [
    (mutates, "an assignment into the captured array DOCS (a modifier reads its arrays; it may not change them)"),
    (yields, "a generator function (it yields): a modifier returns its value"),
    (awaits, "an async function: a modifier returns its value"),
    (recurses, "RecursionError"),
    (functools.partial(max), "must be a Python function (def, lambda, functools.partial of one, or an object "
                             "whose class defines __call__ in Python); got builtin_function_or_method"),
])
def test_modifiers_that_cannot_be_traced_are_refused_by_name(mask_mod, message):
    q, k, v, _ = variant_inputs((1, 2, 2, 33, 40), 13)
    with pytest.raises(ModTraceError) as caught:
        tessera.attention(q, k, v, mask_mod=mask_mod, level="tile")
    assert message in str(caught.value)
    assert DOCS[0, 0] == 0


def test_recursion_on_a_number_unrolls():
    q, k, v, do = variant_inputs((1, 2, 2, 33, 40), 14)
    check_variant_forward_and_backward(q, k, v, do, None, counts_down, "tile")


@pytest.mark.parametrize("change,message", [
    (dict(k=np.float16), "q, k and v must have one element type, got bfloat16, float16, bfloat16"),
    (dict(lse=(slice(None), slice(None), slice(0, 10))), r"lse must be \[batch, heads, seq_q\] = \(1, 2, 33\)"),
    (dict(do=(slice(None), slice(None), slice(0, 5))), r"do must have q's shape \(1, 2, 33, 64\)"),
    (dict(do=np.float32), "q, k, v, o and do must have one element type"),
])
def test_bad_inputs_with_modifiers_are_refused_by_name(change, message):
    q, k, v, do = variant_inputs((1, 2, 2, 33, 40), 15)
    mods = dict(score_mod=head_scale, mask_mod=per_head_window, level="tile")
    if "k" in change:
        with pytest.raises(ValueError, match=message):
            tessera.attention(q, k.astype(change["k"]), v, **mods)
        return
    o, lse = tessera.attention(q, k, v, return_lse=True, **mods)
    if "lse" in change:
        lse = lse[change["lse"]]
    elif isinstance(change["do"], tuple):
        do = do[change["do"]]
    else:
        do = do.astype(change["do"])
    with pytest.raises(ValueError, match=message):
        tessera.attention_backward(q, k, v, o, lse, do, **mods)

# endregion


@pytest.mark.parametrize("keyword", [dict(seqused_k=np.array([5], np.int32)), dict(max_seqlen_k=45),
                                     dict(max_seqlen_q=33)])
def test_packed_sequence_keywords_with_modifiers_are_refused(keyword):
    """`seqused_k=` (and max_seqlen_q/k) without cu_seqlens beside a mask_mod were ignored: O as if every key
    were used. Refused by name, as they are without modifiers."""
    q, k, v, _ = variant_inputs((1, 2, 2, 33, 40), 17)
    with pytest.raises(ValueError, match=r"score_mod/mask_mod are not supported with .*seqused_k"):
        tessera.attention(q, k, v, mask_mod=per_head_window, level="tile", **keyword)


WIDE = np.array([1.0, -np.inf, 1e39])
NARROW = np.array([1.0, -np.inf, 3e38])


def test_a_float64_table_past_f32_is_refused_by_name():
    """A float64 table is read as f32: a finite value past f32's range is refused naming the array (infinities
    are values f32 holds); f32 and narrower tables need no such pass."""
    with pytest.raises(ModTraceError, match=r"the captured array WIDE: its value 1e\+39 overflows f32"):
        trace_mod(lambda s, b, h, q, k: s + WIDE[h % 3], "score_mod")
    assert trace_mod(lambda s, b, h, q, k: s + NARROW[h % 3], "score_mod").arrays[0].array is NARROW


@pytest.mark.slow
def test_a_huge_captured_table():
    """A 256 MB f32 table (8192 x 8192) read at hashed positions, forward and backward: each trace made a full
    pass over it to look for values past f32 (which no f32 value can be), 4.4 s a forward call at 70 x 45 where
    it is now 0.7 s (one run, loaded machine); float64 tables are still checked (test_attention_mods_users)."""
    table = np.random.default_rng(18).standard_normal((8192, 8192)).astype(np.float32)

    def hashed_bias(score, b, h, q_idx, kv_idx):
        return score + table[q_idx * 97 % 8192, kv_idx * 13 % 8192]

    q, k, v, do = variant_inputs((1, 2, 2, 70, 45), 18)
    check_variant_forward_and_backward(q, k, v, do, hashed_bias, None, "tile")

