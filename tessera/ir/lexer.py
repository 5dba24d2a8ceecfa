r"""The MLIR lexer Tessera parses with: xDSL 0.74's, with string literals lexed in linear time.

xDSL 0.74 matches a string literal with `"(?:[^"\\\n\v\f]+|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"`: a `+` inside a
`*`, so when the closing quote is missing, Python's backtracking regex engine tries every way of splitting
the rest of the line into runs, 2^n of them for n characters (`"test.op"() {a = "` followed by 30
characters took 38 s). `TesseraLexer` matches one character (or one escape) per repetition, which splits a
line in exactly one way, and, when the literal does not close, says why at the place it stops: the end of
the line (MLIR string literals do not span lines), the end of the file, or an escape sequence that MLIR
does not define.
"""

from __future__ import annotations

import re

from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Position, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRToken

_CHARACTER = r'[^"\\\n\v\f]'
"""A character that stands for itself in a string literal (a quote, a backslash or a line break does not)."""

_ESCAPE = r'\\(?:["nt\\]|[0-9A-Fa-f]{2})'
"""The escapes MLIR defines: \\", \\n, \\t, \\\\ and two hex digits."""

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class TesseraLexer(MLIRLexer):
    """xDSL's MLIR lexer with the string-literal rule above; every other token is lexed by xDSL."""

    # xDSL's `_lex_string_literal` matches with this class attribute: the same language as xDSL's, one
    # character or escape per repetition (the alternatives start with different characters, so a failed
    # match backtracks over each character once).
    _unescaped_characters_regex = re.compile(f'"(?:{_CHARACTER}|{_ESCAPE})*"')
    _open_string_regex = re.compile(f'"(?:{_CHARACTER}|{_ESCAPE})*')

    def _lex_string_literal(self, start_pos: Position) -> MLIRToken:
        content = self.input.content
        end = self._open_string_regex.match(content, start_pos).end()
        if end < len(content) and content[end] == '"':
            return super()._lex_string_literal(start_pos)
        if end == len(content):
            raise ParseError(Span(start_pos, start_pos + 1, self.input),
                             "string literal is not closed before the end of the file")
        if content[end] == "\\":
            length = 3 if content[end + 1:end + 2] in _HEX_DIGITS else 2
            escape = content[end:end + length].rstrip("\n\v\f")
            raise ParseError(Span(end, end + len(escape), self.input),
                             f"invalid escape sequence '{escape}' in string literal (MLIR has \\\", \\n, \\t, "
                             "\\\\ and \\ followed by two hex digits)")
        raise ParseError(Span(start_pos, start_pos + 1, self.input),
                         "string literal is not closed before the end of the line (a line break inside a string "
                         "is written \\n)")
