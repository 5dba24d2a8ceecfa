"""A StableHLO subset: the ops JAX's exported attention graphs use, with upstream's op and property names.

xDSL 0.74 has no StableHLO dialect (it moved to the separate xdsl-jax package, whose pin excludes xDSL 0.74
and whose `compare` op names its direction differently). Tessera reads StableHLO as JAX prints it in MLIR's
generic form (`"stablehlo.dot_general"(%a, %b) <{dot_dimension_numbers = #stablehlo.dot<...>}> : ...`), so
this dialect defines only what the generic form needs (and `optimization_barrier`'s pretty form, which JAX prints
for `jax.checkpoint`): each op's operands, results, properties and regions under upstream's names, and the
dialect attributes those properties use:

- `#stablehlo.dot<lhs_batching_dimensions = [0, 2], rhs_batching_dimensions = [0, 2],
  lhs_contracting_dimensions = [3], rhs_contracting_dimensions = [3]>` (`DotDimensionNumbersAttr`);
- `#stablehlo<precision DEFAULT>`, `#stablehlo<comparison_direction GE>`, `#stablehlo<comparison_type
  SIGNED>` (`PrecisionAttr`, `ComparisonDirectionAttr`, `ComparisonTypeAttr`: one enum word each).

Any other op of the `stablehlo`, `chlo`, `mhlo` or `sdy` dialects, and any other attribute of theirs, is read
as an opaque unregistered op or attribute (`tessera.ir.parser.OPAQUE_DIALECTS`) and left alone by every pass.
Semantics are upstream's; `tessera.graph.stablehlo_interpreter` runs them on NumPy.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    i1,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    var_operand_def,
    traits_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator

from tessera.ir.diagnostics import require

# region Attributes


@irdl_attr_definition
class DotDimensionNumbersAttr(ParametrizedAttribute):
    """`#stablehlo.dot<...>`: the batching and contracting dimensions of each side of a `dot_general`.

    Each field is a list of dimension indices; an absent field is empty. The result's dimensions are the
    batching dimensions (in lhs order), then lhs's free dimensions, then rhs's free dimensions, each in order."""

    name = "stablehlo.dot"
    FIELDS: ClassVar[tuple[str, ...]] = ("lhs_batching_dimensions", "rhs_batching_dimensions", "lhs_contracting_dimensions",
              "rhs_contracting_dimensions")
    lhs_batching_dimensions: ArrayAttr[IntAttr]
    rhs_batching_dimensions: ArrayAttr[IntAttr]
    lhs_contracting_dimensions: ArrayAttr[IntAttr]
    rhs_contracting_dimensions: ArrayAttr[IntAttr]

    @staticmethod
    def get(lhs_batch: Sequence[int], rhs_batch: Sequence[int], lhs_contract: Sequence[int],
            rhs_contract: Sequence[int]) -> DotDimensionNumbersAttr:
        return DotDimensionNumbersAttr(*(ArrayAttr([IntAttr(d) for d in dims])
                                         for dims in (lhs_batch, rhs_batch, lhs_contract, rhs_contract)))

    def dims(self, field: str) -> list[int]:
        """The dimension indices of `field` (one of FIELDS) as ints."""
        return [d.data for d in getattr(self, field).data]

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        values: dict[str, list[int]] = {f: [] for f in cls.FIELDS}

        def field() -> None:
            start = parser._current_token.span
            key = parser.parse_identifier(" in #stablehlo.dot")
            if key not in values:
                parser.raise_error(f"unknown field '{key}' in #stablehlo.dot (fields: {', '.join(cls.FIELDS)})", start)
            parser.parse_punctuation("=")
            values[key] = parser.parse_comma_separated_list(parser.Delimiter.SQUARE,
                                                            lambda: parser.parse_integer(allow_negative=False))

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, field)
        return [ArrayAttr([IntAttr(d) for d in values[f]]) for f in cls.FIELDS]

    def print_parameters(self, printer: Printer) -> None:
        fields = [f"{f} = [{', '.join(str(d) for d in self.dims(f))}]" for f in self.FIELDS if self.dims(f)]
        printer.print_string(f"<{', '.join(fields)}>")


class _EnumWord(ParametrizedAttribute, SpacedOpaqueSyntaxAttribute):
    """An attribute holding one upstream enum word, written `#stablehlo<KIND WORD>` (its name is
    `stablehlo.KIND`; printed in that opaque form, as upstream prints it; `#stablehlo.KIND<WORD>` reads
    too). `WORDS` lists what upstream accepts."""

    WORDS: ClassVar[tuple[str, ...]] = ()
    value: StringAttr

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        # upstream's opaque form `#stablehlo<precision DEFAULT>` (the caller reads the `>`), or the form
        # xDSL prints, `#stablehlo.precision<DEFAULT>`
        pretty = parser.parse_optional_punctuation("<") is not None
        span = parser._current_token.span
        word = parser.parse_identifier(f" in #{cls.name}")
        if pretty:
            parser.parse_punctuation(">")
        if word not in cls.WORDS:
            parser.raise_error(f"'{word}' is not a {cls.name.split('.')[1]} (expected one of "
                               f"{', '.join(cls.WORDS)})", span)
        return [StringAttr(word)]

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(self.value.data)  # the printer writes `#stablehlo<KIND ` before and `>` after

    @property
    def word(self) -> str:
        return self.value.data


@irdl_attr_definition
class PrecisionAttr(_EnumWord):
    """`#stablehlo<precision DEFAULT>`: a `dot_general` operand's precision (ignored by the interpreter, which
    multiplies exactly and rounds the result to its element type)."""

    name = "stablehlo.precision"
    WORDS: ClassVar[tuple[str, ...]] = ("DEFAULT", "HIGH", "HIGHEST")


@irdl_attr_definition
class ComparisonDirectionAttr(_EnumWord):
    """`#stablehlo<comparison_direction GE>`: what `compare` computes."""

    name = "stablehlo.comparison_direction"
    WORDS: ClassVar[tuple[str, ...]] = ("EQ", "NE", "GE", "GT", "LE", "LT")


@irdl_attr_definition
class ComparisonTypeAttr(_EnumWord):
    """`#stablehlo<comparison_type SIGNED>`: how `compare` orders its operands."""

    name = "stablehlo.comparison_type"
    WORDS: ClassVar[tuple[str, ...]] = ("NOTYPE", "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")


# endregion
# region Ops


def _tensor(value) -> TensorType:
    """The tensor type of an SSA value (the verifiers below are only called on tensor-typed values)."""
    return value.type


def _i64s(attr: DenseArrayBase | None) -> list[int]:
    return [] if attr is None else [int(x) for x in attr.get_values()]


def _require_one_element_type(op: IRDLOperation, what: str, values) -> None:
    """StableHLO's rule for elementwise ops: `values` (tensors) share one element type; NumPy would promote
    mixed ones silently (an i8 plus an f32 is an f32 there, an error in StableHLO)."""
    elements = list(dict.fromkeys(str(_tensor(v).element_type) for v in values))
    require(len(elements) <= 1, op, f"{what} must have one element type, got {', '.join(elements)}")


class _Elementwise(IRDLOperation):
    """An elementwise op: every operand and the result have the same shape and element type."""

    def verify_(self) -> None:
        values = [v for v in (*self.operands, *self.results) if isinstance(v.type, TensorType)]
        shapes = {tuple(_tensor(v).get_shape()) for v in values}
        require(len(shapes) <= 1, self, f"operands and result must have one shape, got {sorted(shapes)}")
        _require_one_element_type(self, "operands and result", values)


def _unary(op_name: str, doc: str) -> type[IRDLOperation]:
    cls = type(op_name.split(".")[1].title().replace("_", "") + "Op", (_Elementwise,), {
        "__doc__": doc, "name": op_name, "operand": operand_def(TensorType), "result": result_def(TensorType)})
    return irdl_op_definition(cls)


def _binary(op_name: str, doc: str) -> type[IRDLOperation]:
    cls = type(op_name.split(".")[1].title().replace("_", "") + "Op", (_Elementwise,), {
        "__doc__": doc, "name": op_name, "lhs": operand_def(TensorType), "rhs": operand_def(TensorType),
        "result": result_def(TensorType)})
    return irdl_op_definition(cls)


AddOp = _binary("stablehlo.add", "`lhs + rhs` elementwise (logical or on i1).")
SubtractOp = _binary("stablehlo.subtract", "`lhs - rhs` elementwise.")
MultiplyOp = _binary("stablehlo.multiply", "`lhs * rhs` elementwise (logical and on i1).")
DivideOp = _binary("stablehlo.divide", "`lhs / rhs` elementwise (integers: truncating).")
MaximumOp = _binary("stablehlo.maximum", "`max(lhs, rhs)` elementwise (NaN propagates).")
MinimumOp = _binary("stablehlo.minimum", "`min(lhs, rhs)` elementwise (NaN propagates).")
AndOp = _binary("stablehlo.and", "Bitwise and elementwise.")
OrOp = _binary("stablehlo.or", "Bitwise or elementwise.")
PowerOp = _binary("stablehlo.power", "`lhs ** rhs` elementwise.")
ExpOp = _unary("stablehlo.exponential", "`exp(x)` elementwise.")
LogOp = _unary("stablehlo.log", "`log(x)` elementwise.")
NegateOp = _unary("stablehlo.negate", "`-x` elementwise.")
SqrtOp = _unary("stablehlo.sqrt", "`sqrt(x)` elementwise.")
RsqrtOp = _unary("stablehlo.rsqrt", "`1 / sqrt(x)` elementwise.")
TanhOp = _unary("stablehlo.tanh", "`tanh(x)` elementwise.")
LogisticOp = _unary("stablehlo.logistic", "`1 / (1 + exp(-x))` elementwise.")
AbsOp = _unary("stablehlo.abs", "`|x|` elementwise.")
NotOp = _unary("stablehlo.not", "Bitwise (logical on i1) not elementwise.")
ErfOp = _unary("chlo.erf", "The error function elementwise (JAX's exact GELU; the `chlo` dialect of StableHLO).")
SquareOp = _unary("chlo.square", "`x * x` elementwise (what JAX emits for `jnp.square`).")


@irdl_op_definition
class ConvertOp(IRDLOperation):
    """`convert`: each element converted to the result's element type (floats round to nearest even)."""

    name = "stablehlo.convert"
    operand = operand_def(TensorType)
    result = result_def(TensorType)

    def verify_(self) -> None:
        require(_tensor(self.operand).get_shape() == _tensor(self.result).get_shape(), self,
                "operand and result must have one shape")


@irdl_op_definition
class SelectOp(IRDLOperation):
    """`select(pred, on_true, on_false)`: elementwise choice; `pred` is i1, of the result's shape or a scalar."""

    name = "stablehlo.select"
    pred = operand_def(TensorType)
    on_true = operand_def(TensorType)
    on_false = operand_def(TensorType)
    result = result_def(TensorType)

    def verify_(self) -> None:
        shape = _tensor(self.result).get_shape()
        require(_tensor(self.on_true).get_shape() == shape == _tensor(self.on_false).get_shape(), self,
                "on_true, on_false and the result must have one shape")
        require(_tensor(self.pred).get_shape() in (shape, ()), self, "pred must be a scalar or of the result's shape")
        require(_tensor(self.pred).element_type == i1, self, f"pred must be i1, got {_tensor(self.pred).element_type}")
        _require_one_element_type(self, "on_true, on_false and the result", (self.on_true, self.on_false, self.result))


@irdl_op_definition
class CompareOp(IRDLOperation):
    """`compare(lhs, rhs)` elementwise by `comparison_direction` (EQ, NE, GE, GT, LE, LT); an i1 result."""

    name = "stablehlo.compare"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    comparison_direction = prop_def(ComparisonDirectionAttr)
    compare_type = opt_prop_def(ComparisonTypeAttr)

    def verify_(self) -> None:
        shape = _tensor(self.result).get_shape()
        require(_tensor(self.lhs).get_shape() == shape == _tensor(self.rhs).get_shape(), self,
                "lhs, rhs and the result must have one shape")
        _require_one_element_type(self, "lhs and rhs", (self.lhs, self.rhs))
        require(_tensor(self.result).element_type == i1, self,
                f"the result must be i1, got {_tensor(self.result).element_type}")
        if self.compare_type is not None:  # StableHLO's rule: the order the operands' type has (the interpreter's;
            # NOTYPE, MHLO's word for it, is that order)
            element = _tensor(self.lhs).element_type
            orders = (("FLOAT", "TOTALORDER") if not isinstance(element, IntegerType) else
                      ("UNSIGNED",) if element == i1 or element.signedness.data == Signedness.UNSIGNED else ("SIGNED",))
            require(self.compare_type.word in (*orders, "NOTYPE"), self,
                    f"compare_type {self.compare_type.word} does not order {element} (it takes {' or '.join(orders)})")


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """`constant`: the tensor `value` (a dense elements attribute of the result's type)."""

    name = "stablehlo.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    output = result_def(TensorType)

    def verify_(self) -> None:
        require(self.value.type == self.output.type, self, f"value's type {self.value.type} is not the "
                                                            f"result's {self.output.type}")


@irdl_op_definition
class IotaOp(IRDLOperation):
    """`iota`: a tensor whose elements are their own index along `iota_dimension`."""

    name = "stablehlo.iota"
    iota_dimension = prop_def(IntegerAttr)
    output = result_def(TensorType)

    def verify_(self) -> None:
        rank = len(_tensor(self.output).get_shape())
        require(0 <= self.iota_dimension.value.data < rank, self, f"iota_dimension must be below the rank {rank}")


@irdl_op_definition
class BroadcastInDimOp(IRDLOperation):
    """`broadcast_in_dim`: operand dimension i becomes result dimension `broadcast_dimensions[i]` (of the same
    size, or of size 1 and repeated); the result's other dimensions repeat the operand."""

    name = "stablehlo.broadcast_in_dim"
    operand = operand_def(TensorType)
    broadcast_dimensions = prop_def(DenseArrayBase)
    result = result_def(TensorType)

    def verify_(self) -> None:
        dims = _i64s(self.broadcast_dimensions)
        source, shape = _tensor(self.operand).get_shape(), _tensor(self.result).get_shape()
        require(len(dims) == len(source), self, "broadcast_dimensions must name one result dimension per "
                                                  "operand dimension")
        for i, d in enumerate(dims):
            require(0 <= d < len(shape) and source[i] in (1, shape[d]), self,
                    f"operand dimension {i} (size {source[i]}) cannot broadcast to result dimension {d}")


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """`reshape`: the same elements, in row-major order, in the result's shape (as many, of one type)."""

    name = "stablehlo.reshape"
    operand = operand_def(TensorType)
    result = result_def(TensorType)

    def verify_(self) -> None:
        source, result = _tensor(self.operand), _tensor(self.result)
        require(source.element_type == result.element_type, self,
                f"operand and result must have one element type, got {source.element_type} and {result.element_type}")
        counts = [math.prod(t.get_shape()) for t in (source, result)]
        if all(-1 not in t.get_shape() for t in (source, result)):  # a dynamic size is checked when it runs
            require(counts[0] == counts[1], self, f"operand and result must hold as many elements, got "
                                                  f"{counts[0]} and {counts[1]}")


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """`transpose`: result dimension i is operand dimension `permutation[i]`."""

    name = "stablehlo.transpose"
    operand = operand_def(TensorType)
    permutation = prop_def(DenseArrayBase)
    result = result_def(TensorType)

    def verify_(self) -> None:
        perm = _i64s(self.permutation)
        source = _tensor(self.operand).get_shape()
        require(sorted(perm) == list(range(len(source))), self, f"permutation {perm} is not one of rank {len(source)}")
        require(tuple(source[p] for p in perm) == tuple(_tensor(self.result).get_shape()), self,
                "result shape is not the permuted operand shape")


@irdl_op_definition
class SliceOp(IRDLOperation):
    """`slice`: the elements from `start_indices` up to `limit_indices` (exclusive) by `strides`, per dimension."""

    name = "stablehlo.slice"
    operand = operand_def(TensorType)
    start_indices = prop_def(DenseArrayBase)
    limit_indices = prop_def(DenseArrayBase)
    strides = prop_def(DenseArrayBase)
    result = result_def(TensorType)

    def verify_(self) -> None:
        start, limit, strides = (_i64s(a) for a in (self.start_indices, self.limit_indices, self.strides))
        source = _tensor(self.operand).get_shape()
        require(len(start) == len(limit) == len(strides) == len(source), self,
                "start_indices, limit_indices and strides must have one entry per dimension")
        for i, (a, b, c) in enumerate(zip(start, limit, strides)):
            require(0 <= a <= b <= source[i] and c > 0, self, f"dimension {i}: need 0 <= start <= limit <= "
                                                              f"{source[i]} and a positive stride")


@irdl_op_definition
class DotGeneralOp(IRDLOperation):
    """`dot_general`: a batched matrix product over the dimensions `dot_dimension_numbers` names (see
    `DotDimensionNumbersAttr` for the result's dimension order). Products are exact; the sum is rounded to the
    result's element type."""

    name = "stablehlo.dot_general"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    dot_dimension_numbers = prop_def(DotDimensionNumbersAttr)
    precision_config = opt_prop_def(ArrayAttr)
    algorithm = opt_prop_def(AnyAttr())
    result = result_def(TensorType)

    def verify_(self) -> None:
        d = self.dot_dimension_numbers
        lhs, rhs = _tensor(self.lhs).get_shape(), _tensor(self.rhs).get_shape()
        lb, rb = d.dims("lhs_batching_dimensions"), d.dims("rhs_batching_dimensions")
        lc, rc = d.dims("lhs_contracting_dimensions"), d.dims("rhs_contracting_dimensions")
        for side, shape, dims in (("lhs", lhs, lb + lc), ("rhs", rhs, rb + rc)):
            require(len(set(dims)) == len(dims) and all(0 <= x < len(shape) for x in dims), self,
                    f"{side} batching and contracting dimensions must be distinct dimensions of {side}")
        require(len(lb) == len(rb) and len(lc) == len(rc), self, "lhs and rhs must name as many batching and "
                                                                  "contracting dimensions")
        require(all(lhs[a] == rhs[b] for a, b in zip(lb + lc, rb + rc)), self,
                "paired batching and contracting dimensions must have the same size")
        free_l = [lhs[i] for i in range(len(lhs)) if i not in lb + lc]
        free_r = [rhs[i] for i in range(len(rhs)) if i not in rb + rc]
        expected = tuple([lhs[i] for i in lb] + free_l + free_r)
        require(tuple(_tensor(self.result).get_shape()) == expected, self,
                f"result shape must be {list(expected)} (batch, lhs free, rhs free)")


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """`reduce(inputs..., inits...)` over `dimensions` with the binary function of its body (this subset
    interprets bodies that apply one `add`, `maximum`, `minimum` or `multiply` to their two arguments)."""

    name = "stablehlo.reduce"
    inputs = var_operand_def()
    dimensions = prop_def(DenseArrayBase)
    body = region_def()
    results_ = var_result_def()

    def verify_(self) -> None:
        """StableHLO's shape rules: N inputs of one shape, then N 0-d inits; `dimensions` distinct dimensions of
        the inputs; result i the inputs' shape without them, in init i's element type; a body of 2N arguments.
        (Unchecked, every consumer of the op, the matcher and the interpreter among them, would index past the
        rank or read a result of another shape.)"""
        operands = list(self.operands)
        count = len(operands) // 2
        require(len(operands) == 2 * count > 0 and len(self.results) == count, self,
                f"takes N inputs, N init values and has N results, got {len(operands)} operands and "
                f"{len(self.results)} results")
        inputs, inits = operands[:count], operands[count:]
        require(all(isinstance(v.type, TensorType) for v in (*operands, *self.results)), self,
                "operands and results must be tensors")
        shapes = {tuple(_tensor(v).get_shape()) for v in inputs}
        require(len(shapes) == 1, self, f"inputs must have one shape, got {sorted(shapes)}")
        shape = shapes.pop()
        dims = _i64s(self.dimensions)
        require(len(set(dims)) == len(dims) and all(0 <= d < len(shape) for d in dims), self,
                f"dimensions {dims} must be distinct dimensions of the inputs (rank {len(shape)})")
        kept = tuple(n for i, n in enumerate(shape) if i not in dims)
        for i, (init, result) in enumerate(zip(inits, self.results)):
            require(not _tensor(init).get_shape(), self, f"init value {i} must be 0-d, got {init.type}")
            require(tuple(_tensor(result).get_shape()) == kept and
                    _tensor(result).element_type == _tensor(init).element_type, self,
                    f"result {i} must be tensor<{'x'.join(map(str, (*kept, _tensor(init).element_type)))}> (the "
                    f"inputs without dimensions {dims}, in init value {i}'s type), got {result.type}")
        blocks = list(self.body.blocks)
        require(len(blocks) == 1 and len(blocks[0].args) == 2 * count, self,
                f"the body must be one block of {2 * count} arguments")


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """`stablehlo.return`: the values a region of `reduce` (or another op with a body) yields."""

    name = "stablehlo.return"
    results_ = var_operand_def()
    traits = traits_def(IsTerminator())


@irdl_op_definition
class CompositeOp(IRDLOperation):
    """`composite "NAME"`: a named operation with the semantics of the function `decomposition` (what
    `jax.lax.composite` emits). `composite_attributes` parameterise it; `version` versions the name."""

    name = "stablehlo.composite"
    inputs = var_operand_def()
    name_ = prop_def(StringAttr, prop_name="name")
    composite_attributes = opt_prop_def(DictionaryAttr)
    decomposition = prop_def(SymbolRefAttr)
    version = opt_prop_def(IntegerAttr)
    results_ = var_result_def()


@irdl_op_definition
class CustomCallOp(IRDLOperation):
    """`custom_call @TARGET(args)`: a call into the backend that XLA dispatches by `call_target_name`; its
    `backend_config` carries the target's configuration. Tessera's rewriter emits `__tessera$attention` and
    `__tessera$attention_bwd` (see `tessera.dialects.attention`)."""

    name = "stablehlo.custom_call"
    inputs = var_operand_def()
    call_target_name = prop_def(StringAttr)
    has_side_effect = opt_prop_def(AnyAttr())
    backend_config = opt_prop_def(AnyAttr())
    api_version = opt_prop_def(IntegerAttr)
    called_computations = opt_prop_def(ArrayAttr)
    operand_layouts = opt_prop_def(AnyAttr())
    result_layouts = opt_prop_def(AnyAttr())
    output_operand_aliases = opt_prop_def(AnyAttr())
    results_ = var_result_def()


@irdl_op_definition
class ReducePrecisionOp(IRDLOperation):
    """`reduce_precision`: each float rounded, as XLA rounds it, to `mantissa_bits` explicit mantissa bits (nearest
    even) and, where `exponent_bits` is narrower than the element type's, to that exponent range (above it: +-inf,
    at or below its smallest normal: +-0); NaN stays NaN. With the element type's own widths (bf16: 8 and 7) it is
    the identity, which JAX writes around what a `jax.checkpoint` policy saves."""

    name = "stablehlo.reduce_precision"
    operand = operand_def(TensorType)
    exponent_bits = prop_def(IntegerAttr)
    mantissa_bits = prop_def(IntegerAttr)
    output = result_def(TensorType)

    def verify_(self) -> None:
        require(self.operand.type == self.output.type, self, f"result is {self.output.type}, but the operand is "
                                                              f"{self.operand.type}: they must be one type")
        require(self.exponent_bits.value.data >= 1 and self.mantissa_bits.value.data >= 0, self,
                "exponent_bits must be at least 1 and mantissa_bits at least 0")


@irdl_op_definition
class OptimizationBarrierOp(IRDLOperation):
    """`optimization_barrier(operands...)`: its results are its operands, unchanged (result i is operand i, of
    its type). XLA's fence: nothing is moved across it, and what is computed from its results is never CSE'd with
    what is computed from its operands, which is how `jax.checkpoint` (`jax.remat`) keeps the backward's
    recompute of the forward from being merged with the forward. Read in upstream's pretty form too:
    `%r:2 = stablehlo.optimization_barrier %a, %b : tensor<..>, tensor<..>` (no operands:
    `stablehlo.optimization_barrier()`)."""

    name = "stablehlo.optimization_barrier"
    operand = var_operand_def()
    result = var_result_def()

    def verify_(self) -> None:
        require(len(self.operand) == len(self.result), self,
                f"has {len(self.operand)} operands but {len(self.result)} results: result i is operand i")
        for i, (value, result) in enumerate(zip(self.operand, self.result)):
            require(value.type == result.type, self, f"result {i} is {result.type}, but operand {i} is {value.type}: "
                                                      "result i is operand i, of its type")

    @classmethod
    def parse(cls, parser: Parser) -> OptimizationBarrierOp:
        attributes = parser.parse_optional_attr_dict()
        if parser.parse_optional_punctuation("(") is not None:
            parser.parse_punctuation(")", " (an optimization_barrier without operands is written `()`)")
            return cls.create(attributes=attributes)
        start = parser.pos
        names = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":", " after the operands of stablehlo.optimization_barrier")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        operands = parser.resolve_operands(names, types, start)
        return cls.create(operands=operands, result_types=types, attributes=attributes)


StableHLO = Dialect(
    "stablehlo",
    [AddOp, SubtractOp, MultiplyOp, DivideOp, MaximumOp, MinimumOp, AndOp, OrOp, PowerOp, ExpOp, LogOp, NegateOp,
     SqrtOp, RsqrtOp, TanhOp, LogisticOp, AbsOp, NotOp, ConvertOp, SelectOp, CompareOp, ConstantOp, IotaOp,
     BroadcastInDimOp, ReshapeOp, TransposeOp, SliceOp, DotGeneralOp, ReduceOp, ReturnOp, CompositeOp, CustomCallOp,
     OptimizationBarrierOp, ReducePrecisionOp],
    [DotDimensionNumbersAttr, PrecisionAttr, ComparisonDirectionAttr, ComparisonTypeAttr],
)
"""The registered subset (see the module docstring); everything else of `stablehlo` is opaque."""

CHLO = Dialect("chlo", [ErfOp, SquareOp], [])
"""The `chlo` ops transformer graphs use (`square` in layernorm, `erf` in exact GELU); the others are opaque."""
# endregion
