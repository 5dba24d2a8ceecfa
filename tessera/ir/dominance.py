"""SSA dominance, which xDSL 0.74 does not verify: every use of a value must be dominated by its definition.

The rule is MLIR's. A value (an op result or a block argument) is defined in a block B of a region R; an op
U uses it. Let A be the ancestor of U (U itself, or the op holding U's region, and so on up) whose block is in
R. The use is valid when

- such an A exists: R encloses the use (a value defined inside an `scf.for` body is not visible after it);
- no op between U and R is IsolatedFromAbove (a `func.func` sees only what is defined inside it);
- R is a graph region (the body of `builtin.module`, where order does not matter), or else
  - A is in B itself, and the value is an argument of B or the result of an op before A (not of A itself:
    an op may not use its own result, nor may the ops inside it), or
  - A is in another block of R that B dominates in R's control-flow graph (MLIR's rule; blocks no branch
    reaches are dominated by every block).

`verify_dominance(op)` checks every use under `op` and raises a `DominanceError` for the first that breaks the
rule, naming the user and its operand, the value, both places in the source when the ops were parsed
(`FileLineColLoc`, which `tessera.ir.parser.TesseraParser` gives every op), and the function they are in.
Without this check such IR passed the verifier and then crashed a pass or an interpreter with a KeyError.
"""

from __future__ import annotations

from collections.abc import Mapping

from xdsl.dialects import func
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.parser.core import ForwardDeclaredValue
from xdsl.traits import IsolatedFromAbove
from xdsl.utils.exceptions import VerifyException

from tessera.ir.kernel_marks import is_kernel, is_target_kernel

GRAPH_REGION_OPS = (ModuleOp,)
"""Ops whose regions are graph regions (no dominance inside them), as in MLIR: only `builtin.module` here."""


class DominanceError(VerifyException):
    """A use of a value that its definition does not dominate."""


def source_location(op: Operation | None) -> str | None:
    """`file:line:col` of a parsed op, or None for an op without a file location (built or made by a pass)."""
    if op is not None and isinstance(op.location, FileLineColLoc):
        loc = op.location
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return None


def verify_dominance(root: Operation, names: Mapping[SSAValue, str] | None = None) -> None:
    """Check that the definition of every value used under `root` (included) dominates the use; raises a
    DominanceError for the first use that it does not, in program order. `names` gives values the names
    they have in the source (`TesseraParser.value_names`); without it, a value is named by its name hint or
    by what defines it."""
    checker = _Checker()
    for op in root.walk():
        for index, operand in enumerate(op.operands):
            problem = checker.check(op, operand)
            if problem is not None:
                raise DominanceError(_message(op, index, operand, problem, names or {}))


class _Checker:
    """The dominance rule over one walk, remembering op positions per block and block dominance per region."""

    def __init__(self) -> None:
        self._positions: dict[Block, dict[Operation, int]] = {}
        self._dominance: dict[Region, DominanceInfo] = {}

    def check(self, user: Operation, value: SSAValue) -> str | None:
        """None if `value`'s definition dominates its use by `user`, else why not (completing 'uses %v ...')."""
        if isinstance(value, ForwardDeclaredValue):
            # the parser left a placeholder: the name is defined only where this use cannot see it (the op's own
            # region argument, say: `scf.for %j = %c0 to %n step %j`)
            return "which is not defined where this use can see it (only inside a region that the use is not in)"
        defining_op = None if isinstance(value, BlockArgument) else value.owner
        block = value.owner if isinstance(value, BlockArgument) else defining_op.parent_block()
        if block is None or block.parent is None:
            return "which is not in the IR (its op or block was erased or never inserted)"
        region = block.parent
        ancestor, isolated = user, None
        while (ancestor_block := ancestor.parent_block()) is not None and ancestor_block.parent is not region:
            holder = ancestor.parent_op()
            if isolated is None and holder.has_trait(IsolatedFromAbove):
                isolated = holder
            ancestor = holder
        if ancestor_block is None:
            owner = region.parent
            where = f" ({loc})" if (loc := source_location(owner)) else ""
            return (f"outside the region that defines it (a region of '{owner.name}'{where}, which does not "
                    "enclose this use)" if owner is not None else "outside the region that defines it")
        if isolated is not None:
            name = f" @{isolated.sym_name.data}" if isinstance(isolated, func.FuncOp) else ""
            return (f"which is defined outside '{isolated.name}'{name}, an op isolated from above that contains "
                    "this use (it sees only values defined inside it)")
        if isinstance(region.parent, GRAPH_REGION_OPS):
            return None
        if ancestor_block is block:
            if defining_op is None:
                return None
            if defining_op is ancestor:
                return ("which is its own result" if ancestor is user else
                        f"which is a result of the '{ancestor.name}' that contains this use")
            positions = self._positions.get(block)
            if positions is None:
                positions = self._positions[block] = {op: i for i, op in enumerate(block.ops)}
            if positions[defining_op] < positions[ancestor]:
                return None
            return "before its definition (later in the same block)"
        if self._dominates(region, block, ancestor_block):
            return None
        return "in a block that the block defining it does not dominate"

    def _dominates(self, region: Region, a: Block, b: Block) -> bool:
        info = self._dominance.get(region)
        if info is None:
            for candidate in region.blocks:
                last = candidate.last_op
                if last is not None and any(s.parent is not region for s in last.successors):
                    return False  # a branch out of the region: no dominance to speak of (the op verifier says why)
            info = self._dominance[region] = DominanceInfo(region)
        return info.dominates(a, b)


def _describe(value: SSAValue, names: Mapping[SSAValue, str]) -> str:
    """The value's name in the source, else `%name_hint`, else what defines it ('result #1 of 'arith.addf'')."""
    if value in names:
        return names[value]
    if value.name_hint:
        return f"%{value.name_hint}"
    if isinstance(value, ForwardDeclaredValue):
        return "a value"
    if isinstance(value, BlockArgument):
        holder = value.owner.parent_op()
        return f"argument #{value.index} of a block" + (f" of '{holder.name}'" if holder is not None else "")
    return f"result #{value.index} of '{value.owner.name}'"


def _enclosing_function(op: Operation) -> func.FuncOp | None:
    current: Operation | None = op
    while current is not None and not isinstance(current, func.FuncOp):
        current = current.parent_op()
    return current


def _message(user: Operation, index: int, value: SSAValue, problem: str, names: Mapping[SSAValue, str]) -> str:
    """`file:line:col: kernel @k: operand #i of 'op' uses %v <problem>[; %v is defined at file:line:col]`."""
    parts = []
    if loc := source_location(user):
        parts.append(loc)
    if (fn := _enclosing_function(user)) is not None:
        parts.append(f"{'kernel' if is_kernel(fn) or is_target_kernel(fn) else 'func'} @{fn.sym_name.data}")
    name = _describe(value, names)
    text = f"operand #{index} of '{user.name}' uses {name} {problem}"
    defined_at = None if isinstance(value, (BlockArgument, ForwardDeclaredValue)) else source_location(value.owner)
    if defined_at and defined_at not in text:
        text += f"; {name} is defined at {defined_at}"
    return ": ".join([*parts, text])
