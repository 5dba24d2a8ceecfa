"""PTX registers of Target IR values: the register classes, and the names a kernel's values are printed with.

Every element of a per-thread value is one PTX register [P#parameterized-variable-names]: `i1` is a `.pred`
(%p), `i32` and `index` a `.b32` (%r; `index` arithmetic is `.s32`), `i64` a `.b64` (%rd), `f32` a `.f32` (%f).
A *name* is either a register (`%r7`) or, for a constant, a PTX immediate (`0f3FB8AA3B`, `-7`) that the
register allocator may hand out for operand positions that take one.

`RegisterFile` gives names: those of an optional assignment (value -> one name per element, e.g. from the
register allocator), else a fresh virtual register per element; fresh names never collide with assigned ones.
It declares every register it has seen, per class and prefix (`.reg .f32 %f<N>;`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import Float32Type, IndexType, IntegerType, VectorType
from xdsl.ir import Attribute, SSAValue

from tessera.ir.class_tests import subclass_test


@dataclass(frozen=True)
class RegisterClass:
    """A PTX register type: how it is declared and moved, and the prefix of its virtual registers."""

    name: str
    ptx_type: str
    prefix: str

    @property
    def move(self) -> str:
        return f"mov.{self.ptx_type}"


PRED = RegisterClass("pred", "pred", "%p")
B32 = RegisterClass("b32", "b32", "%r")
B64 = RegisterClass("b64", "b64", "%rd")
F32 = RegisterClass("f32", "f32", "%f")
B16 = RegisterClass("b16", "b16", "%h")
"""Scratch registers only (no Target IR value is 16 bits): the .b16 result of `cvt...e4m3x2.f32`."""
CLASSES = (PRED, B32, B64, F32, B16)
"""In declaration order."""
_is_vector, _is_f32 = subclass_test(VectorType), subclass_test(Float32Type)
_is_index, _is_integer = subclass_test(IndexType), subclass_test(IntegerType)


class UnsupportedType(ValueError):
    """A value of a type PTX registers of this printer cannot hold (f16, f64, i8, ...)."""


def element_type(ty: Attribute) -> Attribute:
    return ty.element_type if _is_vector(ty) else ty


def lanes(ty: Attribute) -> int:
    """Registers per thread of a value: N for vector<N x T>, 1 for a scalar."""
    if isinstance(ty, VectorType):
        if ty.get_num_dims() != 1:
            raise UnsupportedType(f"per-thread registers are 1-D vectors, got {ty}")
        return ty.get_shape()[0]
    return 1


def register_class(ty: Attribute) -> RegisterClass:
    """The class of one register of a value of type `ty` (or of a vector's elements)."""
    element = element_type(ty)
    if _is_f32(element):
        return F32
    if _is_index(element):
        return B32
    if _is_integer(element):
        width = element.width.data
        if width in (1, 32, 64):
            return {1: PRED, 32: B32, 64: B64}[width]
    raise UnsupportedType(f"no PTX register class for {ty}")


def is_register(name: str) -> bool:
    """A register name (`%f3`), not an immediate."""
    return name.startswith("%")


_NUMBERED = re.compile(r"^(%[A-Za-z_$][A-Za-z_$]*?)(\d+)$")


@functools.lru_cache(maxsize=4096)
def _split(name: str) -> tuple[str, int] | None:
    """`%rd12` -> ("%rd", 12): a name a parameterized declaration `%rd<N>` covers (no leading zeros)."""
    match = _NUMBERED.match(name)
    if match is None or (len(match.group(2)) > 1 and match.group(2).startswith("0")):
        return None
    return match.group(1), int(match.group(2))


@dataclass
class RegisterFile:
    """Names of values and scratch registers of one kernel; see the module docstring."""

    assigned: Mapping[SSAValue, Sequence[str]] = field(default_factory=dict)
    _next: dict[str, int] = field(default_factory=dict)
    _classes: dict[str, RegisterClass] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in {name for names in self.assigned.values() for name in names}:
            if is_register(name):
                split = _split(name)
                if split is not None:
                    prefix, index = split
                    self._next[prefix] = max(self._next.get(prefix, 0), index + 1)

    def assignment(self, value: SSAValue) -> list[str] | None:
        """The assigned names of `value` (checked against its type), or None."""
        names = self.assigned.get(value)
        if names is None:
            return None
        names = list(names)
        if len(names) != lanes(value.type):
            raise UnsupportedType(f"the register assignment gives {len(names)} names to a {value.type} value")
        cls = register_class(value.type)
        for name in names:
            if is_register(name):
                self.note(name, cls)
        return names

    def fresh(self, cls: RegisterClass) -> str:
        index = self._next.get(cls.prefix, 0)
        self._next[cls.prefix] = index + 1
        name = f"{cls.prefix}{index}"
        self._classes[name] = cls
        return name

    def note(self, name: str, cls: RegisterClass) -> None:
        """Record that register `name` is used with class `cls` (it must keep one class)."""
        known = self._classes.setdefault(name, cls)
        if known is not cls:
            raise UnsupportedType(f"register {name} is used as both .{known.ptx_type} and .{cls.ptx_type}")

    def class_of(self, name: str) -> RegisterClass:
        return self._classes[name]

    def declarations(self) -> list[str]:
        """`.reg` lines for every register seen: `%p<N>` per numbered prefix, others one by one."""
        ranges: dict[tuple[RegisterClass, str], int] = {}
        singles: dict[RegisterClass, list[str]] = {}
        for name, cls in self._classes.items():
            split = _split(name)
            if split is None:
                singles.setdefault(cls, []).append(name)
                continue
            prefix, index = split
            ranges[(cls, prefix)] = max(ranges.get((cls, prefix), 0), index + 1)
        prefix_class: dict[str, RegisterClass] = {}
        for cls, prefix in ranges:
            if prefix_class.setdefault(prefix, cls) is not cls:
                raise UnsupportedType(f"registers {prefix}<N> are used with two classes")
        lines = []
        for cls in CLASSES:
            for (c, prefix), count in sorted(ranges.items(), key=lambda kv: kv[0][1]):
                if c is cls:
                    lines.append(f".reg .{cls.ptx_type} {prefix}<{count}>;")
            for name in sorted(singles.get(cls, [])):
                lines.append(f".reg .{cls.ptx_type} {name};")
        return lines
