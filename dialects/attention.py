"""The `tessera` dialect: Tessera's attention kernels as ops of a tensor graph (what `rewrite-attention` emits).

    %o, %lse = "tessera.attention"(%q, %k, %v) <{causal = true, scale = 0.125 : f32, head_dim = 64 : i64,
                 dtype = "bf16", kernel = "flash_attention_d64_bf16_causal", block_m = 128 : i64,
                 block_n = 128 : i64}> : (tensor<2x4x256x64xbf16>, ...) -> (tensor<2x4x256x64xbf16>, tensor<2x4x256xf32>)
    %o = "tessera.attention"(%q, %k, %v, %bias) <{..., kernel = "flash_attention_d64_bf16_bias"}> : (...,
                 tensor<2x4x256x256xbf16>) -> tensor<2x4x256x64xbf16>
    %dq, %dk, %dv = "tessera.attention_bwd"(%q, %k, %v, %o, %lse, %do) <{...}> : (...) -> (...)

Tensors are in Tessera's layout [batch, heads, seq, head_dim] (`tessera.kernels`); the rewriter transposes a
graph's own layout into it and back. `tessera.attention` computes O = softmax(scale Q K^T [+ bias] [causal mask]) V
with the causal mask aligned bottom-right (query i sees keys 0 .. i + seq_k - seq_q), with a fourth operand the
additive bias [batch or 1, heads or 1, seq_q, seq_k] in `dtype` (1: broadcast along that dimension; the kernel
is `flash_attention(bias=True)`, its name says `_bias`, `_bias_b1`, `_bias_h1`), and, when it has a second
result, the log-sum-exp of each query row in f32 (natural log; [batch, heads, seq_q]), which the backward op
takes. `tessera.attention_bwd` computes dQ, dK, dV of that forward from Q, K, V, O, LSE and dO.

The properties are the kernel configuration: `causal`, `scale` (f32), `head_dim` (one of
`tessera.kernels.HEAD_DIMS`), `dtype` (bf16 or f16, the element type of every tensor operand and of O, dQ, dK,
dV), and `kernel`, the name of the Tile IR kernel that runs it (`flash_attention_d64_bf16_causal`, as
`AttentionConfig.kernel_name` spells it), with `block_m`/`block_n`. The verifiers check shapes, element types
and that the configuration is one the builders accept. `tessera.graph.graph_runtime` executes them with the Tile
interpreter.
"""

from __future__ import annotations

from xdsl.dialects.builtin import Float32Type, FloatAttr, IntegerAttr, StringAttr, TensorType, i1, i64
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_result_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

DTYPES = ("bf16", "f16")
"""Element types of the attention kernels."""


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape()) if isinstance(value.type, TensorType) else ()


def _element(value: SSAValue) -> str:
    return str(value.type.element_type) if isinstance(value.type, TensorType) else str(value.type)


class _AttentionConfigOp(IRDLOperation):
    """The kernel configuration every attention op carries, and its checks."""

    causal = prop_def(IntegerAttr)
    scale = prop_def(FloatAttr)
    head_dim = prop_def(IntegerAttr)
    dtype = prop_def(StringAttr)
    kernel = prop_def(StringAttr)
    block_m = prop_def(IntegerAttr)
    block_n = prop_def(IntegerAttr)

    @staticmethod
    def config_properties(causal: bool, scale: float, head_dim: int, dtype: str, kernel: str, block_m: int,
                          block_n: int) -> dict:
        return {"causal": IntegerAttr(int(causal), i1), "scale": FloatAttr(scale, Float32Type()),
                "head_dim": IntegerAttr(head_dim, i64), "dtype": StringAttr(dtype), "kernel": StringAttr(kernel),
                "block_m": IntegerAttr(block_m, i64), "block_n": IntegerAttr(block_n, i64)}

    @property
    def is_causal(self) -> bool:
        return bool(self.causal.value.data)

    def _fail(self, message: str) -> None:
        raise VerifyException(f"'{self.name}' op {message}")

    def _verify_config(self, tensors: dict[str, SSAValue]) -> None:
        from tessera.kernels import HEAD_DIMS
        from tessera.kernels.common import check_block

        d = self.head_dim.value.data
        if d not in HEAD_DIMS:
            self._fail(f"head_dim {d} is not one the kernels support ({', '.join(map(str, HEAD_DIMS))})")
        if self.dtype.data not in DTYPES:
            self._fail(f"dtype '{self.dtype.data}' is not one of {', '.join(DTYPES)}")
        if not (self.scale.value.data > 0 and abs(self.scale.value.data) != float("inf")):
            self._fail(f"scale must be a positive finite f32, got {self.scale.value.data}")
        for what in ("block_m", "block_n"):  # the builders' own rule (a block of 3 rows is no kernel)
            try:
                check_block(what, getattr(self, what).value.data)
            except ValueError as e:
                self._fail(str(e))
        for what, value in tensors.items():
            shape = _shape(value)
            if len(shape) != 4 or shape[3] != d:
                self._fail(f"{what} must be a tensor [batch, heads, seq, {d}], got {value.type}")
            if 0 in shape:  # (no kernel launches a grid or a loop of none)
                self._fail(f"{what} has an empty dimension ({value.type}): the kernels take sizes of at least 1")
            if _element(value) != self.dtype.data:
                self._fail(f"{what} has element type {_element(value)}, but dtype is {self.dtype.data}")
        shapes = [_shape(v) for v in tensors.values()]
        if len({s[:2] for s in shapes}) != 1:
            self._fail(f"every tensor must have the same batch and heads, got {[list(s[:2]) for s in shapes]}")


@irdl_op_definition
class AttentionOp(_AttentionConfigOp):
    """`tessera.attention(q, k, v [, bias]) -> o [, lse]`: Tessera's forward attention kernel (module docstring)."""

    name = "tessera.attention"
    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    o = result_def(TensorType)
    lse = opt_result_def(TensorType)

    def verify_(self) -> None:
        self._verify_config({"q": self.q, "k": self.k, "v": self.v, "o": self.o})
        q, k, v, o = (_shape(x) for x in (self.q, self.k, self.v, self.o))
        if k != v:
            self._fail(f"k and v must have one shape, got {list(k)} and {list(v)}")
        if o != q:
            self._fail(f"o must have q's shape {list(q)}, got {list(o)}")
        if self.bias is not None:
            bias, expected = _shape(self.bias), f"[{q[0]} or 1, {q[1]} or 1, {q[2]}, {k[2]}]"
            if len(bias) != 4 or bias[2:] != (q[2], k[2]) or bias[0] not in (1, q[0]) or bias[1] not in (1, q[1]):
                self._fail(f"bias must be a tensor {expected} (batch, heads, seq_q, seq_k), got {self.bias.type}")
            if _element(self.bias) != self.dtype.data:
                self._fail(f"bias has element type {_element(self.bias)}, but dtype is {self.dtype.data}")
        if ("_bias" in self.kernel.data) != (self.bias is not None):
            self._fail(f"kernel {self.kernel.data} and the operands disagree: a bias operand goes with a '_bias' kernel")
        if self.lse is not None and (_shape(self.lse) != q[:3] or _element(self.lse) != "f32"):
            self._fail(f"lse must be tensor<{'x'.join(map(str, q[:3]))}xf32>, got {self.lse.type}")


@irdl_op_definition
class AttentionBwdOp(_AttentionConfigOp):
    """`tessera.attention_bwd(q, k, v, o, lse, do) -> dq, dk, dv`: the gradients of `tessera.attention` with the
    same configuration, from its output O and log-sum-exp LSE (module docstring)."""

    name = "tessera.attention_bwd"
    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    o = operand_def(TensorType)
    lse = operand_def(TensorType)
    do = operand_def(TensorType)
    dq = result_def(TensorType)
    dk = result_def(TensorType)
    dv = result_def(TensorType)

    def verify_(self) -> None:
        self._verify_config({"q": self.q, "k": self.k, "v": self.v, "o": self.o, "do": self.do, "dq": self.dq,
                             "dk": self.dk, "dv": self.dv})
        q, k, v = (_shape(x) for x in (self.q, self.k, self.v))
        for what, value, shape in (("o", self.o, q), ("do", self.do, q), ("dq", self.dq, q), ("dk", self.dk, k),
                                   ("dv", self.dv, v)):
            if _shape(value) != shape:
                self._fail(f"{what} must have shape {list(shape)}, got {list(_shape(value))}")
        if _shape(self.lse) != q[:3] or _element(self.lse) != "f32":
            self._fail(f"lse must be tensor<{'x'.join(map(str, q[:3]))}xf32>, got {self.lse.type}")


TesseraAttention = Dialect("tessera", [AttentionOp, AttentionBwdOp], [])
"""The `tessera` dialect: attention ops of a tensor graph."""
