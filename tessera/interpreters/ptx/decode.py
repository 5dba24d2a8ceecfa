"""Decoding: each PTX instruction becomes a `Step` holding a pre-bound Python closure, once per launch.

A decoder (registered per opcode with `@opcode`) reads the instruction's modifiers with `Modifiers` (every
modifier must be consumed: a leftover one is refused, so an unsupported variant never runs), and binds its
operands with `Operands.read` / `Operands.write` to closures over the machine's register arrays. A closure
takes `sel`, the lanes that execute (an index array, or `ALL` = slice(None) when every lane of the batch
does), so the same code serves converged and divergent execution.

`Step.run(sel)` for a plain step: the scheduler applies the guard, runs it on the active lanes and advances
their pc. A `control` step's `run(lanes, active)` gets all lanes at this pc and the active ones (guard true)
and moves the pcs and statuses itself (branches, exits, barriers, waits). `unit` (32 or 128) marks a
collective instruction that all non-exited threads of the warp (warpgroup) execute together.

Anything the executor does not implement raises `PtxExecutionError` naming the instruction and its line, at
decode time, before any instruction runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.state import Machine, PtxExecutionError, fail
from tessera.interpreters.ptx.syntax import (
    Address,
    FloatImm,
    Imm,
    Instruction,
    Label,
    Negated,
    Reg,
    Sink,
    Special,
    Symbol,
    Vector,
)
from tessera.interpreters.ptx.types import PtxType, ptx_type

ALL = slice(None)

CLOCK_TICKS_PER_READ = 1024
"""How far a lane's clock moves at each read of `%clock`/`%clock64` (cycles; one counter, `%clock` its low 32
bits) or of `%globaltimer` (ns, its own counter): the executor has no cycles, so each read is later than the
lane's last one, by enough that nvcc's delay loops (`while (clock64() - t0 < wait)`) end within `max_steps`."""

_CLOCK_COUNTERS = {"%clock": "%clock64", "%clock64": "%clock64", "%globaltimer": "%globaltimer"}


def per_lane(values, shape: tuple, dtype=None) -> np.ndarray:
    """`values` (what an operand reader returns: one value per lane, or one value for every lane) as an array of
    `shape` (and `dtype`): `values` itself where it already is one, else broadcast (read-only; `np.broadcast_to`
    costs some microseconds a call, the steps of a launch call it hundreds of times on arrays already in shape).
    The caller never writes into it. One value (an immediate, a uniform result) becomes a read-only view with a
    zero stride, as `np.broadcast_to` makes it, built directly (a fifth of its cost)."""
    if type(values) is np.ndarray and values.shape == shape and (dtype is None or values.dtype == dtype):
        return values
    one = np.asarray(values, dtype)
    if one.shape == shape:  # (converted to `dtype`: a copy of its own)
        return one
    if one.ndim or len(shape) != 1:
        return np.broadcast_to(one, shape)
    view = np.ndarray(shape, one.dtype, one, 0, (0,))
    view.flags.writeable = False
    return view


@dataclass
class Step:
    inst: Instruction
    run: Callable
    control: bool = False
    unit: int = 0
    mask: int | None = None  # the member mask of a warp collective, when it is an immediate
    member_mask: Callable | None = None  # otherwise the reader of its member mask operand (lanes -> mask)
    watched: frozenset = frozenset()  # the wgmma registers it names, checked and logged around `run` (asynchrony)
    branch: int | None = None  # a `bra`'s target, where `run` does nothing but move the pcs (`Scheduler._straight`)


DECODERS: dict[str, Callable[[Operands, Instruction, Modifiers], Step | Callable]] = {}


def opcode(*names: str):
    """Register a decoder for these opcodes. It returns a Step, or a plain closure run(sel)."""

    def register(fn):
        for name in names:
            DECODERS[name] = fn
        return fn

    return register


class Modifiers:
    """The modifiers of one instruction, consumed by its decoder."""

    def __init__(self, ops: Operands, inst: Instruction):
        self.ops, self.inst = ops, inst
        self.left = list(inst.modifiers)

    def take(self, *names: str) -> str | None:
        """Remove and return the first modifier among `names` present, or None."""
        for m in self.left:
            if m in names:
                self.left.remove(m)
                return m
        return None

    def drop(self, *names: str) -> None:
        """Accept (and ignore) these modifiers: cache and ordering hints without a semantic effect here."""
        for name in names:
            while name in self.left:
                self.left.remove(name)

    def drop_prefixed(self, *prefixes: str) -> None:
        self.left = [m for m in self.left if not m.startswith(prefixes)]

    def type(self) -> PtxType:
        """The last modifier, which must be a type."""
        if not self.left or ptx_type(self.left[-1]) is None:
            raise self.ops.refuse(self.inst, "needs a type modifier")
        return ptx_type(self.left.pop())

    def types(self, count: int) -> list[PtxType]:
        """The last `count` modifiers as types (e.g. cvt's destination and source types)."""
        found = self.left[-count:]
        if len(found) != count or any(ptx_type(m) is None for m in found):
            others = [m for m in found if ptx_type(m) is None]
            raise self.ops.refuse(self.inst, f"needs {count} type modifiers" + (
                f" (.{', .'.join(others)} is not a type the executor takes here)" if others else ""))
        del self.left[-count:]
        return [ptx_type(m) for m in found]

    def done(self) -> None:
        if self.left:
            raise self.ops.refuse(self.inst, f"modifier(s) .{', .'.join(self.left)} not supported")


class Operands:
    """Binds operands to closures over `machine`."""

    def __init__(self, machine: Machine, specials: dict[str, np.ndarray]):
        self.m = machine
        self.specials = specials

    def refuse(self, inst: Instruction, what: str) -> PtxExecutionError:
        return fail(self.m.source, inst, f"not supported by the PTX executor: {what}")

    def register(self, inst: Instruction, reg: Reg) -> tuple[np.ndarray, PtxType]:
        if reg.name not in self.m.registers:
            raise fail(self.m.source, inst, f"register {reg.name} is not declared")
        return self.m.registers[reg.name], self.m.register_types[reg.name]

    def read(self, inst: Instruction, operand, t: PtxType) -> Callable[[object], np.ndarray]:
        """A closure giving the operand's value(s) as type `t` for the lanes `sel` (a scalar for constants). A
        register read for `ALL` (every lane of the batch, a fused group's rows) is one view kept with the closure,
        the one `store[ALL]` would give anew on every call."""
        dtype = t.dtype
        if isinstance(operand, Reg):
            store, declared = self.register(inst, operand)
            if t.kind == "pred" or declared.kind == "pred":
                if t.kind != declared.kind:
                    raise fail(self.m.source, inst, f"{operand.name} is .{declared.name}, used as .{t.name}")
                every = store[ALL]
                return lambda sel: every if sel is ALL else store[sel]
            if declared.bits == t.bits:
                every = store.view(dtype)
                return lambda sel: every if sel is ALL else store[sel].view(dtype)
            if declared.bits > t.bits:
                narrow = np.dtype(f"uint{t.bits}")
                return lambda sel: store[sel].astype(narrow).view(dtype)
            raise fail(self.m.source, inst, f"register {operand.name} (.{declared.name}) is narrower than .{t.name}")
        if isinstance(operand, Negated):
            inner = self.read(inst, operand.operand, t)
            return lambda sel: ~inner(sel)
        if isinstance(operand, Imm):
            value = self.constant(inst, operand, t)
            return lambda sel: value
        if isinstance(operand, FloatImm):
            value = self.constant(inst, operand, t)
            return lambda sel: value
        if isinstance(operand, Special):
            if operand.name not in self.specials:
                raise self.refuse(inst, f"special register {operand.name}")
            values = self.specials[_CLOCK_COUNTERS.get(operand.name, operand.name)]
            if t.bits < 32 or t.kind in ("f", "pred"):
                raise fail(self.m.source, inst, f"{operand.name} read as .{t.name}")
            if operand.name in _CLOCK_COUNTERS:
                def clock(sel):
                    values[sel] += np.uint64(CLOCK_TICKS_PER_READ)
                    return values[sel].astype(dtype)
                return clock
            return lambda sel: values[sel].astype(dtype)
        if isinstance(operand, Symbol):
            if operand.name in self.m.local_params:
                raise self.refuse(inst, f"the address of the function parameter {operand.name}")
            value = np.asarray(self.symbol_address(inst, operand.name)).astype(np.uint64).astype(dtype)
            return lambda sel: value
        raise self.refuse(inst, f"operand {operand} here")

    def constant(self, inst: Instruction, operand, t: PtxType):
        """An immediate as a NumPy scalar of type `t`."""
        if isinstance(operand, Imm):
            if t.kind == "pred":
                return np.bool_(operand.value != 0)
            if t.kind == "f":
                if operand.value != 0:
                    raise self.refuse(inst, f"integer literal {operand.value} as a .{t.name} operand")
                return t.dtype.type(0)
            return np.asarray(operand.value & ((1 << t.bits) - 1), dtype=f"uint{t.bits}").view(t.dtype)[()]
        if isinstance(operand, FloatImm):
            raw = np.asarray(operand.bits, dtype=f"uint{operand.width}").view(f"float{operand.width}")[()]
            if t.kind == "f":
                return raw.astype(t.dtype) if operand.width != t.bits else \
                    np.asarray(operand.bits, dtype=f"uint{t.bits}").view(t.dtype)[()]
            if t.kind in ("b", "u", "s", "x2") and operand.width == t.bits:
                return np.asarray(operand.bits, dtype=f"uint{t.bits}").view(t.dtype)[()]
            raise self.refuse(inst, f"float literal as a .{t.name} operand")
        raise self.refuse(inst, f"operand {operand} as a constant")

    def static(self, inst: Instruction, operand) -> int:
        """The value of an operand that must be an integer immediate."""
        if not isinstance(operand, Imm):
            raise self.refuse(inst, f"operand {operand} must be an immediate here")
        return operand.value

    def write(self, inst: Instruction, operand, t: PtxType) -> Callable[[object, np.ndarray], None]:
        """A closure storing values of type `t` into the operand for lanes `sel`. Where the register's width is the
        type's, the closure's `target(sel)` gives the destination to compute into instead (see `write_same`)."""
        if isinstance(operand, Sink):
            return lambda sel, value: None
        if not isinstance(operand, Reg):
            raise fail(self.m.source, inst, f"destination {operand} is not a register")
        store, declared = self.register(inst, operand)
        if t.kind == "pred" or declared.kind == "pred":
            if t.kind != declared.kind:
                raise fail(self.m.source, inst, f"{operand.name} is .{declared.name}, written as .{t.name}")

            def write_pred(sel, value):
                store[sel] = value

            return write_pred
        if declared.bits < t.bits:
            raise fail(self.m.source, inst, f"register {operand.name} (.{declared.name}) is narrower than .{t.name}")
        storage, dtype = declared.storage, t.dtype
        if declared.bits == t.bits:
            every = store.view(dtype)  # (`ALL`'s view, kept as `read` keeps it)

            def write_same(sel, value):
                store[sel] = np.asarray(value, dtype).view(storage)

            def target(sel):
                """The destination as an array of type `t` for a computation to write its values into, where `sel`
                is a slice (every lane of the batch; a fused group's rows): a view, with the bits `write_same` would
                store; None for an index array (its lanes are a copy)."""
                if sel is ALL:
                    return every
                return store[sel].view(dtype) if type(sel) is slice else None

            write_same.target = target
            return write_same
        widen = np.dtype(f"int{declared.bits}") if t.kind == "s" else np.dtype(f"uint{t.bits}")

        def write_extended(sel, value):
            bits = np.asarray(value, dtype)
            if t.kind != "s":
                bits = bits.view(widen)
            store[sel] = bits.astype(widen).view(storage) if t.kind == "s" else bits.astype(storage)

        return write_extended

    def symbol_address(self, inst: Instruction, name: str) -> int:
        """The address of a variable or parameter in its own state space."""
        m = self.m
        if name in m.shared_layout.offsets:
            return m.shared_layout.offsets[name]
        if name in m.param_offsets:
            return m.param_offsets[name]
        if name in m.local_offsets:
            return m.local_offsets[name]
        if name in m.global_symbols:
            return m.global_symbols[name]
        raise fail(m.source, inst, f"unknown symbol '{name}'")

    def symbol_space(self, name: str) -> str | None:
        m = self.m
        for space, table in (("shared", m.shared_layout.offsets), ("param", m.param_offsets),
                             ("local", m.local_offsets), ("global", m.global_symbols)):
            if name in table:
                return space
        return None

    def address(self, inst: Instruction, operand) -> Callable[[object], np.ndarray]:
        """A closure giving the int64 addresses of `[base+offset]` for lanes `sel`."""
        if not isinstance(operand, Address):
            raise fail(self.m.source, inst, f"expected an address [..], got {operand}")
        offset = operand.offset
        base = operand.base
        if not -2**63 <= offset < 2**64:  # as ptxas: any 64-bit immediate, read modulo 2^64
            raise fail(self.m.source, inst, f"address offset {offset} does not fit 64 bits")
        offset = offset - 2**64 if offset >= 2**63 else offset
        if base is None:
            return lambda sel: np.int64(offset)
        if isinstance(base, Symbol):
            value = np.int64(self.symbol_address(inst, base.name) + offset)
            return lambda sel: value
        store, declared = self.register(inst, base)
        if declared.kind == "pred" or declared.bits < 32:
            raise fail(self.m.source, inst, f"address register {base.name} is .{declared.name}")
        if declared.bits == 64:
            every = store.view(np.int64)  # (`ALL`'s view, kept as `read` keeps it)
            return lambda sel: (every if sel is ALL else store[sel].view(np.int64)) + offset
        return lambda sel: store[sel].astype(np.int64) + offset


def guard_reader(ops: Operands, inst: Instruction):
    """The guard as a closure over lanes (None when unguarded)."""
    if inst.guard is None:
        return None
    store, declared = ops.register(inst, inst.guard.predicate)
    if declared.kind != "pred":
        raise fail(ops.m.source, inst, f"guard {inst.guard.predicate.name} is not a .pred register")
    if inst.guard.negated:
        return lambda lanes: ~store[lanes]
    return lambda lanes: store[lanes]


def decode(ops: Operands, inst: Instruction) -> Step:
    decoder = DECODERS.get(inst.opcode)
    if decoder is None:
        raise fail(ops.m.source, inst, f"unknown instruction '{inst.opcode}' (not supported by the PTX executor)")
    mods = Modifiers(ops, inst)
    result = decoder(ops, inst, mods)
    mods.done()
    return result if isinstance(result, Step) else Step(inst, result)


def label_index(ops: Operands, inst: Instruction, operand) -> int:
    if not isinstance(operand, Label):
        raise fail(ops.m.source, inst, f"expected a label, got {operand}")
    return operand.index


def elements(operand) -> tuple:
    """The elements of a vector operand, or the operand alone."""
    return operand.elements if isinstance(operand, Vector) else (operand,)


def sources(ops: Operands, inst: Instruction, t: PtxType, count: int, first: int = 1) -> list:
    """Readers of the `count` source operands of `inst` from operand `first` on, as type `t`; any other operand
    count is refused."""
    if len(inst.operands) != first + count:
        raise ops.refuse(inst, f"expected {first + count} operands, got {len(inst.operands)}")
    return [ops.read(inst, o, t) for o in inst.operands[first:first + count]]


def lane_count(ops: Operands, sel) -> int:
    """How many lanes `sel` (an index array, or `ALL`) selects."""
    return ops.m.lanes if isinstance(sel, slice) else len(sel)
