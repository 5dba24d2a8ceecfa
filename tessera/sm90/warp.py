"""Warp-level facts of sm_90a: shuffles, named barriers, the register file and `setmaxnreg`.

Sources: [P#x] = PTX ISA 9.1, https://docs.nvidia.com/cuda/parallel-thread-execution/#x;
[CCG] = CUDA C++ Programming Guide, "Compute Capabilities", technical specifications for compute capability 9.0.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

WARP_SIZE = 32
"""Threads per warp; `%laneid` is 0..31 [P#special-registers-laneid]."""

# region shfl.sync [P#data-movement-and-conversion-instructions-shfl-sync]

ShuffleMode = Literal["up", "down", "bfly", "idx"]
SHFL_MODES: tuple[ShuffleMode, ...] = ("up", "down", "bfly", "idx")

_LANE_BITS = WARP_SIZE - 1


def shfl_source_lane(mode: ShuffleMode, lane, b: int, c: int):
    """The lane that `shfl.sync.<mode>.b32 d|p, a, b, c, membermask` reads for each `lane` (int or array),
    and the predicate p. Exactly the PTX semantics: bval = b[4:0], cval = c[4:0], segmask = c[12:8];
    maxLane = (lane & segmask) | (cval & ~segmask), minLane = lane & segmask;
    up: j = lane - bval, p = j >= maxLane; down: j = lane + bval, p = j <= maxLane;
    bfly: j = lane ^ bval, p = j <= maxLane; idx: j = minLane | (bval & ~segmask), p = j <= maxLane;
    if !p then j = lane (the thread keeps its own a).

    c = ((32 - width) << 8) | 0x1f gives `width`-lane segments for down/bfly/idx, and (32 - width) << 8 for up
    (the CUDA `__shfl_*_sync(..., width)` encoding). Reading a lane outside `membermask` is undefined; the
    caller checks membership."""
    if mode not in SHFL_MODES:
        raise ValueError(f"shfl.sync mode must be one of {SHFL_MODES}, got {mode!r}")
    lane = np.asarray(lane, dtype=np.int64)
    if np.any((lane < 0) | (lane >= WARP_SIZE)):
        raise ValueError(f"lane must be in [0, {WARP_SIZE})")
    bval = int(b) & _LANE_BITS
    cval = int(c) & _LANE_BITS
    segmask = (int(c) >> 8) & _LANE_BITS
    max_lane = (lane & segmask) | (cval & ~segmask & _LANE_BITS)
    min_lane = lane & segmask
    if mode == "up":
        j = lane - bval
        valid = j >= max_lane
    elif mode == "down":
        j = lane + bval
        valid = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        valid = j <= max_lane
    else:
        j = min_lane | (bval & ~segmask & _LANE_BITS)
        valid = j <= max_lane
    return np.where(valid, j, lane), valid


def shfl_sync(values, mode: ShuffleMode, b: int, c: int):
    """`d|p` of `shfl.sync.<mode>.b32` for all 32 lanes, given every lane's `a` in `values` (length 32)."""
    values = np.asarray(values)
    if values.shape[0] != WARP_SIZE:
        raise ValueError(f"shfl_sync needs one value per lane ({WARP_SIZE}), got {values.shape[0]}")
    source, valid = shfl_source_lane(mode, np.arange(WARP_SIZE), b, c)
    return values[source], valid


# endregion

# region Named barriers [P#parallel-synchronization-and-communication-instructions-bar]

NAMED_BARRIERS = 16
"""Each CTA has barriers 0..15 for `bar{.cta}.sync/arrive/red`."""


def check_named_barrier(barrier: int, threads: int | None, cta_threads: int, *, arrive: bool = False) -> None:
    """Refuse a `bar.sync barrier{, threads}` / `bar.arrive barrier, threads` that PTX rejects: the id must be
    0..15; a thread count must be a non-zero multiple of the warp size and at most the CTA's threads;
    `bar.arrive` needs a thread count (omitted = all threads of the CTA)."""
    if not 0 <= barrier < NAMED_BARRIERS:
        raise ValueError(f"named barrier id must be in [0, {NAMED_BARRIERS}), got {barrier}")
    if threads is None:
        if arrive:
            raise ValueError("bar.arrive requires a non-zero thread count")
        return
    if threads <= 0 or threads % WARP_SIZE:
        raise ValueError(f"barrier thread count must be a non-zero multiple of the warp size {WARP_SIZE}, "
                         f"got {threads}")
    if threads > cta_threads:
        raise ValueError(f"barrier thread count {threads} exceeds the CTA's {cta_threads} threads")


# endregion

# region Registers and setmaxnreg [P#miscellaneous-instructions-setmaxnreg; CCG]

MAX_SHARED_MEMORY_PER_BLOCK = 227 * 1024
"""Most dynamic shared memory one thread block may use on compute capability 9.0 (opt-in, 232448 bytes) [CCG
"Technical Specifications per Compute Capability": maximum amount of shared memory per thread block]."""

REGISTERS_PER_SM = 65536
"""32-bit registers per SM (and per CTA) on compute capability 9.0 [CCG]."""

MAX_REGISTERS_PER_THREAD = 255
"""Most 32-bit registers one thread may own at launch [CCG]; ptxas caps allocation at 255 (notes section 9)."""

UNIFORM_REGISTERS_PER_WARP = 63
"""32-bit uniform registers (UR0-UR62; UR63 reads as zero, URZ) one warp owns on sm_90, beside and not counted
in its per-thread registers: the uniform datapath's operands, where HGMMA reads its descriptors and UTMALDG its
addresses. Checked against ptxas' SASS (tests/test_uniform_descriptors.py: no sm_90a kernel names a register
above UR62, and uniform zero prints as URZ), the same count as Turing's uniform datapath.""" 

SETMAXNREG_MIN = 24
SETMAXNREG_MAX = 256
SETMAXNREG_STEP = 8


def check_setmaxnreg(action: Literal["inc", "dec"], count: int, current: int | None = None) -> None:
    """Refuse `setmaxnreg.<action>.sync.aligned.u32 count` where PTX says the behaviour is undefined or the
    operand illegal: count must be a multiple of 8 in [24, 256]; `.dec` needs current >= count and `.inc`
    current <= count (current = the warp's per-thread maximum before the instruction, when known).
    All four warps of a warpgroup execute the same instruction; `.inc` blocks until the CTA's pool has the
    registers and their contents are undefined."""
    if action not in ("inc", "dec"):
        raise ValueError(f"setmaxnreg action must be 'inc' or 'dec', got {action!r}")
    if not SETMAXNREG_MIN <= count <= SETMAXNREG_MAX or count % SETMAXNREG_STEP:
        raise ValueError(f"setmaxnreg count must be a multiple of {SETMAXNREG_STEP} in "
                         f"[{SETMAXNREG_MIN}, {SETMAXNREG_MAX}], got {count}")
    if current is None:
        return
    if action == "dec" and current < count:
        raise ValueError(f"setmaxnreg.dec to {count} from {current}: .dec may only lower the count")
    if action == "inc" and current > count:
        raise ValueError(f"setmaxnreg.inc to {count} from {current}: .inc may only raise the count")


REGISTER_ALLOCATION_UNIT = 256
"""Registers per warp by which the registers of a thread block are allocated on compute capability 9.0 (8 per
thread) [the CUDA Occupancy Calculator's compute capability 9.0 data: "register allocation unit size 256",
granularity "warp"; ptxas rounds a kernel's count at its launch bounds down to a
multiple of 8: tests/test_sm90_facts.py runs it]."""


def registers_at_entry(threads: int, min_ctas: int = 1, maxnreg: int | None = None,
                       largest_inc: int | None = None) -> int:
    """The registers per thread every warp of a kernel that uses `setmaxnreg` owns when it starts, as ptxas
    sizes them: the most its launch bounds allow (`.reqntid`/`.maxntid` `threads` and `.minnctapersm
    min_ctas`: REGISTERS_PER_SM / (threads min_ctas) rounded down to the allocation unit, at most 255 and
    `.maxnreg`), and no more than the largest `setmaxnreg.inc` count when that is smaller (ptxas 12.9-13.5:
    `.reqntid 384 .minnctapersm 1` gives 168 whatever the split; `.reqntid 128` with `.inc 240`, 240). Without
    launch bounds ptxas drops setmaxnreg (C7508).

    The CTA owns `registers_at_entry(...) * threads` registers for its whole life: that is the pool
    `setmaxnreg` moves registers through [P#miscellaneous-instructions-setmaxnreg: "A pool of available
    registers is maintained per-CTA"; SASS `USETMAXREG.TRY_ALLOC.CTAPOOL` in a retry loop], not the SM's
    REGISTERS_PER_SM."""
    step = REGISTER_ALLOCATION_UNIT // WARP_SIZE
    most = REGISTERS_PER_SM // (threads * min_ctas) // step * step
    most = min(most, MAX_REGISTERS_PER_THREAD, maxnreg if maxnreg is not None else MAX_REGISTERS_PER_THREAD)
    return most if largest_inc is None else min(most, largest_inc)


def check_register_budget(per_thread_counts, threads_per_group: int, cta_threads: int, min_ctas: int = 1) -> None:
    """Refuse a register split that the CTA's registers cannot satisfy: sum(count * threads_per_group) over
    the groups (warpgroups of 128 threads after their `setmaxnreg`) must be at most the registers the CTA owns,
    `registers_at_entry(cta_threads, min_ctas, largest_inc=max(counts)) * cta_threads`. Past it a
    `setmaxnreg.inc` waits forever for registers no `.dec` releases (FlashAttention-3's and CUTLASS's splits use
    the pool exactly: 24 + 2 x 240 and 40 + 2 x 232 = 3 x 168 at 384 threads, 32 + 3 x 160 = 4 x 128 at 512)."""
    counts = [int(n) for n in per_thread_counts]
    entry = registers_at_entry(cta_threads, min_ctas, largest_inc=max(counts))
    total, owned = sum(n * threads_per_group for n in counts), entry * cta_threads
    if total > owned:
        raise ValueError(f"register split {'/'.join(map(str, counts))} per thread of {threads_per_group}-thread "
                         f"groups needs {total} registers, more than the {owned} the CTA owns ({cta_threads} threads "
                         f"x {entry} registers at entry, ptxas's count at .reqntid {cta_threads} .minnctapersm "
                         f"{min_ctas}): a setmaxnreg.inc would wait forever for registers no setmaxnreg.dec releases")


# endregion
