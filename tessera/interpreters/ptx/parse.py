"""Parse PTX text into the data of `syntax`: `parse_ptx(text, source) -> Module`.

Accepted (the PTX ISA 8.x subset that Hopper kernels from Tessera, Triton and CUTLASS use):
- the header `.version M.m`, `.target name[, name...]`, `.address_size 32|64` (32 when absent, as in PTX);
- module-scope variables `[.visible|.weak|.extern] .global|.const|.shared [.align N] .type name[N]... [= init];`
  (several names per declaration; `[]` when extern or initialised; initialisers of integers for integer
  types and `0f`/`0d`/decimal floats for .f32/.f64, nested braces flattened, missing elements zero);
- `[.visible|.weak] .entry name(.param [.align N] .type name[N], ...)`, then the performance directives
  `.reqntid .maxntid .maxnreg .minnctapersm .maxclusterrank .reqnctapercluster .explicitcluster`;
- in the body: `.reg .type %a, %b<N>;`, `.shared`/`.local` variables, `{ }` scopes, labels `name:`, and
  instructions `[@[!]%p] opcode.mod... operand, ...;`. A register is any declared identifier (`%r1`, `P1`);
  a bare name not declared as a register is a symbol (parameter, variable). Registers and
  labels are scoped: a register declared in the k-th `{` of the entry (counting from 1) is renamed `name@k`;
  variables declared in a nested scope are visible in the whole entry.

Operands: registers, special registers, integers (decimal, hex, octal, binary, `U` suffix, negative), floats
(`0fXXXXXXXX` 32-bit, `0dXXXXXXXXXXXXXXXX` and decimal 64-bit, negated by `-`), symbols, `WARP_SZ` (32),
`[base]`, `[base+imm]`, `[base+-imm]`, `[imm]`, tensor addresses `[base, {c0, ...}]`, vectors `{a, _, c}`,
pairs `%r|%p`, `!%p`, and the label of `bra`.

Checked, each failure a `PtxSyntaxError` with line and column: every register is declared in an enclosing
scope or is a special register; every symbol is declared; a branch target is a label of the branch's scope or
of an enclosing one (innermost first); no register, label or symbol is declared twice in one scope; the opcode
is a PTX instruction; a guard or `!` operand is a `.pred` register.

Ignored: `.pragma "...";`, the debug directives `.file` and `.loc` (each to the end of its line) and
`.section name { ... }` blocks (DWARF data as LLVM emits it).

Functions: `[.visible|.weak|.extern] .func [(.param ret)] name(.param ..., ...) [.noreturn] { body }` (or `;`
for a declaration) is parsed like an entry; `.param` variables declared in a body (call sites) are scoped like
registers (`param0` in the k-th `{` becomes `param0@k`); `call[.uni] [(ret, ...),] name[, (arg, ...)];` becomes
an instruction with operands (Vector(returns), Symbol(name), Vector(arguments)). Each entry is then linked with
the functions it calls (`link.link`).

Refused: indirect calls (`call` through a register, prototypes), `brx.idx`, vector registers and variables
(`.v4`), `.global`/`.const` declarations inside an entry, entries without body.

Written by hand (one regular expression per token class in `lexer`, recursive descent over the tokens, linear
in the text; the ISA's names checked against are in `isa_names`) because the PyPI package ptx-parser 0.1.3 rejects `.target sm_90a` and most of the sm_90a syntax and
records no line numbers on what it parses: see PARSER_EVALUATION.md beside this file in a checkout (the wheel
holds only modules).
"""

from __future__ import annotations

import re
from dataclasses import replace

from tessera.interpreters.ptx.isa_names import OPCODES, PERFORMANCE_DIRECTIVES
from tessera.interpreters.ptx.lexer import Token, describe_token, syntax_error, tokenize
from tessera.interpreters.ptx.parse_declarations import DeclarationParser
from tessera.interpreters.ptx.parse_functions import FunctionParser
from tessera.interpreters.ptx.parse_operands import OperandParser, Scope
from tessera.interpreters.ptx.syntax import (
    TYPE_BYTES, Entry, Guard, Instruction, Label, Module, Operand, PtxSyntaxError, Variable,
)
from tessera.interpreters.ptx.types import is_type

MAX_REGISTERS = 1 << 16
"""The most registers one `%r<N>` declaration may make (a thread has at most 255)."""

_OPERAND_STARTS = frozenset(("name", "int", "float", "-", "[", "{", "!"))

MODULE_SPACES = ("global", "const", "shared")
BODY_SPACES = ("shared", "local")


_NOT_PTX_TEXT = re.compile(r"[^\x01-\x7f]")
"""PTX is ASCII: ptxas refuses any other character (and a NUL) wherever it stands, comments included."""


def parse_ptx(text: str, source: str = "<ptx>") -> Module:
    """The module written in `text` (`source` names it in diagnostics). Raises PtxSyntaxError."""
    if (bad := _NOT_PTX_TEXT.search(text)) is not None:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise syntax_error(text, source, f"character U+{ord(bad.group()):04X} is not ASCII (ptxas refuses it "
                                         "anywhere, comments included)", line, column)
    return _Parser(text, source).module()


class _Parser(FunctionParser, DeclarationParser, OperandParser):
    """Recursive descent over the tokens: a method per construct, reading from `pos`. `symbols` holds the
    module-scope names (variables, entries), `entry_symbols` the parameters and variables of the entry being
    read. The header and declarations are parsed by `parse_declarations`, operands by `parse_operands`,
    functions and calls by `parse_functions`; this class holds the token methods, the module, entries, bodies and
    instructions."""

    def __init__(self, text: str, source: str):
        self.text, self.source = text, source
        self.tokens = tokenize(text, source)
        self.pos = 0
        self.symbols: dict[str, int] = {}  # module-scope names -> line of declaration
        self.entry: Entry | None = None
        self.entry_symbols: dict[str, int] = {}
        self.function_names: set[str] = set()

    # region tokens

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind != "eof":
            self.pos += 1
        return token

    def accept(self, kind: str, text: str | None = None) -> Token | None:
        token = self.tokens[self.pos]
        if token.kind == kind and (text is None or token.text == text):
            return self.next()
        return None

    def expect(self, kind: str, what: str) -> Token:
        token = self.tokens[self.pos]
        if token.kind != kind:
            raise self.error(f"expected {what}, found {describe_token(token)}", token)
        return self.next()

    def error(self, message: str, token: Token) -> PtxSyntaxError:
        return syntax_error(self.text, self.source, message, token.line, token.column)

    # endregion
    # region module scope

    def module(self) -> Module:
        version, targets, address_size = self.header()
        module = Module(version, targets, address_size)
        while self.peek().kind != "eof":
            if self.pragma() or self.debug_directive():
                continue
            linkage = []
            while self.peek().text in (".visible", ".weak", ".extern"):
                linkage.append(self.next().text)
            token = self.expect("directive", "a module-scope declaration (.entry, .global, .const, .shared)")
            if token.text == ".entry":
                if ".extern" in linkage:
                    raise self.error("an .extern .entry (a declaration without body) is not supported", token)
                entry = self.entry_definition(token)
                module.entries[entry.name] = entry
            elif token.text[1:] in MODULE_SPACES:
                module.variables += self.variables(token, self.symbols, extern=".extern" in linkage)
            elif token.text == ".func":
                self.function_definition(token, module, extern=".extern" in linkage)
            else:
                raise self.error(f"unsupported module-scope directive '{token.text}'", token)
        from tessera.interpreters.ptx.link import link

        module.entries = {name: link(module, entry) for name, entry in module.entries.items()}
        return module

    # endregion
    # region entries

    def entry_definition(self, token: Token) -> Entry:
        name = self.expect("name", "the entry name")
        self.declare(self.symbols, name, "entry")
        self.entry_symbols = {}
        self.expect("(", "'(' after the entry name")
        entry = Entry(name.text, self.parameter_list(), line=token.line)
        while True:
            if self.pragma():
                continue
            directive = self.peek()
            if directive.kind != "directive" or directive.text[1:] not in PERFORMANCE_DIRECTIVES:
                break
            self.next()
            if directive.text[1:] in entry.directives:
                raise self.error(f"{directive.text} is given twice", directive)
            values = []
            if self.peek().kind == "int":
                values.append(self.integer(self.next()))
                while self.accept(","):
                    values.append(self.integer(self.expect("int", f"an integer after {directive.text}")))
            entry.directives[directive.text[1:]] = tuple(values)
        if self.peek().kind == "directive":
            raise self.error(f"unsupported entry directive '{self.peek().text}'", self.peek())
        self.expect("{", "'{' opening the entry body")
        self.entry = entry
        self.body()
        self.entry = None
        return entry

    def parameter(self) -> Variable:
        start = self.expect("directive", "a parameter (.param)")
        if start.text != ".param":
            raise self.error(f"expected .param, found '{start.text}'", start)
        align, type_ = self.attributes(start)
        if self.accept("directive", ".ptr"):  # `.ptr [.space] [.align N]`: an optimisation hint, ignored
            if self.peek().text in (".global", ".shared", ".const", ".local"):
                self.next()
            if self.accept("directive", ".align"):
                self.expect("int", "an alignment")
        name = self.expect("name", "a parameter name")
        count = self.dimensions(allow_unsized=False)
        self.declare(self.entry_symbols, name, "parameter")
        return Variable(name.text, "param", type_, count, align or TYPE_BYTES[type_], line=name.line)

    def body(self) -> None:
        """Statements up to the '}' closing the entry ('{' already read); then labels are resolved."""
        entry = self.entry
        scope = Scope(0, None, {}, {})
        scopes = 1
        branches: list[tuple[int, Scope, Token]] = []
        opened = [self.tokens[self.pos - 1]]
        while True:
            token = self.peek()
            kind = token.kind
            if kind == "}":
                self.next()
                opened.pop()
                if scope.parent is None:
                    break
                scope = scope.parent
            elif kind == "{":
                opened.append(self.next())
                scope = Scope(scopes, scope, {}, {})
                scopes += 1
            elif kind == "eof":
                raise self.error(f"missing '}}' closing the block opened at line {opened[-1].line}", token)
            elif kind == "directive":
                self.body_directive(scope)
            elif kind == "name" and self.peek(1).kind == ":":
                self.next()
                self.next()
                if token.text in scope.labels:
                    line = scope.labels[token.text][1]
                    raise self.error(f"label '{token.text}' is already defined in this scope (line {line})", token)
                scope.labels[token.text] = (len(entry.instructions), token.line)
            else:
                instruction, target = self.instruction(scope)
                if target is not None:
                    branches.append((len(entry.instructions), scope, target))
                entry.instructions.append(instruction)
        for index, branch_scope, target in branches:
            found = branch_scope
            while found is not None and target.text not in found.labels:
                found = found.parent
            if found is None:
                raise self.error(f"branch to undefined label '{target.text}'", target)
            label = Label(target.text, found.labels[target.text][0])
            entry.instructions[index] = replace(entry.instructions[index], operands=(label,))

    def body_directive(self, scope: Scope) -> None:
        token = self.peek()
        word = token.text[1:]
        if word == "reg":
            self.registers(scope)
        elif word in BODY_SPACES:
            self.entry.variables += self.variables(self.next(), self.entry_symbols)
        elif word == "pragma":
            self.pragma()
        elif word == "loc":
            self.debug_directive()
        elif word == "param":
            for v in self.variables(self.next(), scope.params):
                self.entry.variables.append(replace(v, name=f"{v.name}@{scope.number}"))
        elif word in ("global", "const", "extern"):
            raise self.error(f"{token.text} declarations are not supported inside an entry", token)
        elif word == "callprototype":
            raise self.error("'.callprototype': indirect calls through a function pointer (function tables, virtual "
                             "functions) are not supported by the PTX executor", token)
        else:
            raise self.error(f"unsupported directive '{token.text}' in an entry body", token)

    def registers(self, scope: Scope) -> None:
        """`.reg .type %a, %b<N>, ...;`: declares %a and %b0..%b(N-1) in `scope`."""
        self.next()
        type_token = self.expect("directive", "a register type such as .b32")
        type_ = type_token.text[1:]
        if type_ in ("v2", "v4", "v8"):
            raise self.error(f"vector registers ({type_token.text}) are not supported", type_token)
        if type_ != "pred" and type_ not in TYPE_BYTES:
            raise self.error(f"unknown register type '{type_token.text}'", type_token)
        if not is_type(type_):  # PTX's, but no register file here holds it (.b128)
            raise self.error(f"registers of type '{type_token.text}' are not supported by the PTX executor", type_token)
        while True:
            name = self.expect("name", "a register name")
            if "." in name.text or "::" in name.text or name.text == "_":
                raise self.error(f"'{name.text}' is not a register name (an identifier such as %r)", name)
            names = [name.text]
            if self.accept("<"):
                count_token = self.expect("int", "a register count")
                count = self.integer(count_token)
                if count > MAX_REGISTERS:
                    raise self.error(f"more than {MAX_REGISTERS} registers in one declaration", count_token)
                self.expect(">", "'>'")
                names = [f"{name.text}{i}" for i in range(count)]
            for declared in names:
                if declared in scope.registers:
                    raise self.error(f"register {declared} is declared twice in this scope", name)
                resolved = declared if scope.number == 0 else f"{declared}@{scope.number}"
                scope.registers[declared] = resolved
                self.entry.registers[resolved] = type_
            if not self.accept(","):
                break
        self.expect(";", "';' after a register declaration")

    # endregion
    # region instructions

    def instruction(self, scope: Scope) -> tuple[Instruction, Token | None]:
        """The next instruction, and for `bra` the token of its label (the Label's index is set later)."""
        first = self.peek()
        guard = None
        if self.accept("@"):
            negated = self.accept("!") is not None
            guard = Guard(self.predicate(scope), negated)
        mnemonic = self.expect("name", "an instruction")
        opcode, *modifiers = mnemonic.text.split(".")
        if opcode not in OPCODES:
            raise self.error(f"unknown instruction '{opcode}'", mnemonic)
        if opcode == "brx":
            raise self.error("'brx' is not supported (indirect branches)", mnemonic)
        if opcode == "call":
            target, operands = None, self.call_operands(scope)
        elif opcode == "bra":
            target = self.expect("name", "a label after bra")
            if target.text.startswith("%") or self.lookup(target.text, scope) is not None:
                raise self.error(f"bra takes a label, not the register '{target.text}'", target)
            operands: list[Operand] = [Label(target.text, -1)]
        else:
            target, operands = None, []
            if self.peek().kind in _OPERAND_STARTS:
                operands.append(self.operand(scope))
                while self.accept(","):
                    operands.append(self.operand(scope))
        self.expect(";", "',' or ';' after an operand" if operands else "';' ending the instruction")
        return Instruction(opcode, tuple(modifiers), tuple(operands), guard, first.line), target

    # endregion
