"""The PTX lexer: `tokenize(text, source)` cuts PTX text into `Token`s (one regular expression per token class,
linear in the text), comments and white space dropped, each token with its line and column; `syntax_error` builds
the located `PtxSyntaxError` the parser (`parse`) raises.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from tessera.interpreters.ptx.syntax import PtxSyntaxError


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
            raise syntax_error(text, source, what, line, pos - line_start + 1)
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


def syntax_error(text: str, source: str, message: str, line: int, column: int) -> PtxSyntaxError:
    lines = text.split("\n")
    text_line = lines[line - 1].rstrip("\r") if line <= len(lines) else ""
    return PtxSyntaxError(message, source, line, column, text_line)


def describe_token(token: Token) -> str:
    return "end of file" if token.kind == "eof" else f"'{token.text}'"
