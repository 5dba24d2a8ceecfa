"""Which operand reads of a kernel the register-file check must compare at run time (`register_check`).

The check fails at an op X reading a value v from a register r only if, in some thread, an op wrote r after v's
definition D and before X: between D's write and X's read in program order, or anywhere in a loop that holds X
but not D (its later trips and its back edge run before X reads again), or in either branch of an `scf.if`
that runs between them. A branch of an `scf.if` that holds X but not D, taken by the other threads, is
not between them unless a loop holds the `scf.if` too (per thread, the branches exclude each other; in a loop a
thread may take the other branch in an earlier trip). Any region op other than `scf.if` counts as a loop.

A loop's carried value (a block argument) is defined at the start of its block: the loop's entry, its yields
and an `scf.condition` move values into carried registers right after reading their operands (`moves_of`).

`check_windows` numbers every op of the kernel with the event of its reads and moves (`pre`) and of its result
writes (`post`, after its regions'), lists per register the events that write it, and keeps, per op, only the
operands whose window holds a write to one of their registers: a correct allocation leaves few or none (flash
attention: none), a wrong one keeps every read it can break. The file must then record the writes of every op
writing a register that some kept read compares (`CheckWindows.records`), so its state for those registers is the
state the full check would have; writes to other registers need no record. Views (ops whose results are their
operands' registers) write nothing: their results are read through their own windows, and their operands are read at
the view; a view placed in other registers than its source's (`view_in_place`) has every read kept.

This decides which comparisons run, never how they compare: a read left out cannot fail (no write into its
registers can run between its definition and it), so the check raises the same error at the same op.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func, scf
from xdsl.ir import Block, BlockArgument, Operation, OpResult

from tessera.dialects import sm90
from tessera.interpreters.truth import any_set
from tessera.regalloc.liveness import alias_sources


@dataclass(frozen=True)
class CheckWindows:
    """The outcome of `check_windows` for one kernel and allocation."""

    reads: dict[Operation, tuple[int, ...]]
    """The operand positions of each op whose registers the check compares (ops with none are left out)."""
    records: frozenset[Operation]
    """The ops whose result writes the register file records: those writing a register some kept read compares."""
    columns: frozenset[int]
    """The file columns (registers) some kept read compares."""


def kernel_of(op: Operation) -> func.FuncOp | None:
    """The `func.func` holding `op` (None for an op outside one: the check then compares every read)."""
    while op is not None and not isinstance(op, func.FuncOp):
        op = op.parent_op()
    return op


def _number(func_op: func.FuncOp) -> tuple[dict[Operation, int], dict[Operation, int]]:
    """(pre, post) event of every op below `func_op`: pre before its regions run, post after them."""
    pre: dict[Operation, int] = {}
    post: dict[Operation, int] = {}
    counter = 0
    stack: list[tuple[Operation, bool]] = []
    for region in reversed(func_op.regions):
        for block in reversed(region.blocks):
            stack.extend((op, False) for op in reversed(block.ops))
    while stack:
        op, done = stack.pop()
        if done:
            post[op] = counter
            counter += 1
            continue
        pre[op] = counter
        counter += 1
        stack.append((op, True))
        for region in reversed(op.regions):
            for block in reversed(region.blocks):
                stack.extend((inner, False) for inner in reversed(block.ops))
    return pre, post


def _region_span(region, pre, post) -> tuple[int, int] | None:
    """The events of the ops of `region` as [first, last]."""
    ops = [op for block in region.blocks for op in block.ops]
    return (pre[ops[0]], post[ops[-1]]) if ops else None


def _window(lo: int | None, home: Block, reader: Operation, pre, post) -> tuple[int, int, list] | None:
    """(lo, hi, excluded spans): the writes that may run between a value's definition (event `lo`, in block
    `home`) and `reader`'s read are the events e with lo < e < hi outside the excluded [first, last] spans
    (module docstring); None when `reader` is not in a block below `home` (then every write counts)."""
    if lo is None:
        return None
    hi = pre[reader]
    chain = []  # (ancestor region op of `reader`, its child on the way to `reader`), innermost first
    child = reader
    while child.parent_block() is not home:
        parent = child.parent_op()
        if parent is None or parent not in pre:
            return None
        chain.append((parent, child))
        child = parent
    if pre[child] < lo:
        return None  # the reader's branch of `home` runs before the definition: not SSA order
    loops = [i for i, (parent, _) in enumerate(chain) if not isinstance(parent, scf.IfOp)]
    if loops:
        hi = post[chain[loops[-1]][0]]  # all of the outermost loop, not its own result writes
    excluded = []
    for parent, child in chain[loops[-1] + 1 if loops else 0:]:
        inside = child.parent_block().parent
        excluded += [span for region in parent.regions
                     if region is not inside and (span := _region_span(region, pre, post)) is not None]
    return lo, hi, excluded


def _writes_in(events: list[int], lo: int, hi: int, excluded: list) -> bool:
    """Whether the sorted `events` hold one in (lo, hi) outside the `excluded` (disjoint) [first, last] spans."""
    count = bisect_left(events, hi) - bisect_right(events, lo)
    for first, last in excluded:
        if count <= 0:
            break
        first, last = max(first, lo + 1), min(last, hi - 1)
        if first <= last:
            count -= bisect_right(events, last) - bisect_left(events, first)
    return count > 0


def view_in_place(view: Operation, layout) -> bool:
    """Whether each register of `view`'s result is the register of the source element it shows (what the
    allocator gives a view: it prints no instruction, so nothing else puts its values there); kept on
    `layout.in_place`."""
    known = layout.in_place.get(view)
    if known is None:
        known = layout.in_place[view] = _in_place(view, layout)
    return known


def _in_place(view: Operation, layout) -> bool:
    names = layout.names.get(view.results[0], ())
    for i, (source, j) in alias_sources(view):
        mine = names[i] if i < len(names) else None
        if mine is not None and mine.startswith("%"):
            theirs = layout.names.get(source, ())
            if j >= len(theirs) or theirs[j] != mine:
                return False
    return True


def carried(value: BlockArgument) -> bool:
    """Whether the block argument `value` is a loop's carried value, which the moves of `moves_of` write (not
    a kernel argument, not an `scf.for`'s induction variable)."""
    parent = value.block.parent_op()
    return isinstance(parent, scf.WhileOp) or isinstance(parent, scf.ForOp) and value.index > 0


def moves_of(op: Operation) -> list[tuple[int, BlockArgument]]:
    """(operand position, block argument) of each value `op` moves into a loop's carried registers: a loop's
    initial values (`scf.for`, `scf.while`), a trip's yielded ones (`scf.yield` of a loop), the values an
    `scf.condition` passes to the after-region. The moves run after `op` read its operands."""
    if isinstance(op, scf.ForOp):
        return [(3 + j, arg) for j, arg in enumerate(op.body.block.args[1:])]
    if isinstance(op, scf.WhileOp):
        return list(enumerate(op.before_region.block.args))
    parent = op.parent_op()
    if isinstance(op, scf.YieldOp) and isinstance(parent, scf.ForOp):
        return [(j, arg) for j, arg in enumerate(parent.body.block.args[1:])]
    if isinstance(op, scf.YieldOp) and isinstance(parent, scf.WhileOp) and op.parent_region() is parent.after_region:
        return list(enumerate(parent.before_region.block.args))
    if isinstance(op, scf.ConditionOp) and isinstance(parent, scf.WhileOp):
        return [(1 + j, arg) for j, arg in enumerate(parent.after_region.block.args)]
    return []


def _note(writes: dict[int, list[int]], columns, event: int) -> None:
    for column in columns:
        events = writes.get(column)
        if events is None:
            writes[column] = [event]
        else:
            events.append(event)


def check_windows(func_op: func.FuncOp, layout) -> CheckWindows:
    """The reads of `func_op` that the register-file check compares and the ops whose writes it records, for
    `layout` (a `register_layout.RegisterLayout`) (module docstring)."""
    pre, post = _number(func_op)
    ops = sorted(pre, key=pre.__getitem__)
    # the events that write each register (file column): results at `post` (a view's results are its
    # operands' registers), moves into carried registers at `pre`, after the op's reads
    writes: dict[int, list[int]] = {}
    written_by: dict[Operation, set[int]] = {}
    for op in ops:
        layouts = [layout_ for result in op.results if (layout_ := layout.of(result)) is not None]
        if layouts:
            columns = set(layouts[0].columns.tolist())
            for other in layouts[1:]:
                columns.update(other.columns.tolist())
            written_by[op] = columns
            if not layout.is_view(op):
                _note(writes, columns, post[op])
        moved = [layout_ for _, target in moves_of(op) if (layout_ := layout.of(target)) is not None]
        if moved:
            columns = {c for layout_ in moved for c in layout_.columns.tolist()}
            written_by.setdefault(op, set()).update(columns)
            _note(writes, columns, pre[op])
    misplaced_views = {op for op in written_by if op.results and layout.is_view(op) and not view_in_place(op, layout)}
    writes = {column: np.array(events, np.int64) for column, events in writes.items()}
    empty = np.zeros(0, np.int64)
    # per set of registers, the events writing any of them (sorted); per value, those and whether its
    # definition's own write counts (two results of one op in one register)
    events_of: dict[bytes, list[int]] = {}
    value_events: dict[object, tuple[list[int], int]] = {}
    reads: dict[Operation, tuple[int, ...]] = {}
    columns: set[int] = set()
    for op in ops:
        kept = []
        for position, value in enumerate(op._operands):  # noqa: SLF001 - xDSL's `operands` view costs 10x
            value_layout = layout.of(value)
            if value_layout is None:
                continue
            if isinstance(value, OpResult):
                definition = value.op
                window = _window(post.get(definition), definition.parent_block(), op, pre, post)
                results = definition.results
            else:  # a carried value: moved in before the block's first op (after a previous trip's moves)
                first = value.block.first_op
                window = _window(pre[first] - 1 if first in pre else None, value.block, op, pre, post)
                definition, results = None, ()
            if window is None or definition in misplaced_views:
                kept.append(position)  # not below its definition, or a view whose registers are not its source's
                columns.update(value_layout.columns.tolist())
                continue
            entry = value_events.get(value)
            if entry is None:
                own = value_layout.columns
                key = own.tobytes()
                events = events_of.get(key)
                if events is None:
                    unique = np.unique(own).tolist()
                    events = events_of[key] = np.sort(np.concatenate([writes.get(c, empty) for c in unique])).tolist()
                shared = len(results) > 1 and any(
                    other is not value and (other_layout := layout.of(other)) is not None
                    and any_set(np.isin(other_layout.columns, own)) for other in results)
                entry = value_events[value] = (events, -1 if shared or len(np.unique(own)) < len(own) else 0)
            events, shift = entry
            if _writes_in(events, window[0] + shift, window[1], window[2]):
                kept.append(position)
                columns.update(value_layout.columns.tolist())
        if kept:
            reads[op] = tuple(kept)
    records = frozenset(op for op, written in written_by.items() if not written.isdisjoint(columns))
    return CheckWindows(reads, records, frozenset(columns))


def _since_fence(wgmma: Operation) -> list[Operation] | None:
    """The ops of `wgmma`'s block between the latest `wgmma_fence` before it and it, with their regions' ops
    (every path into the wgmma runs that fence and then only these); None without such a fence."""
    between = []
    op = wgmma.prev_op
    while op is not None and not isinstance(op, sm90.WgmmaFenceOp):
        between.append(op)
        op = op.prev_op
    return None if op is None else [inner for outer in between for inner in outer.walk()]


def fence_touches(func_op: func.FuncOp, touches) -> frozenset[Operation]:
    """The ops whose register accesses the `wgmma_fence` rule by registers must note (`register_check`):
    those touching a register of a wgmma after the latest fence before it in its block. An access before that
    fence is ordered by it; a wgmma with no fence before it in its block counts every access of its registers.
    `touches(op)` is the layout's (columns read, columns written, the wgmma's columns) of `op`."""
    noted: set[Operation] = set()
    every = None
    for wgmma in func_op.walk():
        if not isinstance(wgmma, sm90.WgmmaMmaAsyncOp):
            continue
        held = set(touches(wgmma)[2][0].tolist())
        window = _since_fence(wgmma)
        if window is None:
            window = every = list(func_op.walk()) if every is None else every
        for op in window:
            reads, writes, _ = touches(op)
            if (reads is not None and not held.isdisjoint(reads.tolist())
                    or writes is not None and not held.isdisjoint(writes.tolist())):
                noted.add(op)
    return frozenset(noted)
