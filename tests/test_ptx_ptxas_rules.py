"""The PTX executor refuses, before running and naming the line, what ptxas refuses where it matters for trust
(tessera/interpreters/ptx/ptxas_rules.py), and accepts what ptxas accepts. Every case is one instruction in a
small kernel; its verdict was taken from ptxas 13 and is checked again against the ptxas found, if any."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import toolchain
from tessera.interpreters.ptx import PtxExecutionError, launch

_HEAD = """.version 8.0
.target {target}
.address_size 64
.global .align 4 .b32 gvar[4];
.visible .entry k(.param .u64 p)
{{
    .reg .b32 %r<4>;
    .reg .u32 %u<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    .reg .b16 %h<4>;
    .reg .pred %p<4>;
    .shared .align 8 .b8 tile[64];
    ld.param.u64 %rd2, [p];
    {body}
    ret;
}}
"""

REFUSED = {
    "add.s32 %rd1, %r1, %r2;": "register %rd1 is .b64, which does not fit a .s32 operand",
    "add.f32 %f1, %u1, %f2;": "register %u1 is .u32, which does not fit a .f32 operand",
    "add.u32 %r1, %f1, %r2;": "register %f1 is .f32, which does not fit a .u32 operand",
    "mov.b32 %rd1, %r1;": "register %rd1 is .b64",
    "mov.u32 %f1, 0x0;": "register %f1 is .f32",
    "mov.b64 %rd1, %r1;": "register %r1 is .b32",
    "max.u32 %f1, %f1, %f2;": "register %f1 is .f32",
    "setp.lt.u32 %p1, %rd1, %r2;": "register %rd1 is .b64",
    "shl.b32 %r1, %r1, %rd1;": "register %rd1 is .b64, which does not fit a .u32 operand",
    "mul.wide.u32 %r1, %r2, %r2;": "register %r1 is .b32, which does not fit a .u64 operand",
    "popc.b32 %r1, %rd1;": "register %rd1 is .b64",
    "shfl.sync.up.b32 %rd1|%p1, %r1, 2, 0, -1;": "register %rd1 is .b64, which does not fit a .b32 operand",
    "abs.s32 %r1, %f1;": "register %f1 is .f32",
    "add.s32 %r1, %p1, %r2;": "register %p1 is .pred",
    "ld.global.u32 %f1, [%rd2];": "register %f1 is .f32",
    "ld.global.u64 %r1, [%rd2];": "register %r1 is .b32",
    "cvt.rn.f32.u32 %f1, %f2;": "register %f2 is .f32",
    "cvta.to.global.u64 %rd1, %r1;": "register %r1 is .b32",
    "add.b16 %h1, %h1, %h1;": "add has no .b16 form",
    "and.u32 %r1, %r1, %r1;": "and takes .b types only, not .u32",
    "shl.u32 %r1, %r1, 2;": "shl takes .b types only",
    "and.b32 %r1, %tid.x, %r2;": "special register %tid.x as an operand of and",
    "mad.lo.s32 %r1, %ctaid.x, %ntid.x, %tid.x;": "special register %ctaid.x as an operand of mad",
    "st.global.u32 [%rd2], %tid.x;": "special register %tid.x as an operand of st",
    "ld.global.u32 %r1, [%r2];": "32-bit register %r2 as a global address",
    "ld.u32 %r1, [%r2];": "32-bit register %r2 as a generic address",
    "ld.shared.u32 %r1, [%f2];": "register %f2 of type .f32 as an address",
    "ld.shared.u32 %r1, [gvar];": r"\[gvar\] is a .global variable, used by a .shared access",
    "ld.global.u32 %r1, [tile];": r"\[tile\] is a .shared variable, used by a .global access",
    "mov.u32 %r1, gvar;": "the 32-bit address of the .global variable gvar",
    "mbarrier.init.global.b64 [%rd2], 1;": "mbarrier on the .global state space",
    "st.const.u32 [%rd2], %r1;": "st.const",
}

ACCEPTED = [
    "add.f32 %f1, %r1, %f2;", "add.s32 %r1, %u1, %r2;", "mov.b32 %f1, %r1;", "mov.f32 %r1, %f1;",
    "ld.global.u32 %rd1, [%rd2];", "ld.global.f32 %rd1, [%rd2];", "ld.global.b32 %f1, [%rd2];",
    "ld.global.u8 %r1, [%rd2];", "st.global.u8 [%rd2], %r1;", "st.global.u32 [%rd2], %rd1;",
    "cvt.u32.u16 %r1, %r2;", "cvt.u16.u32 %r1, %r2;", "cvt.rn.f32.u32 %r1, %r2;", "cvt.u64.u32 %rd1, %tid.x;",
    "setp.lt.f32 %p1, %r1, %f2;", "ld.shared.u32 %r1, [%r2];", "ld.shared.u32 %r1, [%rd2];",
    "ld.shared.u32 %r1, [tile];", "selp.f32 %f1, %r1, %f2, %p1;", "shfl.sync.bfly.b32 %r1, %f1, 8, 31, -1;",
    "mov.u64 %rd1, gvar;", "mov.u32 %r1, tile;", "popc.b64 %r1, %rd1;", "fma.rn.f32 %r1, %r1, %r1, %r1;",
    "mov.b64 %rd1, {%r1, %r2};", "shfl.sync.up.b32 %r1|%p1, %f1, 2, 0, -1;", "mul.wide.u32 %rd1, %r2, %r2;",
    "shr.u32 %r1, %r1, %u1;",
]


def _kernel(body: str, target: str = "sm_90a") -> str:
    return _HEAD.format(target=target, body=body)


def _run(text: str) -> None:
    launch(text, "k", 1, 32, [np.zeros(4, np.uint32)])


def _ptxas_refuses(text: str, arch: str = "sm_90a") -> bool | None:
    ptxas = toolchain.find_ptxas()
    if ptxas is None:
        return None
    try:
        toolchain.compile_ptx(text, ptxas=ptxas, arch=arch)
    except toolchain.PtxasError:
        return True
    return False


@pytest.mark.parametrize("body", sorted(REFUSED))
def test_refused_like_ptxas(body):
    with pytest.raises(PtxExecutionError, match=rf"^<ptx>:15: error: \S+: ptxas refuses this: {REFUSED[body]}"):
        _run(_kernel(body))


def test_accepted_like_ptxas():
    for body in ACCEPTED:
        try:
            _run(_kernel(body))
        except PtxExecutionError as error:
            assert "ptxas refuses" not in str(error), body


def test_sm90a_instructions_need_sm90a():
    for body in ("wgmma.fence.sync.aligned;", "setmaxnreg.inc.sync.aligned.u32 240;"):
        with pytest.raises(PtxExecutionError, match=r":15: error: \S+: ptxas refuses this: \w+ needs .target sm_90a "
                                                    r"\(the module targets sm_90\)"):
            _run(_kernel(body, "sm_90"))


def test_loc_needs_integers():
    with pytest.raises(Exception, match=r":15:\d+: error: .loc needs an integer file, line and column, got '1.5'"):
        _run(_kernel(".loc 1 12 1.5"))


def test_verdicts_agree_with_the_ptxas_found():
    """The tables above are ptxas's verdicts (skipped without a ptxas)."""
    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas")
    disagree = [body for body in REFUSED if _ptxas_refuses(_kernel(body)) is False]
    disagree += [body for body in ACCEPTED if _ptxas_refuses(_kernel(body)) is True]
    assert not disagree, disagree
