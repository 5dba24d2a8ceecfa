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

Written by hand (one regular expression per token class, recursive descent over the tokens, linear in the
text) because the PyPI package ptx-parser 0.1.3 rejects `.target sm_90a` and most of the sm_90a syntax and
records no line numbers on what it parses: see PARSER_EVALUATION.md.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from tessera.interpreters.ptx.parse_functions import _FunctionParser
from tessera.interpreters.ptx.syntax import (
    TYPE_BYTES, Address, Entry, FloatImm, Guard, Imm, Instruction, Label, Module, Negated, Operand,
    PtxSyntaxError, Reg, Sink, Special, Symbol, Variable, Vector,
)

OPCODES = frozenset("""
    abs activemask add addc alloca and applypriority atom bar barrier bfe bfi bfind bmsk bra brev brkpt brx call
    clusterlaunchcontrol clz cnot copysign cos cp createpolicy cvt cvta discard div dp2a dp4a elect ex2 exit fence
    fma fns getctarank griddepcontrol isspacep istypep ld ldmatrix ldu lg2 lop3 mad mad24 madc mapa match max
    mbarrier membar min mma mov movmatrix mul mul24 multimem nanosleep neg not or pmevent popc prefetch prefetchu
    prmt rcp red redux rem ret rsqrt sad selp set setmaxnreg setp shf shfl shl shr sin slct sqrt st stackrestore
    stacksave stmatrix sub subc suld suq sured sust szext tanh tcgen05 tensormap testp tex tld4 trap txq vabsdiff
    vabsdiff2 vabsdiff4 vadd vadd2 vadd4 vavrg2 vavrg4 vmad vmax vmax2 vmax4 vmin vmin2 vmin4 vote vset vset2
    vset4 vshl vshr vsub vsub2 vsub4 wgmma wmma xor
""".split())
"""The instruction names of the PTX ISA (9.x): the part of a mnemonic before its first dot."""

_XYZ = ("tid", "ntid", "ctaid", "nctaid", "cluster_ctaid", "cluster_nctaid", "clusterid", "nclusterid")
SPECIAL_REGISTERS = frozenset(
    [f"%{base}.{axis}" for base in _XYZ for axis in "xyz"]
    + [f"%{name}" for name in (
        "laneid warpid nwarpid smid nsmid gridid clock clock_hi clock64 globaltimer globaltimer_lo globaltimer_hi "
        "dynamic_smem_size total_smem_size aggr_smem_size reserved_smem_offset_begin reserved_smem_offset_end "
        "reserved_smem_offset_cap reserved_smem_offset_0 reserved_smem_offset_1 lanemask_eq lanemask_le "
        "lanemask_lt lanemask_ge lanemask_gt cluster_ctarank cluster_nctarank is_explicit_cluster "
        "current_graph_exec").split()]
    + [f"%envreg{i}" for i in range(32)] + [f"%pm{i}" for i in range(8)] + [f"%pm{i}_64" for i in range(8)])
"""The special registers of PTX ISA chapter 10 (read-only; `%tid.x` is one name)."""

PERFORMANCE_DIRECTIVES = frozenset(
    "reqntid maxntid maxnreg minnctapersm maxclusterrank reqnctapercluster explicitcluster".split())
"""Directives between an entry's parameters and its body, kept in `Entry.directives`."""

MAX_REGISTERS = 1 << 16
"""The most registers one `%r<N>` declaration may make (a thread has at most 255)."""
MAX_INITIALISED_BYTES = 1 << 28
"""The largest initialised variable, so that a typo cannot exhaust memory."""

_OPERAND_STARTS = frozenset(("name", "int", "float", "-", "[", "{", "!"))

MODULE_SPACES = ("global", "const", "shared")
BODY_SPACES = ("shared", "local")

_TOKEN = re.compile(r"""
    (?P<newline>\n)
  | (?P<space>[ \t\r\f\v]+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<float>0[fFdD][0-9a-fA-F]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>0[xX][0-9a-fA-F]+U?|0[bB][01]+U?|\d+U?)
  | (?P<name>[%$A-Za-z_][\w$]*(?:(?:\.|::)[\w$]+)*)
  | (?P<directive>\.[A-Za-z_][\w$]*)
  | (?P<string>"[^"\n]*")
  | (?P<punct>[{}()\[\]<>,;:+\-!@|=])
""", re.VERBOSE | re.DOTALL)
"""One alternative per token class. A name takes its dotted and `::` parts (`ld.global.v4.f32`,
`mbarrier::complete_tx::bytes`, `%tid.x`); a directive is one dotted word (`.reg`, `.b32`)."""


class Token(NamedTuple):
    """`kind` is "name", "directive", "int", "float", "string", "eof" or the punctuation character itself."""

    kind: str
    text: str
    line: int
    column: int


def tokenize(text: str, source: str = "<ptx>") -> list[Token]:
    """The tokens of `text`, comments and white space dropped, ending with an "eof" token."""
    tokens: list[Token] = []
    line, line_start, pos, end = 1, 0, 0, len(text)
    match = _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            what = "unterminated comment" if text.startswith("/*", pos) else f"unexpected character {text[pos]!r}"
            raise _error(text, source, what, line, pos - line_start + 1)
        kind, word = m.lastgroup, m.group()
        if kind == "newline":
            line, line_start = line + 1, pos + 1
        elif kind == "comment":
            newlines = word.count("\n")
            if newlines:
                line, line_start = line + newlines, pos + word.rfind("\n") + 1
        elif kind != "space":
            tokens.append(Token(word if kind == "punct" else kind, word, line, pos - line_start + 1))
        pos += len(word)
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


_NOT_PTX_TEXT = re.compile(r"[^\x01-\x7f]")
"""PTX is ASCII: ptxas refuses any other character (and a NUL) wherever it stands, comments included."""


def parse_ptx(text: str, source: str = "<ptx>") -> Module:
    """The module written in `text` (`source` names it in diagnostics). Raises PtxSyntaxError."""
    if (bad := _NOT_PTX_TEXT.search(text)) is not None:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise _error(text, source, f"character U+{ord(bad.group()):04X} is not ASCII (ptxas refuses it anywhere, "
                                   "comments included)", line, column)
    return _Parser(text, source).module()


def _error(text: str, source: str, message: str, line: int, column: int) -> PtxSyntaxError:
    lines = text.split("\n")
    text_line = lines[line - 1].rstrip("\r") if line <= len(lines) else ""
    return PtxSyntaxError(message, source, line, column, text_line)


def _describe(token: Token) -> str:
    return "end of file" if token.kind == "eof" else f"'{token.text}'"


@dataclass(eq=False)
class _Scope:
    """A `{ }` block of an entry: `number` 0 for the body, then 1, 2, ... in order of opening. `registers`
    maps declared names to resolved ones, `labels` names to (instruction index, line)."""

    number: int
    parent: _Scope | None
    registers: dict[str, str]
    labels: dict[str, tuple[int, int]]
    params: dict[str, int] = field(default_factory=dict)  # `.param` variables declared here -> line


class _Parser(_FunctionParser):
    """Recursive descent over the tokens: a method per construct, reading from `pos`. `symbols` holds the
    module-scope names (variables, entries), `entry_symbols` the parameters and variables of the entry being
    read."""

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
            raise self.error(f"expected {what}, found {_describe(token)}", token)
        return self.next()

    def error(self, message: str, token: Token) -> PtxSyntaxError:
        return _error(self.text, self.source, message, token.line, token.column)

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

    def header(self) -> tuple[tuple[int, int], list[str], int]:
        token = self.accept("directive", ".version")
        if token is None:
            raise self.error(f"a PTX module starts with .version, found {_describe(self.peek())}", self.peek())
        number = self.next()
        if number.kind != "float" or not re.fullmatch(r"\d+\.\d+", number.text):
            raise self.error(f"expected a version such as 8.0, found {_describe(number)}", number)
        major, minor = number.text.split(".")
        if self.accept("directive", ".target") is None:
            raise self.error(f"expected .target, found {_describe(self.peek())}", self.peek())
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
            raise self.error(f"expected a constant, found {_describe(token)}", token)
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
        scope = _Scope(0, None, {}, {})
        scopes = 1
        branches: list[tuple[int, _Scope, Token]] = []
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
                scope = _Scope(scopes, scope, {}, {})
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

    def body_directive(self, scope: _Scope) -> None:
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

    def registers(self, scope: _Scope) -> None:
        """`.reg .type %a, %b<N>, ...;`: declares %a and %b0..%b(N-1) in `scope`."""
        self.next()
        type_token = self.expect("directive", "a register type such as .b32")
        type_ = type_token.text[1:]
        if type_ in ("v2", "v4", "v8"):
            raise self.error(f"vector registers ({type_token.text}) are not supported", type_token)
        if type_ != "pred" and type_ not in TYPE_BYTES:
            raise self.error(f"unknown register type '{type_token.text}'", type_token)
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

    def instruction(self, scope: _Scope) -> tuple[Instruction, Token | None]:
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

    def operand(self, scope: _Scope) -> Operand:
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

    def scalar(self, scope: _Scope) -> Operand:
        """A register, special register, sink, number or symbol."""
        token = self.peek()
        if token.kind in ("int", "float", "-"):
            return self.number()
        if token.kind != "name":
            raise self.error(f"expected an operand, found {_describe(token)}", token)
        self.next()
        if token.text == "_":
            return Sink()
        return self.name(token, scope)

    def name(self, token: Token, scope: _Scope) -> Operand:
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
    def lookup(name: str, scope: _Scope | None) -> str | None:
        """The resolved name of register `name` in `scope` or the nearest enclosing scope declaring it."""
        while scope is not None:
            resolved = scope.registers.get(name)
            if resolved is not None:
                return resolved
            scope = scope.parent
        return None

    def register(self, token: Token, scope: _Scope) -> Reg | Special:
        resolved = self.lookup(token.text, scope)
        if resolved is not None:
            return Reg(resolved)
        if token.text in SPECIAL_REGISTERS:
            return Special(token.text)
        raise self.error(f"register {token.text} is not declared", token)

    def predicate(self, scope: _Scope) -> Reg:
        token = self.expect("name", "a predicate register")
        register = self.name(token, scope)
        if not isinstance(register, Reg) or self.entry.registers[register.name] != "pred":
            raise self.error(f"'{token.text}' is not a .pred register", token)
        return register

    def symbol(self, token: Token) -> Symbol:
        if token.text not in self.entry_symbols and token.text not in self.symbols:
            raise self.error(f"unknown symbol '{token.text}'", token)
        return Symbol(token.text)

    def address(self, scope: _Scope) -> Address:
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
            raise self.error(f"expected a register, symbol or integer address, found {_describe(token)}", token)
        self.expect("]", "']' closing the address (an offset is written '+N' or '+-N')")
        return Address(base, offset, coords)

    def vector(self, scope: _Scope) -> Vector:
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
            raise self.error(f"expected a number, found {_describe(token)}", token)
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

    # endregion
