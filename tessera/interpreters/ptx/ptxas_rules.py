"""What ptxas refuses and the executor would otherwise run: checked on a whole entry before it runs, each
refusal a `PtxExecutionError` naming the instruction and its line (`check_entry`).

The rules, each checked against ptxas 13 on small cases (a register type that does not fit is "Arguments
mismatch", a special register "Special register argument not allowed", ...); where ptxas accepts, so does
this module, and instructions it does not list are left to their decoders:

- operand types [P#operand-type-checking]: a register used by an instruction of type .T must have T's size,
  and a kind T accepts: a .f instruction takes .f and .b registers (`add.f32 %f, %r` with %r .b32 is
  fine), a .u/.s one .b, .u and .s registers, a .b one any register of its size; .pred only where a
  predicate belongs. `ld`, `st` and `cvt` also take a register *wider* than the type (data operands only).
  The shift amount of shl/shr is .u32, and popc/clz write a .u32; mul.wide/mad.wide write (and mad.wide
  adds) twice the width; setp writes predicates; shfl's operands are all .b32 but its predicate
  destination; selp's last operand and the guard are predicates. Packed .f16x2/.bf16x2 instructions are not
  checked.
- instruction types: add, sub, mul, mad, min, max, neg, abs, div, rem take no .b type; and, or, xor, not
  only .b (or .pred); shl only .b.
- special registers (%tid.x, ...) are operands of mov and cvt only.
- addresses: a register base of a .global or generic access must be 64 bits under `.address_size 64`;
  a .f or .pred register is never an address; `[symbol]` must name a variable of the instruction's state
  space (a .shared variable in ld.global is "State space mismatch"); a 32-bit mov/cvta of a .global or
  .const variable's address is refused.
- state spaces: mbarrier on .shared, no st.const (atom/red on other spaces are refused by their decoder).
- `.target`: wgmma and setmaxnreg need sm_90a ("not supported on .target 'sm_90'").
"""

from __future__ import annotations

from tessera.interpreters.ptx.state import PtxExecutionError, fail
from tessera.interpreters.ptx.syntax import Address, Entry, Module, Reg, Special, Symbol, Vector
from tessera.interpreters.ptx.types import PtxType, ptx_type

_NO_BIT_TYPES = {"add", "sub", "mul", "mad", "min", "max", "neg", "abs", "div", "rem"}
_BIT_TYPES_ONLY = {"and", "or", "xor", "not", "cnot", "shl"}
_SAME_TYPE = {"add", "sub", "mul", "mad", "min", "max", "neg", "abs", "div", "rem", "and", "or", "xor", "not",
              "cnot", "mov", "fma", "rcp", "sqrt", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh", "copysign", "cvta",
              "brev"}
_SPECIAL_ALLOWED = {"mov", "cvt"}
_SM90A_ONLY = {"wgmma", "setmaxnreg"}
_ADDRESS_SPACES = {"global", "const", "shared", "shared::cta", "shared::cluster", "local", "param"}


def _space(inst) -> str | None:
    for m in inst.modifiers:
        if m in _ADDRESS_SPACES:
            return m.split("::")[0]
    return None


def _type(inst) -> PtxType | None:
    """The instruction's type: its last modifier, when that is a type."""
    return ptx_type(inst.modifiers[-1]) if inst.modifiers else None


def _fits(register: PtxType, t: PtxType, wider: bool = False) -> bool:
    """Whether a register declared `register` may be an operand of type `t` (see the module docstring)."""
    if register.kind == "pred" or t.kind == "pred":
        return register.kind == t.kind
    if register.bits != t.bits and not (wider and register.bits > t.bits):
        return False
    if t.kind == "f":
        return register.kind in ("f", "b")
    if t.kind in ("u", "s"):
        return register.kind in ("b", "u", "s")
    return True


class _Checker:
    def __init__(self, module: Module, entry: Entry, source: str):
        self.module, self.entry, self.source = module, entry, source
        self.spaces: dict[str, str] = {}
        for v in module.variables:
            self.spaces[v.name] = v.space
        for v in entry.variables:
            self.spaces[v.name] = v.space
        for p in entry.params:
            self.spaces[p.name] = "param"
        self.types = {name: ptx_type(t) for name, t in entry.registers.items()}

    def refuse(self, inst, message: str) -> PtxExecutionError:
        return fail(self.source, inst, f"ptxas refuses this: {message}")

    def register(self, operand) -> PtxType | None:
        return self.types.get(operand.name) if type(operand) is Reg else None

    def operand(self, inst, operand, t: PtxType | None, wider: bool = False) -> None:
        """Check one data operand (a register, or each register of a vector) against type `t`."""
        if t is None or t.kind == "x2":
            return
        if type(operand) is Reg:
            declared = self.types.get(operand.name)
            if declared is not None and not _fits(declared, t, wider):
                raise self.refuse(inst, f"register {operand.name} is .{declared.name}, which does not fit a "
                                        f".{t.name} operand")
            return
        if isinstance(operand, Vector):
            for element in operand.elements:
                self.operand(inst, element, t, wider)
            return
        if isinstance(operand, Special) and inst.opcode not in _SPECIAL_ALLOWED:
            raise self.refuse(inst, f"special register {operand.name} as an operand of {inst.opcode} (only mov and "
                                    "cvt read special registers)")
        declared = self.register(operand)
        if declared is not None and not _fits(declared, t, wider):
            raise self.refuse(inst, f"register {operand.name} is .{declared.name}, which does not fit a .{t.name} "
                                    "operand")

    def address(self, inst, operand, space: str | None) -> None:
        if not isinstance(operand, Address):
            return
        base = operand.base
        if isinstance(base, Reg):
            declared = self.register(base)
            if declared is None:
                return
            if declared.kind in ("f", "pred", "x2"):
                raise self.refuse(inst, f"register {base.name} of type .{declared.name} as an address")
            if space in (None, "global") and self.module.address_size == 64 and declared.bits < 64:
                raise self.refuse(inst, f"32-bit register {base.name} as a {space or 'generic'} address under "
                                        ".address_size 64")
        elif isinstance(base, Symbol) and space is not None:
            found = self.spaces.get(base.name)
            if found is not None and {"const": "global"}.get(found, found) != {"const": "global"}.get(space, space):
                raise self.refuse(inst, f"[{base.name}] is a .{found} variable, used by a .{space} access "
                                        "(state space mismatch)")

    def check(self, inst) -> None:
        op, mods = inst.opcode, inst.modifiers
        if op in _SM90A_ONLY and "sm_90a" not in self.module.targets:
            target = ", ".join(self.module.targets) or "none"
            raise self.refuse(inst, f"{op} needs .target sm_90a (the module targets {target})")
        space = _space(inst)
        if op == "mbarrier" and space not in (None, "shared"):
            raise self.refuse(inst, f"mbarrier on the .{space} state space (an mbarrier lives in shared memory)")
        if op == "st" and space == "const":
            raise self.refuse(inst, "st.const (the constant space is read-only)")
        operands = inst.operands
        t = _type(inst)
        if op in ("ld", "ldu", "st") and t is not None and len(operands) >= 2:
            data, address = (operands[0], operands[1]) if op != "st" else (operands[1], operands[0])
            self.address(inst, address, space)
            self.operand(inst, data, t, wider=True)
            return
        if op in ("atom", "red", "prefetch") and operands:
            self.address(inst, operands[1 if op == "atom" else 0], space)
            return
        if t is None:
            return
        if op in _NO_BIT_TYPES and t.kind == "b":
            raise self.refuse(inst, f"{op} has no .{t.name} form (use .u{t.bits}/.s{t.bits})")
        if op in _BIT_TYPES_ONLY and t.kind not in ("b", "pred"):
            raise self.refuse(inst, f"{op} takes .b types only, not .{t.name}")
        if op == "cvt" and len(mods) >= 2 and len(operands) == 2:
            self.operand(inst, operands[0], ptx_type(mods[-2]), wider=True)
            self.operand(inst, operands[1], t, wider=True)
        elif op in ("mov", "cvta") and t.bits == 32 and len(operands) == 2 and isinstance(operands[1], Symbol) \
                and self.spaces.get(operands[1].name) in ("global", "const"):
            raise self.refuse(inst, f"the 32-bit address of the .{self.spaces[operands[1].name]} variable "
                                    f"{operands[1].name}")
        elif op in ("mul", "mad") and "wide" in mods:
            wide = ptx_type(f"{t.kind}{2 * t.bits}") if t.bits <= 32 else None
            self.operand(inst, operands[0], wide)
            for source in operands[1:3]:
                self.operand(inst, source, t)
            if op == "mad" and len(operands) > 3:
                self.operand(inst, operands[3], wide)
        elif op == "shfl" and len(operands) == 5:
            dests = operands[0].elements if isinstance(operands[0], Vector) else (operands[0],)
            self.operand(inst, dests[0], t)
            if len(dests) > 1:
                self.operand(inst, dests[1], ptx_type("pred"))
            for operand in operands[1:]:
                self.operand(inst, operand, t)
        elif op in ("popc", "clz") and len(operands) == 2:
            self.operand(inst, operands[0], ptx_type("u32"))
            self.operand(inst, operands[1], t)
        elif op in ("shl", "shr") and len(operands) == 3:
            self.operand(inst, operands[0], t)
            self.operand(inst, operands[1], t)
            self.operand(inst, operands[2], ptx_type("u32"))
        elif op == "setp" and len(operands) >= 3:
            self.operand(inst, operands[1], t)
            self.operand(inst, operands[2], t)
        elif op == "selp" and len(operands) == 4:
            for operand in operands[:3]:
                self.operand(inst, operand, t)
        elif op in _SAME_TYPE:
            for operand in operands:
                if not (op == "mov" and isinstance(operand, Vector)):  # mov packs and unpacks vectors
                    self.operand(inst, operand, t)


def check_entry(module: Module, entry: Entry, source: str) -> None:
    """Refuse, naming the instruction and its line, what ptxas refuses in `entry` (see the module docstring)."""
    checker = _Checker(module, entry, source)
    for inst in entry.instructions:
        checker.check(inst)
