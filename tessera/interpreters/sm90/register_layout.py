"""What the register-file check (`register_check`) needs of a register allocation, the same for every CTA of a
launch: the file's column of each register, the registers of each value, and per op what the checker compares,
records and notes (its plans), with the windows that decide which reads can fail (`register_windows`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import UnrealizedConversionCastOp
from xdsl.ir import BlockArgument, Operation

from tessera.dialects import sm90
from tessera.interpreters.ranges import as_slice
from tessera.interpreters.sm90.register_windows import (CheckWindows, carried, check_windows, fence_touches,
                                                           kernel_of, moves_of, view_in_place)
from tessera.regalloc import Allocation, aliases_operand_registers


def _register_order(name: str) -> tuple[str, int, str]:
    """Registers of one class in numeric order (%f2 before %f10), so a vector's registers are one slice."""
    match = re.fullmatch(r"%([A-Za-z_]*)(\d*)", name)
    if match is None:
        return (name, -1, name)
    return (match[1], int(match[2]) if match[2] else -1, name)


def _prints_nothing(op: Operation, view: bool) -> bool:
    """Ops whose operands no instruction reads: views of registers (`view`), casts, control flow (its moves are
    writes)."""
    return (view or isinstance(op, UnrealizedConversionCastOp) or bool(op.regions)
            or op.parent is not None and op is op.parent.last_op)


def _folded_accumulator(op: Operation) -> bool:
    """A constant whose only uses are wgmma accumulators: the printer writes it into the wgmma's registers at
    the fence, or not at all under scale-d 0 (`tessera.ptx.machine`), never after the fence."""
    if not isinstance(op, arith.ConstantOp) or not op.result.uses:
        return False
    return all(isinstance(use.operation, sm90.WgmmaMmaAsyncOp) and use.index == 0 for use in op.result.uses)


@dataclass(frozen=True)
class ValueLayout:
    """Where one SSA value lives in the register file: its registers (columns of the file), their names, and
    the element (column of the value's [T, N] array) each holds; a scalar [T] value is in all its registers."""

    registers: slice | np.ndarray
    names: tuple[str, ...]
    elements: slice | np.ndarray
    columns: np.ndarray
    """`registers` as an index array."""
    codes: np.ndarray
    """The element each register holds, as an index array (`RegisterFileChecker.owner`)."""


class RegisterLayout:
    """What the register file check needs of an allocation, the same for every CTA of a launch: the file's
    column of each register (registers of a class in numeric order, so that a vector's registers are one
    slice), the registers of each value (`of`), and the registers each op writes (`written`); built once per
    launch and shared by the CTAs' checkers. The allocation must not change while it is in use."""

    def __init__(self, allocation: Allocation, every_read: bool = False):
        self.names = allocation.names
        self.every_read = every_read
        """Compare every read and record every write (no `register_windows`): the reference the tests hold the
        windows to."""
        registers = {name for names in allocation.names.values() for name in names if name.startswith("%")}
        self.index = {name: i for i, name in enumerate(sorted(registers, key=_register_order))}
        self._layouts: dict[object, ValueLayout | None] = {}
        self._written: dict[Operation, list[tuple[str, object]]] = {}
        self.plans: dict[Operation, tuple] = {}
        self._windows: dict[Operation, CheckWindows] = {}
        self._fence_noted: dict[Operation, frozenset[Operation]] = {}
        self._raw_touch_plans: dict[Operation, tuple] = {}
        self.in_place: dict[Operation, bool] = {}
        self._is_view: dict[Operation, bool] = {}
        """Per view op, whether its result is in its source's registers (`register_windows.view_in_place`)."""
        self.touch_plans: dict[Operation, tuple] = {}
        self.held_plans: dict[Operation, tuple] = {}
        self.op_plans: dict[int, OpPlan] = {}
        self._wgmma_columns: np.ndarray | None = None

    def of(self, value) -> ValueLayout | None:
        """The registers of `value` (None for a value with none, or one no op or move writes: a kernel
        argument, a loop's induction variable)."""
        try:
            return self._layouts[value]
        except KeyError:
            pass
        names = self.names.get(value)
        layout = None
        if names is not None and (not isinstance(value, BlockArgument) or carried(value)):
            picked = [(i, name) for i, name in enumerate(names) if name.startswith("%")]
            if picked:
                columns = [self.index[name] for _, name in picked]
                elements = [i for i, _ in picked]
                layout = ValueLayout(as_slice(columns), tuple(name for _, name in picked), as_slice(elements),
                                 np.array(columns, np.intp), np.array(elements, np.int64))
        self._layouts[value] = layout
        return layout

    @classmethod
    def shared(cls, allocation: Allocation) -> RegisterLayout:
        """The layout of `allocation`, kept on it across launches (with the per-op plans) while its names stay
        the same (the same values in the same order, each with equal names: compared as lists, in C, against
        copies kept with it); rebuilt if they changed. A layout is its own."""
        if isinstance(allocation, RegisterLayout):
            return allocation
        names = allocation.names
        cached = getattr(allocation, "_register_layout", None)
        if cached is not None and list(map(id, names)) == cached[0] and list(names.values()) == cached[1]:
            return cached[2]
        layout = cls(allocation)
        # (the layout holds the names dict, so its keys stay alive and their ids their own)
        kept = (list(map(id, names)), [list(n) for n in names.values()], layout)
        try:
            allocation._register_layout = kept  # noqa: SLF001 - a cache, not state
        except AttributeError:
            pass
        return layout

    def is_view(self, op: Operation) -> bool:
        """Whether `op`'s results are views of its operands' registers (`aliases_operand_registers`), kept."""
        view = self._is_view.get(op)
        if view is None:
            view = self._is_view[op] = aliases_operand_registers(op)
        return view

    def windows(self, op: Operation) -> CheckWindows | None:
        """The reads the check compares and the writes it records in `op`'s kernel (`register_windows`), once
        per kernel; None for an op outside a `func.func` (then every read is compared, every write recorded)."""
        kernel = None if self.every_read else kernel_of(op)
        if kernel is None:
            return None
        windows = self._windows.get(kernel)
        if windows is None:
            windows = self._windows[kernel] = check_windows(kernel, self)
        return windows

    def plan(self, op: Operation, written) -> tuple:
        """(operand positions whose registers the check compares, with their layouts; result positions whose
        writes it records, with theirs; the registers of wgmma operands `op` writes (from `written(op)`: their
        columns, names and values; empty if none); whether its results are views of its operands' registers;
        the operand positions it moves into a loop's carried registers, with the layouts of those (`moves_of`)):
        what the checker does at `op`, computed once per kernel and allocation (`plans`)."""
        plan = self.plans.get(op)
        if plan is None:
            windows = self.windows(op)
            compared = range(len(op.operands)) if windows is None else windows.reads.get(op, ())
            reads = tuple((i, layout) for i in compared if (layout := self.of(op.operands[i])))
            view = self.is_view(op)
            # a view outside its source's registers writes nothing there: its reads find what they hold
            recorded = (windows is None or op in windows.records) and (not view or view_in_place(op, self))
            # (a region op or terminator moving values into a loop's carried registers records those moves)
            writes = tuple((i, layout) for i, value in enumerate(op.results) if recorded and (layout := self.of(value)))
            followed = self.wgmma_columns  # only these can be in flight (`held`)
            registers = [(name, value) for name, value in written(op) if followed[self.index[name]]]
            columns = np.array([self.index[name] for name, _ in registers], np.intp)
            moves = tuple((i, layout) for i, target in moves_of(op) if recorded and (layout := self.of(target)))
            plan = self.plans[op] = (reads, writes, registers and (columns, *zip(*registers)), view, moves)
        return plan

    def touches(self, op: Operation, written) -> tuple:
        """(columns `op` reads as an instruction, columns it writes, or None for each; for a wgmma the columns
        of its accumulator, result and A fragment with their names): what the fence rule by registers notes at
        `op`, once per launch (`RegisterFileChecker._touch`)."""
        plan = self.touch_plans.get(op)
        if plan is None:
            plan = self._raw_touches(op, written)
            kernel = None if self.every_read or plan[2] is not None else kernel_of(op)
            if kernel is not None:
                noted = self._fence_noted.get(kernel)
                if noted is None:
                    noted = self._fence_noted[kernel] = fence_touches(kernel, lambda o: self._raw_touches(o, written))
                if op not in noted:
                    plan = (None, None, None)
            self.touch_plans[op] = plan
        return plan

    def instruction_reads(self, op: Operation, written) -> np.ndarray | None:
        """The columns of the registers some wgmma accesses that `op` (not a wgmma) reads as an instruction, or
        None: what must not be in flight when `op` runs (`RegisterFileChecker._check_reads_in_flight`)."""
        return self._raw_touches(op, written)[0]

    def _raw_touches(self, op: Operation, written) -> tuple:
        plan = self._raw_touch_plans.get(op)
        if plan is None:
            plan = self._raw_touch_plans[op] = self._touches(op, written)
        return plan

    @property
    def wgmma_columns(self) -> np.ndarray:
        """A [R] mask of the registers some wgmma of the kernel accesses (its accumulator, result or A
        fragment): the only ones the fence rule needs to follow."""
        if self._wgmma_columns is None:
            mask = np.zeros(len(self.index), bool)
            for value in self.names:
                owner = getattr(value, "op", None)
                if isinstance(owner, sm90.WgmmaMmaAsyncOp):
                    for operand in [value, owner.acc] + ([owner.a] if owner.a_in_registers else []):
                        mask[[self.index[n] for n in self.names.get(operand, ()) if n.startswith("%")]] = True
            self._wgmma_columns = mask
        return self._wgmma_columns

    def _touches(self, op: Operation, written) -> tuple:
        if isinstance(op, sm90.WgmmaMmaAsyncOp):
            values = [op.acc, op.result] + ([op.a] if op.a_in_registers else [])
            names = sorted({name for value in values for name in self.names.get(value, ()) if name.startswith("%")},
                           key=_register_order)
            return None, None, (np.array([self.index[n] for n in names], np.intp), tuple(names))
        followed = self.wgmma_columns
        reads = [] if _prints_nothing(op, self.is_view(op)) else sorted(
            {int(c) for value in op.operands if not isinstance(value, BlockArgument) and (layout := self.of(value))
             for c in layout.columns if followed[c]})
        writes = [] if _folded_accumulator(op) else [c for name, _ in written(op) if followed[c := self.index[name]]]
        return (np.array(reads, np.intp) if reads else None), (np.array(writes, np.intp) if writes else None), None

    def held(self, op: sm90.WgmmaMmaAsyncOp) -> tuple[int, tuple[tuple[int, str], ...]]:
        """The registers wgmma `op` holds in flight until its group completes, as a mask (bit c: file column c),
        and per role the mask of its result's ("accumulator") and, for a register A operand, the A fragment's;
        once per launch."""
        plan = self.held_plans.get(op)
        if plan is None:
            values = [(op.result, "accumulator")] + ([(op.a, "A fragment")] if op.a_in_registers else [])
            roles = tuple((column_mask(self.index[name] for name in self.names.get(value, ()) if name.startswith("%")),
                           role) for value, role in values)
            union = 0
            for mask, _ in roles:
                union |= mask
            plan = self.held_plans[op] = (union, roles)
        return plan

    def op_plan(self, op: Operation, written) -> OpPlan:
        """Everything the checker reads at a run of `op` (`OpPlan`), kept by the op's id (the plan holds the op, so
        the id stays its own): one look-up per run instead of one per part."""
        plan = self.op_plans.get(id(op))
        if plan is None or plan.op is not op:
            plan = self.op_plans[id(op)] = OpPlan(self, op, written)
        return plan

    def written(self, op: Operation, find) -> list[tuple[str, object]]:
        """The registers `op` writes, with the value written into each (`find(op)` the first time)."""
        cached = self._written.get(op)
        if cached is None:
            cached = self._written[op] = find(op)
        return cached


def column_mask(columns) -> int:
    """The file columns `columns` (indices, or a slice) as a mask: bit c set for column c."""
    if isinstance(columns, slice):
        return ((1 << (columns.stop - columns.start)) - 1) << columns.start
    mask = 0
    for column in np.asarray(columns).tolist():
        mask |= 1 << column
    return mask


class OpPlan:
    """What the register-file check does at every run of one op (`RegisterLayout.op_plan`), gathered from the layout's
    plans: the same for every CTA and launch of a kernel and allocation.

    `reads`, `writes`, `written`, `view`, `moves`: `RegisterLayout.plan`; `touch_reads`, `touch_writes`,
    `wgmma_registers`: `RegisterLayout.touches`; `flight_reads`: `RegisterLayout.instruction_reads`, the columns
    that must not be in flight when `op` runs; the masks (`column_mask`) of `flight_reads` and of the written
    registers' columns; whether `op` is a wgmma or a `wgmma_fence`; for a wgmma, `RegisterLayout.held`."""

    __slots__ = ("op", "reads", "writes", "written", "view", "moves", "touch_reads", "touch_writes",
                 "wgmma_registers", "flight_reads", "flight_read_mask", "written_mask", "wgmma", "fence", "held")

    def __init__(self, layout: RegisterLayout, op: Operation, written):
        self.op = op
        self.reads, self.writes, self.written, self.view, self.moves = layout.plan(op, written)
        self.touch_reads, self.touch_writes, self.wgmma_registers = layout.touches(op, written)
        self.flight_reads = layout.instruction_reads(op, written)
        self.flight_read_mask = 0 if self.flight_reads is None else column_mask(self.flight_reads)
        self.written_mask = column_mask(self.written[0]) if self.written else 0
        self.wgmma = type(op) is sm90.WgmmaMmaAsyncOp
        self.fence = type(op) is sm90.WgmmaFenceOp
        self.held = layout.held(op) if self.wgmma else None
