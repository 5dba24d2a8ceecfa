"""PTX as data: what `parse.parse_ptx` produces and the executor runs.

A `Module` holds the header, the module-scope `.global`/`.const`/`.shared` variables and the `.entry`
functions. An `Entry` is flat: its instructions in program order, with every name already resolved, so the
executor never looks at scopes or labels again:

- registers declared inside a `{ }` scope are renamed to be unique in the entry (`%r1` declared in a nested
  scope becomes `%r1@2`, 2 being the scope's number); `Reg.name` is the resolved name, and `Entry.registers`
  gives the declared type of each (parameterised declarations `.reg .b32 %r<90>;` are expanded);
- a branch target is a `Label` whose `index` is the position in `Entry.instructions` of the first
  instruction after that label (labels are looked up from the innermost enclosing scope outwards);
- special registers (`%tid.x`, `%ntid.y`, `%ctaid.z`, `%nctaid.x`, `%laneid`, `%warpid`, `%clock`, ...) are
  `Special` operands, never `Reg`;
- names of parameters, variables and entries used as operands are `Symbol`s.

Instructions keep their opcode split at the dots (`ld.global.v4.f32` -> opcode "ld", modifiers
("global", "v4", "f32")), the guard (`@%p1` / `@!%p1`) and the source line, for diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Reg:
    """A register, by its resolved (entry-unique) name, e.g. "%r1" or "%r1@2"."""

    name: str


@dataclass(frozen=True)
class Special:
    """A special register, e.g. "%tid.x", "%laneid", "%ctaid.y"."""

    name: str


@dataclass(frozen=True)
class Imm:
    """An integer immediate (decimal, hex `0x..`, octal `0..`, binary `0b..`, optionally `U`-suffixed)."""

    value: int


@dataclass(frozen=True)
class FloatImm:
    """A floating-point immediate: `bits` is the IEEE encoding, `width` 32 (`0fXXXXXXXX`) or 64 (`0dXXXX...`
    or a decimal literal such as `1.5`, which PTX reads as f64)."""

    bits: int
    width: int


@dataclass(frozen=True)
class Symbol:
    """A parameter, variable or function name used as a value (its address) or inside an address."""

    name: str


@dataclass(frozen=True)
class Label:
    """A branch target: `index` is the instruction it jumps to (len(instructions) for the end)."""

    name: str
    index: int


@dataclass(frozen=True)
class Sink:
    """`_`: a destination (or vector element) whose value is discarded."""


@dataclass(frozen=True)
class Address:
    """`[base+offset]`: base is a register, a symbol or None (an absolute address such as `[0x100]`).

    `coords` is the vector of a tensor operand `[base, {c0, c1, ...}]` (the tensor map and its coordinates in
    `cp.async.bulk.tensor` and `cp.async.bulk.prefetch.tensor`), None for an ordinary address; such an address
    has no offset."""

    base: Reg | Symbol | None
    offset: int = 0
    coords: Vector | None = None


@dataclass(frozen=True)
class Vector:
    """`{a, b, ...}`: a vector operand (elements are registers, immediates or sinks)."""

    elements: tuple[Operand, ...]


@dataclass(frozen=True)
class Negated:
    """`!%p`: a negated predicate used as a source operand (e.g. in `and.pred` or `selp`)."""

    operand: Reg


Operand = Union[Reg, Special, Imm, FloatImm, Symbol, Label, Sink, Address, Vector, Negated]


@dataclass(frozen=True)
class Guard:
    """`@%p` (negated False) or `@!%p` (negated True)."""

    predicate: Reg
    negated: bool = False


@dataclass(frozen=True)
class Instruction:
    """One PTX instruction. `opcode` is the part before the first dot, `modifiers` the dot-separated rest
    (without dots, `::` kept inside a modifier: "shared::cta"). `operands` in source order; a `|`-joined
    destination pair (`setp.lt.s32 %p|%q, ...`) is a `Vector` of two registers."""

    opcode: str
    modifiers: tuple[str, ...]
    operands: tuple[Operand, ...]
    guard: Guard | None
    line: int

    @property
    def name(self) -> str:
        """The full mnemonic, e.g. "ld.global.v4.f32"."""
        return ".".join((self.opcode, *self.modifiers))


TYPE_BYTES: dict[str, int] = {
    **{f"{kind}{bits}": bits // 8 for kind in "bus" for bits in (8, 16, 32, 64)},
    "b128": 16, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "e4m3x2": 2, "e5m2x2": 2,
}
"""Size in bytes of each PTX data type (the types a variable or a non-predicate register may have)."""


@dataclass(frozen=True)
class Variable:
    """A `.global`, `.const`, `.shared` or `.local` variable, or a `.param` of an entry.

    `space` is "global", "const", "shared", "local" or "param"; `type` the element type without the dot
    ("b8", "u32", "f32", ...); `count` the number of elements (1 for a scalar, None for an unsized `[]`
    array); `align` in bytes (the type's size when not given); `extern` for `.extern .shared`; `init` the
    initial bytes (little-endian) for initialised `.global`/`.const` data, None otherwise; `line` where it is
    declared."""

    name: str
    space: str
    type: str
    count: int | None = 1
    align: int = 1
    extern: bool = False
    init: bytes | None = None
    line: int = 0

    @property
    def element_bytes(self) -> int:
        """Bytes per element of `type` (4 for "f16x2", 2 for "bf16"), 1 for a type not in TYPE_BYTES."""
        return TYPE_BYTES.get(self.type, 1)


@dataclass
class Entry:
    """A `.entry` (kernel): parameters in order, registers by resolved name -> type ("b32", "pred", ...),
    variables declared in its body (`.shared`, `.local`), the flat instruction list, and the performance
    directives given (`reqntid`, `maxntid`, `maxnreg`, `minnctapersm`, `explicitcluster`, `reqnctapercluster`),
    each as a tuple of ints. `line` is the line of `.entry`.

    A `.func` is parsed into an Entry too (`returns` holds its return parameters). Once linked (`link`), an
    entry's instructions are followed by the code of every `.func` it calls (transitively), with registers
    and variables renamed `name@function`; `functions` says where each starts, `call_depth` is the deepest
    call chain, `unlinked` why a called function is not linked ("extern", "recursive", "no body"), and `.param` variables of the functions and of call sites are in `variables` (space "param",
    per thread)."""

    name: str
    params: list[Variable]
    registers: dict[str, str] = field(default_factory=dict)
    variables: list[Variable] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    directives: dict[str, tuple[int, ...]] = field(default_factory=dict)
    line: int = 0
    returns: list[Variable] = field(default_factory=list)
    functions: dict[str, Function] = field(default_factory=dict)
    call_depth: int = 0
    unlinked: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Function:
    """A `.func` linked into an entry (see `link`): its code starts at instruction `start`; `params` and
    `returns` are its renamed `.param` variables (per-thread, in local memory), in order."""

    name: str
    start: int
    params: tuple[Variable, ...]
    returns: tuple[Variable, ...]


@dataclass
class Module:
    """A parsed PTX module: `.version` (e.g. (8, 0)), `.target` names (e.g. ["sm_90a"]), `.address_size`,
    module-scope variables, and entries by name (in order), each linked with the `.func`s it calls.
    `functions` holds the unlinked `.func` definitions, `externs` the names of `.extern .func` declarations
    without a body (`vprintf`, `__assertfail`, `malloc`): calling one stops the executor with its name."""

    version: tuple[int, int]
    targets: list[str]
    address_size: int
    variables: list[Variable] = field(default_factory=list)
    entries: dict[str, Entry] = field(default_factory=dict)
    functions: dict[str, Entry] = field(default_factory=dict)
    externs: set[str] = field(default_factory=set)


class PtxSyntaxError(ValueError):
    """Text that is not PTX the parser accepts: `line` (1-based) and `column` locate it, and str() reads
    `<source>:<line>:<column>: error: <message>` followed by the line and a caret."""

    def __init__(self, message: str, source: str, line: int, column: int, text_line: str = ""):
        self.message, self.source, self.line, self.column = message, source, line, column
        caret = f"\n{text_line}\n{' ' * max(column - 1, 0)}^" if text_line else ""
        super().__init__(f"{source}:{line}:{column}: error: {message}{caret}")
