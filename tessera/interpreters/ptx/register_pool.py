"""`setmaxnreg` in the PTX executor: the CTA's pool of registers, which `.dec` fills and `.inc` waits on.

Every warpgroup starts with the registers ptxas gives each thread at entry (`facts.registers_at_entry` of the
entry's launch bounds: `.reqntid`/`.maxntid`, `.minnctapersm`, `.maxnreg`, and its largest `setmaxnreg.inc`), so
a CTA owns that many registers per thread for its whole life. `setmaxnreg.dec n` gives a warpgroup's registers
above n back to its CTA's pool; `setmaxnreg.inc n` takes what it lacks below n, and its threads wait (status
REGS) until the pool holds them [P#miscellaneous-instructions-setmaxnreg: "A pool of available registers is
maintained per-CTA" ... "setmaxnreg.inc ... blocks the execution until enough registers are available in the
CTA's register pool"; SASS: `USETMAXREG.TRY_ALLOC.CTAPOOL` in a retry loop]. A split of more registers than the
CTA owns never completes, so the executor reports the deadlock as the GPU hangs (the FP8 forward whose
160/176/176 split needs 65536 registers of the 384 x 168 = 64512 a CTA owns hung on an H200).

An entry without launch bounds ptxas can size it from (C7508: "'setmaxnreg' ignored; unable to determine register
count at entry") keeps no pool: only the counts are checked. Whether an exited warp's registers go back to the
pool the PTX ISA does not say; they do not here.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.interpreters.ptx.state import REGS, RUN, Machine
from tessera.sm90 import facts


def registers_at_entry(m: Machine) -> int | None:
    """What ptxas gives each thread of `m`'s entry at its start, or None where it cannot tell (no pool)."""
    if not hasattr(m, "entry_registers"):
        d = m.entry.directives
        bound = d.get("reqntid") or d.get("maxntid")
        incs = [int(inst.operands[0].value) for inst in m.entry.instructions
                if inst.opcode == "setmaxnreg" and "inc" in inst.modifiers]
        maxnreg = int(d["maxnreg"][0]) if "maxnreg" in d else None
        if bound is None or ("minnctapersm" not in d and maxnreg is None):
            m.entry_registers = None
        else:
            m.entry_registers = facts.registers_at_entry(
                math.prod(bound), int(d.get("minnctapersm", (1,))[0]), maxnreg, max(incs) if incs else None)
    return m.entry_registers


def set_max_registers(m: Machine, inst, lanes: np.ndarray, action: str, count: int) -> None:
    """The whole warpgroups `lanes` execute `setmaxnreg.<action> count`: each checked against its present count,
    then registers given back to or taken from its CTA's pool. A warpgroup whose `.inc` the pool cannot serve
    waits (REGS, its pc kept: it retries when a `.dec` of its CTA refills the pool); the others go on."""
    entry = registers_at_entry(m)
    group_of = m.unit_of[facts.WARPGROUP_SIZE]
    for group in np.unique(group_of[lanes]):
        members = lanes[group_of[lanes] == group]
        key, cta = (int(group), 0), int(m.lane_cta[members[0]])
        current = m.maxnreg.get(key, entry)
        try:
            facts.check_setmaxnreg(action, count, current)
        except ValueError as error:
            raise m.error(inst, str(error), int(members[0])) from None
        change = 0 if entry is None else (count - current) * len(members)
        if change > m.register_pool[cta]:
            m.status[members] = REGS
            continue
        m.register_pool[cta] -= change
        m.maxnreg[key] = count
        m.status[members] = RUN
        m.pc[members] += 1
        if change < 0:  # registers given back: the CTA's waiting warpgroups try again
            waiting = np.flatnonzero((m.status == REGS) & (m.lane_cta == cta))
            if len(waiting):
                m.status[waiting] = RUN
                m.woken += 1


def describe_wait(m: Machine, lane: int) -> str:
    """What the threads of `lane`'s warpgroup, waiting in `setmaxnreg.inc`, wait for (a deadlock message)."""
    cta, entry = int(m.lane_cta[lane]), registers_at_entry(m)
    groups = -(-m.threads // facts.WARPGROUP_SIZE)
    holds = ", ".join(f"warpgroup {g}: {m.maxnreg.get((cta * groups + g, 0), entry)}" for g in range(groups))
    return (f"wait in setmaxnreg.inc for registers of the CTA's pool, which holds {int(m.register_pool[cta])} and "
            f"which no warpgroup will give more to: the CTA owns {m.threads} x {entry} = {m.threads * entry} "
            f"registers (ptxas's count at entry for the entry's launch bounds), and the warpgroups hold {holds} "
            "registers per thread (a split past what the CTA owns waits forever on the GPU)")
