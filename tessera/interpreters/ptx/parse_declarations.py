"""The module-scope part of the PTX parser (see `parse`): a mixin of `parse._Parser`.

The header (`.version`, `.target`, `.address_size`), the ignored debug directives (`.file`, `.loc`, `.section`)
and `.pragma`, and variable declarations (module scope and in a body): their state space, attributes
(`.align`, `.visible`, ...), array dimensions and initialisers, encoded to the variable's bytes
(integers and `0f`/`0d`/decimal floats, nested braces flattened, missing elements zero).
"""

from __future__ import annotations

import re
import struct

from tessera.interpreters.ptx.lexer import Token, describe_token
from tessera.interpreters.ptx.syntax import TYPE_BYTES, Imm, Operand, Variable


MAX_INITIALISED_BYTES = 1 << 28
"""The largest initialised variable, so that a typo cannot exhaust memory."""


class DeclarationParser:
    """Methods of `parse._Parser` for the header, directives and variable declarations (they use its token
    methods and state)."""

    def header(self) -> tuple[tuple[int, int], list[str], int]:
        token = self.accept("directive", ".version")
        if token is None:
            raise self.error(f"a PTX module starts with .version, found {describe_token(self.peek())}", self.peek())
        number = self.next()
        if number.kind != "float" or not re.fullmatch(r"\d+\.\d+", number.text):
            raise self.error(f"expected a version such as 8.0, found {describe_token(number)}", number)
        major, minor = number.text.split(".")
        if self.accept("directive", ".target") is None:
            raise self.error(f"expected .target, found {describe_token(self.peek())}", self.peek())
        targets = [self.expect("name", "a target name such as sm_90a").text]
        while self.accept(","):
            targets.append(self.expect("name", "a target name").text)
        address_size = 32
        if self.accept("directive", ".address_size"):
            size = self.expect("int", "32 or 64")
            if size.text not in ("32", "64"):
                raise self.error(f".address_size must be 32 or 64, not {size.text}", size)
            address_size = int(size.text)
        return (int(major), int(minor)), targets, address_size

    def debug_directive(self) -> bool:
        """Skip `.file`/`.loc` (to the end of their line) or a `.section name { ... }` (True), else False."""
        token = self.peek()
        if token.kind != "directive" or token.text not in (".file", ".loc", ".section"):
            return False
        self.next()
        if token.text != ".section":
            operands = 0
            while self.peek().line == token.line and self.peek().kind != "eof":
                skipped = self.next()
                operands += 1
                if token.text == ".loc" and operands <= 3 and skipped.kind != "int":  # as ptxas: file line column
                    raise self.error(f".loc needs an integer file, line and column, got '{skipped.text}'", skipped)
            return True
        self.expect("directive", "a section name such as .debug_info")
        self.expect("{", "'{' opening the section")
        depth = 1
        while depth:
            skipped = self.next()
            if skipped.kind == "eof":
                raise self.error(f"missing '}}' closing the section opened at line {token.line}", skipped)
            depth += {"{": 1, "}": -1}.get(skipped.kind, 0)
        return True

    def pragma(self) -> bool:
        """Skip a `.pragma "...";` (True) or do nothing (False)."""
        if self.accept("directive", ".pragma") is None:
            return False
        self.expect("string", "a quoted pragma")
        while self.accept(","):
            self.expect("string", "a quoted pragma")
        self.expect(";", "';' after .pragma")
        return True

    def declare(self, names: dict[str, int], token: Token, what: str) -> None:
        if token.text in names or token.text in self.symbols:
            line = names.get(token.text, self.symbols.get(token.text))
            raise self.error(f"{what} '{token.text}' is already declared (line {line})", token)
        names[token.text] = token.line

    def variables(self, space: Token, names: dict[str, int], extern: bool = False) -> list[Variable]:
        """`.space [.align N] .type name[dims] [= init], ...;` after the space token."""
        align, type_ = self.attributes(space)
        found = []
        while True:
            name = self.expect("name", "a variable name")
            if name.text.startswith("%"):
                raise self.error(f"a variable name cannot start with '%': '{name.text}'", name)
            count = self.dimensions(allow_unsized=True)
            init = None
            if self.accept("=", "="):
                if space.text not in (".global", ".const"):
                    raise self.error(f"a {space.text} variable cannot be initialised", name)
                values = self.initializer()
                count = len(values) if count is None else count
                if count * TYPE_BYTES[type_] > MAX_INITIALISED_BYTES:
                    raise self.error(f"initialised data over {MAX_INITIALISED_BYTES} bytes: '{name.text}'", name)
                if len(values) > count:
                    raise self.error(f"{len(values)} initial values for {count} elements of '{name.text}'", name)
                init = b"".join(self.encode(v, type_, name) for v in values) + bytes((count - len(values))
                                                                                    * TYPE_BYTES[type_])
            if count is None and not extern:
                raise self.error(f"the unsized array '{name.text}' needs .extern or an initialiser", name)
            self.declare(names, name, "symbol")
            found.append(Variable(name.text, space.text[1:], type_, count, align or TYPE_BYTES[type_], extern,
                                  init, name.line))
            if not self.accept(","):
                break
        self.expect(";", "';' after a variable declaration")
        return found

    def attributes(self, start: Token) -> tuple[int | None, str]:
        """`[.align N] .type` after `start` (a space or `.param`): (the alignment or None, the type)."""
        align, type_ = None, None
        while type_ is None:
            token = self.expect("directive", "a type such as .b32")
            word = token.text[1:]
            if word == "align":
                value = self.expect("int", "an alignment")
                align = self.integer(value)
                if align <= 0 or align & (align - 1):
                    raise self.error(f"alignment {align} is not a power of two", value)
            elif word in ("v2", "v4", "v8"):
                raise self.error(f"vector variables ({token.text}) are not supported", token)
            elif word in TYPE_BYTES:
                type_ = word
            else:
                raise self.error(f"expected a type or .align after {start.text}, found '{token.text}'", token)
        return align, type_

    def dimensions(self, allow_unsized: bool) -> int | None:
        """`[N][M]...` -> N*M..., nothing -> 1, `[]` first -> None."""
        count: int | None = 1
        if allow_unsized and self.peek().kind == "[" and self.peek(1).kind == "]":
            self.pos += 2
            count = None
        while self.accept("["):
            size = self.expect("int", "an array size")
            if count is None:
                raise self.error("only the first dimension of an array may be unsized", size)
            count *= self.integer(size)
            self.expect("]", "']'")
        return count

    def initializer(self) -> list[tuple[Token, Operand]]:
        """A constant or a brace list of constants (nested braces flattened), each with its token."""
        if not self.accept("{"):
            return [self.constant()]
        values, depth = [], 1
        while depth:
            if self.accept("{"):
                depth += 1
                continue
            values.append(self.constant())
            while depth and self.accept("}"):
                depth -= 1
            if depth:
                self.expect(",", "',' or '}' in an initialiser")
        return values

    def constant(self) -> tuple[Token, Operand]:
        token = self.peek()
        if token.kind == "name":  # nvcc's table of function pointers: {_Z5twicef, ...}
            raise self.error(f"the address of '{token.text}' as an initial value (a table of function or variable "
                             "pointers) is not supported by the PTX executor", token)
        if token.kind not in ("int", "float", "-"):
            raise self.error(f"expected a constant, found {describe_token(token)}", token)
        return token, self.number()

    def encode(self, value: tuple[Token, Operand], type_: str, name: Token) -> bytes:
        """The little-endian bytes of one initial value of type `type_`."""
        token, constant = value
        size = TYPE_BYTES[type_]
        if type_ in ("f32", "f64"):
            if isinstance(constant, Imm):  # as ptxas: "Initial value type mismatch"
                raise self.error(f"an integer cannot initialise .{type_} '{name.text}' (write a float literal)", token)
            layout = "<f" if constant.width == 32 else "<d"
            (number,) = struct.unpack(layout, constant.bits.to_bytes(constant.width // 8, "little"))
            try:
                return struct.pack("<f" if type_ == "f32" else "<d", number)
            except OverflowError:
                raise self.error(f"the value does not fit in .{type_}", token) from None
        if not isinstance(constant, Imm):
            raise self.error(f"a floating-point value cannot initialise .{type_} '{name.text}'", token)
        if not -(1 << (8 * size - 1)) <= constant.value < (1 << (8 * size)):
            raise self.error(f"{constant.value} does not fit in .{type_}", token)
        return (constant.value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
