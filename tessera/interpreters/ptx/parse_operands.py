"""The operand part of the PTX parser (see `parse`): a mixin of `parse._Parser`, and `Scope`, the `{ }` blocks
registers and labels are looked up in.

Operands: registers (declared in an enclosing scope, or special registers), predicates (`.pred` registers,
`!%p`), symbols, integers and floats, addresses `[base+imm]` and tensor addresses `[base, {c0, ...}]`, vectors
`{a, _, c}` and pairs `%r|%p`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tessera.interpreters.ptx.isa_names import SPECIAL_REGISTERS
from tessera.interpreters.ptx.lexer import Token, describe_token
from tessera.interpreters.ptx.syntax import Address, FloatImm, Imm, Negated, Operand, Reg, Sink, Special, Symbol, Vector


@dataclass(eq=False)
class Scope:
    """A `{ }` block of an entry: `number` 0 for the body, then 1, 2, ... in order of opening. `registers`
    maps declared names to resolved ones, `labels` names to (instruction index, line)."""

    number: int
    parent: Scope | None
    registers: dict[str, str]
    labels: dict[str, tuple[int, int]]
    params: dict[str, int] = field(default_factory=dict)  # `.param` variables declared here -> line


class OperandParser:
    """Methods of `parse._Parser` for operands (they use its token methods and state)."""

    def operand(self, scope: Scope) -> Operand:
        kind = self.peek().kind
        if kind == "[":
            return self.address(scope)
        if kind == "{":
            return self.vector(scope)
        if kind == "!":
            self.next()
            return Negated(self.predicate(scope))
        value = self.scalar(scope)
        if self.accept("|"):
            return Vector((value, self.scalar(scope)))
        return value

    def scalar(self, scope: Scope) -> Operand:
        """A register, special register, sink, number or symbol."""
        token = self.peek()
        if token.kind in ("int", "float", "-"):
            return self.number()
        if token.kind != "name":
            raise self.error(f"expected an operand, found {describe_token(token)}", token)
        self.next()
        if token.text == "_":
            return Sink()
        return self.name(token, scope)

    def name(self, token: Token, scope: Scope) -> Operand:
        """A register (`%` is a convention: `.reg .pred P1;` declares P1), a special register, `WARP_SZ` or a
        symbol, in that order."""
        if token.text.startswith("%") or self.lookup(token.text, scope) is not None:
            return self.register(token, scope)
        if token.text == "WARP_SZ":
            return Imm(32)
        found = scope
        while found is not None:
            if token.text in found.params:
                return Symbol(f"{token.text}@{found.number}")
            found = found.parent
        return self.symbol(token)

    @staticmethod
    def lookup(name: str, scope: Scope | None) -> str | None:
        """The resolved name of register `name` in `scope` or the nearest enclosing scope declaring it."""
        while scope is not None:
            resolved = scope.registers.get(name)
            if resolved is not None:
                return resolved
            scope = scope.parent
        return None

    def register(self, token: Token, scope: Scope) -> Reg | Special:
        resolved = self.lookup(token.text, scope)
        if resolved is not None:
            return Reg(resolved)
        if token.text in SPECIAL_REGISTERS:
            return Special(token.text)
        raise self.error(f"register {token.text} is not declared", token)

    def predicate(self, scope: Scope) -> Reg:
        token = self.expect("name", "a predicate register")
        register = self.name(token, scope)
        if not isinstance(register, Reg) or self.entry.registers[register.name] != "pred":
            raise self.error(f"'{token.text}' is not a .pred register", token)
        return register

    def symbol(self, token: Token) -> Symbol:
        if token.text not in self.entry_symbols and token.text not in self.symbols:
            raise self.error(f"unknown symbol '{token.text}'", token)
        return Symbol(token.text)

    def address(self, scope: Scope) -> Address:
        """`[base]`, `[base+imm]`, `[base+-imm]`, `[imm]` or `[base, {c0, ...}]`."""
        self.next()
        token = self.peek()
        base, offset, coords = None, 0, None
        if token.kind == "name":
            self.next()
            base = self.name(token, scope)
            if not isinstance(base, (Reg, Symbol)):
                raise self.error(f"{token.text} cannot be the base of an address", token)
            if self.accept("+"):
                offset = self.signed_integer()
            elif self.accept(","):
                coords = self.vector(scope)
        elif token.kind in ("int", "-"):
            offset = self.signed_integer()
        else:
            raise self.error(f"expected a register, symbol or integer address, found {describe_token(token)}", token)
        self.expect("]", "']' closing the address (an offset is written '+N' or '+-N')")
        return Address(base, offset, coords)

    def vector(self, scope: Scope) -> Vector:
        self.expect("{", "'{'")
        elements = [self.scalar(scope)]
        while self.accept(","):
            elements.append(self.scalar(scope))
        self.expect("}", "',' or '}' in a vector")
        return Vector(tuple(elements))

    def signed_integer(self) -> int:
        negative = self.accept("-") is not None
        value = self.integer(self.expect("int", "an integer"))
        return -value if negative else value

    def number(self) -> Imm | FloatImm:
        """An integer or floating-point immediate, optionally negated by '-'."""
        negative = self.accept("-") is not None
        token = self.next()
        if token.kind == "int":
            value = self.integer(token)
            return Imm(-value if negative else value)
        if token.kind != "float":
            raise self.error(f"expected a number, found {describe_token(token)}", token)
        text = token.text
        if text[:2] in ("0f", "0F", "0d", "0D"):
            width = 32 if text[1] in "fF" else 64
            if len(text) - 2 != width // 4:
                raise self.error(f"'{text}' needs exactly {width // 4} hex digits after {text[:2]}", token)
            bits = int(text[2:], 16)
        else:
            width, bits = 64, int.from_bytes(struct.pack("<d", float(text)), "little")
        return FloatImm(bits ^ (1 << (width - 1)) if negative else bits, width)

    def integer(self, token: Token) -> int:
        text = token.text.rstrip("U")
        if text[:2] in ("0x", "0X"):
            return int(text[2:], 16)
        if text[:2] in ("0b", "0B"):
            return int(text[2:], 2)
        if len(text) > 1 and text[0] == "0":
            if not text.isdigit() or "8" in text or "9" in text:
                raise self.error(f"'{token.text}' is not an octal number", token)
            return int(text, 8)
        return int(text)
