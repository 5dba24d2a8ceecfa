"""Odd but legal PTX a kernel author writes, run by the PTX executor against NumPy (float64 or exact integers):
predicated branches that split a warp, `vote`/`shfl`/`activemask`/`bar.warp.sync` on part of a warp, `prmt` in every
mode, `bfe.s32`/`bfi`, `cvt` in each rounding mode and on NaN, infinities and out-of-range values, 64-bit address
arithmetic with a negative offset, 64-bit `mul.hi`/`shr`, and a `.local` array indexed per thread (one past its end:
refused by name; `cvt.rn.satfinite.tf32` (sm_100's), `mul24` and `discard` as well). A collective executed by a thread its member mask
does not name is refused (tests/test_ptx_exec.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError, launch

TEXT = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out, .param .u64 fin)
{
    .reg .b32 %r<40>;
    .reg .b64 %rd<16>;
    .reg .f32 %f<8>;
    .reg .b16 %rs<8>;
    .reg .pred %p<8>;
    .local .align 4 .b8 stack[64];
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r0, 16;
    add.s64 %rd2, %rd0, %rd1;
    ld.param.u64 %rd9, [fin];
    mul.wide.u32 %rd10, %r0, 4;
    add.s64 %rd11, %rd9, %rd10;
    ld.global.f32 %f0, [%rd11];
BODY
    ret;
}
"""
"""Thread t reads fin[t] into %f0 and may store four words at out[t, 0:4] (%rd2)."""
LANES = np.arange(32)
A, B = 0x44332211, 0x88776655


def words(body: str, fin=None) -> np.ndarray:
    fin = np.zeros(32, np.float32) if fin is None else fin
    return launch(TEXT.replace("BODY", body), "k", 1, 32, [np.zeros(32 * 4, np.uint32), fin])[0].reshape(32, 4)


def test_a_warp_split_by_a_predicated_branch_reconverges_with_each_sides_result():
    out = words("""
    and.b32 %r1, %r0, 1;
    setp.eq.u32 %p0, %r1, 1;
    mov.u32 %r2, 100;
    @%p0 bra ODD;
    add.u32 %r2, %r2, %r0;
    bra JOIN;
ODD:
    mul.lo.u32 %r2, %r0, 3;
JOIN:
    st.global.u32 [%rd2], %r2;""")
    np.testing.assert_array_equal(out[:, 0], np.where(LANES % 2, 3 * LANES, 100 + LANES))


def test_collectives_on_part_of_a_warp():
    """vote and shfl by lanes 0-15 naming only themselves; activemask in a branch of lanes 0-9; bar.warp.sync then
    shfl.idx among lanes 0-7."""
    out = words("""
    setp.lt.u32 %p1, %r0, 16;
    setp.gt.u32 %p2, %r0, 5;
    mov.u32 %r3, 0;
    mov.u32 %r4, 0;
    mov.u32 %r5, 0;
    mov.u32 %r6, 0;
    @%p1 vote.sync.ballot.b32 %r3, %p2, 0x0000ffff;
    @%p1 shfl.sync.bfly.b32 %r4, %r0, 1, 31, 0x0000ffff;
    setp.lt.u32 %p3, %r0, 10;
    @!%p3 bra EIGHT;
    activemask.b32 %r5;
EIGHT:
    setp.lt.u32 %p4, %r0, 8;
    @!%p4 bra STORE;
    bar.warp.sync 0xff;
    shfl.sync.idx.b32 %r6, %r0, 7, 31, 0xff;
STORE:
    st.global.v4.u32 [%rd2], {%r3, %r4, %r5, %r6};""")
    ballot = sum(1 << lane for lane in range(6, 16))
    np.testing.assert_array_equal(out[:, 0], np.where(LANES < 16, ballot, 0))
    np.testing.assert_array_equal(out[:, 1], np.where(LANES < 16, LANES ^ 1, 0))
    np.testing.assert_array_equal(out[:, 2], np.where(LANES < 10, 0x3FF, 0))
    np.testing.assert_array_equal(out[:, 3], np.where(LANES < 8, 7, 0))


def _bytes(a: int, b: int) -> list[int]:
    return [(a >> 8 * i) & 0xFF for i in range(4)] + [(b >> 8 * i) & 0xFF for i in range(4)]


def _prmt(a: int, b: int, c: int, mode: str | None) -> int:
    """prmt.b32{.mode} d, a, b, c from the ISA's tables (selector c; byte 7..0 of {b, a})."""
    x, n = _bytes(a, b), c & 3
    if mode is None:
        picks = []
        for i in range(4):
            s = (c >> 4 * i) & 0xF
            v = x[s & 7]
            picks.append((0xFF if v & 0x80 else 0) if s & 8 else v)
    else:
        table = {"f4e": [(n + i) % 8 for i in range(4)], "b4e": [(n - i) % 8 for i in range(4)],
                 "rc8": [n] * 4, "ecl": [max(n, i) for i in range(4)], "ecr": [min(n, i) for i in range(4)],
                 "rc16": [2 * (n & 1), 2 * (n & 1) + 1] * 2}[mode]
        picks = [x[s] for s in table]
    return sum(v << 8 * i for i, v in enumerate(picks))


@pytest.mark.parametrize("mode", [None, "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
def test_prmt_in_every_mode(mode):
    selector = "0x7531" if mode is None else "%r0"
    out = words(f"""
    mov.u32 %r5, {A:#x};
    mov.u32 %r6, {B:#x};
    prmt.b32{"." + mode if mode else ""} %r7, %r5, %r6, {selector};
    st.global.u32 [%rd2], %r7;""")
    np.testing.assert_array_equal(out[:, 0], [_prmt(A, B, 0x7531 if mode is None else t, mode) for t in range(32)])


def _bfe_s32(a: int, pos: int, length: int) -> int:
    signed = a - (1 << 32) if a & 0x80000000 else a
    field = (signed >> pos) & ((1 << length) - 1)
    if (signed >> min(pos + length - 1, 31)) & 1:
        field -= 1 << length
    return field & 0xFFFFFFFF


def test_bit_field_extract_and_insert():
    out = words(f"""
    mov.u32 %r6, {B:#x};
    bfe.s32 %r9, %r6, %r0, 5;
    bfi.b32 %r10, %r0, {A:#x}, 4, 7;
    st.global.v2.u32 [%rd2], {{%r9, %r10}};""")
    np.testing.assert_array_equal(out[:, 0], [_bfe_s32(B, t, 5) for t in range(32)])
    mask = 0x7F << 4
    np.testing.assert_array_equal(out[:, 1], [(A & ~mask | (t << 4) & mask) & 0xFFFFFFFF for t in range(32)])


def test_cvt_to_integers_in_each_rounding_mode():
    """x = (t - 15.5) / 2: halves and quarters on both sides of zero (rni rounds halves to even)."""
    out = words("""
    cvt.rn.f32.s32 %f1, %r0;
    sub.f32 %f1, %f1, 0f41780000;
    mul.f32 %f1, %f1, 0f3F000000;
    cvt.rni.s32.f32 %r11, %f1;
    cvt.rzi.s32.f32 %r12, %f1;
    cvt.rmi.s32.f32 %r13, %f1;
    cvt.rpi.s32.f32 %r14, %f1;
    st.global.v4.u32 [%rd2], {%r11, %r12, %r13, %r14};""").view(np.int32)
    x = (LANES - 15.5) / 2
    for column, rounded in enumerate([np.rint(x), np.trunc(x), np.floor(x), np.ceil(x)]):
        np.testing.assert_array_equal(out[:, column], rounded)


def test_cvt_of_nan_infinities_and_out_of_range_values():
    """Float to integer saturates and takes NaN to 0; f16 overflows to infinity under .rn; bf16 .satfinite keeps
    NaN and clamps infinities to the largest finite value."""
    fin = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5, -2.5, 0.5] * 4, np.float32)
    out = words("""
    cvt.rni.s32.f32 %r1, %f0;
    cvt.rzi.u32.f32 %r2, %f0;
    cvt.rn.f16.f32 %rs1, %f0;
    cvt.u32.u16 %r3, %rs1;
    cvt.rn.satfinite.bf16.f32 %rs2, %f0;
    cvt.u32.u16 %r4, %rs2;
    st.global.v4.u32 [%rd2], {%r1, %r2, %r3, %r4};""", fin)[:8]
    np.testing.assert_array_equal(out[:, 0].view(np.int32), [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 2, -2, 0])
    np.testing.assert_array_equal(out[:, 1], [0, 2**32 - 1, 0, 3_000_000_000, 0, 2, 0, 0])
    np.testing.assert_array_equal(out[:, 2], [0x7E00, 0x7C00, 0xFC00, 0x7C00, 0xFC00, 0x4100, 0xC100, 0x3800])
    np.testing.assert_array_equal(out[:, 3], [0x7FC0, 0x7F7F, 0xFF7F, 0x4F33, 0xCF33, 0x4020, 0xC020, 0x3F00])


def test_64_bit_address_arithmetic_and_integers():
    """mad.wide.s32 with a negative offset from the end of the thread's row; mul.hi.s64 and shr.s64 of 5 - t."""
    out = words("""
    add.s64 %rd3, %rd2, 16;
    mov.s32 %r15, -1;
    mad.wide.s32 %rd4, %r15, 4, %rd3;
    cvt.s64.s32 %rd5, %r0;
    sub.s64 %rd5, 5, %rd5;
    mul.hi.s64 %rd6, %rd5, 0x7000000000000000;
    shr.s64 %rd7, %rd5, 1;
    mov.b64 {%r1, %r2}, %rd6;
    cvt.u32.u64 %r3, %rd7;
    st.global.v2.u32 [%rd2], {%r1, %r2};
    st.global.u32 [%rd2+8], %r3;
    st.global.u32 [%rd4], %r0;""").astype(np.uint64)
    d = [5 - t for t in range(32)]
    np.testing.assert_array_equal(out[:, 0] | out[:, 1] << np.uint64(32),
                                  np.array([(x * 0x7000000000000000 >> 64) % 2**64 for x in d], np.uint64))
    np.testing.assert_array_equal(out[:, 2], [(x >> 1) % 2**32 for x in d])
    np.testing.assert_array_equal(out[:, 3], LANES)


LOCAL = """
    mov.u64 %rd5, stack;
    mov.u32 %r16, 0;
LOOP:
    mul.wide.u32 %rd6, %r16, 4;
    add.s64 %rd7, %rd5, %rd6;
    mad.lo.u32 %r17, %r16, %r0, 7;
    st.local.u32 [%rd7], %r17;
    add.u32 %r16, %r16, 1;
    setp.lt.u32 %p3, %r16, 16;
    @%p3 bra LOOP;
    and.b32 %r18, %r0, MASK;
    mul.wide.u32 %rd8, %r18, 4;
    add.s64 %rd8, %rd5, %rd8;
    cvta.local.u64 %rd12, %rd8;
    ld.u32 %r19, [%rd12];
    st.global.u32 [%rd2], %r19;"""
"""Each thread fills its 16-word .local array with i t + 7 and reads word t & MASK back through a generic address."""


def test_a_local_array_indexed_per_thread():
    np.testing.assert_array_equal(words(LOCAL.replace("MASK", "15"))[:, 0], LANES % 16 * LANES + 7)


def test_a_local_array_read_one_past_its_end_is_refused_by_name():
    with pytest.raises(PtxExecutionError, match=r"ld.u32: 4-byte access at .* out of bounds .*\(thread \(16, 0, 0\)"):
        words(LOCAL.replace("MASK", "31"))


@pytest.mark.parametrize("body, message", [
    ("cvt.rn.satfinite.tf32.f32 %r1, %f0;", r"cvt.rn.satfinite.tf32.f32: not supported by the PTX executor: cvt to "
                                            r".tf32 other than .*sm_90a's forms"),
    ("mul24.hi.u32 %r1, %r0, %r0;", r"mul24.hi.u32: unknown instruction 'mul24' \(not supported by the PTX executor\)"),
    ("discard.global.L2 [%rd2], 128;", r"discard.global.L2: unknown instruction 'discard'"),
], ids=["cvt-tf32", "mul24", "discard"])
def test_legal_ptx_the_executor_does_not_implement_is_refused_by_name_before_running(body, message):
    with pytest.raises(PtxExecutionError, match=r"<ptx>:\d+: error: " + message):
        words(body)
