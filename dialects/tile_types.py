"""Types and attributes of the Tile IR dialect.

`!tile.tile<SHAPE x ELT, SPACE[, swizzle N]>` is the one value type of Tile IR: a tile with a static shape
(dynamic `?` dimensions are allowed for global tensors only), an element type, a memory space and, for shared
tiles, the byte width of the XOR swizzle that lays it out in shared memory.

`#tile.dims<...>` names the sizes of a kernel's dynamic dimensions. Each entry is a dimension expression: a name
(`seq_q`), an integer (`128`) or `ceildiv(name, N)`, a name or ceildiv optionally times a constant (`3 * heads`). Kernel arguments carry one (`tile.dims`) to name their
dimensions, and a kernel carries one (`tile.grid`) to say how many thread blocks it is launched over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import auto

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    BFloat16Type,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    IndexType,
    IntAttr,
    IntegerType,
    StringAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import (
    Attribute,
    ParametrizedAttribute,
    SpacedOpaqueSyntaxAttribute,
    TypeAttribute,
)
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from tessera.sm90.swizzle import SWIZZLE_MODES

DYNAMIC = DYNAMIC_INDEX
"""Marker of a dynamic (`?`) dimension in a tile shape."""

SWIZZLE_BYTES = SWIZZLE_MODES
"""Shared-memory swizzle widths Tile IR can describe (0 = no swizzle): the hardware's, from the facts module."""


class MemSpace(StrEnum):
    GLOBAL = auto()
    SHARED = auto()
    REGISTER = auto()


@irdl_attr_definition
class MemSpaceAttr(EnumAttribute[MemSpace], SpacedOpaqueSyntaxAttribute):
    """Memory space of a tile: `global` (device memory), `shared` (per block) or `register` (per thread,
    distributed over the block's threads by the lowering)."""

    name = "tile.mem"


def element_byte_width(element_type: Attribute) -> int:
    """Bytes of one element of a tile."""
    if isinstance(element_type, IndexType):
        return 8
    if isinstance(element_type, IntegerType):
        return max(1, element_type.width.data // 8)
    return element_type.bitwidth // 8  # the float types


def is_float(element_type: Attribute) -> bool:
    return isinstance(element_type, BFloat16Type | Float16Type | Float32Type)


def is_half(element_type: Attribute) -> bool:
    """bf16 or f16: the 16-bit tensor-core input types."""
    return isinstance(element_type, BFloat16Type | Float16Type)


def is_fp8(element_type: Attribute) -> bool:
    """f8E4M3FN or f8E5M2: the 8-bit float storage types (OCP FP8, PTX .e4m3/.e5m2). They are held, moved,
    converted (`tile.cast`) and multiplied (`tile.mma`), but not computed with: elementwise ops refuse them
    (`is_float` is false), as the hardware has no 8-bit float arithmetic besides the tensor core."""
    return isinstance(element_type, Float8E4M3FNType | Float8E5M2Type)


@irdl_attr_definition
class TileType(ParametrizedAttribute, TypeAttribute):
    """A tile: static shape (`?` only in global space), element type, memory space, shared swizzle.

    Invariants checked by the verifier:
    - rank >= 1 and every static dimension > 0;
    - dynamic dimensions only in `global`;
    - element type bf16, f16, f32, f8E4M3FN, f8E5M2 (`is_fp8`), i32, i64 or index, or i1 in registers
      (`tile.cmp`'s predicates);
    - swizzle is one of 0/32/64/128 bytes, non-zero only in `shared`, and a swizzled tile's rows (its
      innermost dimension) span a whole number of swizzle widths.
    A shared tile of rank 3 or more may use its leading dimension as a stage (ring-buffer) index.
    """

    name = "tile.tile"

    shape: ArrayAttr[IntAttr]
    element_type: Attribute
    space: MemSpaceAttr
    swizzle: IntAttr

    def __init__(
        self,
        shape: Sequence[int],
        element_type: Attribute,
        space: MemSpace | str = MemSpace.REGISTER,
        swizzle: int = 0,
    ):
        super().__init__(
            ArrayAttr(IntAttr(d) for d in shape),
            element_type,
            MemSpaceAttr(MemSpace(space)),
            IntAttr(swizzle),
        )

    # -- accessors ---------------------------------------------------------------------------------------
    def get_shape(self) -> tuple[int, ...]:
        return tuple(d.data for d in self.shape.data)

    @property
    def rank(self) -> int:
        return len(self.shape.data)

    @property
    def memory_space(self) -> MemSpace:
        return self.space.data

    @property
    def swizzle_bytes(self) -> int:
        return self.swizzle.data

    @property
    def is_static(self) -> bool:
        return DYNAMIC not in self.get_shape()

    @property
    def num_elements(self) -> int:
        return math.prod(self.get_shape())

    @property
    def byte_size(self) -> int:
        return self.num_elements * element_byte_width(self.element_type)

    def with_(self, **changes) -> TileType:
        """A copy of this type with some of shape, element_type, space, swizzle replaced."""
        fields = dict(
            shape=self.get_shape(),
            element_type=self.element_type,
            space=self.memory_space,
            swizzle=self.swizzle_bytes,
        )
        fields.update(changes)
        return TileType(**fields)

    # -- syntax ------------------------------------------------------------------------------------------
    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            dims, element_type = parser.parse_ranked_shape()
            parser.parse_punctuation(",")
            space = parser.parse_str_enum(MemSpace)
            swizzle = 0
            if parser.parse_optional_punctuation(","):
                parser.parse_keyword("swizzle")
                swizzle = parser.parse_integer(allow_negative=False, allow_boolean=False)
        return (
            ArrayAttr(IntAttr(d) for d in dims),
            element_type,
            MemSpaceAttr(space),
            IntAttr(swizzle),
        )

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            dims = ("?" if d == DYNAMIC else str(d) for d in self.get_shape())
            printer.print_string("".join(d + "x" for d in dims))
            printer.print_attribute(self.element_type)
            printer.print_string(f", {self.memory_space.value}")
            if self.swizzle_bytes:
                printer.print_string(f", swizzle {self.swizzle_bytes}")

    def verify(self) -> None:
        shape = self.get_shape()
        if not shape:
            raise VerifyException("tile type: rank must be at least 1")
        if any(d <= 0 and d != DYNAMIC for d in shape):
            raise VerifyException(f"tile type: dimensions must be positive, got {list(shape)}")
        if DYNAMIC in shape and self.memory_space != MemSpace.GLOBAL:
            raise VerifyException("tile type: dynamic dimensions are allowed only in global memory")
        elt = self.element_type
        if not (is_float(elt) or is_fp8(elt) or isinstance(elt, IndexType) or
                (isinstance(elt, IntegerType) and elt.width.data in (32, 64))):
            if not (isinstance(elt, IntegerType) and elt.width.data == 1):
                raise VerifyException(
                    f"tile type: element type must be bf16, f16, f32, f8E4M3FN, f8E5M2, i32, i64, index or i1, "
                    f"got {elt}"
                )
            if self.memory_space != MemSpace.REGISTER:
                raise VerifyException("tile type: i1 (predicate) tiles live in registers only")
        swizzle = self.swizzle_bytes
        if swizzle not in SWIZZLE_BYTES:
            raise VerifyException(f"tile type: swizzle must be one of 0, 32, 64, 128 bytes, got {swizzle}")
        if swizzle and self.memory_space != MemSpace.SHARED:
            raise VerifyException("tile type: only shared tiles can be swizzled")
        if swizzle:
            row_bytes = shape[-1] * element_byte_width(elt)
            if row_bytes % swizzle:
                raise VerifyException(
                    f"tile type: a {swizzle}B swizzle needs rows of a multiple of {swizzle} bytes, "
                    f"but rows are {row_bytes} bytes"
                )


# ------------------------------------------------------------------------------------------------------------
# Dimension expressions
# ------------------------------------------------------------------------------------------------------------


@irdl_attr_definition
class DimExprAttr(ParametrizedAttribute):
    """One dimension expression: `name`, `ceildiv(name, N)` (N > 1), either with a constant factor in front
    (`3 * heads`, `2 * ceildiv(seq_q, 128)`: a grid axis that also counts split-KV parts), or an integer
    constant.

    Encoded as (name, value, factor): name "" means the constant `value` (factor 1); otherwise `value` is the
    divisor (1 for a plain name) and the expression is factor * ceildiv(name, value). Printed inside
    `#tile.dims<...>`, never alone."""

    name = "tile.dim_expr"

    symbol: StringAttr
    value: IntAttr
    factor: IntAttr

    def __init__(self, symbol: str, value: int, factor: int = 1):
        super().__init__(StringAttr(symbol), IntAttr(value), IntAttr(factor))

    @property
    def is_constant(self) -> bool:
        return not self.symbol.data

    @property
    def is_name(self) -> bool:
        return bool(self.symbol.data) and self.value.data == 1 and self.factor.data == 1

    def evaluate(self, sizes: Mapping[str, int]) -> int:
        if self.is_constant:
            return self.value.data
        size = sizes[self.symbol.data]
        return self.factor.data * -(-size // self.value.data)

    def __str__(self) -> str:
        if self.is_constant:
            return str(self.value.data)
        base = self.symbol.data if self.value.data == 1 else f"ceildiv({self.symbol.data}, {self.value.data})"
        return base if self.factor.data == 1 else f"{self.factor.data} * {base}"

    def verify(self) -> None:
        if self.is_constant and self.value.data <= 0:
            raise VerifyException(f"dimension expression: constants must be positive, got {self.value.data}")
        if not self.is_constant and self.value.data <= 0:
            raise VerifyException(f"dimension expression: ceildiv divisor must be positive, got {self.value.data}")
        if self.factor.data <= 0 or (self.is_constant and self.factor.data != 1):
            what = f"{self.factor.data} * {self.value.data}" if self.is_constant else str(self)
            raise VerifyException(f"dimension expression: a factor must be positive and multiply a name, got {what}")

    @staticmethod
    def parse_one(parser: AttrParser) -> DimExprAttr:
        factor = 1
        if (value := parser.parse_optional_integer(allow_negative=True, allow_boolean=False)) is not None:
            if parser.parse_optional_punctuation("*") is None:
                return DimExprAttr("", value)
            factor = value
        symbol = parser.parse_identifier("dimension name, integer or ceildiv(name, N)")
        divisor = 1
        if symbol == "ceildiv" and parser.parse_optional_punctuation("("):
            symbol = parser.parse_identifier("dimension name")
            parser.parse_punctuation(",")
            divisor = parser.parse_integer(allow_negative=True, allow_boolean=False)
            parser.parse_punctuation(")")
        start = parser.pos
        if parser.parse_optional_punctuation("*") is not None:  # `B * H`: a product the expressions do not hold
            parser.raise_error("a dimension expression has one name, and its constant factor in front (`3 * heads`): "
                               "a product after a name (`B * H`, `heads * 3`) is not one; give each name a grid "
                               "axis of its own", start, parser.pos)
        return DimExprAttr(symbol, divisor, factor)


@irdl_attr_definition
class DimsAttr(ParametrizedAttribute):
    """`#tile.dims<e0, e1, ...>`: a list of dimension expressions (see the module docstring)."""

    name = "tile.dims"

    exprs: ArrayAttr[DimExprAttr]

    def __init__(self, exprs: Sequence[DimExprAttr | str | int]):
        converted = []
        for e in exprs:
            if isinstance(e, int):
                e = DimExprAttr("", e)
            elif isinstance(e, str):
                e = DimExprAttr(e, 1)
            converted.append(e)
        super().__init__(ArrayAttr(converted))

    def __iter__(self):
        return iter(self.exprs.data)

    def __len__(self) -> int:
        return len(self.exprs.data)

    def evaluate(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(e.evaluate(sizes) for e in self.exprs.data)

    def symbols(self) -> set[str]:
        return {e.symbol.data for e in self.exprs.data if not e.is_constant}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            exprs = parser.parse_comma_separated_list(
                parser.Delimiter.NONE, lambda: DimExprAttr.parse_one(parser)
            )
        return (ArrayAttr(exprs),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(str(e) for e in self.exprs.data) + ">")

