"""`TesseraParser`: the one MLIR parser of Tessera (`tessera.parse_module`, `tessera-opt`, `tessera-run`).

It is xDSL 0.74's `Parser` with what Tessera needs of a parser on top, each part in its own module:

- the lexer lexes in time linear in the input (`tessera.ir.lexer`: xDSL's string rule backtracks exponentially
  on an unterminated string);
- hex float literals are bit patterns, as in MLIR, in dense and array attributes too (`tessera.ir.hex_floats`:
  xDSL misreads them, so printed Target IR did not survive being read back);
- every op it parses gets the `FileLineColLoc` of its first token, unless the text gives it a `loc("file":
  line:col)` (a name, call-site or fused location, as JAX writes, is replaced by the position too), so
  that the verifiers that run after parsing (dominance, kernel ABI) can say where (xDSL records none), and
  `value_names` keeps the name each value has in the text (`%0`, `%acc#1`), for their diagnostics;
- a value used but defined nowhere in scope is reported at its first use, not at the end of the input;
- a type or attribute that fails its verifier while being parsed (`!tile.tile<4x4xf32, register,
  swizzle 64>`) is reported at its body in the source, a property or attribute of an op failing its constraint
  at the op, and an unregistered type or attribute at its name; xDSL reports such errors without a location
  (or at the token after them);
- location aliases defined after their use (`loc(#loc35)`, defined at the end of the file, as JAX prints
  StableHLO with debug info) and location ranges are read (`tessera.ir.location_aliases`);
- an op or attribute of a dialect in `OPAQUE_DIALECTS` (StableHLO and its companions) that Tessera does not
  define is read as an unregistered one (`UnregisteredOp`, `UnregisteredAttr`), which passes leave alone;
  unknown ops of any other dialect stay errors; such an op in its pretty form (JAX's default printing) is
  reported with how to print the generic form Tessera reads;
- the text is remembered under its file name (`tessera.ir.diagnostics.remember_source`), so that the tools can
  print the source line under a located diagnostic.

`line_offset` is the number of lines before the text in its file (a chunk of `--split-input-file`).
"""

from __future__ import annotations

import bisect
import difflib
import re
import sys

from xdsl.context import Context
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.parser import Parser
from xdsl.parser.core import UnresolvedOperand
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

from tessera.ir.diagnostics import LocatedVerifyException, remember_source
from tessera.ir.hex_floats import HexFloatLiterals
from tessera.ir.lexer import TesseraLexer
from tessera.ir.location_aliases import LocationAliases

OPAQUE_DIALECTS = ("stablehlo", "chlo", "mhlo", "sdy", "shardy")
"""Dialects whose ops and attributes outside Tessera's subset (`dialects/stablehlo.py`) read as opaque."""

_OPAQUE_OPS: dict[str, type] = {}
_OPAQUE_NAME = re.compile(r"<\s*([A-Za-z_][\w$.]*)")
"""The attribute name that follows `#dialect` in the opaque form `#dialect<name ...>`."""


def opaque_op(name: str) -> type:
    """The class of the unregistered op `name` of an OPAQUE_DIALECTS dialect: xDSL's `UnregisteredOp`, except
    that it is neither a symbol table nor isolated from above (xDSL's claims every trait of an unregistered
    op, so a `func.call` inside `stablehlo.while` would look its callee up in the while, not the module)."""
    if name not in _OPAQUE_OPS:
        from xdsl.dialects.builtin import UnregisteredOp
        from xdsl.traits import IsolatedFromAbove, SymbolTable

        base = UnregisteredOp.with_name(name)

        def has_trait(cls, trait, *, value_if_unregistered: bool = True) -> bool:
            kind = trait if isinstance(trait, type) else type(trait)
            if issubclass(kind, (SymbolTable, IsolatedFromAbove)):
                return False
            return value_if_unregistered

        _OPAQUE_OPS[name] = type(base.__name__, (base,), {"has_trait": classmethod(has_trait)})
    return _OPAQUE_OPS[name]


class TesseraParser(HexFloatLiterals, LocationAliases, Parser):
    """xDSL's MLIR parser with Tessera's lexer, hex float literals, location aliases, op locations, opaque
    StableHLO ops and located type errors."""

    def __init__(self, ctx: Context, input: str | bytes, name: str = "<unknown>", line_offset: int = 0):
        text = input.decode("utf-8") if isinstance(input, bytes) else input
        # A byte order mark (some editors start UTF-8 files with one) is no character of the IR; xDSL's lexer
        # would call it an unexpected character at 1:1, invisible in the line it shows.
        text = text.removeprefix("\ufeff")
        # xDSL's constructor lexes the first token with its own lexer; give it nothing to lex, then swap in ours
        super().__init__(ctx, "", name)
        self._parser_state = ParserState(TesseraLexer(Input(text, name)))
        self.line_offset = line_offset
        self._line_starts: list[int] | None = None
        self._filename = StringAttr(name)
        self.value_names: dict[SSAValue, str] = {}
        self._first_forward_use: dict[str, Span] = {}
        self._too_deep_at: int | None = None  # where the innermost op being parsed starts, at a RecursionError
        self._op_name = ""  # the name of the op being parsed, as the text spells it
        remember_source(name, line_offset, text)
        self._scan_location_aliases(text)

    def _get_op_by_name(self, name: str):
        self._op_name = name  # (an opaque op's class is named builtin.unregistered: `parse_operation` names it)
        op_type = self.ctx.get_optional_op(name, dialect_stack=self._parser_state.dialect_stack)
        if op_type is None and name.split(".")[0] in OPAQUE_DIALECTS:
            return opaque_op(name)
        if op_type is not None:
            return super()._get_op_by_name(name)
        hint = ""
        if (dialect := self.ctx.get_optional_dialect(name.split(".")[0])) is not None:
            # a misspelt op of a known dialect (`tile.loadd`): name the op meant, as -p names the pass meant
            if close := difflib.get_close_matches(name, [op.name for op in dialect.operations], n=1, cutoff=0.8):
                hint = f" (did you mean '{close[0]}'?)"
        # at the name, which the parser has just read (xDSL points at the token after it: the next line's op
        # when the unknown op has no operands)
        end = self._current_token.span.start
        start = self.lexer.input.content.rfind(name, 0, end)
        self.raise_error(f"Operation {name} is not registered{hint}", start, start + len(name))

    def _parse_block(self):  # private in xDSL 0.74 (pinned): a labelled block, after a region's first one
        # xDSL expects a block label wherever a region's ops stop before its `}` and says only " in block
        # definition": the usual cause is a `}` left out (the input ends) or text that is no op.
        token = self._current_token
        if token.kind == MLIRTokenKind.EOF:
            self.raise_error("the input ends inside a region: a '}' is missing (a function body or another op's "
                             "region is not closed)")
        if token.kind != MLIRTokenKind.CARET_IDENT:
            self.raise_error(f"expected an operation, a block label (^bb1:) or the '}}' closing the region, got "
                             f"'{token.text}'")
        return super()._parse_block()

    def file_line_col(self, position: int) -> FileLineColLoc:
        """The `FileLineColLoc` of a character offset into the text (lines and columns count from 1)."""
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.lexer.input.content)]
        line = bisect.bisect_right(self._line_starts, position) - 1
        column = position - self._line_starts[line] + 1
        return FileLineColLoc(self._filename, IntAttr(line + 1 + self.line_offset), IntAttr(column))

    def parse_operation(self) -> Operation:
        start = self._current_token.span.start
        try:
            op = super().parse_operation()
        except LocatedVerifyException:
            raise
        except VerifyException as e:  # a property or attribute of the op failing its constraint while parsed
            span = Span(start, max(self.pos, start + 1), self.lexer.input, self.line_offset)
            raise LocatedVerifyException(span.print_with_context(str(e)).rstrip("\n")) from e
        except ParseError as e:
            name = self._op_name if e.msg.endswith(" does not have a custom format.") else ""
            if name.split(".")[0] in OPAQUE_DIALECTS:  # JAX prints StableHLO's pretty form unless asked otherwise
                raise ParseError(e.span, f"Operation {name} does not have a custom format here: Tessera reads "
                                         "StableHLO in MLIR's generic form "
                                         f"(\"{name}\"(...) <{{...}}> : ...), which JAX prints with "
                                         "lowered.compiler_ir(\"stablehlo\").operation.get_asm("
                                         "print_generic_op_form=True)") from None
            raise
        except RecursionError:
            # Regions or attribute values nested past Python's recursion limit: remember the innermost op (no
            # call here, there is no stack left), `parse_module` reports it.
            if self._too_deep_at is None:
                self._too_deep_at = start
            raise
        except OverflowError:  # xDSL packs a float property past its type's range (`tile.scale %x by 1e40`)
            self.raise_error("float literal out of range for its float type (f32 holds magnitudes up to "
                             "3.4028235e+38)",
                             Span(start, max(self.pos, start + 1), self.lexer.input))
        if not isinstance(op.location, FileLineColLoc):
            # unknown, or a name/call-site/fused location (JAX's): diagnostics point into the text read
            op.location = self.file_line_col(start)
        return op

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        """The module; ParseError for text that does not parse, located, including ops nested so deeply
        (regions in regions, attribute values in attribute values: about 140 levels of scf.if) that xDSL's
        recursive descent exceeds Python's recursion limit."""
        try:
            return super().parse_module(allow_implicit_module)
        except RecursionError:
            at = self._too_deep_at or 0
            self.raise_error(f"nested too deeply to parse: regions or attribute values nested here exceed Python's "
                             f"recursion limit ({sys.getrecursionlimit()} frames)",
                             Span(at, at + 1, self.lexer.input))
        except ParseError as e:
            # xDSL reports values that no definition resolved at the end of the input, without a place
            if not (self.forward_ssa_references and e.msg.startswith("values used but not defined")):
                raise
            name = next(iter(self.forward_ssa_references))
            self.raise_error(f"use of undefined value %{name} (no definition of it is in scope here: a value "
                             "defined inside a region is not visible after it)", self._first_forward_use[name])

    def resolve_operand(self, operand: UnresolvedOperand, type):
        name = operand.operand_name
        if name not in self.ssa_values and name not in self.forward_ssa_references:
            self._first_forward_use[name] = operand.span
        return super().resolve_operand(operand, type)

    def _register_ssa_definition(self, name: str, values, span: Span) -> None:
        super()._register_ssa_definition(name, values, span)
        for index, value in enumerate(values):
            self.value_names[value] = f"%{name}" if len(values) == 1 else f"%{name}#{index}"

    def _parse_dialect_type_or_attribute_body(self, attr_name, *args, **kwargs):  # private in xDSL 0.74 (pinned)
        start = self.pos
        self._allow_opaque(attr_name, bool(args[0]) if args else bool(kwargs.get("is_type")))
        try:
            return super()._parse_dialect_type_or_attribute_body(attr_name, *args, **kwargs)
        except LocatedVerifyException:
            raise
        except ParseError as e:
            # xDSL points an unregistered type or attribute at the token after it: point at its name
            if e.msg != f"'{attr_name}' is not registered":
                raise
            content = self.lexer.input.content
            name_start = content.rfind(attr_name.split(".")[-1], 0, start)
            name_start = content.rfind(attr_name.split(".")[0], 0, name_start + 1)
            if name_start < 0:
                raise
            span = Span(max(name_start - 1, 0), name_start + len(attr_name), self.lexer.input, self.line_offset)
            raise ParseError(span, e.msg) from None
        except VerifyException as e:
            # `start` is the body's `<`; span it up to the matching `>`
            end = self._raw_scan_balanced(start + 1) + 1 if self.lexer.input.content[start] == "<" else start + 1
            span = Span(start, end, self.lexer.input, self.line_offset)
            raise LocatedVerifyException(span.print_with_context(str(e)).rstrip("\n")) from e

    def _parse_builtin_densearray_attr(self):
        start = self.pos
        try:
            return super()._parse_builtin_densearray_attr()
        except NotImplementedError as e:  # xDSL stores dense arrays of i1/i8/i16/i32/i64 and floats only
            span = Span(start, max(self.pos, start + 1), self.lexer.input, self.line_offset)
            raise ParseError(span, f"unsupported dense array: {e}") from None

    def _allow_opaque(self, attr_name: str, is_type: bool) -> None:
        """If `attr_name` (`dialect.name`, or a bare `dialect` whose `<name ...>` follows) belongs to an
        OPAQUE_DIALECTS dialect and names nothing registered, make it read as an UnregisteredAttr."""
        dialect = attr_name.split(".")[0]
        if dialect not in OPAQUE_DIALECTS:
            return
        full = attr_name
        if "." not in attr_name:
            match = _OPAQUE_NAME.match(self.lexer.input.content, self.pos)
            if match is None:
                return
            full = f"{attr_name}.{match.group(1)}"
        found = self.ctx.get_optional_type(full) if is_type else self.ctx.get_optional_attr(full)
        if found is None:
            from xdsl.dialects.builtin import UnregisteredAttr

            loaded = self.ctx._loaded_types if is_type else self.ctx._loaded_attrs  # xDSL 0.74 (pinned)
            loaded[full] = UnregisteredAttr.with_name_and_type(full, is_type)
