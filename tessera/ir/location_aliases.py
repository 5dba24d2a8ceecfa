"""Locations as MLIR prints them with debug info: aliases defined after their use, and ranges.

`jax.jit(f).lower(...).compiler_ir("stablehlo")` printed with debug info writes every location as an alias,
`loc(#loc35)`, and defines the aliases after the module, at the end of the file:

    %3 = "stablehlo.exponential"(%2) : (tensor<...>) -> tensor<...> loc(#loc52)
    ...
    #loc52 = loc("jit(f)/exp"(#loc41))
    #loc41 = loc(callsite(#loc29 at #loc33))
    #loc5 = loc("f.py":4:8 to :43)

MLIR resolves such forward references; xDSL 0.74 reads alias definitions only before their use ("undefined
symbol alias '#loc52'") and knows no location ranges (`"f.py":4:8 to :43`, or `to 5:2`).

`LocationAliases` is a mixin of xDSL's parser (put it before `Parser` among the bases) that resolves them:

- before parsing, the text is scanned for top-level definitions `#NAME = loc(...)` (at the start of a line);
  a second definition of a name is refused there, with MLIR's words ("redefinition of location alias");
- a use `loc(#NAME)` of an alias not yet read parses that definition where it stands (recursively: aliases
  of aliases), once, and records it as any alias; a cycle (`#a = loc(#b)`, `#b = loc(#a)`) is refused at the
  use that closes it; a use of a name defined nowhere stays xDSL's "undefined symbol alias" error, located;
- when the top-level loop reaches a definition already resolved, it is read again (to move past it) and kept;
- a range `"file":L:C to [L2]:C2` reads as its start, `FileLineColLoc(file, L, C)` (xDSL has no range
  location; the end is dropped).

The aliases are resolved so that the text reads as MLIR defines it (an undefined or cyclic alias is an
error), but `tessera.ir.parser` then gives each op whose location is not a plain `file:line:col` (JAX's are
names and call sites of Python source) its position in the file being read: Tessera's diagnostics and the
rewriter's report point into the text the user has. The Python positions are dropped (noted here).
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import FileLineColLoc, LocationAttr
from xdsl.parser import AttrParser
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

_DEFINITION = re.compile(r"^[ \t]*(#[A-Za-z_$.][\w$.\-]*)[ \t]*=[ \t]*(loc)\b", re.MULTILINE)
"""A top-level location alias definition: the name, then `loc` (group 2 starts where its value does)."""


class LocationAliases(AttrParser):
    """A parser mixin reading location aliases defined after their use, and location ranges (see the module
    docstring). `_scan_location_aliases(text)` must be called once the lexer holds the whole text."""

    _location_definitions: dict[str, int]
    """Each alias name defined in the text -> the offset of the `loc` of its definition."""
    _resolving: set[str]

    def _scan_location_aliases(self, text: str) -> None:
        self._location_definitions = {}
        self._resolving = set()
        for match in _DEFINITION.finditer(text):
            name = match.group(1)
            if name in self._location_definitions:
                span = Span(match.start(1), match.end(1), self.lexer.input)
                self.raise_error(f"redefinition of location alias '{name}'", span)
            self._location_definitions[name] = match.start(2)

    def _resolve_location_alias(self, name: str, use: Span) -> None:
        """Parse the definition of alias `name` where it stands and record it; the parser resumes where it was."""
        if name in self._resolving:
            self.raise_error(f"location alias '{name}' is defined in terms of itself", use)
        self._resolving.add(name)
        token, position = self._current_token, self.lexer.pos
        self._resume_from(self._location_definitions[name])
        try:
            location = self.parse_optional_location()
        finally:
            self._resolving.discard(name)
        self.lexer.pos = position
        self._parser_state.current_token = token
        self.attribute_aliases[name] = location

    def _parse_location(self) -> LocationAttr:
        token = self._current_token
        definitions = getattr(self, "_location_definitions", {})
        if token.kind == MLIRTokenKind.HASH_IDENT and token.text not in self.attribute_aliases \
                and token.text in definitions:
            self._resolve_location_alias(token.text, token.span)
        location = super()._parse_location()
        if isinstance(location, FileLineColLoc) and self._current_token.text == "to":
            # a range: `to COL` after `:`, or `to LINE:COL`; read its start
            self._consume_token()
            if self.parse_optional_punctuation(":") is None:
                self.parse_integer(False, False)
                self.parse_punctuation(":", " in a location range")
            self.parse_integer(False, False)
        return location

    def _parse_alias_def(self):
        token = self._current_token
        definitions = getattr(self, "_location_definitions", {})
        if token.kind != MLIRTokenKind.HASH_IDENT or definitions.get(token.text) is None \
                or self.lexer.input.content[self.pos:definitions[token.text]].count("\n"):
            return super()._parse_alias_def()
        self._consume_token()
        self.parse_punctuation("=", "after attribute alias name")
        if token.text in self.attribute_aliases:  # resolved at an earlier use: read past it
            self.parse_optional_location()
        else:
            self._resolving.add(token.text)
            self.attribute_aliases[token.text] = self.parse_optional_location()
            self._resolving.discard(token.text)
