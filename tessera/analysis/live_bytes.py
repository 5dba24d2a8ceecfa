"""Peak live bytes of a kernel's intermediates, per thread block.

What is counted, at every program point (after each op, and on entry to and exit from each loop):
- register tiles that are live there, by their byte size (`TileType.byte_size`);
- scratch buffers (kernel arguments with `tile.role = "scratch"`) that are live there, each by this block's
  share of it: the buffer's size for the given sizes divided by the number of thread blocks in the grid
  (every variant gives each block a disjoint slice).

What is not counted: the kernel's inputs and outputs, shared-memory tiles (the operand tiles the copies
fill), index scalars, and the output accumulator chain: the register tiles that flow into a store to an
output argument, traced back through ops that keep the stored shape (cast, div_rows, mul_rows, the
accumulator operand of mma) and around loops (iter_args, block arguments, yields, results). What remains are
the score-derived intermediates the 2-pass/3-pass/online comparison is about.

Liveness over structured control flow: ops are numbered in program order, a loop gets an entry point before
its body and an exit point after it. A value is live after point p when it is defined at or before p and
used after p (a result is always live right after the op that defines it). A value defined outside an
`scf.for` and used inside it is live through the whole body (every iteration uses it). Loop-carried state
is the body's block argument from the entry until its last use, and the yielded value from its definition
to the `scf.yield`; inits die at the entry and results are born at the exit. A scratch buffer is live from
its first access to its last, where an access inside a loop stands for the whole outermost loop holding it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue

from tessera.dialects import tile
from tessera.dialects.tile_types import MemSpace, TileType, element_byte_width
from tessera.kernel_abi import kernels, signature


@dataclass(frozen=True)
class LiveValue:
    """One live item at the peak: a register tile or this block's share of a scratch buffer."""

    name: str
    kind: str  # "register" or "scratch"
    description: str
    bytes: int


@dataclass(frozen=True)
class LiveBytes:
    """The result of `peak_live_bytes`: the peak, where it is, and what is live there (largest first)."""

    kernel: str
    peak_bytes: int
    peak_at: str
    breakdown: tuple[LiveValue, ...]

    @property
    def register_bytes(self) -> int:
        return sum(v.bytes for v in self.breakdown if v.kind == "register")

    @property
    def scratch_bytes(self) -> int:
        return sum(v.bytes for v in self.breakdown if v.kind == "scratch")


# region Program points


class _ProgramPoints:
    """Ops of a function in program order; region-holding ops get an entry and an exit point."""

    def __init__(self, fn: func.FuncOp):
        self.fn = fn
        self.points: list[tuple[Operation, str]] = []
        self.pos: dict[Operation, int] = {}
        self.exit: dict[Operation, int] = {}
        self._number(fn.body.blocks.first)

    def _number(self, block: Block) -> None:
        for op in block.ops:
            self.pos[op] = len(self.points)
            self.points.append((op, "entry" if op.regions else "op"))
            if op.regions:
                for region in op.regions:
                    for inner in region.blocks:
                        self._number(inner)
                self.exit[op] = len(self.points)
                self.points.append((op, "exit"))

    def enclosing(self, op: Operation) -> Iterator[Operation]:
        """The region-holding ops around `op`, innermost first, up to (not including) the function."""
        parent = op.parent_op()
        while parent is not None and parent is not self.fn:
            yield parent
            parent = parent.parent_op()

    def definition(self, value: SSAValue) -> int:
        if isinstance(value, OpResult):
            op = value.op
            return self.exit[op] if op.regions else self.pos[op]
        assert isinstance(value, BlockArgument)
        parent = value.block.parent_op()
        return -1 if parent is self.fn else self.pos[parent]

    def defined_inside(self, value: SSAValue, loop: Operation) -> bool:
        if isinstance(value, BlockArgument):
            scope = value.block.parent_op()
            return scope is loop or (scope is not None and loop in self.enclosing(scope))
        return loop in self.enclosing(value.op)

    def last_use(self, value: SSAValue) -> int:
        """The last point where `value` is needed; a use inside a loop that does not define the value counts
        at the end of that loop's body (the next iteration needs it again)."""
        last = self.definition(value)
        for use in value.uses:
            user = use.operation
            at = self.pos[user]
            for loop in self.enclosing(user):
                if not self.defined_inside(value, loop):
                    at = max(at, self.exit[loop] - 1)
            last = max(last, at)
        return last

    def describe(self, p: int) -> str:
        op, kind = self.points[p]
        names = " ".join(f"%{r.name_hint}" for r in op.results if r.name_hint)
        text = f"{op.name} {names}".rstrip() if kind == "op" else f"{op.name} ({kind})"
        loops = [self._loop_name(loop) for loop in self.enclosing(op)]
        if loops:
            text += " in " + " in ".join(loops)
        return text

    @staticmethod
    def _loop_name(loop: Operation) -> str:
        if isinstance(loop, scf.ForOp) and loop.body.blocks.first.args[0].name_hint:
            return f"scf.for %{loop.body.blocks.first.args[0].name_hint}"
        return loop.name


# endregion
# region Which values count


def _is_register_tile(value: SSAValue) -> bool:
    return isinstance(value.type, TileType) and value.type.memory_space == MemSpace.REGISTER


def _base_tensor(value: SSAValue) -> SSAValue:
    """The kernel argument a (chain of) tile.view(s) looks into."""
    while isinstance(value, OpResult) and isinstance(value.op, tile.ViewOp):
        value = value.op.source
    return value


def _loop_carried(loop: scf.ForOp, i: int) -> list[SSAValue]:
    """Init, block argument, yielded value and result of iter_arg i."""
    body = loop.body.blocks.first
    yielded = body.last_op.operands[i]
    return [loop.iter_args[i], body.args[i + 1], yielded, loop.results[i]]


def output_accumulator_chain(fn: func.FuncOp, outputs: set[SSAValue]) -> set[SSAValue]:
    """Register tiles that flow into a store to one of `outputs`, traced back through shape-keeping ops."""
    work = [
        op.value for op in fn.walk() if isinstance(op, tile.StoreGlobalOp) and _base_tensor(op.dest) in outputs
    ]
    chain: set[SSAValue] = set()
    while work:
        value = work.pop()
        if value in chain or not _is_register_tile(value):
            continue
        chain.add(value)
        shape = value.type.get_shape()
        if isinstance(value, BlockArgument):
            loop = value.block.parent_op()
            if isinstance(loop, scf.ForOp) and value.index > 0:
                work += _loop_carried(loop, value.index - 1)
            continue
        op = value.op
        if isinstance(op, scf.ForOp):
            work += _loop_carried(op, value.index)
        elif isinstance(op, tile.MmaOp):
            work.append(op.acc)  # A and B are operands, not the accumulated output
        else:
            work += [v for v in op.operands if _is_register_tile(v) and v.type.get_shape() == shape]
    return chain


def _register_values(fn: func.FuncOp) -> Iterator[SSAValue]:
    for op in fn.walk():
        yield from op.results
        for region in op.regions:
            for block in region.blocks:
                if op is not fn:
                    yield from block.args


def _value_name(value: SSAValue) -> str:
    if value.name_hint:
        return f"%{value.name_hint}"
    if isinstance(value, OpResult):
        return f"<{value.op.name} result {value.index}>"
    return f"<block argument {value.index}>"


# endregion


def peak_live_bytes(kernel: func.FuncOp | ModuleOp, sizes: Mapping[str, int] | None = None) -> LiveBytes:
    """Peak live bytes of `kernel`'s intermediates per thread block (see the module docstring).

    `sizes` binds the named dimensions (seq_q, seq_k, batch, heads, ...) that scratch buffers and the grid
    use; kernels without scratch buffers need none. Raises ValueError naming a missing size."""
    if isinstance(kernel, ModuleOp):
        found = kernels(kernel)
        if len(found) != 1:
            raise ValueError(f"peak_live_bytes needs a module with exactly one kernel, found {len(found)}")
        kernel = found[0]
    sig = signature(kernel)
    sizes = dict(sizes or {})
    program = _ProgramPoints(kernel)
    n_points = len(program.points)
    args = dict(zip((a.name for a in sig.args), kernel.body.blocks.first.args))

    # (first point, last point, item) for everything that counts
    intervals: list[tuple[int, int, LiveValue]] = []

    outputs = {args[a.name] for a in sig.outputs}
    excluded = output_accumulator_chain(kernel, outputs)
    for value in _register_values(kernel):
        if not _is_register_tile(value) or value in excluded:
            continue
        ty: TileType = value.type  # type: ignore[assignment]
        item = LiveValue(_value_name(value), "register", str(ty), ty.byte_size)
        intervals.append((program.definition(value), program.last_use(value), item))

    scratch = [a for a in sig.args if a.role == "scratch"]
    if scratch:
        needed = set().union(*(a.dims.symbols() for a in scratch), sig.grid.symbols())
        if missing := sorted(needed - set(sizes)):
            raise ValueError(f"peak_live_bytes of @{sig.name} needs the sizes {missing} (scratch buffers and the grid use them)")
        blocks = math.prod(sig.grid_size(sizes))
    for arg in scratch:
        # An access inside a loop stands for the whole outermost loop around it.
        spans = []
        for op in _accesses(args[arg.name]):
            outer = ([op, *program.enclosing(op)])[-1]
            spans.append((program.pos[outer], program.exit.get(outer, program.pos[outer])))
        if not spans:
            continue
        shape = arg.shape(sizes)
        total = math.prod(shape) * element_byte_width(arg.type.element_type)
        description = f"scratch {list(shape)} {arg.type.element_type}, 1/{blocks} per block"
        item = LiveValue(f"%{arg.name}", "scratch", description, -(-total // blocks))
        intervals.append((min(s for s, _ in spans), max(e for _, e in spans), item))

    def live_after(p: int) -> list[LiveValue]:
        live = []
        for first, last, item in intervals:
            if item.kind == "scratch":
                if first <= p <= last:
                    live.append(item)
            elif first <= p and (p < last or p == first):
                live.append(item)
        return live

    peak, peak_point = -1, 0
    for p in range(n_points):
        total = sum(item.bytes for item in live_after(p))
        if total > peak:
            peak, peak_point = total, p
    breakdown = tuple(sorted(live_after(peak_point), key=lambda v: (-v.bytes, v.name)))
    return LiveBytes(sig.name, max(peak, 0), program.describe(peak_point), breakdown)


def _accesses(tensor: SSAValue) -> Iterator[Operation]:
    """The ops that read or write `tensor` through (chains of) views."""
    for use in tensor.uses:
        if isinstance(use.operation, tile.ViewOp):
            yield from _accesses(use.operation.result)
        else:
            yield use.operation


# region The seed's comparison


def compare_attention_variants(
    seq_q: int = 1024,
    seq_k: int = 1024,
    block_m: int = 128,
    block_n: int = 256,
    head_dim: int = 128,
    dtype: str = "bf16",
    causal: bool = False,
    batch: int = 1,
    heads: int = 1,
) -> dict[str, LiveBytes]:
    """Build the three-pass, two-pass and online (flash) kernels with the same tiles and report each one's
    peak live bytes per block. With M = seq_k, M0 = block_n, M1 = ceildiv(M, M0) and P = block_m queries, the
    seed's table says three-pass ~ 2 M P floats, two-pass ~ M0 P (+ M1 P statistics), online ~ M0 P."""
    from tessera.kernels import flash_attention, three_pass_attention, two_pass_attention

    options = dict(head_dim=head_dim, causal=causal, dtype=dtype, block_m=block_m, block_n=block_n)
    sizes = dict(batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k)
    builders = {"three_pass": three_pass_attention, "two_pass": two_pass_attention, "flash": flash_attention}
    return {name: peak_live_bytes(build(**options), sizes) for name, build in builders.items()}


def format_comparison(reports: Mapping[str, LiveBytes], block_m: int) -> str:
    """A text table of `compare_attention_variants`' reports, in bytes and in units of P = block_m floats."""
    lines = [f"{'variant':<11} {'peak bytes':>11} {'floats / P':>11}  peak at", "-" * 72]
    for name, report in reports.items():
        per_p = report.peak_bytes / (4 * block_m)
        lines.append(f"{name:<11} {report.peak_bytes:>11,} {per_p:>11.1f}  {report.peak_at}")
    return "\n".join(lines)


# endregion
