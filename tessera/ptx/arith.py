"""PTX of upstream `arith`, `math` and `vector` on per-thread registers, register by register.

Semantics as the Target IR defines them (see `tessera.interpreters.sm90.arith`), instruction by instruction
[P#integer-arithmetic-instructions, P#floating-point-instructions, P#comparison-and-selection-instructions,
P#data-movement-and-conversion-instructions-cvt]:
- `index` and `i32` are .b32 registers with .s32 arithmetic, `i64` .b64 with .s64, `i1` .pred; integers wrap.
  Division truncates (`div.s32`, `rem.s32`); unsigned division and remainder by a constant 2^k are `shr.u`
  and `and` (ptxas keeps a generic division sequence for `div.u32 %r, %r, 2`); `ceildivsi`/`floordivsi` round the truncated quotient towards
  +inf/-inf when the remainder is non-zero and its sign is (not) the divisor's; `ceildivui` adds one when the
  remainder is non-zero (no overflow, unlike (a + b - 1) / b). Shifts clamp their amount as PTX does.
  `math.absi` is `abs.s32`/`abs.s64` (|most negative| is itself).
- f32 `addf`/`subf`/`mulf` are `add.rn`/`sub.rn`/`mul.rn`: the explicit rounding keeps ptxas from contracting
  a mul and an add into an fma, so each op rounds once, as the IR says; `maximumf`/`minimumf` are
  `max.NaN`/`min.NaN` (NaN propagates), `maxnumf`/`minnumf` `max`/`min`; `math.fma` is `fma.rn.f32`,
  `math.sqrt` `sqrt.rn.f32`.
- Integer compares are signed (or unsigned, as the predicate says); float compares are ordered or unordered
  as `arith.cmpf` says.
- Constants are `mov`s of immediates (f32 as `0fXXXXXXXX`), one register per distinct value of a vector.
- vector.broadcast/shuffle/extract/insert with static positions print no instruction: their results are the
  registers of their sources.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
from xdsl.dialects import arith, math, vector
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr
from xdsl.ir import Operation, SSAValue

from tessera.ptx.kernel import Job, KernelPrinter, element_lists, handles
from tessera.ptx.registers import B32, B64, F32, PRED, RegisterClass, lanes, register_class
from tessera.sm90.rounding import integer_rounding_mnemonic

Render = Callable[[str, list[str]], list[str]]


def elementwise(p: KernelPrinter, result: SSAValue, operands: Sequence[SSAValue], render: Render) -> None:
    """Register i of `result` from register i of each operand (a scalar operand serves every register)."""
    n = lanes(result.type)
    lists = element_lists(p, operands, n)
    if any(len(names) != n for names in lists):
        p.refuse(p.current, f"operands have {[len(names) for names in lists]} registers, the result {n}")
    cls = p.cls(result)
    jobs = [Job(dst, cls, tuple(srcs), partial(_render, render, list(srcs))) for dst, *srcs in zip(p.define(result), *lists)]
    p.run(jobs)


def _render(render: Render, srcs: list[str], dst: str) -> list[str]:
    return render(dst, srcs)


def suffix(cls: RegisterClass, signed: bool = True) -> str:
    """The typed suffix of integer arithmetic on registers of `cls`: s32/u32/s64/u64."""
    bits = {B32: 32, B64: 64}[cls]
    return f"{'s' if signed else 'u'}{bits}"


# region constants -------------------------------------------------------------------------------------------


def immediate(value: float | int | bool, cls: RegisterClass) -> str:
    """PTX immediate of a constant element: f32 as its exact bits `0fXXXXXXXX`, integers as signed decimals
    wrapped to the register width, predicates as 0/1."""
    if cls is F32:
        return "0f%08X" % int(np.array(value, dtype=np.float32).view(np.uint32))
    if cls is PRED:
        return "1" if value else "0"
    bits = 32 if cls is B32 else 64
    wrapped = int(value) & ((1 << bits) - 1)
    return str(wrapped - (1 << bits) if wrapped >> (bits - 1) else wrapped)


def constant_values(op: arith.ConstantOp) -> list:
    attr = op.value
    if isinstance(attr, IntegerAttr | FloatAttr):
        return [attr.value.data]
    if isinstance(attr, DenseIntOrFPElementsAttr):
        values = list(attr.get_values())
        n = lanes(op.result.type)
        return values * n if len(values) == 1 and n != 1 else values
    return []


UNGUARDED_WHEN_TRUE: set[type[Operation]] = set()
"""Ops with a per-register `mask` operand whose printers write no predicate when the mask is a constant
all-true vector (`is_true_constant`: an access through a `tile.view ... in_bounds`); registered by their
printers' modules. Such a constant, used only as their masks, prints nothing."""


def _only_unguarded_masks(value: SSAValue) -> bool:
    return bool(value.uses) and all(type(u.operation) in UNGUARDED_WHEN_TRUE and u.operation.mask is value
                                    for u in value.uses)


@handles(arith.ConstantOp)
def print_constant(p: KernelPrinter, op: arith.ConstantOp) -> None:
    values = constant_values(op)
    cls = p.cls(op.result)
    if len(values) != lanes(op.result.type):
        p.refuse(op, f"no PTX for the constant {op.value}")
    if is_true_constant(op.result) and _only_unguarded_masks(op.result):
        p.bind(op.result, ["1"] * len(values))  # never printed: the users write no predicate
        return
    immediates = [immediate(v, cls) for v in values]
    assigned = p.assigned(op.result)
    if assigned is not None:
        registers = {}
        for name, imm in zip(assigned, immediates):
            if name.startswith("%") and registers.setdefault(name, imm) != imm:
                p.refuse(op, f"the register assignment gives {name} two values ({registers[name]}, {imm})")
        p.bind(op.result, assigned)
        p.emit(*(f"{cls.move} {name}, {imm}" for name, imm in registers.items()))
        return
    register_of: dict[str, str] = {}
    for imm in immediates:
        if imm not in register_of:
            register_of[imm] = p.temp(cls)
            p.emit(f"{cls.move} {register_of[imm]}, {imm}")
    p.bind(op.result, [register_of[imm] for imm in immediates])


def is_true_constant(value: SSAValue) -> bool:
    """An `arith.constant true` (i1, or an i1 vector of all ones)."""
    op = value.owner
    return isinstance(op, arith.ConstantOp) and register_class(value.type) is PRED and all(constant_values(op))


# endregion
# region integers ----------------------------------------------------------------------------------------------

_INTEGER_BINARY: dict[type[Operation], tuple[str | None, str | None, str | None]] = {
    # op: (b32 / index, b64, pred) mnemonics; None = not for that class
    arith.AddiOp: ("add.s32", "add.s64", "xor.pred"),
    arith.SubiOp: ("sub.s32", "sub.s64", "xor.pred"),
    arith.MuliOp: ("mul.lo.s32", "mul.lo.s64", "and.pred"),
    arith.AndIOp: ("and.b32", "and.b64", "and.pred"),
    arith.OrIOp: ("or.b32", "or.b64", "or.pred"),
    arith.XOrIOp: ("xor.b32", "xor.b64", "xor.pred"),
    arith.MinSIOp: ("min.s32", "min.s64", None),
    arith.MaxSIOp: ("max.s32", "max.s64", None),
    arith.MinUIOp: ("min.u32", "min.u64", None),
    arith.MaxUIOp: ("max.u32", "max.u64", None),
    arith.DivSIOp: ("div.s32", "div.s64", None),
    arith.DivUIOp: ("div.u32", "div.u64", None),
    arith.RemSIOp: ("rem.s32", "rem.s64", None),
    arith.RemUIOp: ("rem.u32", "rem.u64", None),
}


@handles(*_INTEGER_BINARY)
def print_integer_binary(p: KernelPrinter, op: Operation) -> None:
    cls = p.cls(op.results[0])
    b32, b64, pred = _INTEGER_BINARY[type(op)]
    mnemonic = {B32: b32, B64: b64, PRED: pred}[cls]
    if mnemonic is None:
        p.refuse(op, f"no PTX for '{op.name}' on i1")
    lhs, rhs = op.operands
    if isinstance(op, arith.XOrIOp) and cls is PRED and is_true_constant(rhs):
        elementwise(p, op.results[0], [lhs], lambda d, s: [f"not.pred {d}, {s[0]}"])
        return
    power = _power_of_two(rhs) if isinstance(op, arith.DivUIOp | arith.RemUIOp) else None
    if power is not None:  # ptxas keeps a generic division sequence for these (about 20 SASS instructions)
        width = "32" if cls is B32 else "64"
        line = (f"shr.u{width} {{}}, {{}}, {power}" if isinstance(op, arith.DivUIOp)
                else f"and.b{width} {{}}, {{}}, {(1 << power) - 1}")
        elementwise(p, op.results[0], [lhs], lambda d, s: [line.format(d, s[0])])
        return
    elementwise(p, op.results[0], [lhs, rhs], lambda d, s: [f"{mnemonic} {d}, {s[0]}, {s[1]}"])


def _uniform_constant(value) -> int | None:
    """The integer every lane of a constant `value` holds, else None."""
    if not isinstance(value.owner, arith.ConstantOp):
        return None
    values = set(constant_values(value.owner))
    if len(values) != 1:
        return None
    (v,) = values
    return v if isinstance(v, int) else None


def _power_of_two(value) -> int | None:
    """k where `value` is a constant 2^k in every lane (k >= 0), else None: unsigned division by it is a right
    shift by k, the remainder the low k bits."""
    v = _uniform_constant(value)
    return v.bit_length() - 1 if v is not None and v > 0 and v & (v - 1) == 0 else None


@handles(math.AbsIOp)
def print_absi(p: KernelPrinter, op: math.AbsIOp) -> None:
    """`abs.s32` / `abs.s64`: one instruction (the most negative value is itself, as the IR's wrapping says)."""
    cls = p.cls(op.result)
    if cls is PRED:
        p.refuse(op, "no PTX for 'math.absi' on i1")
    mnemonic = "abs.s32" if cls is B32 else "abs.s64"
    elementwise(p, op.result, [op.operand], lambda d, s: [f"{mnemonic} {d}, {s[0]}"])


_SHIFTS = {arith.ShLIOp: "shl.b", arith.ShRSIOp: "shr.s", arith.ShRUIOp: "shr.u"}


@handles(*_SHIFTS)
def print_shift(p: KernelPrinter, op: Operation) -> None:
    """PTX clamps the amount to the width (shl/shr.u give 0, shr.s the sign), as the IR's shifts do; a .b64
    shift takes a .u32 amount, so a 64-bit amount is clamped to 64 before it is narrowed."""
    cls = p.cls(op.results[0])
    if cls is PRED:
        p.refuse(op, "no PTX for shifts of i1")
    mnemonic = _SHIFTS[type(op)] + ("32" if cls is B32 else "64")

    def render(d: str, s: list[str]) -> list[str]:
        if cls is B32:
            return [f"{mnemonic} {d}, {s[0]}, {s[1]}"]
        wide, amount = p.temp(B64), p.temp(B32)
        return [f"min.u64 {wide}, {s[1]}, 64", f"cvt.u32.u64 {amount}, {wide}", f"{mnemonic} {d}, {s[0]}, {amount}"]

    elementwise(p, op.results[0], list(op.operands), render)


def _rounded_division(p: KernelPrinter, cls: RegisterClass, toward: str, d: str, a: str, b: str) -> list[str]:
    """Signed a / b rounded towards +inf ("ceil") or -inf ("floor") [arith.ceildivsi, arith.floordivsi]: the
    truncated quotient, moved by one when the remainder is non-zero and has the divisor's sign (ceil) or the
    other sign (floor); the remainder has the dividend's sign."""
    s, bits = suffix(cls), suffix(cls)[1:]
    q, r, x, step = p.temp(cls), p.temp(cls), p.temp(cls), p.temp(cls)
    nonzero, sign, adjust = p.temp(PRED), p.temp(PRED), p.temp(PRED)
    same_sign = "ge" if toward == "ceil" else "lt"
    return [
        f"div.{s} {q}, {a}, {b}",
        f"rem.{s} {r}, {a}, {b}",
        f"xor.b{bits} {x}, {r}, {b}",
        f"setp.ne.{s} {nonzero}, {r}, 0",
        f"setp.{same_sign}.{s} {sign}, {x}, 0",
        f"and.pred {adjust}, {nonzero}, {sign}",
        f"selp.{s} {step}, 1, 0, {adjust}",
        f"{'add' if toward == 'ceil' else 'sub'}.{s} {d}, {q}, {step}",
    ]


def _floor_by_positive_constant(p: KernelPrinter, cls: RegisterClass, d: str, a: str, b: str) -> list[str]:
    """floor(a / b) for a constant b > 0 without a remainder: with s = a >> 31 (0 or -1), s ^ ((a ^ s) / b),
    an unsigned division of a non-negative value (for a < 0, a ^ s = -a - 1, and floor(a / b) =
    -floor((-a - 1) / b) - 1), exact for every a; ptxas turns the division into a multiply-high."""
    bits = suffix(cls)[1:]
    sign, magnitude = p.temp(cls), p.temp(cls)
    return [
        f"shr.s{bits} {sign}, {a}, {int(bits) - 1}",
        f"xor.b{bits} {magnitude}, {a}, {sign}",
        f"div.u{bits} {magnitude}, {magnitude}, {b}",
        f"xor.b{bits} {d}, {magnitude}, {sign}",
    ]


def _unsigned_ceil_division(p: KernelPrinter, cls: RegisterClass, d: str, a: str, b: str) -> list[str]:
    u = suffix(cls, signed=False)
    q, r, step, nonzero = p.temp(cls), p.temp(cls), p.temp(cls), p.temp(PRED)
    return [
        f"div.{u} {q}, {a}, {b}",
        f"rem.{u} {r}, {a}, {b}",
        f"setp.ne.{u} {nonzero}, {r}, 0",
        f"selp.{u} {step}, 1, 0, {nonzero}",
        f"add.{u} {d}, {q}, {step}",
    ]


@handles(arith.CeilDivSIOp, arith.FloorDivSIOp, arith.CeilDivUIOp)
def print_rounded_division(p: KernelPrinter, op: Operation) -> None:
    cls = p.cls(op.results[0])
    if cls is PRED:
        p.refuse(op, "no PTX for divisions of i1")
    divisor = _uniform_constant(op.operands[1])
    if isinstance(op, arith.CeilDivUIOp):
        render = lambda d, s: _unsigned_ceil_division(p, cls, d, s[0], s[1])  # noqa: E731
    elif isinstance(op, arith.FloorDivSIOp) and divisor is not None and divisor > 0:
        render = lambda d, s: _floor_by_positive_constant(p, cls, d, s[0], s[1])  # noqa: E731
    else:
        toward = "ceil" if isinstance(op, arith.CeilDivSIOp) else "floor"
        render = lambda d, s: _rounded_division(p, cls, toward, d, s[0], s[1])  # noqa: E731
    elementwise(p, op.results[0], list(op.operands), render)


_CMPI = {"eq": ("eq", True), "ne": ("ne", True), "slt": ("lt", True), "sle": ("le", True), "sgt": ("gt", True),
         "sge": ("ge", True), "ult": ("lt", False), "ule": ("le", False), "ugt": ("gt", False), "uge": ("ge", False)}


def compare_integers(p: KernelPrinter, result: SSAValue, lhs: SSAValue, rhs: SSAValue, predicate: str,
                     signed: bool) -> None:
    """setp per register; i1 operands compare for (in)equality with xor."""
    cls = p.cls(lhs)
    if cls is PRED:
        if predicate not in ("eq", "ne"):
            p.refuse(p.current, f"no PTX for an ordering compare ({predicate}) of i1")

        def render(d: str, s: list[str]) -> list[str]:
            if predicate == "ne":
                return [f"xor.pred {d}, {s[0]}, {s[1]}"]
            t = p.temp(PRED)
            return [f"xor.pred {t}, {s[0]}, {s[1]}", f"not.pred {d}, {t}"]

        elementwise(p, result, [lhs, rhs], render)
        return
    typed = suffix(cls, signed)
    elementwise(p, result, [lhs, rhs], lambda d, s: [f"setp.{predicate}.{typed} {d}, {s[0]}, {s[1]}"])


@handles(arith.CmpiOp)
def print_cmpi(p: KernelPrinter, op: arith.CmpiOp) -> None:
    predicate, signed = _CMPI[arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]]
    compare_integers(p, op.result, op.lhs, op.rhs, predicate, signed)


_CMPF = {"oeq": "eq", "ogt": "gt", "oge": "ge", "olt": "lt", "ole": "le", "one": "ne", "ord": "num",
         "ueq": "equ", "ugt": "gtu", "uge": "geu", "ult": "ltu", "ule": "leu", "une": "neu", "uno": "nan"}


@handles(arith.CmpfOp)
def print_cmpf(p: KernelPrinter, op: arith.CmpfOp) -> None:
    name = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    if name in ("false", "true"):
        value = "1" if name == "true" else "0"
        elementwise(p, op.result, [op.lhs], lambda d, s: [f"mov.pred {d}, {value}"])
        return
    elementwise(p, op.result, [op.lhs, op.rhs], lambda d, s: [f"setp.{_CMPF[name]}.f32 {d}, {s[0]}, {s[1]}"])


def select(p: KernelPrinter, result: SSAValue, condition: SSAValue, lhs: SSAValue, rhs: SSAValue) -> None:
    """result = condition ? lhs : rhs per register (`selp`; on predicates, (c & a) | (!c & b)); a scalar
    condition serves every register."""
    cls = p.cls(result)
    if cls is PRED:

        def render(d: str, s: list[str]) -> list[str]:
            taken, inverse, other = p.temp(PRED), p.temp(PRED), p.temp(PRED)
            return [f"and.pred {taken}, {s[0]}, {s[1]}", f"not.pred {inverse}, {s[0]}",
                    f"and.pred {other}, {inverse}, {s[2]}", f"or.pred {d}, {taken}, {other}"]

        elementwise(p, result, [condition, lhs, rhs], render)
        return
    elementwise(p, result, [condition, lhs, rhs], lambda d, s: [f"selp.{cls.ptx_type} {d}, {s[1]}, {s[2]}, {s[0]}"])


@handles(arith.SelectOp)
def print_select(p: KernelPrinter, op: arith.SelectOp) -> None:
    select(p, op.result, op.cond, op.lhs, op.rhs)


# endregion
# region floats ------------------------------------------------------------------------------------------------

_FLOAT_BINARY = {
    arith.AddfOp: "add.rn.f32",
    arith.SubfOp: "sub.rn.f32",
    arith.MulfOp: "mul.rn.f32",
    arith.DivfOp: "div.rn.f32",
    arith.MaximumfOp: "max.NaN.f32",
    arith.MinimumfOp: "min.NaN.f32",
    arith.MaxnumfOp: "max.f32",
    arith.MinnumfOp: "min.f32",
}


@handles(*_FLOAT_BINARY)
def print_float_binary(p: KernelPrinter, op: Operation) -> None:
    if p.cls(op.results[0]) is not F32:
        p.refuse(op, f"only f32 registers, got {op.results[0].type}")
    mnemonic = _FLOAT_BINARY[type(op)]
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"{mnemonic} {d}, {s[0]}, {s[1]}"])


@handles(arith.NegfOp, math.AbsFOp)
def print_float_unary(p: KernelPrinter, op: Operation) -> None:
    if p.cls(op.results[0]) is not F32:
        p.refuse(op, f"only f32 registers, got {op.results[0].type}")
    mnemonic = "neg.f32" if isinstance(op, arith.NegfOp) else "abs.f32"
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"{mnemonic} {d}, {s[0]}"])


@handles(math.SqrtOp)
def print_sqrt(p: KernelPrinter, op: math.SqrtOp) -> None:
    """IEEE square root, `sqrt.rn.f32` (correctly rounded, as the IR's math.sqrt)."""
    if p.cls(op.results[0]) is not F32:
        p.refuse(op, f"only f32 registers, got {op.results[0].type}")
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"sqrt.rn.f32 {d}, {s[0]}"])


_INTEGER_ROUNDING = {math.FloorOp: "floor", math.CeilOp: "ceil", math.RoundEvenOp: "rint", math.TruncOp: "trunc"}


@handles(*_INTEGER_ROUNDING)
def print_integer_rounding(p: KernelPrinter, op: Operation) -> None:
    """Rounding to an integral f32, `cvt.rmi/rpi/rni/rzi.f32.f32` (`tessera.sm90.rounding`; no .ftz: subnormal
    inputs are kept, as the IR's math.floor/ceil/roundeven/trunc)."""
    if p.cls(op.results[0]) is not F32:
        p.refuse(op, f"only f32 registers, got {op.results[0].type}")
    mnemonic = integer_rounding_mnemonic(_INTEGER_ROUNDING[type(op)])
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"{mnemonic} {d}, {s[0]}"])


@handles(math.FmaOp, vector.FMAOp)
def print_fma(p: KernelPrinter, op: Operation) -> None:
    if p.cls(op.results[0]) is not F32:
        p.refuse(op, f"only f32 registers, got {op.results[0].type}")
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"fma.rn.f32 {d}, {s[0]}, {s[1]}, {s[2]}"])


# endregion
# region conversions -------------------------------------------------------------------------------------------


@handles(arith.IndexCastOp, arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp)
def print_integer_cast(p: KernelPrinter, op: Operation) -> None:
    """Sign- (index_cast, extsi) or zero-extend (extui) or truncate; index and i32 share the
    .b32 registers, so a cast between them is no instruction. i1 extends to -1 (signed) or 1."""
    (source,) = op.operands
    result = op.results[0]
    src, dst = p.cls(source), p.cls(result)
    signed = isinstance(op, arith.IndexCastOp | arith.ExtSIOp)
    if src is dst:
        p.alias(result, p.regs(source))
        return
    if src is PRED:
        if isinstance(op, arith.IndexCastOp | arith.TruncIOp):
            p.refuse(op, "no PTX for casts of i1 other than extsi/extui")
        one = "-1" if signed else "1"
        elementwise(p, result, [source], lambda d, s: [f"selp.{dst.ptx_type} {d}, {one}, 0, {s[0]}"])
        return
    if dst is PRED:
        if not isinstance(op, arith.TruncIOp):
            p.refuse(op, "no PTX for this cast to i1")

        def render(d: str, s: list[str]) -> list[str]:
            bit = p.temp(src)
            return [f"and.{src.ptx_type} {bit}, {s[0]}, 1", f"setp.ne.{suffix(src, False)} {d}, {bit}, 0"]

        elementwise(p, result, [source], render)
        return
    if src is B32 and dst is B64:
        cvt = "cvt.s64.s32" if signed else "cvt.u64.u32"
    elif src is B64 and dst is B32:
        cvt = "cvt.u32.u64"
    else:
        p.refuse(op, f"no PTX for a cast from {source.type} to {result.type}")
    elementwise(p, result, [source], lambda d, s: [f"{cvt} {d}, {s[0]}"])


@handles(arith.SIToFPOp, arith.UIToFPOp)
def print_int_to_float(p: KernelPrinter, op: Operation) -> None:
    (source,) = op.operands
    src = p.cls(source)
    if src is PRED or p.cls(op.results[0]) is not F32:
        p.refuse(op, f"no PTX for a conversion from {source.type} to {op.results[0].type}")
    typed = suffix(src, isinstance(op, arith.SIToFPOp))
    elementwise(p, op.results[0], [source], lambda d, s: [f"cvt.rn.f32.{typed} {d}, {s[0]}"])


@handles(arith.FPToSIOp, arith.FPToUIOp)
def print_float_to_int(p: KernelPrinter, op: Operation) -> None:
    """`cvt.rzi` truncates, saturates and gives 0 for NaN, as the IR's fptosi/fptoui."""
    dst = p.cls(op.results[0])
    if dst is PRED or p.cls(op.operands[0]) is not F32:
        p.refuse(op, f"no PTX for a conversion from {op.operands[0].type} to {op.results[0].type}")
    typed = suffix(dst, isinstance(op, arith.FPToSIOp))
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"cvt.rzi.{typed}.f32 {d}, {s[0]}"])


@handles(arith.BitcastOp)
def print_bitcast(p: KernelPrinter, op: arith.BitcastOp) -> None:
    src, dst = p.cls(op.operands[0]), p.cls(op.results[0])
    if src is dst:
        p.alias(op.results[0], p.regs(op.operands[0]))
        return
    if {src, dst} != {B32, F32}:
        p.refuse(op, f"no PTX for a bitcast from {op.operands[0].type} to {op.results[0].type}")
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"mov.b32 {d}, {s[0]}"])


# endregion
# region vector: register moves --------------------------------------------------------------------------------


@handles(vector.BroadcastOp)
def print_broadcast(p: KernelPrinter, op: vector.BroadcastOp) -> None:
    names = p.regs(op.source)
    n = lanes(op.vector.type)
    if len(names) not in (1, n):
        p.refuse(op, "only scalars, vector<1xT> and same-length vectors broadcast to 1-D vectors")
    p.alias(op.vector, names * n if len(names) == 1 else names)


@handles(vector.ShuffleOp)
def print_shuffle(p: KernelPrinter, op: vector.ShuffleOp) -> None:
    names = p.regs(op.v1) + p.regs(op.v2)
    mask = list(op.mask.get_values())
    if any(not 0 <= m < len(names) for m in mask):
        p.refuse(op, "shuffle masks select existing registers (no undefined -1 entries)")
    p.alias(op.result, [names[m] for m in mask])


def _static_position(p: KernelPrinter, op: vector.ExtractOp | vector.InsertOp) -> list[int]:
    if op.dynamic_position:
        p.refuse(op, "only static positions (a dynamic register index has no PTX)")
    return list(op.static_position.get_values())


@handles(vector.ExtractOp)
def print_extract(p: KernelPrinter, op: vector.ExtractOp) -> None:
    names = p.regs(op.vector)
    position = _static_position(p, op)
    if len(position) > 1:
        p.refuse(op, "registers of a thread are 1-D vectors")
    p.alias(op.result, [names[position[0]]] if position else names)


@handles(vector.InsertOp)
def print_insert(p: KernelPrinter, op: vector.InsertOp) -> None:
    names = list(p.regs(op.dest))
    position = _static_position(p, op)
    if len(position) > 1:
        p.refuse(op, "registers of a thread are 1-D vectors")
    if not position:
        p.alias(op.result, p.regs(op.source))
        return
    names[position[0]] = p.reg(op.source)
    p.alias(op.result, names)


# endregion
