"""Register allocation for Target IR: liveness over structured control flow, then linear scan per class.

Every element of every per-thread value is one PTX register of a class (`f32` -> %f, `i32`/`index` ->
.b32 %r, `i64` -> .b64 %rd, `i1` -> .pred %p). Some values share registers instead of being copied:
- `vector.shuffle`, `vector.extract` and `vector.broadcast` results *are* the source's registers (a
  permutation, a selection, a repetition): they cost no instruction;
- a `scf.for` result is the register of its loop-carried block argument (the latch moves each yielded value
  into it); a yielded value defined in the body takes those registers itself where the argument is no longer
  read or held by a wgmma in flight when the value is made (overlap-softmax's P): the latch then moves nothing;
- an `scf.if` result takes the registers its branches yield where they are one register group, dead at the
  join, or free from the join to the result's last read (a loop-carried accumulator that one branch updates
  in place by a wgmma and the other yields as it is: overlap-softmax{fold=true}): no branch moves anything;
- a `sm90.wgmma_mma_async` result reuses its accumulator's registers when the accumulator dies there (the
  instruction reads and writes the same `{d...}` list; otherwise the printer copies the accumulator first),
  and an elementwise op's vector result reuses the registers of an operand that dies there (register i of
  the result reads only register i of each operand), so softmax chains run in place; a loop's initial value
  that dies at the loop is computed directly into the carried register.

Liveness: positions number the ops in program order; a value is live from its definition to its last use,
and a value used inside a loop but defined outside it stays live to the end of that loop (it is read again on
every trip); loop-carried registers are live for the whole loop. Linear scan then gives each class exactly as
many registers as are live at once (interval graphs colour optimally), reusing the registers of dead values.
Pressure counts 32-bit registers (a .b64 counts 2; predicates are a separate file and are not counted).
Kernel parameters (pointers, sizes) count none: the PTX loads each once (`ld.param`) into a register that
lives through the kernel, but ptxas reads them from the constant bank where they are used (`c[0x0][...]` as an
operand, or an `LDC`/`ULDC` again inside the loops: the backward's 20 registers of pointers and sizes are
not held), so that the count is what ptxas needs. Measured under ptxas 13.0 on the warp-specialized
kernels the budgets decide (the consumers' setmaxnreg lowered by steps of 8 until ptxas spills): the flash
forward at head_dim 64 and 128 needs 153-160 and 217-224 where the count is 156 and 224; the backward with
modifiers 217-232 where it is 220-229 (soft-cap, document masking, windows, ALiBi at head_dim 128), as
`tests/test_regalloc_accuracy.py` checks. (Its names are still allocated: the PTX loads them once.)

Asynchronous wgmma operands: between a `sm90.wgmma_mma_async` and the `sm90.wgmma_wait_group` that retires its
group, the tensor core still reads the A fragment (register A, the vector operand) and writes the result's
`{d...}` registers, so those registers are *held* until then even where no op reads them any more. The
retiring wait is found by scanning forward from the wgmma over the ops of its block (ops nested in regions are
not looked into): the first `sm90.wgmma_commit_group` closes the wgmma's own group, each later one adds a
group after it, and the first `wgmma_wait_group k` with at least k groups committed after the own group
retires it (`wait_group k` leaves only the k newest groups pending). Where the block ends first, the hold
goes on at the end of the block: to the end of the enclosing loop and, because the next trip runs before any
op after the loop, from the loop's start to the first retiring wait of the next trip (or over the whole
loop if the next trip has none), then on after the enclosing op in its block, outwards to the end of the
kernel. A hold may therefore be two ranges with a hole (an A fragment made late in a loop body and retired
early in the next trip); linear scan keeps the register reserved for the later range and lets values that
die before it use the hole. Only the result's registers are held for the accumulator: an accumulator that
dies at the wgmma shares them (see above), one that does not is copied into them before the wgmma is issued.
The accumulator chain's in-place decisions are made before the holds are added (a later wgmma of the chain
may take the registers of a pending result: the tensor core orders its own accesses).

Register spaces: the regions that run under a register budget of their own (the branches of an `scf.if` that
begin with `sm90.setmaxnreg`: warp-specialize's producer and consumer warpgroups) are allocated from disjoint
PTX registers. A value defined inside such a region gets a register of that region's space; every other value
(the prologue before the split, anything after it) one of the kernel's own space, and a register group takes
the space of its earliest definition. Each space is a linear scan of its own, and the spaces are numbered one
after the other per class (`%r0..` the kernel's, then the first region's, then the next one's), so no PTX
register is written in two budget regions: the only names both branches mention are values defined before the
split that both read. ptxas 13.3 and later need this: they behave as if a virtual register were one
allocation unit across the whole kernel, so that a name the 24-register producer and the 240-register
consumers both write has to fit the producer's budget. With the names shared (one scan over both branches
hands them out), the flash kernels' consumers were left with about 184 registers under ptxas 13.3 to 13.5
whatever their setmaxnreg said: ptxas spilled (292 bytes for head_dim 128, also in the producer, which
uses a dozen registers) and serialized the wgmmas (C7512). Renaming the producer's registers in that PTX,
and nothing else, removed both; ptxas 12.1 to 13.2 assemble both forms without a spill (under 13.0 the
main loop's SASS is the same length, 497 and 602 instructions). For the same reason each wgmma descriptor (`sm90.make_descriptor`,
`descriptor_advance`, `descriptor_offset`) gets registers no other value is given (`allocate._descriptor_roots`):
HGMMA reads descriptors from uniform registers, and a descriptor whose name also held a per-thread value left the
uniform datapath under 13.3+ (R2UR or a UMOV pair per k-step).

Pressure per region: `Allocation.region_pressure(op)` gives, for each region of `op` (the producer and the
consumer branch of a warp-specialized `scf.if`, a loop body), the peak of 32-bit registers live at one
position inside it, so that a pass can size each branch's setmaxnreg budget. It is measured on a liveness
that knows the regions of an `scf.if` are alternatives, which program order (and so the allocation above)
does not: a value is live inside one region only while a read of it can still follow, in that region or
after the if; reads only in another region of the if do not count, unless a loop around the if that the
value is defined outside of leads there on a later trip. Held wgmma operands count as above.
`region_pressure(fn, op)` answers the same without a budget check; `region_peaks` and `Allocation.at_peak` also
say where each peak is and what is live there (`PressurePeak`: each value with its defining op, source location
and registers), which the refusals print so that a user knows what to change.

Modules: `registers` (register classes, PTX immediates), `liveness` (positions, holds, aliasing ops), `groups`
(which values share registers: aliases, in-place results, coalesced yields and branch results), `pressure` (peak
and per-region pressure), `allocate` (linear scan per class and register space, memoized per kernel).
"""

from __future__ import annotations

from tessera.regalloc.allocate import (
    Allocation,
    SPILL_ATTR,
    RegisterBudgetError,
    allocate_registers,
    budget_regions,
    region_peaks,
    region_pressure,
)
from tessera.regalloc.pressure import LiveValue, PressurePeak
from tessera.regalloc.liveness import aliases_operand_registers
from tessera.regalloc.registers import (
    CLASS_PREFIX,
    CLASS_WIDTH,
    IMMEDIATE_OPERANDS,
    element_count,
    immediate_text,
    immediates,
    register_class,
)

__all__ = [
    "CLASS_PREFIX", "CLASS_WIDTH", "IMMEDIATE_OPERANDS", "Allocation", "LiveValue", "PressurePeak",
    "RegisterBudgetError", "SPILL_ATTR", "aliases_operand_registers", "allocate_registers", "budget_regions", "element_count",
    "immediate_text", "immediates", "region_peaks", "region_pressure", "register_class",
]
