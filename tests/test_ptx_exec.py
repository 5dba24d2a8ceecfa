"""The PTX executor, instruction by instruction: integer wrap-around, carry chains, funnel shifts and prmt modes,
float rounding modes (against exact rational arithmetic), comparisons, packing, shuffles, divergence and
reconvergence, barriers, mbarrier phases, cp.async groups, ldmatrix/stmatrix, atomics (conflicts applied in
thread order), and the errors it must report (unknown instruction, memory faults, deadlock, bad launches)."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import tessera.ptx
from tessera.interpreters.ptx import PtxDeadlockError, PtxExecutionError, PtxHazardError, TensorMapArg, launch
from tessera.sm90 import facts
from race_templates import ptx_entry
from text_edits import checked, filled

REGS = """
    .reg .b32 %r<16>;
    .reg .b64 %rd<16>;
    .reg .f32 %f<16>;
    .reg .pred %p<8>;
    .reg .b16 %h<8>;
"""


def kernel(body: str, params: str = ".param .u64 out", extra: str = "", directives: str = "") -> str:
    return ptx_entry(body, REGS, params, extra, directives)


ELEMENTWISE = """
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd0, %r0, 4;
    ld.param.u64 %rd1, [pa];
    add.s64 %rd1, %rd1, %rd0;
    ld.global.b32 %r1, [%rd1];
    ld.param.u64 %rd2, [pb];
    add.s64 %rd2, %rd2, %rd0;
    ld.global.b32 %r2, [%rd2];
    ld.param.u64 %rd3, [pc];
    add.s64 %rd3, %rd3, %rd0;
    ld.global.b32 %r3, [%rd3];
    mov.b32 %f1, %r1;
    mov.b32 %f2, %r2;
    mov.b32 %f3, %r3;
    {op}
    mov.b32 %r5, %f4;
    {store}
    ld.param.u64 %rd4, [pout];
    add.s64 %rd4, %rd4, %rd0;
    st.global.b32 [%rd4], %r4;
"""
PARAMS4 = ".param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pout"


def elementwise(op: str, a, b, c=None, result="%r4"):
    """Run `op` per thread on a[tid], b[tid], c[tid] (32-bit, in %r1..%r3 and %f1..%f3); return %r4 (or %f4
    with result="%f4") as uint32 bits."""
    a, b = (np.asarray(x).view(np.uint32) for x in (a, b))
    c = np.zeros_like(a) if c is None else np.asarray(c).view(np.uint32)
    store = "" if result == "%r4" else "mov.b32 %r4, %f4;"
    op = op if op.rstrip().endswith(";") else op + ";"
    text = kernel(ELEMENTWISE.format(op=op, store=store), PARAMS4)
    out = np.zeros(len(a), np.uint32)
    return launch(text, "k", 1, len(a), [a, b, c, out])[3]


# region integers
RNG = np.random.default_rng(7)
I32 = np.concatenate([np.array([0, 1, -1, 2**31 - 1, -2**31, 7, -7, 100], np.int32),
                      RNG.integers(-2**31, 2**31, 24, dtype=np.int64).astype(np.int32)])
J32 = np.concatenate([np.array([1, -1, 3, -3, 5, 2**31 - 1, -1, 9], np.int32),
                      RNG.integers(-2**20, 2**20, 24, dtype=np.int64).astype(np.int32) | 1])


def wrap32(x):
    return np.array([int(v) & 0xFFFFFFFF for v in x], np.uint32)


def trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


INTEGER_CASES = {
    "add.s32 %r4, %r1, %r2": lambda a, b: a + b,
    "sub.s32 %r4, %r1, %r2": lambda a, b: a - b,
    "sub.sat.s32 %r4, %r1, %r2": lambda a, b: min(max(a - b, -2**31), 2**31 - 1),
    "mul.lo.s32 %r4, %r1, %r2": lambda a, b: a * b,
    "mul.hi.s32 %r4, %r1, %r2": lambda a, b: (a * b) >> 32,
    "mul.hi.u32 %r4, %r1, %r2": lambda a, b: ((a & 0xFFFFFFFF) * (b & 0xFFFFFFFF)) >> 32,
    "mad.lo.s32 %r4, %r1, %r2, %r1": lambda a, b: a * b + a,
    "div.s32 %r4, %r1, %r2": lambda a, b: trunc_div(a, b) if not (a == -2**31 and b == -1) else a,
    "rem.s32 %r4, %r1, %r2": lambda a, b: a - trunc_div(a, b) * b if not (a == -2**31 and b == -1) else 0,
    "div.u32 %r4, %r1, %r2": lambda a, b: (a & 0xFFFFFFFF) // (b & 0xFFFFFFFF),
    "rem.u32 %r4, %r1, %r2": lambda a, b: (a & 0xFFFFFFFF) % (b & 0xFFFFFFFF),
    "min.s32 %r4, %r1, %r2": min,
    "max.u32 %r4, %r1, %r2": lambda a, b: max(a & 0xFFFFFFFF, b & 0xFFFFFFFF),
    "abs.s32 %r4, %r1": lambda a, b: abs(a),
    "neg.s32 %r4, %r1": lambda a, b: -a,
    "popc.b32 %r4, %r1": lambda a, b: bin(a & 0xFFFFFFFF).count("1"),
    "clz.b32 %r4, %r1": lambda a, b: 32 - (a & 0xFFFFFFFF).bit_length(),
    "brev.b32 %r4, %r1": lambda a, b: int(f"{a & 0xFFFFFFFF:032b}"[::-1], 2),
    "lop3.b32 %r4, %r1, %r2, %r1, 0x96": lambda a, b: a ^ b ^ a,
    "not.b32 %r4, %r1": lambda a, b: ~a,
    "cnot.b32 %r4, %r1": lambda a, b: int(a == 0),
    "xor.b32 %r4, %r1, %r2": lambda a, b: a ^ b,
}


@pytest.mark.parametrize("op", INTEGER_CASES)
def test_integer_arithmetic_wraps_like_ptx(op):
    expected = wrap32([INTEGER_CASES[op](int(a), int(b)) for a, b in zip(I32, J32)])
    np.testing.assert_array_equal(elementwise(op, I32, J32), expected)


def shift_reference(kind, a, s):
    a32, amount = a & 0xFFFFFFFF, s & 0xFFFFFFFF
    if kind == "shl":
        return (a32 << amount) if amount < 32 else 0
    if kind == "shr.u32":
        return a32 >> amount if amount < 32 else 0
    return a >> min(amount, 31)


@pytest.mark.parametrize("kind", ["shl", "shr.u32", "shr.s32"])
def test_shift_amounts_clamp(kind):
    amounts = np.array([0, 1, 5, 31, 32, 33, 100, 2**31] * 4, np.uint32)
    op = {"shl": "shl.b32", "shr.u32": "shr.u32", "shr.s32": "shr.s32"}[kind] + " %r4, %r1, %r2"
    expected = wrap32([shift_reference(kind, int(a), int(s)) for a, s in zip(I32, amounts)])
    np.testing.assert_array_equal(elementwise(op, I32, amounts), expected)


@pytest.mark.parametrize("kind", ["shl", "shr.u32", "shr.s32"])
@pytest.mark.parametrize("amount", [0, 1, 5, 31, 32, 33, 100, 2**31, -1])
def test_shift_by_an_immediate_clamps_as_by_a_register(kind, amount):
    """A constant amount (decided once at decode) shifts as the same amount in a register does (-1: 2^32 - 1)."""
    op = {"shl": "shl.b32", "shr.u32": "shr.u32", "shr.s32": "shr.s32"}[kind] + f" %r4, %r1, {amount}"
    expected = wrap32([shift_reference(kind, int(a), amount & 0xFFFFFFFF) for a in I32])
    np.testing.assert_array_equal(elementwise(op, I32, np.zeros_like(I32)), expected)


def bfe_reference(a, pos, length, signed):
    pos, length = pos & 0xFF, length & 0xFF
    bits = [(a >> i) & 1 for i in range(32)]
    sbit = bits[min(pos + length - 1, 31)] if signed and length else 0
    return sum((bits[pos + i] if i < length and pos + i <= 31 else sbit) << i for i in range(32))


@pytest.mark.parametrize("signed", [False, True])
def test_bfe_and_bfi(signed):
    pos = np.array([0, 4, 8, 28, 31, 32, 40, 3] * 4, np.uint32)
    length = np.array([8, 0, 31, 8, 1, 4, 2, 32] * 4, np.uint32)
    a = I32.view(np.uint32)
    op = f"bfe.{'s' if signed else 'u'}32 %r4, %r1, %r2, %r3"
    expected = wrap32([bfe_reference(int(x), int(p), int(n), signed) for x, p, n in zip(a, pos, length)])
    np.testing.assert_array_equal(elementwise(op, a, pos, length), expected)
    # bfi: insert the low 8 bits of %r1 into %r2 at position %r3
    got = elementwise("bfi.b32 %r4, %r1, %r2, %r3, 8", a, J32, pos)
    mask = [((0xFF << int(p)) & 0xFFFFFFFF) if p < 32 else 0 for p in pos]
    expected = wrap32([(int(b) & ~m) | ((int(x) << int(p)) & m) if p < 32 else int(b)
                       for x, b, p, m in zip(a, J32.view(np.uint32), pos, mask)])
    np.testing.assert_array_equal(got, expected)


def test_prmt_selects_and_replicates_bytes():
    a = np.full(4, 0x83828180, np.uint32)
    b = np.full(4, 0x87868584, np.uint32)
    selectors = np.array([0x3210, 0x7654, 0x0123, 0x8889], np.uint32)
    expected = np.array([0x83828180, 0x87868584, 0x80818283, 0xFFFFFF00 | 0x00], np.uint32)
    expected[3] = 0xFF | (0xFF << 8) | (0xFF << 16) | (0xFF << 24)  # bytes 1 and 0 of b/a with sign replicate
    expected[3] = int.from_bytes(bytes([0xFF, 0xFF, 0xFF, 0xFF]), "little")
    got = elementwise("prmt.b32 %r4, %r1, %r2, %r3", a, b, selectors)
    np.testing.assert_array_equal(got[:3], expected[:3])
    assert got[3] == 0xFFFFFFFF


def test_64_bit_multiply_high_and_wide():
    body = """
    mov.u64 %rd1, 0xFFFFFFFFFFFFFFFF;
    mov.u64 %rd2, 0x123456789ABCDEF1;
    mul.hi.u64 %rd3, %rd1, %rd2;
    mul.hi.s64 %rd4, %rd1, %rd2;
    mov.u32 %r1, -3;
    mul.wide.s32 %rd5, %r1, 7;
    mul.wide.u32 %rd6, %r1, 7;
    ld.param.u64 %rd0, [out];
    st.global.v2.u64 [%rd0], {%rd3, %rd4};
    st.global.v2.u64 [%rd0+16], {%rd5, %rd6};
    """
    out = launch(kernel(body), "k", 1, 1, [np.zeros(4, np.uint64)])[0]
    b = 0x123456789ABCDEF1
    assert int(out[0]) == ((2**64 - 1) * b) >> 64
    assert int(out[1]) == ((-1 * b) >> 64) & (2**64 - 1)
    assert int(out[2]) == (-21) & (2**64 - 1)
    assert int(out[3]) == (2**32 - 3) * 7


M32 = 0xFFFFFFFF


def carry_chain_kernel(bits: int) -> str:
    """Per thread: X, Y (128-bit, little-endian words of `bits`) -> X + Y, X - Y (128-bit), the carry out of the
    sum (0 or 1) and 0 - the borrow out of the difference, as one word each. Word 1 uses the .s type."""
    words = 128 // bits
    regs = [f"%r{i}" for i in range(1, 15)] if bits == 32 else [f"%rd{i}" for i in range(5, 15)]
    x, y, total = regs[:words], regs[words:2 * words], regs[2 * words:3 * words]
    carry, borrow = regs[3 * words], regs[3 * words + 1]

    def chain(opcode: str, dests: list[str], out: str) -> str:
        lines = []
        for i, (d, a, b) in enumerate(zip(dests, x, y)):
            name = opcode + ".cc" if i == 0 else opcode + "c.cc"
            lines.append(f"{name}.{'s' if i == 1 else 'u'}{bits} {d}, {a}, {b};")
        lines.append(f"{opcode}c.u{bits} {out}, 0, 0;")
        return "\n    ".join(lines)

    return kernel(f"""
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd0, %r0, 16;
    ld.param.u64 %rd1, [px];
    add.s64 %rd1, %rd1, %rd0;
    ld.global.v{words}.u{bits} {{{", ".join(x)}}}, [%rd1];
    ld.param.u64 %rd2, [py];
    add.s64 %rd2, %rd2, %rd0;
    ld.global.v{words}.u{bits} {{{", ".join(y)}}}, [%rd2];
    {chain("add", total, carry)}
    {chain("sub", x, borrow)}
    mul.wide.u32 %rd3, %r0, 48;
    ld.param.u64 %rd4, [pout];
    add.s64 %rd4, %rd4, %rd3;
    st.global.v{words}.u{bits} [%rd4], {{{", ".join(total)}}};
    st.global.v{words}.u{bits} [%rd4+16], {{{", ".join(x)}}};
    st.global.v2.u{bits} [%rd4+32], {{{carry}, {borrow}}};
    """, ".param .u64 px, .param .u64 py, .param .u64 pout")


def to_words(values) -> np.ndarray:
    """128-bit Python integers as little-endian 32-bit words [n, 4]."""
    return np.array([[(v >> (32 * i)) & M32 for i in range(4)] for v in values], np.uint32)


def from_words(words: np.ndarray) -> list[int]:
    return [sum(int(w) << (32 * i) for i, w in enumerate(row)) for row in words]


@pytest.mark.parametrize("bits", [32, 64])
def test_carry_chains_add_and_subtract_128_bit_numbers(bits):
    top = 2**128 - 1
    edges = [(top, 1), (0, 1), (top, top), (M32, 1), (1 << 64, 1), (0, top), (5, 5), (1 << 127, 1 << 127),
             (0xFFFFFFFF_00000000_FFFFFFFF_00000000, 0x00000001_00000000_00000001_00000000)]
    rng = np.random.default_rng(bits)
    randoms = [(int.from_bytes(rng.bytes(16), "little"), int.from_bytes(rng.bytes(16), "little")) for _ in range(23)]
    xs, ys = zip(*(edges + randoms))
    out = np.zeros((len(xs), 12), np.uint32)
    out = launch(carry_chain_kernel(bits), "k", 1, len(xs), [to_words(xs), to_words(ys), out])[2]
    words = out.view(np.uint32)
    ones = (1 << bits) - 1
    np.testing.assert_array_equal(from_words(words[:, 0:4]), [(x + y) & top for x, y in zip(xs, ys)])
    np.testing.assert_array_equal(from_words(words[:, 4:8]), [(x - y) & top for x, y in zip(xs, ys)])
    flags = from_words(words[:, 8:12])  # carry word, then borrow word, each `bits` wide
    np.testing.assert_array_equal([f & ones for f in flags], [(x + y) >> 128 for x, y in zip(xs, ys)])
    np.testing.assert_array_equal([f >> bits for f in flags], [ones if x < y else 0 for x, y in zip(xs, ys)])


def test_carry_flag_is_per_thread_and_written_only_by_cc():
    a = np.array([M32, 1, M32, 0x80000000, 7, M32], np.uint32)
    b = np.array([1, 2, M32, 0x80000000, 9, 0], np.uint32)
    c = np.array([0, 0, 1, 0, 1, 0], np.uint32)
    carry = np.array([(int(x) + int(y)) >> 32 for x, y in zip(a, b)], np.uint32)
    # an addc without .cc leaves CF alone; a guarded-off add.cc does not write it; one that runs clears it
    op = ("setp.ne.u32 %p1, %r3, 0; add.cc.u32 %r5, %r1, %r2; addc.u32 %r6, 0xffffffff, 1;"
          " @%p1 add.cc.u32 %r5, 0, 0; addc.u32 %r4, 0, 0;")
    np.testing.assert_array_equal(elementwise(op, a, b, c), np.where(c != 0, 0, carry))
    # sub.cc then subc: 0 - (0 + borrow)
    borrow = np.array([M32 if x < y else 0 for x, y in zip(a, b)], np.uint32)
    np.testing.assert_array_equal(elementwise("sub.cc.s32 %r5, %r1, %r2; subc.u32 %r4, 0, 0;", a, b), borrow)


def test_mad_cc_and_madc_chain_a_64_bit_product():
    a = np.array([M32, M32, 0x12345678, 0, 3, 0x80000000], np.uint32)
    b = np.array([M32, 1, 0x9ABCDEF0, 5, 0x7FFFFFFF, 2], np.uint32)
    c = np.array([M32, M32, 0xDEADBEEF, M32, 0x80000001, 0], np.uint32)
    exact = [int(x) * int(y) + int(z) for x, y, z in zip(a, b, c)]
    lo = elementwise("mad.lo.cc.u32 %r4, %r1, %r2, %r3;", a, b, c)
    hi = elementwise("mad.lo.cc.u32 %r5, %r1, %r2, %r3; madc.hi.u32 %r4, %r1, %r2, 0;", a, b, c)
    np.testing.assert_array_equal(lo, [v & M32 for v in exact])
    np.testing.assert_array_equal(hi, [v >> 32 for v in exact])
    # a * b + c * (2^32 + 1): the carry out of the high word, through madc.hi.cc
    top = elementwise("mad.lo.cc.u32 %r5, %r1, %r2, %r3; madc.hi.cc.u32 %r6, %r1, %r2, %r3;"
                      " addc.u32 %r4, 0, 0;", a, b, c)
    np.testing.assert_array_equal(top, [(int(x) * int(y) + int(z) * (2**32 + 1)) >> 64 for x, y, z in zip(a, b, c)])


def funnel_reference(direction: str, mode: str, a: int, b: int, c: int) -> int:
    """shf [PTX ISA 9.7.8.7] bit by bit: n = min(c, 32) or c & 31; .l takes bits 63:32 of {b, a} << n, .r
    bits 31:0 of {b, a} >> n."""
    n = min(c, 32) if mode == "clamp" else c & 31
    source = [(a >> i) & 1 for i in range(32)] + [(b >> i) & 1 for i in range(32)]
    if direction == "l":
        bits = [source[32 + i - n] for i in range(32)]
    else:
        bits = [source[i + n] for i in range(32)]
    return sum(bit << i for i, bit in enumerate(bits))


@pytest.mark.parametrize("direction", ["l", "r"])
@pytest.mark.parametrize("mode", ["wrap", "clamp"])
def test_shf_funnel_shifts(direction, mode):
    amounts = np.array([0, 1, 4, 31, 32, 33, 36, 63, 64, 100, 2**31, M32, 17, 8, 24, 16], np.uint32)
    a = np.resize(np.array([0x80000001, 0x12345678, M32, 0, 0xDEADBEEF], np.uint32), len(amounts))
    b = np.resize(np.array([0x00000001, 0x9ABCDEF0, 0, M32, 0xCAFEF00D, 0x7], np.uint32), len(amounts))
    a[6], b[6] = 0x80000001, 0x00000001  # shifted by 36
    got = elementwise(f"shf.{direction}.{mode}.b32 %r4, %r1, %r2, %r3;", a, b, amounts)
    expected = [funnel_reference(direction, mode, int(x), int(y), int(s)) for x, y, s in zip(a, b, amounts)]
    np.testing.assert_array_equal(got, expected)
    # {b, a} = 0x00000001_80000001 by 36: .wrap shifts by 4, .clamp by 32
    by_36 = {("l", "wrap"): 0x18, ("l", "clamp"): 0x80000001, ("r", "wrap"): 0x18000000, ("r", "clamp"): 1}
    assert got[6] == by_36[direction, mode]


# The ISA's table for the prmt modes: for c & 3 = 0..3, the source bytes of d.b3, d.b2, d.b1, d.b0
PRMT_TABLE = {
    "f4e": [(3, 2, 1, 0), (4, 3, 2, 1), (5, 4, 3, 2), (6, 5, 4, 3)],
    "b4e": [(5, 6, 7, 0), (6, 7, 0, 1), (7, 0, 1, 2), (0, 1, 2, 3)],
    "rc8": [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)],
    "ecl": [(3, 2, 1, 0), (3, 2, 1, 1), (3, 2, 2, 2), (3, 3, 3, 3)],
    "ecr": [(0, 0, 0, 0), (1, 1, 1, 0), (2, 2, 1, 0), (3, 2, 1, 0)],
    "rc16": [(1, 0, 1, 0), (3, 2, 3, 2), (1, 0, 1, 0), (3, 2, 3, 2)],
}


@pytest.mark.parametrize("mode", PRMT_TABLE)
def test_prmt_modes_follow_the_isa_table(mode):
    selectors = np.array([0, 1, 2, 3, 0xFFFFFFFC, 0x1235, 0x8886, 0xFFFFFFFF], np.uint32)
    a = np.resize(np.array([0x44332211, 0x83828180, 0xDEADBEEF], np.uint32), len(selectors))
    b = np.resize(np.array([0x88776655, 0x87868584, 0x01234567], np.uint32), len(selectors))
    got = elementwise(f"prmt.b32.{mode} %r4, %r1, %r2, %r3;", a, b, selectors)
    expected = []
    for x, y, c in zip(a, b, selectors):
        source = int(x).to_bytes(4, "little") + int(y).to_bytes(4, "little")  # bytes 0..7 of {b, a}
        b3, b2, b1, b0 = PRMT_TABLE[mode][int(c) & 3]
        expected.append(int.from_bytes(bytes(source[i] for i in (b0, b1, b2, b3)), "little"))
    np.testing.assert_array_equal(got, expected)


# endregion
# region floats
def exact(x) -> Fraction:
    return Fraction(float(x))


def round_fraction(x: Fraction, mode: str) -> np.float32:
    """The f32 nearest to x in `mode`, by exact comparison with the neighbours (ties to even)."""
    r = np.float32(float(x))
    candidates = sorted({np.nextafter(r, np.float32(-np.inf)), r, np.nextafter(r, np.float32(np.inf))},
                        key=lambda c: Fraction(float(c)))
    values = [Fraction(float(c)) for c in candidates]
    if mode == "rn":
        best = min(range(3), key=lambda i: (abs(values[i] - x), int(candidates[i].view(np.uint32)) & 1))
        return candidates[best]
    if mode == "rz":
        fits = [c for c, v in zip(candidates, values) if abs(v) <= abs(x) and (v >= 0) == (x >= 0) or v == 0]
        return max(fits, key=lambda c: abs(Fraction(float(c))))
    if mode == "rm":
        return max((c for c, v in zip(candidates, values) if v <= x), key=lambda c: Fraction(float(c)))
    return min((c for c, v in zip(candidates, values) if v >= x), key=lambda c: Fraction(float(c)))


F_A = np.concatenate([np.float32([1 + 2**-12, 1.5, -3.25, 1e-3, 3e38]),
                      (RNG.standard_normal(27) * 10.0 ** RNG.integers(-3, 4, 27)).astype(np.float32)])
F_B = np.concatenate([np.float32([1 + 2**-12, 2 ** -30, 7.0, -1e-3, 10.0]),
                      RNG.standard_normal(27).astype(np.float32)])
F_C = np.concatenate([np.float32([2**-60, 1.0, 0.5, 3.0, -3e38]), RNG.standard_normal(27).astype(np.float32)])


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("name", ["add", "mul", "fma", "div"])
def test_float_ops_round_once_in_every_mode(name, mode):
    """Against exact rationals; the first case of fma is a double-rounding trap: (1+2^-12)^2 + 2^-60 is just
    above an f32 midpoint, and rounding through float64 would land on the midpoint and round down."""
    operands = "%f4, %f1, %f2, %f3" if name == "fma" else "%f4, %f1, %f2"
    got = elementwise(f"{name}.{mode}.f32 {operands};", F_A, F_B, F_C, result="%f4").view(np.float32)
    for a, b, c, g in zip(F_A, F_B, F_C, got):
        value = {"add": lambda: exact(a) + exact(b), "mul": lambda: exact(a) * exact(b),
                 "fma": lambda: exact(a) * exact(b) + exact(c), "div": lambda: exact(a) / exact(b)}[name]()
        if abs(value) > Fraction(float(np.finfo(np.float32).max)):
            continue
        assert g == round_fraction(value, mode), (name, mode, a, b, c)


def test_fma_double_rounding_case():
    got = elementwise("fma.rn.f32 %f4, %f1, %f2, %f3;", F_A[:1], F_B[:1], F_C[:1], result="%f4").view(np.float32)
    assert got[0] == np.float32(1 + 2**-11 + 2**-23)


def test_fma_rn_shortcut_gives_the_round_to_odd_bits_lane_by_lane():
    """fma.rn.f32 rounds the float64 sum straight to f32 unless a lane's sum is an f32 midpoint or rounds to a
    subnormal (numerics.fma): called lane by lane, so that each takes its own path, the bits equal those of
    the round-to-odd path, on random bit patterns (NaN, infinities, subnormals), sums near a midpoint and
    tiny sums."""
    from tessera.interpreters.ptx import numerics

    rng = np.random.default_rng(5)
    a, b, c = (rng.integers(0, 2**32, 300, dtype=np.uint64).astype(np.uint32).view(np.float32) for _ in range(3))
    near = np.float32(1 + 2**-12)  # (1 + 2^-12)^2 is an f32 midpoint; +-2^-60 puts the sum beside it
    a = np.concatenate([a, np.float32([near, near, near, 2.0**-70, 2.0**-64, 1.5, 3e38])])
    b = np.concatenate([b, np.float32([near, near, near, 2.0**-60, 2.0**-64, -1.5, 10.0])])
    c = np.concatenate([c, np.float32([2.0**-60, -2.0**-60, 0.0, 2.0**-127, -2.0**-140, 2.25, -3e38])])
    for x, y, z in zip(a, b, c):
        x, y, z = (np.array([v], np.float32) for v in (x, y, z))
        with np.errstate(all="ignore"):
            slow = numerics.round_f64(numerics.sum_to_odd(x.astype(np.float64) * y, z.astype(np.float64)),
                                      np.float32, "rn")
        assert numerics.fma(x, y, z, np.float32, "rn").view(np.uint32) == slow.view(np.uint32), (x, y, z)
    assert numerics.fma(a[-7:-6], b[-7:-6], c[-7:-6], np.float32, "rn") == np.float32(1 + 2**-11 + 2**-23)


def test_fma_rn_of_exact_sums_on_midpoints_rounds_ties_to_even():
    """A running sum's fma(1, p, l) lands on f32 midpoints (the exact sum of two f32 values needs 25 bits): where
    every lane's float64 sum is exact, numerics.fma casts it (ties to even, subnormal results too), and each lane
    equals the exact rational rounded once; one inexact lane among them sends the array the round-to-odd way."""
    from tessera.interpreters.ptx import numerics

    rng = np.random.default_rng(11)
    b = (rng.integers(1, 2**24, 400) * 2.0 ** rng.integers(-20, 20, 400)).astype(np.float32)
    c = (b * np.float32(2.0**-24) * rng.choice([1, 3, -1, -3], 400)).astype(np.float32)  # b + c: a midpoint
    b = np.concatenate([b, np.float32([2.0**-126, -2.0**-126, 3 * 2.0**-149])])
    c = np.concatenate([c, np.float32([-2.0**-127, 2.0**-149, 2.0**-149])])  # exact subnormal sums
    ones = np.ones_like(b)
    for lanes in (slice(None), np.r_[0:400:7, 401]):
        x, y, z = ones[lanes], b[lanes], c[lanes]
        got = numerics.fma(x, y, z, np.float32, "rn")
        assert all(g == round_fraction(exact(p) + exact(q), "rn") for g, p, q in zip(got, y, z))
    near = np.float32(1 + 2**-12)
    x, y, z = np.append(ones, near), np.append(b, near), np.append(c, np.float32(2.0**-60))
    assert numerics.fma(x, y, z, np.float32, "rn")[-1] == np.float32(1 + 2**-11 + 2**-23)  # inexact: to odd


def test_min_max_nan_and_signed_zero():
    a = np.float32([np.nan, 1.0, np.nan, -0.0, 0.0])
    b = np.float32([2.0, np.nan, np.nan, 0.0, -0.0])
    mx = elementwise("max.f32 %f4, %f1, %f2;", a, b, result="%f4").view(np.float32)
    np.testing.assert_array_equal(mx[:2], [2.0, 1.0])
    assert np.isnan(mx[2]) and not np.signbit(mx[3]) and not np.signbit(mx[4])
    mn = elementwise("min.f32 %f4, %f1, %f2;", a, b, result="%f4").view(np.float32)
    assert np.signbit(mn[3]) and np.signbit(mn[4])
    propagating = elementwise("max.NaN.f32 %f4, %f1, %f2;", a, b, result="%f4").view(np.float32)
    assert np.isnan(propagating[:3]).all()


def test_ftz_sat_and_approximations():
    sub = np.float32([1e-40, -1e-40, 0.5, 2.0])
    flushed = elementwise("mul.ftz.f32 %f4, %f1, %f2;", sub, np.ones(4, np.float32), result="%f4").view(np.float32)
    assert flushed[0] == 0 and np.signbit(flushed[1]) and flushed[2] == 0.5
    sat = elementwise("mul.sat.f32 %f4, %f1, %f2;", np.float32([-1, 0.25, 3, np.nan]), np.float32([1, 2, 1, 1]),
                      result="%f4").view(np.float32)
    np.testing.assert_array_equal(sat, [0.0, 0.5, 1.0, 0.0])
    x = np.float32([-np.inf, 0.0, 1.5, 10.0, -3.0])
    ex2 = elementwise("ex2.approx.ftz.f32 %f4, %f1;", x, x, result="%f4").view(np.float32)
    np.testing.assert_allclose(ex2, np.exp2(x.astype(np.float64)), rtol=2**-22)
    rcp = elementwise("rcp.approx.ftz.f32 %f4, %f1;", x, x, result="%f4").view(np.float32)
    assert rcp[0] == 0 and np.isinf(rcp[1]) and rcp[2] == np.float32(1 / 1.5)


TINY = np.float32(2.0**-126)  # the smallest normal f32
# (instruction, a, b, c): normal inputs whose exact result is subnormal (|x| < 2^-126), of both signs
SUBNORMAL_RESULTS = [
    ("mul{}.f32 %f4, %f1, %f2;", [1e-20, -1e-20, 2.0**-70], [1e-20, 1e-20, 2.0**-60], [0, 0, 0]),
    ("add{}.f32 %f4, %f1, %f2;", [1.5 * 2.0**-126, -1.5 * 2.0**-126], [-2.0**-126, 2.0**-126], [0, 0]),
    ("sub{}.f32 %f4, %f1, %f2;", [1.25 * 2.0**-126, 2.0**-126], [2.0**-126, 1.75 * 2.0**-126], [0, 0]),
    ("fma.rn{}.f32 %f4, %f1, %f2, %f3;", [2.0**-63, -2.0**-63], [2.0**-63, 2.0**-63],
     [-1.5 * 2.0**-126, 1.25 * 2.0**-126]),
    ("div.rn{}.f32 %f4, %f1, %f2;", [1e-30, -1e-30], [1e10, 1e10], [0, 0]),
    ("ex2.approx{}.f32 %f4, %f1;", [-130.0, -149.0, -127.5], [0, 0, 0], [0, 0, 0]),
    ("rcp.approx{}.f32 %f4, %f1;", [2.0**127, -2.0**127], [0, 0], [0, 0]),
]


@pytest.mark.parametrize("op, a, b, c", SUBNORMAL_RESULTS, ids=[o.split(".")[0] for o, *_ in SUBNORMAL_RESULTS])
def test_ftz_flushes_subnormal_results_and_the_plain_form_keeps_them(op, a, b, c):
    """[PTX ISA, floating-point instructions] `.ftz`: subnormal inputs *and results* flush to sign-preserving
    zero; without it, sm_20+ f32 arithmetic supports subnormals. The inputs here are normal (at least 2^-126 in
    magnitude), so only the flush of the result can make the .ftz form zero."""
    a, b, c = (np.float32(x) for x in (a, b, c))
    assert all(((np.abs(x) >= TINY) | (x == 0)).all() for x in (a, b, c)) and (a != 0).all()
    plain = elementwise(op.format(""), a, b, c, result="%f4").view(np.float32)
    assert ((np.abs(plain) < TINY) & (plain != 0)).all(), plain  # subnormal, kept
    flushed = elementwise(op.format(".ftz"), a, b, c, result="%f4").view(np.float32)
    assert (flushed == 0).all(), flushed
    np.testing.assert_array_equal(np.signbit(flushed), np.signbit(plain))


SETP = {"lt": lambda a, b: a < b, "ne": lambda a, b: a != b and not (np.isnan(a) or np.isnan(b)),
        "ltu": lambda a, b: a < b or np.isnan(a) or np.isnan(b), "equ": lambda a, b: a == b or np.isnan(a) or np.isnan(b),
        "num": lambda a, b: not (np.isnan(a) or np.isnan(b)), "nan": lambda a, b: np.isnan(a) or np.isnan(b),
        "ge": lambda a, b: a >= b}


@pytest.mark.parametrize("cmp", SETP)
def test_setp_ordered_and_unordered(cmp):
    a = np.float32([1.0, 2.0, np.nan, 1.0, -0.0])
    b = np.float32([2.0, 2.0, 1.0, np.nan, 0.0])
    op = f"setp.{cmp}.f32 %p1|%p2, %f1, %f2; selp.u32 %r4, 1, 0, %p1; selp.u32 %r6, 2, 0, %p2; or.b32 %r4, %r4, %r6;"
    got = elementwise(op, a, b)
    expected = [(1 if SETP[cmp](x, y) else 2) for x, y in zip(a, b)]
    np.testing.assert_array_equal(got, expected)


def test_setp_combines_with_a_predicate_and_unsigned_compares():
    a = np.array([1, 0xFFFFFFFF, 5, 5], np.uint32)
    b = np.array([2, 1, 5, 4], np.uint32)
    c = np.array([1, 1, 0, 1], np.uint32)
    op = ("setp.ne.u32 %p3, %r3, 0; setp.lo.and.u32 %p1|%p2, %r1, %r2, %p3;"
          " selp.u32 %r4, 1, 0, %p1; selp.u32 %r6, 2, 0, %p2; or.b32 %r4, %r4, %r6;")
    np.testing.assert_array_equal(elementwise(op, a, b, c), [1, 2, 0, 2])


def test_cvt_integer_rounding_saturation_and_bf16x2_order():
    x = np.float32([2.5, -2.5, 3.5, 1e10, -1e10, np.nan, -0.7, 0.5])
    rni = elementwise("cvt.rni.s32.f32 %r4, %f1;", x, x).view(np.int32)
    np.testing.assert_array_equal(rni, [2, -2, 4, 2**31 - 1, -2**31, 0, -1, 0])
    rzi_u = elementwise("cvt.rzi.u32.f32 %r4, %f1;", x, x)
    np.testing.assert_array_equal(rzi_u, [2, 0, 3, 2**32 - 1, 0, 0, 0, 0])
    a, b = np.float32([1.0, 3.14159, -2.0, 1e-3]), np.float32([2.0, 2.71828, 65504.0, -5.0])
    packed = elementwise("cvt.rn.bf16x2.f32 %r4, %f1, %f2;", a, b)
    np.testing.assert_array_equal(packed, facts.cvt_rn_x2(a, b, "bf16"))
    assert (packed >> 16)[0] == np.float32(1.0).astype(ml_dtypes.bfloat16).view(np.uint16)
    rz = elementwise("cvt.rz.f16.f32 %h1, %f1; cvt.u32.u16 %r4, %h1;", np.float32([1 + 2**-11 + 2**-13, -70000.0]),
                     np.zeros(2, np.float32))
    np.testing.assert_array_equal(rz, [0x3C00, 0xFBFF])  # 1.0 (toward zero) and -65504 (no overflow to -inf)
    back = elementwise("cvt.rn.f32.s32 %f4, %r1;", np.array([16777217, -3], np.int32), np.zeros(2, np.int32),
                       result="%f4").view(np.float32)
    np.testing.assert_array_equal(back, [16777216.0, -3.0])


@pytest.mark.parametrize("rounding", ["", ".rn", ".rz"])
def test_cvt_between_f16_and_bf16_rounds_to_nearest_even_by_default(rounding):
    """[PTX ISA, cvt] a rounding modifier is mandatory only where the destination is smaller than the source:
    cvt.bf16.f16 and cvt.f16.bf16 may omit it (Triton emits cvt.bf16.f16) and then round to nearest even."""
    halves = np.float16([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-9 + 2**-10), 2**-24, 65504, np.inf, -0.0, 3.0])
    to_bf16 = elementwise(f"mov.b32 {{%h1, %h3}}, %r1; cvt{rounding}.bf16.f16 %h2, %h1; cvt.u32.u16 %r4, %h2;",
                          halves.view(np.uint16).astype(np.uint32), np.zeros(8, np.uint32))
    toward_zero = (halves.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    want = toward_zero if rounding == ".rz" else halves.astype(np.float32)
    np.testing.assert_array_equal(to_bf16.astype(np.uint16), want.astype(ml_dtypes.bfloat16).view(np.uint16))
    brains = np.array([1 + 2**-7, 70000.0, 2.0**-26, -2.0**-20 * 3], np.float32).astype(ml_dtypes.bfloat16)
    to_f16 = elementwise(f"mov.b32 {{%h1, %h3}}, %r1; cvt{rounding}.f16.bf16 %h2, %h1; cvt.u32.u16 %r4, %h2;",
                         brains.view(np.uint16).astype(np.uint32), np.zeros(4, np.uint32))
    if rounding != ".rz":  # overflow to infinity, a subnormal that rounds to even
        with np.errstate(over="ignore"):  # 70000 overflows f16 on purpose: inf is the expected value
            expected = brains.astype(np.float16)
        np.testing.assert_array_equal(to_f16.astype(np.uint16), expected.view(np.uint16))
    assert to_f16[1] == (0x7BFF if rounding == ".rz" else 0x7C00)


def test_mov_packs_and_unpacks_low_first():
    body = """
    mov.u32 %r1, 0x11112222;
    mov.u32 %r2, 0x33334444;
    mov.b64 %rd1, {%r1, %r2};
    mov.b64 {%r3, %r4}, %rd1;
    mov.b32 {%h1, %h2}, %r1;
    mov.b32 %r5, {%h2, %h1};
    ld.param.u64 %rd0, [out];
    st.global.u64 [%rd0], %rd1;
    st.global.v2.u32 [%rd0+8], {%r3, %r5};
    """
    out = launch(kernel(body), "k", 1, 1, [np.zeros(2, np.uint64)])[0]
    assert int(out[0]) == 0x3333444411112222
    assert int(out[1]) == 0x22221111 << 32 | 0x11112222


# endregion
# region warps, divergence, barriers
def lanes_out(body: str, block=32, extra: str = "", shared_bytes: int = 0, grid=1):
    """Run `body` (which leaves a 32-bit result in %r9) and store %r9 per thread."""
    text = kernel(f"""
    mov.u32 %r0, %tid.x;
    {body}
    ld.param.u64 %rd0, [out];
    mov.u32 %r15, %ctaid.x;
    mov.u32 %r14, %ntid.x;
    mad.lo.s32 %r15, %r15, %r14, %r0;
    mul.wide.u32 %rd1, %r15, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r9;
    """, extra=extra)
    return launch(text, "k", grid, block, [np.zeros(block * grid, np.uint32)], shared_bytes=shared_bytes)[0]


@pytest.mark.parametrize("mode,b,c,expected", [
    ("bfly", 1, 0x1F, lambda l: l ^ 1),
    ("down", 1, 0x1F, lambda l: l + 1 if l < 31 else l),
    ("up", 2, 0, lambda l: l - 2 if l >= 2 else l),
    ("idx", 3, 0x181F, lambda l: (l & ~7) | 3),  # 8-lane segments
    ("down", 2, 0x181F, lambda l: l + 2 if (l & 7) + 2 <= 7 else l),
])
def test_shfl_modes(mode, b, c, expected):
    out = lanes_out(f"mul.lo.s32 %r1, %r0, 10; shfl.sync.{mode}.b32 %r9|%p1, %r1, {b}, {c:#x}, 0xffffffff;")
    np.testing.assert_array_equal(out, [10 * expected(lane) for lane in range(32)])


def test_shfl_from_a_lane_past_a_partial_warp_is_an_error():
    """A block of 1 thread: lane 8 of its warp does not exist (it was an IndexError)."""
    with pytest.raises(PtxExecutionError, match=r"shfl.sync.bfly.b32: reads lane 8, which is not in the member mask "
                                                 r"or not executing the shfl \(thread \(0, 0, 0\)"):
        lanes_out("shfl.sync.bfly.b32 %r9, %r0, 8, 0x1f, 0xffffffff;", block=1)


@pytest.mark.parametrize("lonely", [False, True])
def test_shfl_sources_kept_for_the_same_lanes_are_checked_for_others(lonely):
    """A shuffle with immediate offsets and mask keeps where each lane reads for the lanes it last ran for (a
    loop's second trip reads through it); lanes that differ are checked again: with `lonely`, the lanes below 16
    take a third trip after the others exited, and reading those is reported."""
    body = f"""
    mov.u32 %r9, %r0;
    mov.u32 %r1, 0;
    setp.lt.u32 %p2, %r0, 16;
    selp.u32 %r5, {3 if lonely else 2}, 2, %p2;
LOOP:
    shfl.sync.bfly.b32 %r2, %r9, 16, 0x1f, 0xffffffff;
    add.s32 %r9, %r9, %r2;
    add.s32 %r1, %r1, 1;
    setp.lt.u32 %p1, %r1, %r5;
    @%p1 bra LOOP;
    """
    if lonely:
        with pytest.raises(PtxExecutionError, match=r"shfl.sync.bfly.b32: reads lane 16, which is not in the member "
                                                     r"mask or not executing the shfl \(thread \(0, 0, 0\)"):
            lanes_out(body)
        return
    np.testing.assert_array_equal(lanes_out(body), [2 * (lane + (lane ^ 16)) for lane in range(32)])


def test_if_else_inside_a_warp_reconverges_before_a_shuffle():
    body = """
    and.b32 %r1, %r0, 1;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra EVEN;
    mul.lo.s32 %r2, %r0, 100;
    bra JOIN;
EVEN:
    add.s32 %r2, %r0, 1000;
JOIN:
    shfl.sync.bfly.b32 %r9, %r2, 1, 0x1f, 0xffffffff;
    """
    out = lanes_out(body, block=64)
    own = [lane + 1000 if lane % 2 == 0 else lane * 100 for lane in range(64)]
    np.testing.assert_array_equal(out, [own[lane ^ 1] for lane in range(64)])


def test_loop_with_per_thread_trip_counts_and_nested_divergence():
    body = """
    mov.u32 %r9, 0;
    mov.u32 %r1, 0;
LOOP:
    setp.ge.u32 %p1, %r1, %r0;
    @%p1 bra DONE;
    and.b32 %r2, %r1, 1;
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra EVEN;
    add.s32 %r9, %r9, 3;
    bra NEXT;
EVEN:
    add.s32 %r9, %r9, %r1;
NEXT:
    add.s32 %r1, %r1, 1;
    bra LOOP;
DONE:
    shfl.sync.idx.b32 %r3, %r9, 31, 0x1f, 0xffffffff;
    add.s32 %r9, %r9, %r3;
    """
    out = lanes_out(body)
    own = [sum(i if i % 2 == 0 else 3 for i in range(t)) for t in range(32)]
    np.testing.assert_array_equal(out, [o + own[31] for o in own])


def test_elect_vote_and_activemask_in_divergent_code():
    body = """
    setp.ge.u32 %p1, %r0, 8;
    mov.u32 %r9, 0;
    @%p1 bra SKIP;
    elect.sync %r1|%p2, 0xff;
    selp.u32 %r2, 100, 0, %p2;
    activemask.b32 %r3;
    add.s32 %r9, %r2, %r3;
SKIP:
    setp.lt.u32 %p3, %r0, 3;
    vote.sync.ballot.b32 %r4, %p3, 0xffffffff;
    add.s32 %r9, %r9, %r4;
    """
    out = lanes_out(body)
    expected = [(100 if t == 0 else 0) + 0xFF + 0b111 if t < 8 else 0b111 for t in range(32)]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("body", [
    "shfl.sync.idx.b32 %r9, %r0, 0, 0x1f, 0xffff;",
    "vote.sync.ballot.b32 %r9, 1, 0xffff;",
    "match.any.sync.b32 %r9, %r0, 0xffff;",
    "redux.sync.add.u32 %r9, %r0, 0xffff;",
    "elect.sync %r9|%p1, 0xffff;",
    "bar.warp.sync 0xffff; mov.u32 %r9, 0;",
], ids=["shfl", "vote", "match", "redux", "elect", "bar.warp.sync"])
def test_a_warp_collective_executed_outside_its_member_mask_is_refused(body):
    """The whole warp executes a collective whose mask names lanes 0-15 only: undefined by the ISA for lanes 16-31
    ("the behavior of shfl.sync is undefined if the executing thread is not in the membermask"). It ran as if
    the mask named them (redux.sync gave every lane the sum over 32 lanes, 496 instead of 120 for lanes 0-15)."""
    with pytest.raises(PtxExecutionError, match=r"executed by lane 16, which its member mask 0x0000ffff does not "
                                                 r"name \(the PTX ISA leaves this undefined; the executor refuses\) "
                                                 r"\(thread \(16, 0, 0\)"):
        lanes_out(body)


def test_a_register_member_mask_naming_each_half_of_the_warp_runs():
    """Each half names its own half (a register mask): every executing lane is in its mask, and redux.sync sums
    over each half."""
    body = """
    setp.lt.u32 %p1, %r0, 16;
    selp.u32 %r1, 0xffff, 0xffff0000, %p1;
    redux.sync.add.u32 %r9, %r0, %r1;
    """
    np.testing.assert_array_equal(lanes_out(body), [120] * 16 + [376] * 16)


@pytest.mark.parametrize("barrier, reported", [("bar.sync 0;", True), ("barrier.sync.aligned 0;", True),
                                              ("barrier.sync 0;", False), ("barrier.sync 1, 64;", False)])
def test_an_aligned_barrier_in_both_branches_of_a_divergent_warp_is_a_hazard(barrier, reported):
    """Each half of every warp reaches the barrier at its own instruction (__syncthreads() in an if and its else):
    undefined for an aligned barrier (bar is barrier.aligned), which ran as if the halves met; barrier.sync without
    .aligned may be reached so, and orders the stores of every thread before the loads."""
    body = f"""
    mov.u32 %r1, buf;
    shl.b32 %r2, %r0, 2;
    add.u32 %r3, %r1, %r2;
    st.shared.u32 [%r3], %r0;
    and.b32 %r4, %r0, 31;
    setp.lt.u32 %p1, %r4, 16;
    @%p1 bra LOW;
    {barrier}
    bra JOIN;
LOW:
    {barrier}
JOIN:
    xor.b32 %r5, %r2, 128;
    add.u32 %r6, %r1, %r5;
    ld.shared.u32 %r9, [%r6];
    """
    if not reported:
        np.testing.assert_array_equal(lanes_out(body, block=64, extra=".shared .align 4 .b32 buf[64];"),
                                      np.arange(64) ^ 32)
        return
    with pytest.raises(PtxHazardError, match=r"the threads of this warp arrive on barrier 0 at two instructions "
                                             r"\(lines \d+ and \d+\) in one phase: an aligned barrier"):
        lanes_out(body, block=64, extra=".shared .align 4 .b32 buf[64];")


def test_named_barriers_order_shared_memory_between_warps():
    body = """
    mov.u32 %r1, buf;
    shl.b32 %r2, %r0, 2;
    add.u32 %r3, %r1, %r2;
    setp.lt.u32 %p1, %r0, 32;
    @!%p1 bra CONSUMER;
    mul.lo.s32 %r4, %r0, 7;
    st.shared.u32 [%r3], %r4;
    bar.arrive 1, 64;
    mov.u32 %r9, 0;
    bra END;
CONSUMER:
    bar.sync 1, 64;
    sub.u32 %r3, %r3, 128;
    ld.shared.u32 %r9, [%r3];
END:
    bar.sync 0;
    """
    out = lanes_out(body, block=64, extra=".shared .align 4 .b32 buf[64];")
    np.testing.assert_array_equal(out, [0] * 32 + [7 * t for t in range(32)])


def test_mbarrier_phases_parity_and_transactions():
    body = """
    mov.u32 %r1, bar;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], 2;
    bar.sync 0;
    mov.u32 %r9, 0;
    // phase 0: one arrive per warp (lane 0), plus 64 transaction bytes expected by warp 0 and completed by warp 1
    and.b32 %r2, %r0, 31;
    setp.eq.u32 %p2, %r2, 0;
    setp.eq.u32 %p3, %r0, 32;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r1], 64;
    @%p3 mbarrier.complete_tx.shared::cta.b64 [%r1], 64;
    @%p3 mbarrier.arrive.shared::cta.b64 %rd2, [%r1];
WAIT0:
    mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r1], 0;
    @!%p4 bra WAIT0;
    // parity 0 completed: the next phase (1) is pending, parity 1 of the previous phase passes? no: test it
    mbarrier.test_wait.parity.shared::cta.b64 %p5, [%r1], 1;
    selp.u32 %r9, 1, 0, %p5;
    bar.sync 0;
    @%p2 mbarrier.arrive.shared::cta.b64 %rd3, [%r1];
WAIT1:
    mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r1], 1;
    @!%p4 bra WAIT1;
    @%p1 cvt.u32.u64 %r9, %rd1;
    @%p3 cvt.u32.u64 %r9, %rd3;
    add.s32 %r9, %r9, 10;
    """
    out = lanes_out(body, block=64, extra=".shared .align 8 .b64 bar;")
    # thread 0: arrive state = phase 0 -> 10; thread 32: state of its second arrive = phase 1 -> 11;
    # others: test_wait of parity 1 after phase 0 completed fails (phase 1 still running) -> 0 + 10
    assert out[0] == 10 and out[32] == 11
    assert (out[1:32] == 10).all() and (out[33:] == 10).all()


def test_cp_async_groups_land_at_their_wait():
    body = """
    ld.param.u64 %rd5, [src];
    mov.u32 %r1, buf;
    mul.wide.u32 %rd6, %r0, 16;
    add.s64 %rd7, %rd5, %rd6;
    shl.b32 %r2, %r0, 4;
    add.u32 %r3, %r1, %r2;
    cp.async.cg.shared.global [%r3], [%rd7], 16;
    cp.async.commit_group;
    cp.async.ca.shared.global [%r3+512], [%rd7+512], 8, 4;
    cp.async.commit_group;
    cp.async.wait_group 1;
    ld.shared.u32 %r4, [%r3];
    mov.u32 %r5, 0;
    cp.async.wait_all;
    ld.shared.u32 %r6, [%r3+516];
    ld.shared.u32 %r7, [%r3+512];
    add.s32 %r9, %r4, %r5;
    mad.lo.s32 %r9, %r6, 1000, %r9;
    add.s32 %r9, %r9, %r7;
    """
    text = kernel(f"""
    mov.u32 %r0, %tid.x;
    {body}
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r9;
    """, ".param .u64 out, .param .u64 src", extra=".shared .align 16 .b8 buf[1024];")
    src = np.arange(256, dtype=np.uint32) + 1
    out = launch(text, "k", 1, 32, [np.zeros(32, np.uint32), src])[0]
    t = np.arange(32)
    # wait_group 1: the first copy landed; after wait_all the 4-of-8 byte copy gives src[128 + 4t] and a
    # zero-filled second word
    np.testing.assert_array_equal(out, src[4 * t] + 0 + 0 * 1000 + src[128 + 4 * t])
    # reading the second copy's bytes after wait_group 1 (its group may still be in flight) is reported
    early = checked(text).replace("mov.u32 %r5, 0;", "ld.shared.u32 %r5, [%r3+512];")
    with pytest.raises(PtxHazardError, match=r":\d+: error: ld.shared.u32: reads shared address 0x200 before it was "
                                             r"signalled: the cp.async at line \d+ into it has not landed .*\(thread "
                                             r"\(0, 0, 0\) of CTA \(0, 0, 0\)\)"):
        launch(early, "k", 1, 32, [np.zeros(32, np.uint32), src])


def test_ldmatrix_and_stmatrix_transpose():
    body = """
    mov.u32 %r1, tile;
    and.b32 %r2, %r0, 7;
    shl.b32 %r2, %r2, 4;
    add.u32 %r2, %r1, %r2;
    shl.b32 %r3, %r0, 2;
    add.u32 %r3, %r1, %r3;
    mul.lo.s32 %r4, %r0, 0x00020002;
    add.s32 %r4, %r4, 0x00010000;
    st.shared.u32 [%r3], %r4;
    bar.warp.sync 0xffffffff;
    ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r5}, [%r2];
    ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r6}, [%r2];
    stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%r2], {%r5};
    bar.warp.sync 0xffffffff;
    ld.shared.u32 %r7, [%r3];
    xor.b32 %r9, %r6, %r7;
    add.s32 %r9, %r9, %r5;
    """
    out = lanes_out(body, extra=".shared .align 16 .b8 tile[128];")
    matrix = np.arange(64).reshape(8, 8)  # element (r, c) = 8r + c
    lane = np.arange(32)
    plain = matrix[lane // 4, 2 * (lane % 4)] | (matrix[lane // 4, 2 * (lane % 4) + 1] << 16)
    # ldmatrix.trans and the transposed store agree (xor = 0), so the result is the plain fragment
    np.testing.assert_array_equal(out, plain)


# endregion
# region wgmma multiplicand types
WGMMA_STORAGE = {"tf32": np.float32, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
                 "s8": np.int8, "u8": np.uint8}
WGMMA_LBO, WGMMA_SBO = 128, 256  # no-swizzle K-major: core matrices (8 rows x 16 bytes) step K by LBO, rows by SBO


def wgmma_shared_image(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Shared memory bytes holding A (64 x 32 bytes) at 0 and B (8 x 32 bytes) at 2048, each in the canonical
    no-swizzle K-major layout: byte kb of row r at (r // 8) * SBO + (kb // 16) * LBO + (r % 8) * 16 + kb % 16."""
    image = np.zeros(2048 + 256, np.uint8)
    for base, matrix in ((0, a), (2048, b)):
        rows = np.ascontiguousarray(matrix).view(np.uint8).reshape(matrix.shape[0], 32)
        r, kb = np.meshgrid(np.arange(rows.shape[0]), np.arange(32), indexing="ij")
        image[base + (r // 8) * WGMMA_SBO + (kb // 16) * WGMMA_LBO + (r % 8) * 16 + kb % 16] = rows
    return image


def wgmma_a_fragments(a: np.ndarray) -> np.ndarray:
    """[128, 4] A registers: a[i] of thread t = 32w + 4g + c holds the 4 bytes of row 16w + g + 8(i & 1) from
    K-byte 4c + 16(i >> 1) (the ISA's register fragment of A, the same bytes for every multiplicand type)."""
    rows = np.ascontiguousarray(a).view(np.uint8).reshape(64, 32)
    t, i = np.arange(128)[:, None], np.arange(4)[None, :]
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * (i & 1)
    byte = 4 * (t % 4) + 16 * (i >> 1)
    return rows[row[..., None], byte[..., None] + np.arange(4)].copy().view(np.uint32)[..., 0]


def run_wgmma(instruction: str, a: np.ndarray, b: np.ndarray, init: int = 0, registers_a: bool = False):
    """D (64 x 8, the accumulator's bits as uint32) of one m64n8 wgmma on A (64 x K) and B (8 x K, K-major),
    the four accumulator registers starting at `init`."""
    desc_a = facts.encode_descriptor(0, WGMMA_LBO, WGMMA_SBO, 0)
    desc_b = facts.encode_descriptor(2048, WGMMA_LBO, WGMMA_SBO, 0)
    a_operand = "{%r10, %r11, %r12, %r13}" if registers_a else "%rd4"
    body = f"""
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd1, [src];
    mov.u32 %r1, smem;
    shl.b32 %r2, %r0, 4;
    cvt.u64.u32 %rd2, %r2;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {{%r3, %r4, %r5, %r6}}, [%rd3];
    add.u32 %r7, %r1, %r2;
    st.shared.v4.b32 [%r7], {{%r3, %r4, %r5, %r6}};
    setp.lt.u32 %p1, %r2, 256;
    @%p1 ld.global.v4.b32 {{%r3, %r4, %r5, %r6}}, [%rd3+2048];
    @%p1 st.shared.v4.b32 [%r7+2048], {{%r3, %r4, %r5, %r6}};
    ld.param.u64 %rd1, [afrag];
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {{%r10, %r11, %r12, %r13}}, [%rd3];
    bar.sync 0;
    fence.proxy.async.shared::cta;
    ld.param.u64 %rd4, [adesc];
    ld.param.u64 %rd5, [bdesc];
    ld.param.u32 %r3, [init];
    mov.b32 %r4, %r3;
    mov.b32 %r5, %r3;
    mov.b32 %r6, %r3;
    wgmma.fence.sync.aligned;
    {instruction.format(d="{%r3, %r4, %r5, %r6}", a=a_operand, b="%rd5")};
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    ld.param.u64 %rd1, [out];
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.b32 [%rd3], {{%r3, %r4, %r5, %r6}};"""
    params = ".param .u64 out, .param .u64 src, .param .u64 afrag, .param .u64 adesc, .param .u64 bdesc, " \
             ".param .u32 init"
    text = kernel(body, params, extra=".shared .align 128 .b8 smem[2304];")
    out, *_ = launch(text, "k", 1, 128, [np.zeros((128, 4), np.uint32), wgmma_shared_image(a, b),
                                         wgmma_a_fragments(a), desc_a, desc_b, init])
    t, v = np.arange(128)[:, None], np.arange(4)[None, :]
    d = np.zeros((64, 8), np.uint32)
    d[16 * (t // 32) + (t % 32) // 4 + 8 * ((v >> 1) & 1), 2 * (t % 4) + (v & 1)] = out
    return d


def random_multiplicand(name: str, shape, rng) -> np.ndarray:
    if name in ("s8", "u8"):
        info = np.iinfo(WGMMA_STORAGE[name])
        return rng.integers(info.min, info.max + 1, shape).astype(WGMMA_STORAGE[name])
    return rng.standard_normal(shape).astype(np.float32).astype(WGMMA_STORAGE[name])


@pytest.mark.parametrize("atype,btype,registers_a", [("tf32", "tf32", False), ("tf32", "tf32", True),
                                                     ("e4m3", "e5m2", False), ("e5m2", "e4m3", True)])
def test_wgmma_tf32_and_fp8_multiply_exactly_and_round_once(atype, btype, registers_a):
    """.tf32 reads sign, exponent and the top 10 mantissa bits of each f32 (the low 13 are ignored); FP8
    types mix; A may come from registers. Products are exact and the f32 result is rounded once."""
    rng = np.random.default_rng(1)
    k = 8 if atype == "tf32" else 32
    a, b = random_multiplicand(atype, (64, k), rng), random_multiplicand(btype, (8, k), rng)
    shape = f"m64n8k{k}"
    d = run_wgmma(f"wgmma.mma_async.sync.aligned.{shape}.f32.{atype}.{btype} {{d}}, {{a}}, {{b}}, 1, 1, -1",
                  a, b, init=np.float32(0.5).view(np.uint32), registers_a=registers_a)

    def value(x):
        if x.dtype == np.float32:
            return (x.view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
        return x.astype(np.float64)

    expected = (0.5 - value(a) @ value(b).T).astype(np.float32)
    np.testing.assert_array_equal(d.view(np.float32), expected)


@pytest.mark.parametrize("satfinite", [False, True])
def test_wgmma_integer_wraps_or_saturates(satfinite):
    """.s32 accumulation of .s8 x .u8 is exact; past INT32_MAX it wraps, or clamps with .satfinite."""
    rng = np.random.default_rng(2)
    a, b = random_multiplicand("s8", (64, 32), rng), random_multiplicand("u8", (8, 32), rng)
    init = (1 << 31) - 100000
    sat = ".satfinite" if satfinite else ""
    d = run_wgmma(f"wgmma.mma_async.sync.aligned.m64n8k32{sat}.s32.s8.u8 {{d}}, {{a}}, {{b}}, 1", a, b, init=init)
    exact = init + a.astype(np.int64) @ b.astype(np.int64).T
    assert (exact > (1 << 31) - 1).any() and (exact < (1 << 31) - 1).any()
    expected = np.minimum(exact, (1 << 31) - 1) if satfinite else exact
    np.testing.assert_array_equal(d.view(np.int32), expected.astype(np.uint32).view(np.int32))


@pytest.mark.parametrize("registers_a", [False, True])
def test_wgmma_accumulators_named_in_another_order_by_a_second_wgmma(registers_a):
    """Accumulator registers are kept as one block per vector (one gather per wgmma) only where no other wgmma
    names them differently: a second wgmma naming the same registers in another order ({%r4, %r3, %r6, %r5}:
    the columns of each pair swapped) reads and writes each register in its own role."""
    rng = np.random.default_rng(3)
    a, b = random_multiplicand("s8", (64, 32), rng), random_multiplicand("u8", (8, 32), rng)
    wgmma = "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8 {}, {{a}}, {{b}}, 1"
    d = run_wgmma(";\n".join([wgmma.format("{d}"), "wgmma.commit_group.sync.aligned",
                              "wgmma.wait_group.sync.aligned 0", "wgmma.fence.sync.aligned",
                              wgmma.format("{{%r4, %r3, %r6, %r5}}")]), a, b, init=5, registers_a=registers_a)
    product = a.astype(np.int64) @ b.astype(np.int64).T
    np.testing.assert_array_equal(d.view(np.int32), 5 + product + product[:, np.arange(8) ^ 1])


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("element_bytes", [1, 2, 4])
def test_a_k_major_descriptor_reads_whole_16_byte_chunks(swizzle, element_bytes):
    """A K-major descriptor's K step reads whole 16-byte chunks in order under every swizzle (the bytes a
    swizzle keeps together), so its operand is gathered, and its read records written, a chunk at a time;
    the chunks name exactly the bytes, in the order, of the element addresses."""
    from tessera.interpreters.ptx.wgmma_operands import descriptor_bytes

    width = swizzle or 16  # the bytes of one row of the tile's layout (LBO 16 and SBO 128 without swizzle)
    descriptor = facts.encode_descriptor(1024, 16 if not swizzle else 0, 8 * width if swizzle else 128, swizzle)
    addresses, offsets, *_, chunks = descriptor_bytes(descriptor, "K", element_bytes, 64)
    assert chunks is not None
    np.testing.assert_array_equal((chunks[:, None] * 16 + np.arange(16)).reshape(-1), offsets)
    assert offsets.size == addresses.size * element_bytes == 64 * facts.WGMMA_K_BYTES


def test_bytes_that_are_not_whole_chunks_in_order_have_none():
    from tessera.interpreters.ptx.shared_chunks import chunks_in_order

    np.testing.assert_array_equal(chunks_in_order(np.arange(32, 64)), [2, 3])
    assert chunks_in_order(np.arange(8, 40)) is None  # not 16-byte aligned
    assert chunks_in_order(np.arange(32)[::-1].copy()) is None  # whole chunks, bytes out of order
    assert chunks_in_order(np.arange(24)) is None


@pytest.mark.parametrize("line,message", [
    ("wgmma.mma_async.sync.aligned.m64n8k256.s32.b1.b1.and.popc {d}, {a}, {b}, 1", r"single-bit wgmma \(.b1"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.bf16 {d}, {a}, {b}, 1, 1, 1, 0, 0", "types must match"),
    ("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.s8 {d}, {a}, {b}, 1, 1, 1", "types must match"),
    ("wgmma.mma_async.sync.aligned.m64n8k16.f32.e4m3.e4m3 {d}, {a}, {b}, 1, 1, 1", "has K = 32"),
    ("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {d}, {a}, {b}, 1, 1, 1, 0, 0", "with 8 operands"),
    ("wgmma.mma_async.sync.aligned.m64n8k32.satfinite.f32.e4m3.e4m3 {d}, {a}, {b}, 1, 1, 1", "applies to .s8/.u8"),
])
def test_wgmma_types_outside_the_isa_are_refused(line, message):
    with pytest.raises(PtxExecutionError, match=message):
        run_wgmma(line, np.zeros((64, 32), np.uint8), np.zeros((8, 32), np.uint8))


@pytest.mark.parametrize("prefix,scale,what,thread", [
    ("add.s64 %rd5, %rd5, %rd2", "1", "B descriptor", 1),
    ("add.s64 %rd4, %rd4, %rd2", "1", "A descriptor", 1),
    ("add.s64 %rd4, %rd4, %rd2;\n    add.s64 %rd5, %rd5, %rd2", "1", "B descriptor", 1),  # B is judged first
    ("setp.lt.u32 %p2, %r0, 64", "%p2", "scale-d predicate", 64),
])
def test_wgmma_operands_that_differ_in_a_warpgroup_are_named(prefix, scale, what, thread):
    """A wgmma's descriptors and scale-d predicate must be the same in the whole warpgroup; the first that is
    not (B, then A, then scale-d) is reported, naming a thread whose value differs from its warpgroup's first."""
    line = f"{prefix};\n    wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8 {{d}}, {{a}}, {{b}}, {scale}"
    message = rf"the {what} must be the same in the whole warpgroup \(thread \({thread}, 0, 0\)"
    with pytest.raises(PtxExecutionError, match=message):
        run_wgmma(line, np.zeros((64, 32), np.int8), np.zeros((8, 32), np.uint8))


# endregion
# region atomics
ATOMIC_BODY = """
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mad.lo.s32 %r0, %r0, %r1, %r2;
    mul.wide.u32 %rd0, %r0, 4;
    ld.param.u64 %rd1, [pslot];
    add.s64 %rd1, %rd1, %rd0;
    ld.global.u32 %r1, [%rd1];
    mul.wide.u32 %rd2, %r0, {size};
    ld.param.u64 %rd3, [pb];
    add.s64 %rd3, %rd3, %rd2;
    ld.global.b{bits} {b}, [%rd3];
    ld.param.u64 %rd4, [pc];
    add.s64 %rd4, %rd4, %rd2;
    ld.global.b{bits} {c}, [%rd4];
    mul.wide.u32 %rd5, %r1, {size};
    ld.param.u64 %rd6, [pmemory];
    add.s64 %rd6, %rd6, %rd5;
    {atomic}
    ld.param.u64 %rd7, [pold];
    add.s64 %rd7, %rd7, %rd2;
    st.global.b{bits} [%rd7], {d};
"""


def run_atomics(instruction: str, memory: np.ndarray, slots, b, c, grid: int, block: int):
    """Thread i (global index) runs `instruction` on memory[slots[i]] with b[i] (and c[i] for cas); returns
    (the old value each thread got, the memory after)."""
    bits = memory.dtype.itemsize * 8
    b_reg, c_reg, d_reg = ("%r3", "%r4", "%r5") if bits == 32 else ("%rd8", "%rd9", "%rd10")
    operands = f"[%rd6], {b_reg}" + (f", {c_reg}" if ".cas." in instruction else "")
    atomic = f"{instruction} {operands};" if instruction.startswith("red") else f"{instruction} {d_reg}, {operands};"
    body = ATOMIC_BODY.format(size=bits // 8, bits=bits, b=b_reg, c=c_reg, d=d_reg, atomic=atomic)
    text = kernel(body, ".param .u64 pslot, .param .u64 pb, .param .u64 pc, .param .u64 pmemory, .param .u64 pold")
    old = np.zeros(len(slots), memory.dtype)
    result = launch(text, "k", grid, block, [np.asarray(slots, np.uint32), b, c, memory, old])
    return result[4], result[3]


def serial_atomics(operation: str, type_name: str, memory, slots, b, c):
    """The ISA's atom semantics, d = *a; *a = op(*a, b{, c}), applied one thread at a time in thread order
    on Python integers; (olds, memory after) as unsigned bit patterns."""
    bits = int(type_name[1:])
    mask = (1 << bits) - 1

    def value(x):
        v = int(x) & mask
        return v - (1 << bits) if type_name[0] == "s" and v >> (bits - 1) else v

    cells, olds = [value(x) for x in memory], []
    for slot, x, y in zip(slots, b, c):
        r, s, t = cells[slot], value(x), value(y)
        new = {"add": r + s, "min": min(r, s), "max": max(r, s), "and": r & s, "or": r | s, "xor": r ^ s,
               "inc": 0 if r >= s else r + 1, "dec": s if r == 0 or r > s else r - 1, "exch": s,
               "cas": t if r == s else r}[operation]
        olds.append(r & mask)
        cells[slot] = value(new)
    return olds, [v & mask for v in cells]


ATOMIC_CASES = [  # (instruction, every thread on one location (else 3 locations))
    ("atom.global.add.u32", True), ("atom.global.add.s32", False), ("atom.add.u32", False),
    ("atom.global.add.u64", True), ("atom.global.min.s32", True), ("atom.global.max.u32", False),
    ("atom.global.min.u64", False), ("atom.global.max.s64", True), ("atom.global.and.b32", True),
    ("atom.global.or.b64", False), ("atom.global.xor.b32", True), ("atom.global.inc.u32", True),
    ("atom.global.dec.u32", True), ("atom.global.inc.u32", False), ("atom.global.exch.b32", True),
    ("atom.global.exch.b64", False), ("atom.global.cas.b32", True), ("atom.global.cas.b64", False),
    ("red.global.add.u32", True), ("red.global.add.s32", False), ("red.global.add.u64", True),
    ("red.global.min.s32", False), ("red.global.max.u64", True), ("red.global.and.b64", True),
    ("red.global.or.b32", False), ("red.global.xor.b64", True), ("red.global.inc.u32", True),
    ("red.global.dec.u32", False), ("red.add.u32", True),
]


@pytest.mark.parametrize("instruction, one_location", ATOMIC_CASES)
def test_atomics_apply_one_thread_at_a_time_in_thread_order(instruction, one_location):
    """2 CTAs of 64 threads; conflicting updates are applied in thread order, so every old value is exact."""
    operation, type_name = instruction.split(".")[-2:]
    bits = int(type_name[1:])
    dtype = np.dtype(f"uint{bits}")
    n = 128
    rng = np.random.default_rng(ATOMIC_CASES.index((instruction, one_location)))
    slots = np.zeros(n, np.int64) if one_location else rng.integers(0, 3, n)
    b = rng.integers(0, 2**bits, n, dtype=np.uint64).astype(dtype)
    c = rng.integers(0, 2**bits, n, dtype=np.uint64).astype(dtype)
    memory = rng.integers(0, 2**bits, 4, dtype=np.uint64).astype(dtype)
    if operation in ("inc", "dec"):  # small bounds, so the counters wrap around [0, b] many times
        b, memory = rng.integers(0, 9, n).astype(dtype), np.array([3, 0, 8, 1], dtype)
        memory[0] = 0 if operation == "dec" else 3
    if operation == "cas":  # thread i swaps i for i + 1: with all threads on one location, a chain 0 -> n
        memory[:] = 0
        b, c = np.arange(n, dtype=dtype), np.arange(1, n + 1, dtype=dtype)
        b[::7] = np.arange(0, n, 7, dtype=dtype) + 2  # some compares fail
    if operation == "add" and type_name != "s32":
        memory[:] = (1 << bits) - 3  # the sum wraps around
    old, after = run_atomics(instruction, memory.copy(), slots, b, c, grid=2, block=64)
    want_old, want_memory = serial_atomics(operation, type_name, memory, slots, b, c)
    np.testing.assert_array_equal([int(v) for v in after], want_memory)
    if instruction.startswith("atom"):
        np.testing.assert_array_equal([int(v) for v in old], want_old)


def flush_to_zero(x: np.float32) -> np.float32:
    return np.float32(np.copysign(0, x)) if abs(x) < np.finfo(np.float32).tiny else x


@pytest.mark.parametrize("space", ["global", "shared"])
def test_atom_add_f32_rounds_in_thread_order_and_flushes_only_on_global(space):
    """atom.add.f32 rounds each addition to nearest even in thread order; on global memory it flushes subnormal
    inputs and results to sign-preserving zero, on shared memory it keeps them."""
    if space == "global":
        atomic = "ld.param.u64 %rd3, [ptotal];\n    atom.global.add.f32 %f2, [%rd3], %f1;"
    else:
        atomic = """mov.u32 %r1, acc;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 st.shared.f32 [%r1], 0f00000000;
    bar.sync 0;
    atom.shared.add.f32 %f2, [%r1], %f1;
    bar.sync 0;
    ld.shared.f32 %f3, [%r1];
    ld.param.u64 %rd3, [ptotal];
    @%p1 st.global.f32 [%rd3], %f3;"""
    text = kernel(f"""
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd0, %r0, 4;
    ld.param.u64 %rd1, [pb];
    add.s64 %rd1, %rd1, %rd0;
    ld.global.f32 %f1, [%rd1];
    {atomic}
    ld.param.u64 %rd2, [pold];
    add.s64 %rd2, %rd2, %rd0;
    st.global.f32 [%rd2], %f2;
    """, ".param .u64 pb, .param .u64 pold, .param .u64 ptotal", extra=".shared .align 4 .f32 acc;")
    rng = np.random.default_rng(11)
    b = (rng.standard_normal(64) * 2.0 ** rng.integers(-10, 10, 64)).astype(np.float32)
    b[:8] = [1e-45, 3e-39, -2e-39, 2.0**24, 1.0, 1.0, 3.0, -2.0**24]  # subnormals, then 2^24 + 1 = 2^24
    _, old, total = launch(text, "k", 1, 64, [b, np.zeros(64, np.float32), np.zeros(1, np.float32)])
    flush = flush_to_zero if space == "global" else (lambda x: x)
    acc, want = np.float32(0), []
    for x in b:
        want.append(acc)
        acc = flush(flush(acc) + flush(x))
    np.testing.assert_array_equal(old.view(np.uint32), np.array(want, np.float32).view(np.uint32))
    assert total.view(np.uint32)[0] == np.float32(acc).view(np.uint32)
    assert (old[2] == 0) if space == "global" else (old[2] == np.float32(1e-45) + np.float32(3e-39))


@pytest.mark.parametrize("line, message", [
    ("red.global.cas.b32 [%rd1], %r1, %r2;", "red.cas"),
    ("red.global.exch.b32 [%rd1], %r1;", "red.exch"),
    ("atom.global.and.u32 %r1, [%rd1], %r2;", r"atom.and on .u32 \(supported: .b32, .b64\)"),
    ("atom.global.inc.s32 %r1, [%rd1], %r2;", r"atom.inc on .s32 \(supported: .u32\)"),
    ("atom.global.min.f32 %f1, [%rd1], %f2;", "atom.min on .f32"),
    ("atom.local.add.u32 %r1, [%rd1], %r2;", "atom on the .local space"),
    ("atom.global.v2.u32.add {%r1, %r2}, [%rd1], {%r2, %r3};", "vector atom .v2"),
])
def test_atomic_variants_outside_the_isa_are_refused(line, message):
    with pytest.raises(PtxExecutionError, match="not supported by the PTX executor: " + message):
        launch(kernel(f"    {line}\n    trap;"), "k", 1, 32, [np.zeros(1, np.uint32)])


def test_generic_atomic_on_local_memory_is_an_error():
    body = """
    .local .align 4 .b32 slot;
    mov.u64 %rd1, slot;
    cvta.local.u64 %rd1, %rd1;
    atom.add.u32 %r1, [%rd1], 1;
    """
    with pytest.raises(PtxExecutionError, match=r"atom.add.u32: atomic access to the local space .*thread \(0, 0, 0\)"):
        launch(kernel(body), "k", 1, 32, [np.zeros(1, np.uint32)])


@pytest.mark.parametrize("instruction", ["atom.global.add.noftz.f16 %h2,", "atom.global.add.noftz.bf16 %h2,",
                                         "red.shared.add.noftz.bf16", "red.global.add.noftz.f16"])
def test_scalar_half_atomic_add_rounds_each_update_and_keeps_subnormals(instruction):
    """atom/red.add.noftz.{f16,bf16} (PTX ISA: atom, sm_70 for .f16, sm_90 for .bf16; what Triton emits for
    tl.atomic_add on fp16/bf16): each update rounds to nearest even in thread order and subnormals stay."""
    half = ml_dtypes.bfloat16 if "bf16" in instruction else np.float16
    space = "shared" if ".shared." in instruction else "global"
    address = "[%r3]" if space == "shared" else "[%rd3]"
    setup = ("mov.u32 %r3, acc;\n    setp.eq.u32 %p1, %r0, 0;\n    @%p1 st.shared.b16 [%r3], 0;\n    bar.sync 0;"
             if space == "shared" else "ld.param.u64 %rd3, [ptotal];")
    finish = ("bar.sync 0;\n    ld.shared.b16 %h3, [%r3];\n    ld.param.u64 %rd3, [ptotal];\n"
              "    @%p1 st.global.b16 [%rd3], %h3;" if space == "shared" else "")
    text = kernel(f"""
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd0, %r0, 2;
    ld.param.u64 %rd1, [pb];
    add.s64 %rd1, %rd1, %rd0;
    ld.global.b16 %h1, [%rd1];
    {setup}
    {instruction} {address}, %h1;
    {finish}
    ld.param.u64 %rd2, [pold];
    add.s64 %rd2, %rd2, %rd0;
    st.global.b16 [%rd2], %h2;
    """, ".param .u64 pb, .param .u64 pold, .param .u64 ptotal", extra=".shared .align 2 .b16 acc;")
    rng = np.random.default_rng(12)
    b = (rng.standard_normal(64) * 2.0 ** rng.integers(-6, 6, 64)).astype(half)
    tiny, eps = ml_dtypes.finfo(half).smallest_subnormal, ml_dtypes.finfo(half).eps
    b[:6] = [tiny, tiny, 3 * tiny, 1.0, eps / 2, -1.0]  # subnormal sums, then half an ulp of 1
    _, old, total = launch(text, "k", 1, 64, [b, np.zeros(64, half), np.zeros(1, half)])
    acc, want = half(0), []
    for x in b:
        want.append(acc)
        acc = half(np.float64(acc) + np.float64(x))
    assert total.view(np.uint16)[0] == np.asarray(acc, half).view(np.uint16)
    if instruction.startswith("atom"):
        np.testing.assert_array_equal(old.view(np.uint16), np.asarray(want, half).view(np.uint16))


def mma_fragments(k: int, lane: int):
    """The PTX ISA's printed fragment formulas (warp-level-matrix-fragment-mma-1688 .tf32, -16816-float .f16/.bf16,
    -16832 .s8/.u8): [(row, col) of a_i], [(k, n) of b_i], [(row, col) of c_i] for `lane`."""
    g, t = lane >> 2, lane % 4
    if k == 8:
        a = [(g if i in (0, 2) else g + 8, t if i < 2 else t + 4) for i in range(4)]
        b = [(t if i == 0 else t + 4, g) for i in range(2)]
    elif k == 16:
        a = [(g if (i < 2 or 4 <= i < 6) else g + 8, t * 2 + (i & 1) + (8 if i >= 4 else 0)) for i in range(8)]
        b = [(t * 2 + (i & 1) + (8 if i >= 2 else 0), g) for i in range(4)]
    else:
        a = [(g if (i < 4 or 8 <= i < 12) else g + 8, t * 4 + (i & 3) + (16 if i >= 8 else 0)) for i in range(16)]
        b = [(t * 4 + (i & 3) + (16 if i >= 4 else 0), g) for i in range(8)]
    c = [(g if i < 2 else g + 8, t * 2 + (i & 1)) for i in range(4)]
    return a, b, c


MMA_BODY = """
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd0, %r0, 16;
    ld.param.u64 %rd1, [pa];
    add.s64 %rd1, %rd1, %rd0;
    ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];
    ld.param.u64 %rd2, [pb];
    add.s64 %rd2, %rd2, %rd0;
    ld.global.v2.b32 {%r5, %r6}, [%rd2];
    ld.param.u64 %rd3, [pc];
    add.s64 %rd3, %rd3, %rd0;
    ld.global.v4.b32 {%r7, %r8, %r9, %r10}, [%rd3];
    mma.sync.aligned.SHAPE.row.col.TYPES DREGS, {%r1, %r2, %r3, %r4}, {%r5, %r6}, DREGS;
    ld.param.u64 %rd4, [pd];
    add.s64 %rd4, %rd4, %rd0;
    st.global.v4.b32 [%rd4], {%r7, %r8, %r9, %r10};
"""
MMA_CASES = {  # name: (shape, K, modifiers and types, multiplicand dtype (A, B), accumulator dtype)
    "f32.f16": ("m16n8k16", 16, "f32.f16.f16.f32", (np.float16, np.float16), np.float32),
    "f32.bf16": ("m16n8k16", 16, "f32.bf16.bf16.f32", (ml_dtypes.bfloat16,) * 2, np.float32),
    "f16.f16": ("m16n8k16", 16, "f16.f16.f16.f16", (np.float16, np.float16), np.float16),
    "f32.tf32": ("m16n8k8", 8, "f32.tf32.tf32.f32", (np.float32, np.float32), np.float32),
    "s32.s8.u8": ("m16n8k32", 32, "satfinite.s32.s8.u8.s32", (np.int8, np.uint8), np.int32),
}


@pytest.mark.parametrize("case", MMA_CASES)
def test_mma_sync_computes_a_times_b_plus_c_on_the_isa_fragments(case):
    """mma.sync.aligned.*.row.col (Triton's dot below 64 rows on sm_90a: k8 tf32, k16 f16/bf16, k32 int8): two
    warps, each with its own A, B, C laid out per the ISA's fragments; D overwrites C's registers, as Triton
    emits it. tf32 reads sign, exponent and 10 mantissa bits; .satfinite clamps the s32 sum."""
    shape, k, types, (a_type, b_type), acc = MMA_CASES[case]
    rng = np.random.default_rng(13)
    if acc == np.int32:
        a, b = rng.integers(-128, 128, (2, 16, k)).astype(a_type), rng.integers(0, 256, (2, k, 8)).astype(b_type)
        c = rng.integers(-2**20, 2**20, (2, 16, 8)).astype(np.int32)
        c[0, 0, 0], c[0, 8, 1] = 2**31 - 1, -2**31  # D saturates there
    else:
        a, b = rng.standard_normal((2, 16, k)).astype(a_type), rng.standard_normal((2, k, 8)).astype(b_type)
        c = rng.standard_normal((2, 16, 8)).astype(acc)
    per_word = 4 // np.dtype(a_type).itemsize
    a_words, b_words = np.zeros((64, 4 * per_word), a_type), np.zeros((64, 4 * per_word), b_type)
    c_words = np.zeros((64, 4), np.uint32)
    for thread in range(64):
        w, lane = divmod(thread, 32)
        fa, fb, fc = mma_fragments(k, lane)
        a_words[thread, :len(fa)] = [a[w][rc] for rc in fa]
        b_words[thread, :len(fb)] = [b[w][kn] for kn in fb]
        values = np.array([c[w][rc] for rc in fc], acc).view(np.uint32)
        c_words[thread, :len(values)] = values
    regs = "{%r7, %r8}" if acc == np.float16 else "{%r7, %r8, %r9, %r10}"
    text = kernel(filled(MMA_BODY, SHAPE=shape, TYPES=types, DREGS=regs),
                  ".param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd")
    out = launch(text, "k", 1, 64, [a_words, b_words, c_words, np.zeros((64, 4), np.uint32)])[3]
    if a_type == np.float32:  # .tf32: the low 13 mantissa bits are not read
        a, b = ((x.view(np.uint32) & 0xFFFFE000).view(np.float32) for x in (a, b))
    exact = a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)
    if acc == np.int32:
        exact = np.clip(exact, -2**31, 2**31 - 1)
    for thread in range(64):
        w, lane = divmod(thread, 32)
        got = out[thread].view(acc)[:4]
        want = np.array([exact[w][rc] for rc in mma_fragments(k, lane)[2]]).astype(acc)
        np.testing.assert_array_equal(got, want, err_msg=f"thread {thread}")


@pytest.mark.parametrize("line, message", [
    ("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2}, {%r3, %r4}, {%f1, %f2, %f3, %f4};",
     r"mma .m8n8k4 \(supported: .m16n8k16, .m16n8k32, .m16n8k8\)"),
    ("mma.sync.aligned.m16n8k16.row.col.f16.bf16.bf16.f16 {%r1, %r2}, {%r3, %r4, %r5, %r6}, {%r7, %r8}, {%r1, %r2};",
     r"mma .m16n8k16.f16.bf16.bf16.f16 \(supported: .m16n8k16.f16.f16.f16.f16, "),
    ("mma.sync.aligned.m16n8k16.row.col.satfinite.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r3, %r4, %r5, %r6}, "
     "{%r7, %r8}, {%f1, %f2, %f3, %f4};", r"mma .m16n8k16.satfinite.f32.f16.f16.f32 .*; .satfinite with .s32 only"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2}, {%r3, %r4, %r5, %r6}, {%r7, %r8}, {%f1, %f2};",
     r"mma .m16n8k16.f32.f16: d takes 4 registers"),
])
def test_mma_sync_outside_what_runs_is_refused_by_name(line, message):
    with pytest.raises(PtxExecutionError, match="not supported by the PTX executor: " + message):
        launch(kernel(f"    {line}\n    trap;"), "k", 1, 32, [np.zeros(1, np.uint32)])


@pytest.mark.parametrize("policy", ["createpolicy.fractional.L2::evict_last.b64 %rd5, 1.0;",
                                    "createpolicy.fractional.L2::evict_first.L2::evict_unchanged.b64 %rd5, 0.25;",
                                    "createpolicy.fractional.L2::evict_normal.b64 %rd5;",
                                    "createpolicy.cvt.L2.b64 %rd5, %rd1;"])
def test_createpolicy_makes_a_cache_hint_that_leaves_values_alone(policy):
    """createpolicy (PTX ISA; Triton's eviction_policy=) makes the opaque .b64 operand of .L2::cache_hint loads and
    stores, which only steer caches."""
    body = f"""
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd0, %r0, 4;
    ld.param.u64 %rd1, [out];
    add.s64 %rd1, %rd1, %rd0;
    {policy}
    ld.global.L1::evict_last.L2::cache_hint.b32 %r1, [%rd1], %rd5;
    add.u32 %r1, %r1, 1;
    st.global.L2::cache_hint.b32 [%rd1], %r1, %rd5;
    """
    out = launch(kernel(body), "k", 1, 32, [np.arange(32, dtype=np.uint32)])[0]
    np.testing.assert_array_equal(out, np.arange(1, 33))


@pytest.mark.parametrize("fraction", ["1.5", "0.0"])
def test_createpolicy_fraction_outside_the_isa_range_is_refused(fraction):
    """As ptxas: "value out of range, expected to be in range (0.0, 1.0]"."""
    text = kernel(f"    createpolicy.fractional.L2::evict_last.b64 %rd5, {fraction};\n    trap;")
    with pytest.raises(PtxExecutionError, match=r"createpolicy.fractional needs a fraction in \(0.0, 1.0\]"):
        launch(text, "k", 1, 32, [np.zeros(1, np.uint32)])


SPIN_LOCK = """
    ld.param.u64 %rd1, [plock];
    ld.param.u64 %rd2, [pcount];
$Lspin:
    atom.global.acquire.gpu.cas.b32 %r1, [%rd1], 0, 1;
    setp.ne.b32 %p1, %r1, 0;
    @%p1 bra $Lspin;
    ld.global.u32 %r2, [%rd2];
    add.u32 %r2, %r2, 1;
    st.global.u32 [%rd2], %r2;
    {release}
"""
CAS_MAX = """
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mad.lo.s32 %r0, %r0, %r1, %r2;
    mul.wide.u32 %rd0, %r0, 4;
    ld.param.u64 %rd1, [plock];
    add.s64 %rd1, %rd1, %rd0;
    ld.global.f32 %f1, [%rd1];
    ld.param.u64 %rd2, [pcount];
    ld.relaxed.gpu.global.b32 %r3, [%rd2];
$Lretry:
    mov.b32 %f2, %r3;
    max.f32 %f3, %f2, %f1;
    mov.b32 %r4, %f3;
    atom.global.cas.b32 %r5, [%rd2], %r3, %r4;
    setp.ne.b32 %p1, %r5, %r3;
    mov.b32 %r3, %r5;
    @%p1 bra $Lretry;
"""


@pytest.mark.parametrize("release, schedule, seed", [
    ("atom.global.release.gpu.exch.b32 %r3, [%rd1], 0;", "min-pc", None),
    ("fence.acq_rel.gpu;\n    atom.global.exch.b32 %r3, [%rd1], 0;", "adversarial", 3),
])
def test_cas_spin_lock_runs_every_thread_in_turn(release, schedule, seed):
    """Every thread of 3 CTAs takes a lock with an atom.cas spin loop (no nanosleep, as Triton and nvcc's
    atomicCAS loops spin), bumps a plain counter and releases: a thread whose cas fails waits until nothing
    else can run, so the holder, at a higher pc, gets on; the lock's acquire and release order the plain
    accesses, so no race is reported."""
    text = kernel(SPIN_LOCK.format(release=release), ".param .u64 plock, .param .u64 pcount")
    out = launch(text, "k", 3, 8, [np.zeros(1, np.uint32), np.zeros(1, np.uint32)], schedule=schedule, seed=seed)
    assert out[0][0] == 0 and out[1][0] == 24


def test_cas_retry_loop_reaches_the_maximum():
    """A lock-free float max (the atomicCAS retry loop): failed compares retry with the value they saw."""
    values = np.random.default_rng(5).standard_normal(128).astype(np.float32)
    out = launch(kernel(CAS_MAX, ".param .u64 plock, .param .u64 pcount"), "k", 2, 64,
                 [values, np.full(1, -np.inf, np.float32)])
    assert out[1][0] == values.max()


@pytest.mark.parametrize("seed", ["ld.global.f32 %f4, [%rd2];\n    mov.b32 %r3, %f4;",
                                  "ld.global.u32 %r6, [%rd2];\n    mov.b32 %f4, %r6;\n    mov.b32 %r3, %f4;"],
                         ids=["float-seed", "two-moves"])
def test_cas_retry_loop_seeded_by_a_plain_load_moved_into_the_compare_operand_is_clean(seed):
    """`float old = *p; ... atomicCAS((int*)p, __float_as_int(old), ...)`: the plain load's bits reach the cas's
    compare operand through movs, and count as the loop's seed (relaxed) as a direct one does."""
    text = kernel(CAS_MAX.replace("ld.relaxed.gpu.global.b32 %r3, [%rd2];", seed),
                  ".param .u64 plock, .param .u64 pcount")
    values = np.random.default_rng(6).standard_normal(128).astype(np.float32)
    assert launch(text, "k", 2, 64, [values, np.full(1, -np.inf, np.float32)])[1][0] == values.max()


def test_a_plain_load_moved_into_a_cas_at_another_address_is_still_a_race():
    """The seed must read the cas's own address: a plain load of a word other threads update atomically, whose
    bits a cas on another word compares, is an unordered read of that word."""
    text = kernel(CAS_MAX.replace("ld.relaxed.gpu.global.b32 %r3, [%rd2];",
                                  "atom.global.add.u32 %r7, [%rd2+4], 1;\n    ld.global.u32 %r6, [%rd2+4];\n"
                                  "    mov.b32 %r3, %r6;"),
                  ".param .u64 plock, .param .u64 pcount")
    with pytest.raises(PtxHazardError, match=r"(ld.global.u32: reads|atom.global.add.u32: writes) global address "
                                             r"0x\w+ \(argument 1 \(pcount\) at byte offset 4\).* \(race"):
        launch(text, "k", 2, 64, [np.zeros(128, np.float32), np.zeros(2, np.float32)])


def test_lock_nobody_releases_is_a_deadlock():
    text = kernel(SPIN_LOCK.format(release=""), ".param .u64 plock, .param .u64 pcount")
    with pytest.raises(PtxDeadlockError, match=r"spin on an atom.cas .*a lock nobody releases\) at line \d+ "
                                              r"\(atom.global.acquire.gpu.cas.b32\)"):
        launch(text, "k", 1, 32, [np.zeros(1, np.uint32), np.zeros(1, np.uint32)])


# endregion
# region errors and launches
def test_unknown_instruction_names_itself_and_its_line():
    text = kernel("    mov.u32 %r0, 1;\n    mul24.lo.s32 %r1, %r0, %r0;")
    with pytest.raises(PtxExecutionError, match=r"<ptx>:13: error: mul24.lo.s32: unknown instruction 'mul24'"):
        launch(text, "k", 1, 32, [np.zeros(1, np.uint32)])


def test_unsupported_modifier_is_refused_before_running():
    text = kernel("    atom.global.add.noftz.f32 %f1, [%rd1], %f2;\n    trap;")
    with pytest.raises(PtxExecutionError, match="atom.global.add.noftz.f32: not supported by the PTX executor"):
        launch(text, "k", 1, 32, [np.zeros(1, np.uint32)])


def test_out_of_bounds_store_names_thread_and_address():
    body = """
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r0;
    """
    with pytest.raises(PtxExecutionError, match=r"st.global.u32: 4-byte access at global address 0x\w+ is out of "
                                                 r"bounds \(thread \(16, 0, 0\) of CTA \(0, 0, 0\)\)"):
        launch(kernel(body), "k", 1, 32, [np.zeros(16, np.uint32)])


def test_misaligned_and_shared_faults():
    body = "    mov.u32 %r1, 2;\n    ld.shared.u32 %r2, [%r1];"
    with pytest.raises(PtxExecutionError, match="misaligned 4-byte access at shared address 0x2"):
        launch(kernel(body), "k", 1, 32, [np.zeros(1, np.uint32)], shared_bytes=64)
    body = "    mov.u32 %r1, 64;\n    st.shared.u32 [%r1], %r1;"
    with pytest.raises(PtxExecutionError, match=r"out of bounds \(the shared space has 64 bytes\)"):
        launch(kernel(body, extra=".extern .shared .align 16 .b8 smem[];"), "k", 1, 32, [np.zeros(1, np.uint32)],
               shared_bytes=64)


def test_division_by_zero_is_reported():
    with pytest.raises(PtxExecutionError, match="div.u32: division by zero"):
        elementwise("div.u32 %r4, %r1, %r2", np.ones(4, np.uint32), np.array([1, 0, 1, 1], np.uint32))


def test_deadlock_names_the_waits():
    body = """
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], 1;
    bar.sync 0;
    setp.lt.u32 %p2, %r0, 32;
    @%p2 bra WAIT;
    bar.sync 1, 64;
    ret;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r1], 0;
    @!%p3 bra WAIT;
    """
    with pytest.raises(PtxExecutionError) as error:
        launch(kernel(body, extra=".shared .align 8 .b64 bar;"), "k", 1, 64, [np.zeros(1, np.uint32)])
    message = str(error.value)
    assert "deadlock" in message
    assert "32 thread(s), first thread (0, 0, 0) of CTA (0, 0, 0): wait on the mbarrier at shared address 0x0" in message
    assert "wait at named barrier 1 at line" in message


def test_launch_validation():
    text = kernel("    ret;", directives="\n.reqntid 64, 1, 1")
    with pytest.raises(ValueError, match=r"requires block \(64, 1, 1\) \(.reqntid\), got \(32, 1, 1\)"):
        launch(text, "k", 1, 32, [np.zeros(1)])
    with pytest.raises(ValueError, match="has 1 parameters, got 2"):
        launch(text, "k", 1, 64, [np.zeros(1), 3])
    with pytest.raises(ValueError, match="exceeds the 232448 bytes"):
        launch(text, "k", 1, 64, [np.zeros(1)], shared_bytes=240000)
    scalar = kernel("    ret;", ".param .u32 n")
    with pytest.raises(ValueError, match=r"argument 0 \(n, .u32\): 4294967296 is out of range"):
        launch(scalar, "k", 1, 32, [1 << 32])
    with pytest.raises(ValueError, match=r"argument 0 \(n, .u32\): -2147483649 is out of range"):
        launch(scalar, "k", 1, 32, [-(1 << 31) - 1])
    with pytest.raises(ValueError, match="no entry named 'nope'"):
        launch(text, "nope", 1, 64, [np.zeros(1)])


def test_unsigned_parameters_take_negative_values_as_twos_complement():
    """LLVM (Triton, clang) declares a signed `i32` parameter `.param .u32`: a negative argument is its bytes."""
    body = """
    ld.param.u32 %r1, [n];
    ld.param.u64 %rd1, [out];
    st.global.b32 [%rd1], %r1;"""
    (out, _) = launch(kernel(body, ".param .u64 out, .param .u32 n"), "k", 1, 1, [np.zeros(1, np.int32), -5])
    assert out[0] == -5


def test_tma_needs_a_tensor_map_address():
    body = """
    mov.u32 %r1, buf;
    mov.u32 %r2, bar;
    mov.u64 %rd1, 0x100;
    mov.u32 %r3, 0;
    mbarrier.init.shared::cta.b64 [%r2], 1;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r3, %r3}], [%r2];
    """
    with pytest.raises(PtxExecutionError, match="address 0x100 is not the generic address of a tensor-map parameter"):
        launch(kernel(body, extra=".shared .align 128 .b8 buf[1024];\n.shared .align 8 .b64 bar;"), "k", 1, 1,
               [np.zeros(1)])


def test_public_entry_points():
    assert tessera.ptx.launch is launch
    text = kernel("""
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd0, %rd0, %rd1;
    ld.global.f32 %f1, [%rd0];
    mul.rn.f32 %f1, %f1, 0f40000000;
    st.global.f32 [%rd0], %f1;
    """)
    x = np.arange(8, dtype=np.float32)
    (out,) = tessera.ptx.launch(text, "k", 1, 8, [x])
    np.testing.assert_array_equal(out, 2 * x)
    np.testing.assert_array_equal(x, np.arange(8))  # the argument itself is not modified
    assert TensorMapArg.tiled(np.zeros((4, 32), np.float16), box=(32, 4)).spec.global_dims == (32, 4)


# endregion


def test_address_offsets_are_64_bit_immediates_read_modulo_2_to_the_64():
    """ptxas takes any 64-bit immediate beside an address register and wraps it (2^64 - 8 is -8); a wider
    one is refused with its line, never an OverflowError from NumPy."""
    body = """
    ld.param.u64 %rd0, [out];
    add.s64 %rd1, %rd0, 8;
    mov.u32 %r1, 7;
    st.global.u32 [%rd1+18446744073709551608], %r1;
    """
    out = launch(kernel(body), "k", 1, 1, [np.zeros(4, np.uint32)])[0]
    assert out.tolist() == [7, 0, 0, 0]
    with pytest.raises(Exception, match=r"address offset 18446744073709551616 does not fit 64 bits"):
        launch(kernel(checked(body).replace("18446744073709551608", "18446744073709551616")), "k", 1, 1,
               [np.zeros(4, np.uint32)])


def test_a_warp_that_arrives_and_then_syncs_counts_twice():
    """PTX ISA, bar: a bar instruction "marks warps' arrival at barrier", and the count is in threads, a
    multiple of the warp size: a warp executing `bar.arrive 1, 64` then `bar.sync 1, 64` in one phase
    contributes 64, completing the barrier alone (FA3's epilogue and warp-scheduler barriers rely on it)."""
    body = """
    mov.u32 %r9, 0;
    setp.lt.u32 %p1, %r0, 32;
    @!%p1 bra END;
    bar.arrive 1, 64;
    bar.sync 1, 64;
    mov.u32 %r9, 1;
END:
    """
    out = lanes_out(body, block=96)
    np.testing.assert_array_equal(out, [1] * 32 + [0] * 64)


def test_named_barrier_counts_whole_warps_and_ignores_their_exited_threads():
    """Warp 0 arrives with half its threads (the other half exited), warp 1 syncs: 2 warps = 64 threads."""
    body = """
    mov.u32 %r9, 0;
    setp.ge.u32 %p1, %r0, 16;
    setp.lt.u32 %p2, %r0, 32;
    and.pred %p3, %p1, %p2;
    @%p3 exit;
    @%p2 bar.arrive 2, 64;
    @%p2 bra END;
    bar.sync 2, 64;
    mov.u32 %r9, 2;
END:
    """
    out = lanes_out(body, block=64)
    np.testing.assert_array_equal(out[:16], 0)
    np.testing.assert_array_equal(out[32:], 2)


def test_a_short_last_warp_arrives_at_a_named_barrier_once_its_live_threads_have():
    """A CTA of 48 threads: its warp 1 has 16 threads. `bar.sync 1` (no count: it expects every warp with a live
    thread) completes once both warps arrive, and with the threads from 40 on exited, once the 8 live threads of
    warp 1 have (a warp arrives when all its non-exited threads have executed the bar)."""
    for exited in (48, 40):
        body = f"""
        mov.u32 %r9, 0;
        setp.ge.u32 %p1, %r0, {exited};
        @%p1 exit;
        bar.sync 1;
        mov.u32 %r9, 5;
        """
        out = lanes_out(body, block=48)
        np.testing.assert_array_equal(out[:exited], 5)
        np.testing.assert_array_equal(out[exited:], 0)


def test_warps_at_one_bar_sync_may_name_different_barriers():
    """FA3's warp-scheduler barriers: every warpgroup executes the same `bar.sync id, n` with its own id (here
    warps 0-1 on barrier 1 and warps 2-3 on barrier 2, 64 threads each); the id need only agree in a warp."""
    body = """
    shr.u32 %r1, %r0, 6;
    add.u32 %r1, %r1, 1;
    bar.sync %r1, 64;
    mov.u32 %r9, %r1;
    """
    out = lanes_out(body, block=128)
    np.testing.assert_array_equal(out, [1] * 64 + [2] * 64)
    with pytest.raises(PtxExecutionError, match="the barrier id must be the same in all threads of a warp: 1 vs 2"):
        lanes_out("shr.u32 %r1, %r0, 4; and.b32 %r1, %r1, 1; add.u32 %r1, %r1, 1; bar.sync %r1, 64; mov.u32 %r9, 0;",
                  block=64)


def test_unique_rows_is_numpys_row_unique():
    """state.unique_rows packs integer rows into one int64 each: the same rows, order, first indices, inverse
    and counts as np.unique(axis=0), on small and negative columns, wide ones (NumPy's way) and uint64."""
    from tessera.interpreters.ptx.state import unique_rows

    rng = np.random.default_rng(11)
    cases = [rng.integers(0, 4, (60, 3)), rng.integers(-5, 5, (40, 2)), rng.integers(-(1 << 40), 1 << 40, (30, 3)),
             rng.integers(0, 7, (25, 1)).astype(np.uint64) + np.uint64(1 << 63), np.array([[3, 1], [3, 1], [0, 2]])]
    for rows in cases:
        want = np.unique(rows, axis=0, return_index=True, return_inverse=True, return_counts=True)
        got = unique_rows(rows, return_index=True, return_inverse=True, return_counts=True)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(np.asarray(g).reshape(-1), np.asarray(w).reshape(-1))
        np.testing.assert_array_equal(unique_rows(rows), np.unique(rows, axis=0))


def test_shared_target_one_is_shared_target_for_one_lane():
    """Machine.shared_target_one (an mbarrier operation of one thread) decodes a shared::cluster address as
    shared_target does: own CTA below 2^24, rank field r > 0 the CTA of cluster rank r - 1, negative kept."""
    from tessera.interpreters.ptx.state import CLUSTER_RANK_SHIFT, Machine

    class Lanes:  # the two fields the decoding reads
        lane_cta, cluster_size = np.repeat(np.arange(8), 4), 4

    rng = np.random.default_rng(2)
    for _ in range(300):
        lane, field, offset = int(rng.integers(0, 32)), int(rng.integers(0, 5)), int(rng.integers(-3, 1 << 20))
        address = offset if offset < 0 else field << CLUSTER_RANK_SHIFT | offset
        slots, offsets, _ = Machine.shared_target(Lanes, np.array([lane]), np.array([address], np.int64))
        assert Machine.shared_target_one(Lanes, lane, address) == (int(slots[0]), int(offsets[0]))
