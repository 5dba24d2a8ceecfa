"""Float literals in attributes as MLIR defines them: a hexadecimal literal is the float's bit pattern.

In MLIR, an integer literal written in hexadecimal where a value of float type T is expected stands for the
bits of T, not for a number: `0xff800000 : f32` is -inf, `dense<0xfc00> : tensor<4xf16>` four f16 -infs.
xDSL 0.74 prints float attributes that way (inf, NaN, and the f32/f64 values that 9/17 significant digits
without a point cannot express, such as 123456792.0), but reads the bit pattern back only in a scalar
`FloatAttr`: in a `dense<...>` literal (tensor, vector or memref) it takes `0xff800000` as the number
4286578688.0, and in `array<f32: ...>` it refuses it. So printed Target IR, whose softmax starts from a
splat of -inf, read back into a kernel whose output is all NaN (issue 21).

`HexFloatLiterals` is a mixin of xDSL's attribute parser that gives all three forms MLIR's meaning, for f16,
bf16, f32, f64 and the small float types (tf32, f8/f6/f4 variants), splat or not:

- a hex element of a float-typed dense literal is stored with exactly its bits (NaN payloads included);
- a hex literal with a minus sign, or wider than the type, is refused at the literal, with MLIR's words
  ("hexadecimal float literal should not have a leading minus", "... out of range for type");
- a decimal integer in a float dense array is refused as in MLIR (xDSL accepts only float literals there);
- attributes of f80 and f128 (or of complex numbers of them), which xDSL parses but cannot encode or print
  (an empty NotImplementedError when the module is parsed or printed), are refused at the literal, naming
  the type.

Dense literals of integer, index or complex element type, and `dense<"0x...">` hex strings (raw bytes, which
xDSL reads correctly), are left to xDSL.
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import (
    AnyFloat,
    BytesAttr,
    ComplexType,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float80Type,
    Float128Type,
    FloatAttr,
)
from xdsl.ir import Attribute
from xdsl.parser import AttrParser
from xdsl.utils.lexer import Position, Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

_HEX_LITERAL = re.compile(r"(-?)\s*(0[xX][0-9a-fA-F]+)")
"""A hex integer literal as the lexer reads it (`0x` then hex digits), with the optional minus in front."""

UNSTORABLE_FLOAT_TYPES = (Float80Type, Float128Type)
"""Float types whose values xDSL 0.74 cannot encode (no byte format): attributes of them are refused."""


def parse_optional_hex_literal(parser: AttrParser) -> tuple[int, Span] | None:
    """For an op's custom syntax that reads a number before its type (`tile.fill 0xff800000 : ...`): if the next
    token is a hex integer literal, consume it and return its value and span; else None and nothing is consumed.
    What it means depends on the type that follows: an integer's value, a float's bit pattern (`float_of_bits`)."""
    token = parser._current_token
    if token.kind != MLIRTokenKind.INTEGER_LIT or token.text[:2] not in ("0x", "0X"):
        return None
    return parser.parse_integer(allow_negative=False), token.span


def float_of_bits(parser: AttrParser, bits: int, span: Span, type: AnyFloat) -> float:
    """The `type` value whose bit pattern is `bits`, a hex literal read at `span` (a ParseError there if it is
    wider than `type`)."""
    if bits >> type.bitwidth:
        parser.raise_error(f"hexadecimal float constant out of range for type {type.name}", span)
    return next(type.iter_unpack(bits.to_bytes(type.compile_time_size, "little")))


def _is_hex(span: Span) -> bool:
    """Whether a literal's text (possibly with a leading minus) is a hex integer."""
    return span.text.lstrip("-").lstrip()[:2] in ("0x", "0X")


class HexFloatLiterals(AttrParser):
    """A mixin for xDSL's `Parser` (put it first among the bases) reading float literals as described in this
    module's docstring. Each override parses with xDSL and then corrects or checks what xDSL got wrong."""

    _dense_elements: list | None = None
    """While a `dense<...>` literal is parsed: its elements in order (one for a splat), else None."""

    class _TensorLiteralElement(AttrParser._TensorLiteralElement):
        """xDSL's tensor literal element, converting a hex integer to a float type by its bit pattern."""

        def to_type(self, parser: AttrParser, type: Attribute):
            if isinstance(type, AnyFloat) and isinstance(self.value, int) and not isinstance(self.value, bool) \
                    and _is_hex(self.span):
                assert isinstance(parser, HexFloatLiterals)
                raw = parser._hex_float_bytes(self.span, self.is_negative, abs(self.value), type)
                return next(type.iter_unpack(raw))
            return super().to_type(parser, type)

    def _hex_float_bytes(self, span: Span, negative: bool, bits: int, type: AnyFloat) -> bytes:
        """The little-endian storage of the hex literal `bits` (at `span`) as a value of float `type`, as xDSL
        stores that type; raises a ParseError at `span` if MLIR would refuse the literal."""
        self._require_storable(type, span)
        if negative:
            self.raise_error("hexadecimal float literal should not have a leading minus", span)
        if bits >> type.bitwidth:
            self.raise_error(f"hexadecimal float constant out of range for type {type.name} "
                             f"({bits.bit_length()} bits in a {type.bitwidth}-bit type)", span)
        return bits.to_bytes(type.compile_time_size, "little")

    def _require_storable(self, type: Attribute, span: Span) -> None:
        """Refuse an attribute whose elements are (or are complex numbers of) a float type xDSL cannot encode."""
        element = type.element_type if isinstance(type, ComplexType) else type
        if isinstance(element, UNSTORABLE_FLOAT_TYPES):
            self.raise_error(f"float attributes of type {element.name} are not supported: xDSL 0.74 cannot encode "
                             f"or print {element.name} values (use f16, bf16, f32 or f64)", span)

    def _span_from(self, start: Position) -> Span:
        """The text from `start` up to the last token consumed (without the blanks before the next one)."""
        content = self.lexer.input.content
        return Span(start, start + len(content[start:self.pos].rstrip()), self.lexer.input)

    # region Scalars: `0xff800000 : f32`

    def parse_optional_builtin_int_or_float_attr(self):
        start = self.pos
        literal = _HEX_LITERAL.match(self.lexer.input.content, start)
        try:
            attr = super().parse_optional_builtin_int_or_float_attr()
        except OverflowError:
            # xDSL converts with int.to_bytes (hex, too wide) or float() (a decimal integer past f64)
            text = self._span_from(start).text
            what = ("hexadecimal float constant" if literal else
                    "float literal" if any(c in text for c in ".eE") else "integer literal")
            self.raise_error(f"{what} out of range for its float type", self._span_from(start))
        if isinstance(attr, FloatAttr):
            self._require_storable(attr.type, self._span_from(start))
            if literal is not None:
                span = Span(start, literal.end(), self.lexer.input)
                self._hex_float_bytes(span, bool(literal.group(1)), int(literal.group(2), 16), attr.type)
        return attr

    # endregion
    # region Dense elements: `dense<0xff800000> : vector<4xf32>`, `dense<[0x7e00, 1.0]> : tensor<2xf16>`

    def _parse_tensor_literal_element(self):
        element = super()._parse_tensor_literal_element()
        if self._dense_elements is not None:
            self._dense_elements.append(element)
        return element

    def _parse_dense_literal_type(self):
        start = self.pos
        type = super()._parse_dense_literal_type()
        self._require_storable(type.element_type, self._span_from(start))
        return type

    def parse_dense_int_or_fp_elements_attr(self, type) -> DenseIntOrFPElementsAttr:
        if type is not None:
            self._require_storable(type.element_type, self._current_token.span)
        outer, self._dense_elements = self._dense_elements, []
        try:
            attr = super().parse_dense_int_or_fp_elements_attr(type)
            elements = self._dense_elements
        finally:
            self._dense_elements = outer
        element_type = attr.get_element_type()
        if not isinstance(element_type, AnyFloat) or not any(isinstance(e.value, int) and _is_hex(e.span)
                                                             for e in elements):
            return attr
        # xDSL packed the decoded values; write each hex element's own bits (a NaN keeps its payload)
        size = element_type.compile_time_size
        data = bytearray(attr.data.data)
        for index in range(len(data) // size):
            element = elements[0] if len(elements) == 1 else elements[index]  # one element: a splat
            if isinstance(element.value, int) and _is_hex(element.span):
                data[index * size:(index + 1) * size] = abs(element.value).to_bytes(size, "little")
        return DenseIntOrFPElementsAttr(attr.type, BytesAttr(bytes(data)))

    # endregion
    # region Dense arrays: `array<f32: 0xff800000, 1.0>`

    def _parse_builtin_densearray_attr(self) -> DenseArrayBase | None:
        start = self.pos
        self.parse_characters("<", " in dense array")
        type_start = self.pos
        element_type = self.parse_attribute()
        if not isinstance(element_type, AnyFloat):
            self._resume_from(start)
            return super()._parse_builtin_densearray_attr()
        self._require_storable(element_type, self._span_from(type_start))
        data = b""
        if self.parse_optional_punctuation(">") is None:
            self.parse_characters(":", " in dense array")
            data = b"".join(self.parse_comma_separated_list(
                self.Delimiter.NONE, lambda: self._parse_dense_array_float(element_type)))
            self.parse_characters(">", " in dense array")
        return DenseArrayBase(element_type, BytesAttr(data))

    def _parse_dense_array_float(self, type: AnyFloat) -> bytes:
        """One element of a float dense array, as stored: a float literal, or a hex literal's bits."""
        parsed = self._parse_optional_bool_int_or_float()
        if parsed is None or isinstance(parsed[0], bool):
            self.raise_error("Expected float literal", parsed[1] if parsed else None)
        value, span = parsed
        if isinstance(value, float):
            return type.pack((value,))
        if not _is_hex(span):
            self.raise_error("unexpected decimal integer literal for a floating point value (add a trailing dot "
                             "to make the literal a float)", span)
        return self._hex_float_bytes(span, value < 0, abs(value), type)

    # endregion
