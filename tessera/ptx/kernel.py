"""Printing one Target IR kernel as a PTX `.entry`: the parameters, the registers of values, the instruction
lines of each op, labels and comments.

The per-op printers live in `arith` (arith/math/vector), `machine` (sm90) and `control` (scf, func.return);
each registers itself for its op classes with `@handles(...)` and gets the `KernelPrinter`, which owns:

- the names of values (`regs`, `define`, `alias`): one register per element, from the optional assignment or
  fresh; ops that only move registers (vector.shuffle/broadcast/extract, an `index` to `i32` cast) print no
  instruction, their results *are* the source registers (with an assignment that says otherwise, moves);
- per-register work as `Job`s, run as a parallel assignment (`run`): no register is written while another
  job still has to read it, cycles go through a scratch register. With fresh registers no job reads another's
  destination and the jobs print in order; with an assignment that reuses registers (in-place vector ops, loop
  latches, swaps) the order is what keeps the semantics;
- the liveness question of in-place updates (`may_overwrite`): may an op write over a value's registers?
- the hooks of `fold_epilogue`'s unstructured form: instructions that open an `scf.if`'s else-branch
  (`else_entries`) and blocks placed after the kernel's `ret` (`tail`).

Everything printed is deterministic: the same IR gives the same text.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from io import StringIO
from typing import NoReturn

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IndexType, IntegerAttr, IntegerType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.printer import Printer
from xdsl.traits import IsTerminator
from xdsl.utils.exceptions import DiagnosticException

from tessera.ir.class_tests import subclass_test
from tessera.ir.walk import walk_ops
from tessera.cluster import CLUSTER_ATTR, kernel_cluster
from tessera.dialects import sm90
from tessera.kernel_abi import SOURCE_ATTR, TARGET_KERNEL_ATTR
from tessera.ptx.registers import (
    B32,
    B64,
    RegisterClass,
    RegisterFile,
    UnsupportedType,
    is_register,
    lanes,
    register_class,
)
from tessera.sm90 import facts

SMEM_SYMBOL = "smem"
"""The kernel's dynamic shared memory, `.extern .shared .align SMEM_ALIGNMENT .b8 smem[];`."""

SMEM_ALIGNMENT = max(facts.swizzle_period_bytes(mode) for mode in facts.SWIZZLE_MODES)
"""The alignment the dynamic shared memory's base is rounded up to at run time (the 128B swizzle period), so
that `sm90.shared_buffer` offsets aligned to a swizzle period are aligned in the shared window too."""

INDENT = "    "


class PtxPrintError(DiagnosticException):
    """A Target IR construct the PTX printer cannot print; the message names the kernel, the op and the rule."""


Handler = Callable[["KernelPrinter", Operation], None]
HANDLERS: dict[type[Operation], Handler] = {}


def handles(*op_types: type[Operation]) -> Callable[[Handler], Handler]:
    """Register the decorated function as the printer of ops of `op_types`."""

    def register(handler: Handler) -> Handler:
        for op_type in op_types:
            HANDLERS[op_type] = handler
        return handler

    return register


@dataclass
class Job:
    """The instructions computing one destination register (or none, for a store) from source names; `lines`
    gets the register to write, which is a scratch register when the job is moved out of a cycle."""

    dst: str | None
    cls: RegisterClass | None
    srcs: tuple[str, ...]
    lines: Callable[[str | None], list[str]]


def move_job(dst: str, src: str, cls: RegisterClass) -> Job:
    return Job(dst, cls, (src,), lambda d: [f"{cls.move} {d}, {src}"])


@dataclass
class KernelParam:
    """One `.param` of the entry and the value it stands for."""

    name: str
    declaration: str
    value: BlockArgument


def kernel_threads(fn: func.FuncOp) -> int:
    return _kernel_info(fn, "threads")


def kernel_smem_bytes(fn: func.FuncOp) -> int:
    return _kernel_info(fn, "smem_bytes")


def _kernel_info(fn: func.FuncOp, key: str) -> int:
    info = fn.attributes.get(TARGET_KERNEL_ATTR)
    entry = info.data.get(key) if isinstance(info, DictionaryAttr) else None
    if not isinstance(entry, IntegerAttr):
        raise PtxPrintError(f"ptx: @{fn.sym_name.data}: '{TARGET_KERNEL_ATTR}' needs an integer '{key}'")
    return entry.value.data


_is_shared_buffer = subclass_test(sm90.SharedBufferOp)


def smem_base_alignment(fn: func.FuncOp) -> int | None:
    """What the kernel rounds its dynamic shared memory base up to: SMEM_ALIGNMENT, or more if a buffer asks;
    None for a kernel without shared buffers."""
    aligns = [op.alignment.value.data for op in walk_ops(fn) if _is_shared_buffer(op)]
    return max([SMEM_ALIGNMENT, *aligns]) if aligns else None


def launch_smem_bytes(fn: func.FuncOp, align: int | None = None) -> int:
    """Dynamic shared memory to launch the printed kernel with: its `smem_bytes` plus the slack that rounding
    the base up to `smem_base_alignment` (`align`, when the caller has it) may skip."""
    align = smem_base_alignment(fn) if align is None else align
    return kernel_smem_bytes(fn) + (align - 1 if align else 0)


def identifier(text: str) -> str:
    """`text` as a PTX identifier: letters, digits, `_` and `$`, not starting with a digit."""
    cleaned = "".join(c if (c.isascii() and c.isalnum()) or c in "_$" else "_" for c in text)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"_{cleaned}"


class _LinePrinter(Printer):
    """xDSL's printer, noting where in its output each op's text starts."""

    def __init__(self, stream: StringIO):
        super().__init__(stream=stream)
        self.starts: dict[Operation, int] = {}

    def print_op(self, op: Operation) -> None:
        self.starts[op] = self.stream.tell()
        super().print_op(op)


class TargetIrText:
    """Values and ops as the Target IR printer shows them (`tessera-opt -p ...` output), for comments: the
    module is printed once, so that every value has its name (`%s_masked`, `%42`) and every op its first
    line, which is cut from that one text rather than printed again (an op with regions would print them
    all)."""

    MAX_LINE = 160

    def __init__(self, module: Operation):
        self._printer = _LinePrinter(StringIO())
        self._printer.print_op(module)
        self._text = self._printer.stream.getvalue()
        self._lines: dict[Operation, str] = {}

    def name(self, value: SSAValue) -> str:
        self._printer.stream = StringIO()
        return f"%{self._printer.print_ssa_value(value)}"

    def line(self, op: Operation) -> str:
        """The op's first line (`%m_final, %l_final = scf.for %j = ... {`), cut at MAX_LINE characters."""
        line = self._lines.get(op)
        if line is not None:
            return line
        start = self._printer.starts.get(op)
        if start is not None:
            end = self._text.find("\n", start)
            line = self._text[start:end if end >= 0 else len(self._text)].strip()
        else:  # an op made after the module was printed
            self._printer.stream = StringIO()
            self._printer.print_op(op)
            line = self._printer.stream.getvalue().split("\n", 1)[0].strip()
        line = line if len(line) <= self.MAX_LINE else line[: self.MAX_LINE - 3] + "..."
        self._lines[op] = line
        return line


class KernelPrinter:
    """Prints one Target IR kernel (see the module docstring)."""

    def __init__(self, fn: func.FuncOp, text: TargetIrText | None, registers: RegisterFile, *,
                 fold_epilogue: bool = True):
        self.fn = fn
        self.kernel = fn.sym_name.data
        self.text = text
        self.comments = text is not None
        """Whether the PTX carries a comment with each op's Target IR line (`print_ptx(comments=...)`)."""
        self.registers = registers
        self.out: list[str] = []
        self.values: dict[SSAValue, list[str]] = {}
        self.holders: dict[str, list[SSAValue]] = defaultdict(list)
        self.prepared: dict[Operation, list[str]] = {}  # wgmma -> result registers its accumulator was copied to
        self.folded: dict[Operation, str] = {}  # ops printed as part of another one -> where
        self.fold_epilogue = fold_epilogue
        """Whether a flash forward's epilogue P.V is folded into its loop where it can be (`fold_epilogue`)."""
        self.else_entries: dict[Operation, list[str]] = {}  # scf.if -> instructions opening its else-branch
        self.tail: list[str] = []  # lines after the kernel's `ret`: blocks reached only by branches
        self.current: Operation | None = None
        self.smem_base: str | None = None
        self._labels = 0
        self._positions: dict[Block, dict[Operation, int]] = {}
        self.smem_align = smem_base_alignment(fn)

    # region output ------------------------------------------------------------------------------------
    def emit(self, *instructions: str) -> None:
        for instruction in instructions:
            self.out.append(f"{INDENT}{instruction};")

    def comment(self, text: str) -> None:
        if self.comments:
            self.out.append(f"{INDENT}// {text}")

    def new_label(self, stem: str) -> str:
        self._labels += 1
        return f"$L__{stem}{self._labels}"

    def place_label(self, label: str) -> None:
        self.out.append(f"{label}:")

    def name(self, value: SSAValue) -> str:
        """The value's Target IR name; without comments (no module text), its name hint or its position."""
        if self.text is not None:
            return self.text.name(value)
        if value.name_hint:
            return f"%{value.name_hint}"
        return f"%arg{value.index}" if isinstance(value, BlockArgument) else "%value"

    def describe(self, op: Operation) -> str:
        return self.text.line(op) if self.text is not None else op.name

    def refuse(self, op: Operation | None, message: str) -> NoReturn:
        text = self.text if self.text is not None else TargetIrText(self.fn)  # errors name the op's line
        where = f"'{text.line(op)}': " if op is not None else ""
        raise PtxPrintError(f"ptx: @{self.kernel}: {where}{message}")

    # endregion
    # region names of values ---------------------------------------------------------------------------
    def regs(self, value: SSAValue) -> list[str]:
        """The names (registers, or immediates of constants) of `value`'s elements."""
        names = self.values.get(value)
        if names is None:
            self.refuse(self.current, f"operand {self.name(value)} has no registers (defined in an unsupported way)")
        return names

    def reg(self, value: SSAValue) -> str:
        """The one name of a scalar."""
        names = self.regs(value)
        if len(names) != 1:
            self.refuse(self.current, f"{self.name(value)} must be a scalar here, got {value.type}")
        return names[0]

    def cls(self, value: SSAValue) -> RegisterClass:
        try:
            return register_class(value.type)
        except UnsupportedType as e:
            self.refuse(self.current, str(e))

    def bind(self, value: SSAValue, names: Sequence[str], cls: RegisterClass | None = None) -> None:
        cls = cls or self.cls(value)
        names = list(names)
        self.values[value] = names
        for name in dict.fromkeys(names):
            if is_register(name):
                try:
                    self.registers.note(name, cls)
                except UnsupportedType as e:
                    self.refuse(self.current, str(e))
                self.holders[name].append(value)

    def assigned(self, value: SSAValue) -> list[str] | None:
        try:
            return self.registers.assignment(value)
        except UnsupportedType as e:
            self.refuse(self.current, str(e))

    def define(self, value: SSAValue) -> list[str]:
        """Registers for a result the op writes: the assigned ones, or fresh ones."""
        names = self.assigned(value)
        if names is None:
            cls = self.cls(value)
            names = [self.registers.fresh(cls) for _ in range(lanes(value.type))]
        elif not all(is_register(n) for n in names):
            self.refuse(self.current, f"the register assignment gives {self.name(value)} immediates, but it is computed")
        self.bind(value, names)
        return names

    def alias(self, value: SSAValue, names: Sequence[str]) -> None:
        """`value` is the registers `names` (no instruction); an assignment that names others gets moves."""
        assigned = self.assigned(value)
        if assigned is None:
            self.bind(value, names)
            return
        self.move(assigned, names, self.cls(value))
        self.bind(value, assigned)

    def temp(self, cls: RegisterClass) -> str:
        return self.registers.fresh(cls)

    # endregion
    # region parallel assignment -------------------------------------------------------------------------
    def move(self, dsts: Sequence[str], srcs: Sequence[str], cls: RegisterClass) -> None:
        """dsts[i] = srcs[i] for all i at once."""
        self.moves([(d, s, cls) for d, s in zip(dsts, srcs, strict=True)])

    def moves(self, triples: Iterable[tuple[str, str, RegisterClass]]) -> None:
        """Each (destination, source, class) at once: a parallel copy (a swap goes through a scratch register)."""
        pairs: dict[str, tuple[str, RegisterClass]] = {}
        for d, s, cls in triples:
            if pairs.setdefault(d, (s, cls))[0] != s:
                self.refuse(self.current, f"register {d} would receive two different values ({pairs[d][0]}, {s})")
        self.run([move_job(d, s, cls) for d, (s, cls) in pairs.items() if d != s])

    def run(self, jobs: list[Job]) -> None:
        """Print the jobs as one parallel assignment (module docstring)."""

        def reads(job: Job) -> set[str]:
            return {s for s in job.srcs if is_register(s) and s != job.dst}

        readers: Counter[str] = Counter()
        for job in jobs:
            readers.update(reads(job))
        if not any(job.dst is not None and readers[job.dst] for job in jobs):
            for job in jobs:
                self.emit(*job.lines(job.dst))
            return
        pending = list(jobs)
        while pending:
            ready = next((i for i, j in enumerate(pending) if j.dst is None or readers[j.dst] == 0), None)
            if ready is None:
                # Every pending job writes a register another one still reads: compute the first into a
                # scratch register and copy it over once its destination is free.
                job = pending.pop(0)
                scratch = self.temp(job.cls)
                self.emit(*job.lines(scratch))
                readers.subtract(reads(job))
                later = move_job(job.dst, scratch, job.cls)
                pending.append(later)
                readers.update(reads(later))
                continue
            job = pending.pop(ready)
            self.emit(*job.lines(job.dst))
            readers.subtract(reads(job))

    # endregion
    # region liveness for in-place updates -----------------------------------------------------------------
    def _position(self, op: Operation) -> int:
        block = op.parent_block()
        positions = self._positions.get(block)
        if positions is None:
            positions = {o: i for i, o in enumerate(block.ops)}
            self._positions[block] = positions
        return positions[op]

    @staticmethod
    def _ancestor_in(op: Operation, block: Block) -> Operation | None:
        while op is not None and op.parent_block() is not block:
            op = op.parent_op()
        return op

    def live_after(self, value: SSAValue, op: Operation) -> bool:
        """Whether `value` may be read after `op` executes (conservative: values from enclosing blocks are
        live; results of ops enclosing `op` or following it are not produced yet)."""
        block = op.parent_block()
        owner = value.owner
        if isinstance(owner, Operation):
            if owner is op or owner.is_ancestor(op):
                return False
            if owner.parent_block() is not block:
                return True
            if self._position(owner) > self._position(op):
                return False
        elif owner is not block:
            return True
        here = self._position(op)
        for use in value.uses:
            user = self._ancestor_in(use.operation, block)
            if user is None or (user is not op and self._position(user) > here):
                return True
        return False

    def may_overwrite(self, value: SSAValue, op: Operation) -> bool:
        """Whether `op` may write its result into `value`'s registers: they are distinct registers and nothing
        holding any of them is read after `op`."""
        names = self.regs(value)
        if len(set(names)) != len(names) or not all(is_register(n) for n in names):
            return False
        return not any(self.live_after(holder, op) for n in names for holder in self.holders[n])

    # endregion
    # region ops -----------------------------------------------------------------------------------------
    def print_block(self, block: Block, skip_terminator: bool = True) -> None:
        for op in block.ops:
            if skip_terminator and op is block.last_op and op.has_trait(IsTerminator):
                break
            self.print_op(op)

    def print_op(self, op: Operation) -> None:
        """A comment with the op's Target IR line, then its instructions."""
        if op in self.folded:
            self.comment(f"{self.describe(op)}: {self.folded[op]}")
            return
        handler = HANDLERS.get(type(op))
        if handler is None:
            self.refuse(op, f"no PTX for '{op.name}'")
        self.comment(self.describe(op))
        saved, self.current = self.current, op
        handler(self, op)
        self.current = saved
        if op.regions:
            self.comment(f"}} {op.name}")

    # endregion
    # region the entry -------------------------------------------------------------------------------------
    def params(self) -> list[KernelParam]:
        """The `.param` of each kernel argument: tensor maps as 64-byte aligned 128-byte arrays, i64 pointers as
        .u64, index/i32 sizes as .u32."""
        taken = {SMEM_SYMBOL}
        params = []
        for i, arg in enumerate(self.fn.body.blocks.first.args):
            base = identifier(f"param_{self.name(arg)[1:]}")
            name, k = base, 1
            while name in taken:
                name, k = f"{base}_{k}", k + 1
            taken.add(name)
            ty = arg.type
            if isinstance(ty, sm90.TensorMapType):
                decl = f".param .align {facts.TENSOR_MAP_ALIGNMENT} .b8 {name}[{facts.TENSOR_MAP_BYTES}]"
            elif ty == IntegerType(64):
                decl = f".param .u64 {name}"
            elif isinstance(ty, IndexType) or ty == IntegerType(32):
                decl = f".param .u32 {name}"
            else:
                self.refuse(None, f"argument {i} ({self.name(arg)}) has type {ty}; kernel arguments are tensor maps, "
                                  "i64 pointers and index/i32 sizes")
            params.append(KernelParam(name, decl, arg))
        return params

    def print_prologue(self, params: list[KernelParam]) -> None:
        """Load the parameters and compute the aligned dynamic shared memory base."""
        self.comment("parameters")
        for param in params:
            arg, ty = param.value, param.value.type
            if isinstance(ty, sm90.TensorMapType):
                # TMA takes the tensor map's generic address [P#...-cp-async-bulk-tensor]
                (reg,) = self._param_registers(arg, B64)
                self.emit(f"mov.b64 {reg}, {param.name}", f"cvta.param.u64 {reg}, {reg}")
            elif ty == IntegerType(64):
                (reg,) = self._param_registers(arg, B64)
                what = self.fn.arg_attrs.data[arg.index].data if self.fn.arg_attrs is not None else {}
                self.emit(f"ld.param.u64 {reg}, [{param.name}]")
                if SOURCE_ATTR in what:  # a tensor's address: global pointers arrive as generic addresses
                    self.emit(f"cvta.to.global.u64 {reg}, {reg}")
            else:
                (reg,) = self._param_registers(arg, B32)
                self.emit(f"ld.param.u32 {reg}, [{param.name}]")
        align = self.smem_align
        if align is not None:
            self.comment(f"dynamic shared memory: the base of '{SMEM_SYMBOL}' rounded up to {align} bytes")
            base = self.smem_base = self.temp(B32)
            self.emit(f"mov.u32 {base}, {SMEM_SYMBOL}", f"add.u32 {base}, {base}, {align - 1}",
                      f"and.b32 {base}, {base}, {-align}")

    def _param_registers(self, arg: BlockArgument, cls: RegisterClass) -> list[str]:
        names = self.assigned(arg) if not isinstance(arg.type, sm90.TensorMapType) else None
        names = names or [self.temp(cls)]
        self.bind(arg, names, cls)
        return names

    def print_kernel(self) -> list[str]:
        """The `.entry` text of the kernel."""
        if identifier(self.kernel) != self.kernel:
            self.refuse(None, "the kernel name is not a PTX identifier (letters, digits, _ and $)")
        params = self.params()
        self.print_prologue(params)
        self.print_block(self.fn.body.blocks.first, skip_terminator=False)
        threads = kernel_threads(self.fn)
        smem, align = kernel_smem_bytes(self.fn), self.smem_align
        slack = f" ({smem} + {align - 1} to align the base)" if align else ""
        head = [
            f"// @{self.kernel}: {threads} threads; launch with {launch_smem_bytes(self.fn, align)} bytes of dynamic shared "
            f"memory{slack}",
            f".visible .entry {self.kernel}(",
        ]
        head += [f"{INDENT}{p.declaration}{',' if i + 1 < len(params) else ''}" for i, p in enumerate(params)]
        head[-1] += ")"
        head += [f".reqntid {threads}, 1, 1", ".minnctapersm 1"]
        if CLUSTER_ATTR in self.fn.attributes and kernel_cluster(self.fn) != (1, 1, 1):
            head.append(".explicitcluster")  # launched with its cluster shape, or (1, 1, 1) where that does not fit
        head.append("{")
        try:
            declarations = self.registers.declarations()
        except UnsupportedType as e:
            self.refuse(None, str(e))
        return head + [f"{INDENT}{d}" for d in declarations] + self.out + self.tail + ["}"]

    # endregion


def element_lists(printer: KernelPrinter, values: Iterable[SSAValue], count: int) -> list[list[str]]:
    """The names of each value, a scalar repeated `count` times (a scalar operand of a per-register op)."""
    lists = []
    for value in values:
        names = printer.regs(value)
        lists.append(names * count if len(names) == 1 and count != 1 else names)
    return lists
