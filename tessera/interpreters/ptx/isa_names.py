"""The names of the PTX ISA the parser (`parse`) checks a module against: the instruction names (`OPCODES`), the
special registers (`SPECIAL_REGISTERS`) and the performance directives of an entry (`PERFORMANCE_DIRECTIVES`).
"""

from __future__ import annotations


OPCODES = frozenset("""
    abs activemask add addc alloca and applypriority atom bar barrier bfe bfi bfind bmsk bra brev brkpt brx call
    clusterlaunchcontrol clz cnot copysign cos cp createpolicy cvt cvta discard div dp2a dp4a elect ex2 exit fence
    fma fns getctarank griddepcontrol isspacep istypep ld ldmatrix ldu lg2 lop3 mad mad24 madc mapa match max
    mbarrier membar min mma mov movmatrix mul mul24 multimem nanosleep neg not or pmevent popc prefetch prefetchu
    prmt rcp red redux rem ret rsqrt sad selp set setmaxnreg setp shf shfl shl shr sin slct sqrt st stackrestore
    stacksave stmatrix sub subc suld suq sured sust szext tanh tcgen05 tensormap testp tex tld4 trap txq vabsdiff
    vabsdiff2 vabsdiff4 vadd vadd2 vadd4 vavrg2 vavrg4 vmad vmax vmax2 vmax4 vmin vmin2 vmin4 vote vset vset2
    vset4 vshl vshr vsub vsub2 vsub4 wgmma wmma xor
""".split())
"""The instruction names of the PTX ISA (9.x): the part of a mnemonic before its first dot."""


_XYZ = ("tid", "ntid", "ctaid", "nctaid", "cluster_ctaid", "cluster_nctaid", "clusterid", "nclusterid")


SPECIAL_REGISTERS = frozenset(
    [f"%{base}.{axis}" for base in _XYZ for axis in "xyz"]
    + [f"%{name}" for name in (
        "laneid warpid nwarpid smid nsmid gridid clock clock_hi clock64 globaltimer globaltimer_lo globaltimer_hi "
        "dynamic_smem_size total_smem_size aggr_smem_size reserved_smem_offset_begin reserved_smem_offset_end "
        "reserved_smem_offset_cap reserved_smem_offset_0 reserved_smem_offset_1 lanemask_eq lanemask_le "
        "lanemask_lt lanemask_ge lanemask_gt cluster_ctarank cluster_nctarank is_explicit_cluster "
        "current_graph_exec").split()]
    + [f"%envreg{i}" for i in range(32)] + [f"%pm{i}" for i in range(8)] + [f"%pm{i}_64" for i in range(8)])
"""The special registers of PTX ISA chapter 10 (read-only; `%tid.x` is one name)."""


PERFORMANCE_DIRECTIVES = frozenset(
    "reqntid maxntid maxnreg minnctapersm maxclusterrank reqnctapercluster explicitcluster".split())
"""Directives between an entry's parameters and its body, kept in `Entry.directives`."""
