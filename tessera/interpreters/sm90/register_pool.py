"""`setmaxnreg` in the CTA simulator: the CTA's pool of registers, which `.dec` fills and `.inc` waits on.

Every warpgroup starts with the registers ptxas gives each thread at entry, `facts.registers_at_entry(T,
largest_inc=...)` for the CTA's T threads (the PTX printer declares `.reqntid T .minnctapersm 1`): the CTA owns
that many times T registers for its whole life. `setmaxnreg.dec n` gives a warpgroup's registers above n back to
the CTA's pool; `setmaxnreg.inc n` takes what it lacks below n from the pool, and waits (blocks the strand) until
the pool holds them [P#miscellaneous-instructions-setmaxnreg: "A pool of available registers is maintained
per-CTA" ... "setmaxnreg.inc ... blocks the execution until enough registers are available in the CTA's register
pool"]. A split of more registers than the CTA owns therefore never completes: the simulator reports the
deadlock, naming the warpgroup and the pool, as the GPU spins in `USETMAXREG.TRY_ALLOC` forever (the FP8 forward
whose 160/176/176 split, 65536 registers, hung on an H200 where the CTA owns 384 x 168 = 64512).

Whether an exited warp's registers go back to the pool the PTX ISA does not say; they do not here.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.sm90 import facts


def registers_at_entry(op: Operation, program=None) -> int:
    """What ptxas gives each thread at entry of the kernel holding `op` (its `.reqntid` threads, one CTA per SM,
    no more than its largest `setmaxnreg.inc`). `program`: the kernel's `program.CompiledKernel`, if the caller
    has it: the kernel's `setmaxnreg` ops are then found once per kernel (a walk of every op at each CTA was a
    fortieth of a causal flash launch), their attributes read here."""
    fn = op
    while fn is not None and not isinstance(fn, func.FuncOp):
        fn = fn.parent_op()
    from tessera.kernel_abi import TARGET_KERNEL_ATTR

    threads = fn.attributes[TARGET_KERNEL_ATTR].data["threads"].value.data
    find = lambda: tuple(o for o in fn.walk() if isinstance(o, sm90.SetMaxNRegOp))  # noqa: E731
    ops = find() if program is None else program.fact("setmaxnreg ops", find)
    incs = [o.count.value.data for o in ops if o.action.data == "inc"]
    return facts.registers_at_entry(threads, largest_inc=max(incs) if incs else None)


def set_max_registers(cta, op: Operation, warpgroup: int, action: str, count: int, program=None) -> None:
    """Warpgroup `warpgroup` of `cta` executes `setmaxnreg.<action> count`: checked against its present count
    (`facts.check_setmaxnreg`), then registers given back to or taken from the CTA's pool, `.inc` blocking the
    running strand until the pool has them (a deadlock when nothing will release them). `program`: as for
    `registers_at_entry`."""
    if cta.entry_registers is None:
        cta.entry_registers = registers_at_entry(op, program)
    current = cta.register_budget.get(warpgroup, cta.entry_registers)
    try:
        facts.check_setmaxnreg(action, count, current)
    except ValueError as error:
        cta.fail(op, f"{error} (warpgroup {warpgroup})", warpgroup * facts.WARPGROUP_SIZE)
    change = (count - current) * facts.WARPGROUP_SIZE
    if change > 0:
        cta.scheduler.block(lambda: cta.register_pool >= change, lambda: _describe_wait(cta, op, warpgroup, change))
    cta.register_pool -= change
    cta.register_budget[warpgroup] = count


def _describe_wait(cta, op: Operation, warpgroup: int, change: int) -> tuple[str, str]:
    entry = cta.entry_registers
    holds = ", ".join(f"warpgroup {w}: {cta.register_budget.get(w, entry)}" for w in range(cta.warpgroups))
    return cta.describe(
        op, f"setmaxnreg.inc in warpgroup {warpgroup} waits for {change} registers of the CTA's pool, which holds "
            f"{cta.register_pool} and which no warpgroup will give more to: the CTA owns {cta.threads} x {entry} "
            f"= {cta.threads * entry} registers (ptxas's count at entry, .reqntid {cta.threads} .minnctapersm 1), "
            f"and the warpgroups hold {holds} registers per thread (a split past what the CTA owns waits "
            "forever on the GPU)", warpgroup * facts.WARPGROUP_SIZE)
