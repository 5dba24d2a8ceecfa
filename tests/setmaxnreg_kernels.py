"""Hand-written PTX kernels with a setmaxnreg split: warpgroup 0 the producer (`.dec`), the others the consumers
(`.inc`); used by tests/test_ptx_setmaxnreg.py (the executor's register pool) and tests/test_sm90_facts.py
(ptxas's count at entry)."""

from __future__ import annotations

from race_templates import ptx_entry
from text_edits import filled

SPLIT = """
    mov.u32 %r0, %tid.x;
    setp.FIRST.u32 %p0, %r0, 128;
    @%p0 bra.uni OTHER;
    setmaxnreg.ACT1.sync.aligned.u32 NUM1;
    bra.uni DONE;
OTHER:
    setmaxnreg.ACT2.sync.aligned.u32 NUM2;
DONE:
    ld.param.u64 %rd0, [out];
    shl.b32 %r1, %r0, 2;
    cvt.u64.u32 %rd1, %r1;
    add.u64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r0;"""
REGS = "\n    .reg .b32 %r<2>;\n    .reg .b64 %rd<2>;\n    .reg .pred %p<1>;"


def bounds(threads: int, ctas: int = 1) -> str:
    """The launch bounds ptxas sizes the registers at entry from."""
    return f"\n.reqntid {threads}, 1, 1\n.minnctapersm {ctas}"


def split_kernel(producer: int, consumer: int, producer_first: bool, directives: str | None = None) -> str:
    """Warpgroup 0 the producer (tid < 128), the others the consumers; the branch taken first at the lower pc;
    launch bounds `directives` (default `bounds(384)`)."""
    if producer_first:  # the producer's .dec at the lower pc (tid >= 128 branches over it)
        fields = dict(FIRST="ge", ACT1="dec", NUM1=str(producer), ACT2="inc", NUM2=str(consumer))
    else:  # the consumers' .inc first: they wait until the producer's .dec fills the pool
        fields = dict(FIRST="lt", ACT1="inc", NUM1=str(consumer), ACT2="dec", NUM2=str(producer))
    return ptx_entry(filled(SPLIT, **fields), REGS, directives=bounds(384) if directives is None else directives)
