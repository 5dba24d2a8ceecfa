"""The trips of an `scf.for`, for the passes that restructure Tile IR loops (overlap-softmax rotates,
peel-masked-iterations splits).

Trip k (k = 0, 1, ...) of `scf.for %iv = %lb to %ub step %step` runs with iv = lb + k * step, and the loop
runs n = ceildivsi(ub - lb, step) trips (none when n <= 0).

- `IndexBuilder` writes index arithmetic at a point, folding constants and reusing the index constants that
  dominate it, so that the usual loops (lb = 0, step = 1) give readable IR (`n` is `ub` itself).
- `trip_slope` says whether an index value of a body is affine in the trip number, v(k) = v(0) + slope * k
  with an integer slope, and what that assumes (dividends that must not be negative at trip 0).
- `clone_at_iv` recomputes values of a body for another value of the induction variable (the previous
  trip, the first, the last) by cloning the ops they depend on; only index arithmetic and views can be
  recomputed (`RECOMPUTABLE`, `is_recomputable`).
- `erase_dead_code` removes the index ops and views a restructured loop no longer uses.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import Pure

from tessera.dialects import tile

INDEX_ARITH: tuple[type[Operation], ...] = (
    arith.ConstantOp,
    arith.AddiOp,
    arith.SubiOp,
    arith.MuliOp,
    arith.DivUIOp,
    arith.DivSIOp,
    arith.FloorDivSIOp,
    arith.CeilDivSIOp,
    arith.CeilDivUIOp,
    arith.RemUIOp,
    arith.RemSIOp,
    arith.MinSIOp,
    arith.MaxSIOp,
    arith.MinUIOp,
    arith.MaxUIOp,
    arith.CmpiOp,
    arith.SelectOp,
)
"""Integer arithmetic a loop body may compute its indices with."""

_DIVISIONS = (arith.DivUIOp, arith.DivSIOp, arith.FloorDivSIOp, arith.CeilDivSIOp, arith.CeilDivUIOp,
              arith.RemUIOp, arith.RemSIOp)

RECOMPUTABLE: tuple[type[Operation], ...] = INDEX_ARITH + (tile.StageOp, tile.ViewOp, tile.DimOp, tile.ProgramIdOp)
"""Ops that may be cloned to compute a value for another trip: they read no memory and cost no registers
beyond indices (a `tile.stage` or `tile.view` is an address)."""


class NotRecomputable(Exception):
    """A value cannot be recomputed for another trip; `value` is the first one found that depends on a
    loop-carried value or on an op outside `RECOMPUTABLE`."""

    def __init__(self, value: SSAValue):
        super().__init__(value)
        self.value = value


def constant_index(value: SSAValue) -> int | None:
    """The integer of an `arith.constant`, else None."""
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


def defined_in(value: SSAValue, block: Block) -> bool:
    """Whether `value` is defined in `block` or in a region nested in it (a block argument of it included)."""
    return block.is_ancestor(value.owner)


_FOLDS: dict[type[Operation], Callable[[int, int], int]] = {
    arith.AddiOp: operator.add,
    arith.SubiOp: operator.sub,
    arith.MuliOp: operator.mul,
    arith.FloorDivSIOp: operator.floordiv,
    arith.CeilDivSIOp: lambda a, b: -(-a // b),
    arith.DivSIOp: lambda a, b: abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1),
    arith.MinSIOp: min,
    arith.MaxSIOp: max,
}
_UNSIGNED_FOLDS: dict[type[Operation], Callable[[int, int], int]] = {
    arith.DivUIOp: operator.floordiv,
    arith.CeilDivUIOp: lambda a, b: -(-a // b),
    arith.RemUIOp: operator.mod,
}


def fold_constants(op_type: type[Operation], operands: Sequence[int | None]) -> int | None:
    """The value of a binary index op of type `op_type` on the given constants, when it is simple to know
    (signed ops, unsigned ones on non-negative operands, no division by zero); else None."""
    if len(operands) != 2 or None in operands:
        return None
    a, b = operands
    if issubclass(op_type, _DIVISIONS) and b == 0:
        return None
    if op_type in _FOLDS:
        return _FOLDS[op_type](a, b)
    if op_type in _UNSIGNED_FOLDS and a >= 0 and b >= 0:
        return _UNSIGNED_FOLDS[op_type](a, b)
    return None


class IndexBuilder:
    """Inserts index arithmetic at `point` (an InsertPoint, or before an op), folding what constants decide.

    Constants come from `constants` (a builder whose point dominates this one's) when given; a builder that
    inserts before an op reuses the index constants that dominate it (those of the enclosing blocks, before
    the op) and otherwise creates them at its point."""

    def __init__(self, point: InsertPoint | Operation, constants: IndexBuilder | None = None):
        self.point = InsertPoint.before(point) if isinstance(point, Operation) else point
        self._parent = constants
        self._constants: dict[int, SSAValue] = {} if constants is not None else _dominating_constants(point)
        self._created: set[SSAValue] = set()

    def emit(self, op: Operation, name: str | None = None) -> SSAValue:
        Rewriter.insert_op(op, self.point)
        self._created.add(op.results[0])
        return self.named(op.results[0], name)

    def named(self, value: SSAValue, name: str | None) -> SSAValue:
        """`value`, with the name hint `name` if this builder created it and it has none yet."""
        if name is not None and value in self._created and value.name_hint is None:
            value.name_hint = name
        return value

    def const(self, value: int) -> SSAValue:
        if self._parent is not None:
            return self._parent.const(value)
        if value not in self._constants:
            op = arith.ConstantOp(IntegerAttr(value, IndexType()))
            self._constants[value] = self.emit(op, f"c{value}" if value >= 0 else f"c_{-value}")
        return self._constants[value]

    def _binary(self, op_type: type[Operation], a: SSAValue, b: SSAValue, name: str | None) -> SSAValue:
        folded = fold_constants(op_type, [constant_index(a), constant_index(b)])
        return self.const(folded) if folded is not None else self.emit(op_type(a, b), name)

    def add(self, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        if constant_index(a) == 0:
            return b
        return a if constant_index(b) == 0 else self._binary(arith.AddiOp, a, b, name)

    def sub(self, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        return a if constant_index(b) == 0 else self._binary(arith.SubiOp, a, b, name)

    def mul(self, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        if constant_index(a) == 1:
            return b
        return a if constant_index(b) == 1 else self._binary(arith.MuliOp, a, b, name)

    def floordiv(self, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        """floor(a / b) for b > 0, in signed arithmetic."""
        return a if constant_index(b) == 1 else self._binary(arith.FloorDivSIOp, a, b, name)

    def ceildiv(self, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        """ceil(a / b) for b > 0, in signed arithmetic."""
        return a if constant_index(b) == 1 else self._binary(arith.CeilDivSIOp, a, b, name)

    def min(self, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        return self._binary(arith.MinSIOp, a, b, name)

    def max(self, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        return self._binary(arith.MaxSIOp, a, b, name)

    def cmp(self, predicate: str, a: SSAValue, b: SSAValue, name: str | None = None) -> SSAValue:
        return self.emit(arith.CmpiOp(a, b, predicate), name)

    # -- trips of a loop -------------------------------------------------------------------------------------
    def trip_count(self, loop: scf.ForOp, name: str | None = "trips") -> SSAValue:
        """n = ceildivsi(ub - lb, step): the trips the loop runs (none when n <= 0)."""
        return self.named(self.ceildiv(self.sub(loop.ub, loop.lb), loop.step), name)

    def iv_of_trip(self, loop: scf.ForOp, k: SSAValue, name: str | None = None) -> SSAValue:
        """lb + k * step, the induction variable of trip k."""
        return self.named(self.add(loop.lb, self.mul(k, loop.step)), name)


def _dominating_constants(point: InsertPoint | Operation) -> dict[int, SSAValue]:
    """The index constants defined before `point` (an op) in its block and the blocks enclosing it."""
    found: dict[int, SSAValue] = {}
    op = point if isinstance(point, Operation) else None
    while op is not None:
        before = op.prev_op
        while before is not None:
            if isinstance(before.results[0].type if before.results else None, IndexType):
                value = constant_index(before.results[0])
                if value is not None:
                    found.setdefault(value, before.results[0])
            before = before.prev_op
        op = op.parent_op()
    return found


def trip_slope(value: SSAValue, body: Block, step: int, nonnegative: list[SSAValue], memo: dict | None = None) -> int | None:
    """The integer s with value(k) = value(0) + s * k over the trips k of the loop whose body is `body` (step
    `step`, a constant), or None when the value is not of that form (or this analysis cannot tell).

    Built from the induction variable (slope `step`), loop-invariant values (slope 0), addi, subi, muli by a
    constant, and divisions by a positive constant c of a dividend whose slope c divides: floordivsi(x, c)
    always (floor((x0 + c s k) / c) = floor(x0 / c) + s k), divsi and divui when x does not decrease and is
    not negative at trip 0; each such x is appended to `nonnegative` (the caller checks x(0) >= 0 at run
    time). Ops whose operands are all loop-invariant are loop-invariant; a division among them must divide
    by a positive constant, so that computing it before the loop cannot fault."""
    memo = {} if memo is None else memo
    if value in memo:
        return memo[value]
    iv = body.args[0]
    if value is iv:
        return step
    if not defined_in(value, body):
        return 0
    if isinstance(value, BlockArgument):
        return None  # a loop-carried value, or a value of a nested region
    op = value.owner
    if not isinstance(op, RECOMPUTABLE) or isinstance(op, tile.StageOp | tile.ViewOp):
        return None
    if isinstance(op, _DIVISIONS):
        divisor = constant_index(op.rhs)
        if divisor is None or divisor <= 0:
            memo[value] = None
            return None
    slopes = [trip_slope(v, body, step, nonnegative, memo) for v in op.operands]
    result: int | None = None
    if any(s is None for s in slopes):
        result = None
    elif all(s == 0 for s in slopes):
        result = 0
    elif isinstance(op, arith.AddiOp):
        result = slopes[0] + slopes[1]
    elif isinstance(op, arith.SubiOp):
        result = slopes[0] - slopes[1]
    elif isinstance(op, arith.MuliOp):
        for x, c in ((0, 1), (1, 0)):
            factor = constant_index(op.operands[c])
            if factor is not None:
                result = slopes[x] * factor
    elif isinstance(op, arith.FloorDivSIOp | arith.DivSIOp | arith.DivUIOp):
        divisor = constant_index(op.rhs)
        s = slopes[0]
        if s % divisor == 0 and (isinstance(op, arith.FloorDivSIOp) or s >= 0):
            result = s // divisor
            if not isinstance(op, arith.FloorDivSIOp):
                nonnegative.append(op.lhs)
    memo[value] = result
    return result


def is_recomputable(value: SSAValue, body: Block) -> bool:
    """Whether `clone_at_iv` can recompute `value` of the loop body `body` (it depends only on the induction
    variable, values defined outside the body and `RECOMPUTABLE` ops)."""
    seen: set[SSAValue] = set()
    work = [value]
    while work:
        v = work.pop()
        if v in seen or v is body.args[0] or not defined_in(v, body):
            continue
        seen.add(v)
        if isinstance(v, BlockArgument) or not isinstance(v.owner, RECOMPUTABLE):
            return False
        work.extend(v.owner.operands)
    return True


def erase_dead_code(root: Operation) -> None:
    """Erase the ops nested in `root` whose results are all unused and that are `RECOMPUTABLE` or pure (what
    a restructured loop leaves behind: views and indices that only the moved or removed ops used)."""
    changed = True
    while changed:
        changed = False
        for op in reversed(list(root.walk())):
            if op is root or op.regions or not op.results or any(r.uses for r in op.results):
                continue
            if isinstance(op, RECOMPUTABLE) or op.has_trait(Pure):
                Rewriter.erase_op(op)
                changed = True


def clone_at_iv(
    values: Sequence[SSAValue], body: Block, iv_value: SSAValue, b: IndexBuilder, mapping: dict[SSAValue, SSAValue]
) -> list[SSAValue]:
    """`values` of the loop body `body` as they would be computed with the induction variable equal to
    `iv_value`: the `RECOMPUTABLE` ops they depend on are cloned at `b`'s insertion point, in dependency order
    (index arithmetic that constants decide is folded). Values defined outside the body are used as they are.
    `mapping` maps body values to their recomputed counterparts and is extended: pass the same dict to share
    the clones between calls. Raises NotRecomputable."""
    mapping.setdefault(body.args[0], iv_value)
    partial = {arith.AddiOp: b.add, arith.SubiOp: b.sub, arith.MuliOp: b.mul}

    def get(value: SSAValue) -> SSAValue:
        if value in mapping:
            return mapping[value]
        if not defined_in(value, body):
            return value
        op = value.owner
        if isinstance(value, BlockArgument) or not isinstance(op, RECOMPUTABLE):
            raise NotRecomputable(value)
        operands = [get(operand) for operand in op.operands]
        folded = fold_constants(type(op), [constant_index(v) for v in operands])
        if folded is not None:
            mapping[value] = b.const(folded)
        elif type(op) in partial:
            mapping[value] = partial[type(op)](*operands, value.name_hint)
        else:
            b.emit(op.clone(value_mapper=mapping))
        return mapping[value]

    return [get(v) for v in values]
