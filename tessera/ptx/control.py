"""PTX of structured control flow: `scf.for`, `scf.if`, `scf.while` as labels and branches, `func.return`.

Conditions are per thread: a branch on a predicate that differs between the threads of a warp diverges, which
PTX allows [P#control-flow-instructions-bra]; whether the ops inside may diverge is the Target IR's business.

- `scf.for %iv = %lb to %ub step %s iter_args(%x = %init)`: the loop-carried values are registers of the
  block arguments; %init moves into them, the loop is skipped if !(lb < ub) (signed), and at the latch the
  yielded values move into them all at once (a parallel copy, so `yield %b, %a` swaps through a scratch
  register) before iv += step and the backward branch while iv < ub. The results are the carried registers.
  A flash forward's loop whose epilogue runs the last trip's P.V again is printed re-entered for that trip
  instead (`fold_epilogue`), where it is recognised; the epilogue's ops are then comments.
- `scf.if`: `@!%p bra` around the then-block (and an else-block); each branch moves its yielded values into
  the result registers.
- `scf.while`: the before-block's arguments are registers, the condition's forwarded values are the after-
  block's arguments and, on exit, the results. A while whose after-block does nothing (a spin loop on an
  mbarrier try_wait) is `LOOP: ... @%p bra LOOP;`; a condition that is `xori %x, true` is tested as `@!%x`.
"""

from __future__ import annotations

from xdsl.dialects import arith, func, scf
from xdsl.ir import Block, Operation, SSAValue

from tessera.dialects import sm90
from tessera.ptx.arith import is_true_constant
from tessera.ptx.fold_epilogue import find_fold, print_fold_blocks, print_folded_body
from tessera.ptx.kernel import KernelPrinter, handles
from tessera.ptx.registers import B32, PRED, is_register


def _yield_moves(p: KernelPrinter, targets: list[list[str]], values: list[SSAValue]) -> None:
    """All registers of `targets` receive those of `values` at once."""
    triples = []
    for dsts, value in zip(targets, values, strict=True):
        srcs, cls = p.regs(value), p.cls(value)
        triples += [(d, s, cls) for d, s in zip(dsts, srcs, strict=True)]
    p.moves(triples)


def _in_flight_at_end(value: SSAValue, block: Block) -> bool:
    """Whether `value` is the result of a `sm90.wgmma_mma_async` of `block` whose group no wait of the block
    retires before its end (the first commit after the wgmma closes its group, each later one adds a group
    after it, and a `wgmma_wait_group k` with at least k groups committed after it retires it)."""
    owner = value.owner
    if not isinstance(owner, sm90.WgmmaMmaAsyncOp) or owner.parent_block() is not block:
        return False
    after = None  # groups committed after the wgmma's own (None: its own not committed yet)
    op = owner.next_op
    while op is not None:
        if isinstance(op, sm90.WgmmaCommitGroupOp):
            after = 0 if after is None else after + 1
        elif isinstance(op, sm90.WgmmaWaitGroupOp) and after is not None and after >= op.pending.value.data:
            return False
        op = op.next_op
    return True


def _check_branch_yields(p: KernelPrinter, op: scf.IfOp, block: Block, results: list[list[str]]) -> None:
    """A branch may yield a wgmma result still in flight (convert-tile-to-sm90's update branch) only where the
    if's result has its registers: a copy into others would read registers the tensor core still writes."""
    for dsts, value in zip(results, _terminator_operands(block)):
        if p.regs(value) != dsts and _in_flight_at_end(value, block):
            p.refuse(op, "a branch yields a wgmma result in flight into other registers (the copy would read "
                         "them before its group retires): wait for the group in the branch")


def _terminator_operands(block: Block) -> list[SSAValue]:
    return list(block.last_op.operands) if block.last_op is not None else []


def _stable(p: KernelPrinter, value: SSAValue) -> str:
    """A loop bound read at every latch: with a register assignment, a private copy (the assignment need not
    keep the bound's register through the loop); otherwise the value's own register."""
    name = p.reg(value)
    if p.assigned(value) is None or not is_register(name):
        return name
    copy = p.temp(B32)
    p.emit(f"mov.b32 {copy}, {name}")
    return copy


@handles(scf.ForOp)
def print_for(p: KernelPrinter, op: scf.ForOp) -> None:
    body = op.body.block
    iv_arg, carried_args = body.args[0], body.args[1:]
    lb = p.reg(op.lb)
    ub, step = _stable(p, op.ub), _stable(p, op.step)
    inits = [(arg, p.regs(init)) for arg, init in zip(carried_args, op.iter_args, strict=True)]
    (iv,) = p.define(iv_arg)
    carried = [p.define(arg) for arg in carried_args]
    p.moves([(iv, lb, B32)] + [(d, s, p.cls(arg)) for (arg, srcs), dsts in zip(inits, carried) for d, s in zip(dsts, srcs)])
    top, end = p.new_label("for"), p.new_label("for_end")
    skip = p.temp(PRED)
    p.emit(f"setp.ge.s32 {skip}, {iv}, {ub}", f"@{skip} bra {end}")
    fold = find_fold(p, op) if p.fold_epilogue else None
    p.place_label(top)
    if fold is None:
        p.print_block(body)
    else:
        print_folded_body(p, fold, iv, ub)
    p.comment(f"latch of {p.name(iv_arg)}")
    _yield_moves(p, carried, _terminator_operands(body))
    again = p.temp(PRED)
    p.emit(f"add.s32 {iv}, {iv}, {step}", f"setp.lt.s32 {again}, {iv}, {ub}", f"@{again} bra {top}")
    if fold is not None:
        print_fold_blocks(p, fold, end)
    p.place_label(end)
    for result, registers in zip(op.results, carried, strict=True):
        p.alias(result, registers)
    if fold is not None:
        p.alias(fold.result, p.regs(fold.update.results[0]))


@handles(scf.IfOp)
def print_if(p: KernelPrinter, op: scf.IfOp) -> None:
    condition = p.reg(op.cond)
    results = [p.define(r) for r in op.results]
    then_block = op.true_region.block
    else_block = op.false_region.blocks.first if op.false_region.blocks else None
    has_else = else_block is not None and (bool(op.results) or else_block.first_op is not else_block.last_op)
    end = p.new_label("if_end")
    otherwise = p.new_label("else") if has_else else end
    p.emit(f"@!{condition} bra {otherwise}")
    p.print_block(then_block)
    _check_branch_yields(p, op, then_block, results)
    _yield_moves(p, results, _terminator_operands(then_block))
    if has_else:
        p.emit(f"bra {end}")
        p.place_label(otherwise)
        p.emit(*p.else_entries.get(op, ()))
        p.print_block(else_block)
        _check_branch_yields(p, op, else_block, results)
        _yield_moves(p, results, _terminator_operands(else_block))
    p.place_label(end)


def _negation(p: KernelPrinter, condition: SSAValue, block: Block) -> SSAValue | None:
    """%x when `condition` is `arith.xori %x, true` of this block used only by the block's terminator."""
    op = condition.owner
    if not (isinstance(op, arith.XOrIOp) and op.parent_block() is block and condition.has_one_use()):
        return None
    lhs, rhs = op.operands
    if not is_true_constant(rhs) or p.cls(lhs) is not PRED:
        return None
    p.folded[op] = "tested by the branch"
    constant = rhs.owner
    if constant.parent_block() is block and all(use.operation in p.folded for use in rhs.uses):
        p.folded[constant] = "tested by the branch"
    return lhs


@handles(scf.WhileOp)
def print_while(p: KernelPrinter, op: scf.WhileOp) -> None:
    before, after = op.before_region.block, op.after_region.block
    arguments = [p.define(arg) for arg in before.args]
    _yield_moves(p, arguments, list(op.arguments))
    top, end = p.new_label("while"), p.new_label("while_end")
    condition_op = before.last_op
    if not isinstance(condition_op, scf.ConditionOp):
        p.refuse(op, "the before-region must end in scf.condition")
    negated = _negation(p, condition_op.condition, before)
    p.place_label(top)
    p.print_block(before)
    forwarded = [p.regs(v) for v in condition_op.args]
    test = f"!{p.reg(negated)}" if negated is not None else p.reg(condition_op.condition)
    exit_test = test[1:] if test.startswith("!") else f"!{test}"
    spin = not before.args and after.first_op is after.last_op and not after.args
    if spin:
        p.emit(f"@{test} bra {top}")
    else:
        p.emit(f"@{exit_test} bra {end}")
        for arg, registers in zip(after.args, forwarded, strict=True):
            p.alias(arg, registers)
        p.print_block(after)
        p.comment(f"latch of {op.name}")
        _yield_moves(p, arguments, _terminator_operands(after))
        p.emit(f"bra {top}")
        p.place_label(end)
    for result, registers in zip(op.results, forwarded, strict=True):
        p.alias(result, registers)


@handles(func.ReturnOp)
def print_return(p: KernelPrinter, op: Operation) -> None:
    if op.operands:
        p.refuse(op, "kernels return nothing")
    p.emit("ret")
