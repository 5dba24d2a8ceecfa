"""Linking an entry with the `.func`s it calls, so that the executor runs one flat instruction list.

`link(module, entry)` appends, after the entry's own instructions, the body of every function reachable
from it through `call` (depth first, each once), renaming what the function declares so that it cannot clash
with the entry or another function: registers and variables (its `.local` stack frame, its parameters, the
`.param` variables of its call sites) become `name@function`. Branch targets are moved by the function's
start. A `call` of a linked function keeps its operands, the callee's `Symbol` being found in
`Entry.functions`.

Functions run with the caller's lanes (a per-thread return stack, see `control_flow`); their registers and
frames are allocated once per thread, not per activation, so recursion (a function that can reach itself) is
not linked: its calls keep a `Symbol` absent from `Entry.functions`, which the decoder refuses by name, as
it refuses calls to `.extern` functions when they execute (`vprintf`, `__assertfail`).
"""

from __future__ import annotations

from dataclasses import replace

from tessera.interpreters.ptx.syntax import (
    Address,
    Entry,
    Function,
    Guard,
    Instruction,
    Label,
    Module,
    Negated,
    Reg,
    Symbol,
    Vector,
)


def _callees(function: Entry) -> list[str]:
    """The functions `function` calls, in order of first call."""
    found: list[str] = []
    for inst in function.instructions:
        if inst.opcode == "call":
            name = inst.operands[1].name
            if name not in found:
                found.append(name)
    return found


def _recursive(module: Module) -> set[str]:
    """The defined functions that can reach themselves through calls."""
    graph = {name: [c for c in _callees(f) if c in module.functions] for name, f in module.functions.items()}
    result = set()
    for start in graph:
        seen, stack = set(), list(graph[start])
        while stack:
            name = stack.pop()
            if name == start:
                result.add(start)
                break
            if name not in seen:
                seen.add(name)
                stack.extend(graph[name])
    return result


class _Renamer:
    """Renames the registers and the local symbols of one function, and moves its labels by `offset`."""

    def __init__(self, function: Entry, offset: int):
        self.suffix = f"@{function.name}"
        self.registers = set(function.registers)
        self.symbols = {v.name for v in (*function.params, *function.returns, *function.variables)
                        if v.space in ("param", "local")}
        self.offset = offset

    def operand(self, operand):
        if isinstance(operand, Reg):
            return Reg(operand.name + self.suffix) if operand.name in self.registers else operand
        if isinstance(operand, Symbol):
            return Symbol(operand.name + self.suffix) if operand.name in self.symbols else operand
        if isinstance(operand, Label):
            return Label(operand.name, operand.index + self.offset)
        if isinstance(operand, Address):
            coords = self.operand(operand.coords) if operand.coords is not None else None
            base = self.operand(operand.base) if operand.base is not None else None
            return Address(base, operand.offset, coords)
        if isinstance(operand, Vector):
            return Vector(tuple(self.operand(e) for e in operand.elements))
        if isinstance(operand, Negated):
            return Negated(self.operand(operand.operand))
        return operand

    def instruction(self, inst: Instruction) -> Instruction:
        guard = inst.guard
        if guard is not None:
            guard = Guard(self.operand(guard.predicate), guard.negated)
        return replace(inst, operands=tuple(self.operand(o) for o in inst.operands), guard=guard)

    def variable(self, variable):
        return replace(variable, name=variable.name + self.suffix)


def link(module: Module, entry: Entry) -> Entry:
    """`entry` followed by the functions it reaches (see the module docstring); `entry` itself if it calls
    nothing."""
    if not any(inst.opcode == "call" for inst in entry.instructions):
        return entry
    recursive = _recursive(module)
    order: list[str] = []
    pending = [c for c in reversed(_callees(entry))]
    unlinked = {}
    while pending:
        name = pending.pop()
        if name in order or name in unlinked:
            continue
        if name not in module.functions or name in recursive:
            unlinked[name] = "extern" if name in module.externs else "no body" if name not in module.functions \
                else "recursive"
            continue
        order.append(name)
        pending.extend(reversed(_callees(module.functions[name])))
    linked = replace(entry, registers=dict(entry.registers), variables=list(entry.variables),
                     instructions=list(entry.instructions), functions={}, unlinked=unlinked)
    for name in order:
        function = module.functions[name]
        renamer = _Renamer(function, len(linked.instructions))
        linked.functions[name] = Function(name, len(linked.instructions),
                                          tuple(renamer.variable(v) for v in function.params),
                                          tuple(renamer.variable(v) for v in function.returns))
        linked.instructions += [renamer.instruction(i) for i in function.instructions]
        linked.registers.update({r + renamer.suffix: t for r, t in function.registers.items()})
        linked.variables += [renamer.variable(v) for v in (*function.params, *function.returns)]
        linked.variables += [renamer.variable(v) if v.space in ("param", "local") else v
                             for v in function.variables]

    def depth(name: str) -> int:
        return 1 + max((depth(c) for c in _callees(module.functions[name]) if c in linked.functions), default=0)

    linked.call_depth = max((depth(c) for c in _callees(entry) if c in linked.functions), default=0)
    return linked
