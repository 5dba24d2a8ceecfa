"""The FP8 forward attention kernel's own pieces (FlashAttention-3's FP8 path), used by `flash_attention(dtype=
"e4m3")` in `attention.py`.

Q, K and V are e4m3 (`f8E4M3FN`) with per-(batch, kv-head) f32 descale factors, three inputs after V,

    %DescaleQ, %DescaleK, %DescaleV : !tile.tile<?x?xf32, global>  {tile.dims = #tile.dims<batch, heads_k>}

(`heads` without grouped heads): the true inputs are q8 descale_q, k8 descale_k, v8 descale_v, with query head h
taking the factors of its key head. Per key block the kernel computes

    S = (Q8 K8^T) * (scale descale_q descale_k)      f32 scores from exact e4m3 products, one row vector
    P = exp(S - m')                                  the online softmax of `flash_attention`, in f32
    acc' = alpha acc + e4m3(2^8 P) V8                P rounded to e4m3 for the tensor core (FlashAttention-3's
                                                     Max_offset: 2^8 P uses e4m3's range, P <= 1 so 2^8 P <= 256)

and at the end O = acc / l * (descale_v 2^-8), rounded to bf16, with LSE = m + ln l (l sums the unrounded P,
so the 2^8 never reaches it). Each factor vector is loaded once per block ([BM] rows of one value:
`tile.load_broadcast` of the descale element). V is given as it is ([batch, heads_k, seq_k, head_dim]); the
lowering transposes each [BN, head_dim] tile in shared memory in the producer warpgroup (K-major for the P.V
product, as FP8 wgmma needs: passes/convert_tile_to_sm90/transpose.py). With `v_transposed="p8"`, V is given as
V^T [batch, heads_k, head_dim, seq_k] with its keys in P8 key order and the kernel multiplies P by its
[head_dim, BN] tile transposed; V^T with its keys in their own order (`v_transposed=True`) is refused
(`V_TRANSPOSED_NATURAL_REFUSAL`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import Float8E4M3FNType
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.common import DTYPES, ArgSpec, TileBuilder, check_choice, f32, global_tensor

FP8_DTYPES = ("e4m3",)
"""The 8-bit input types `flash_attention` takes (e5m2 inputs are refused by name: FlashAttention-3 and cuDNN
take e4m3 for the forward; e5m2's 2-bit mantissa is a gradient format)."""

FP8_OUTPUT_DTYPE = "bf16"
"""The output type of the FP8 kernel (FlashAttention-3's)."""

P_OFFSET_LOG2 = 8
"""P is rounded to e4m3 as 2^8 P (FlashAttention-3's `Max_offset`): P <= 1 becomes <= 256 < 448, and values
down to 2^-17 keep a normal or subnormal e4m3 code instead of flushing to 0 below 2^-10. The factor is undone
with descale_v at the end (a power of two: exact)."""

FP8_BLOCK_N = {64: 128, 128: 128, 256: 64}
"""Keys per inner-loop step of the FP8 kernel by head_dim (`block_n=None`): the P.V product contracts over the
key block on the k32 e4m3 wgmma, so it is a multiple of 32 (the 16-bit kernels' 48 at head_dim 256 is not);
at 256 the default pipeline's consumers then take 168 registers without spill (e4m3 P is a quarter of P's f32
registers, where bf16's BN = 64 needs 252)."""

FP8_HEAD_DIMS = tuple(FP8_BLOCK_N)
"""Head dimensions of the FP8 kernel: 64, 128, 256. 96 and 192, which the 16-bit kernels take, are refused by
name (`check_fp8_head_dim`): the FP8 kernel's V transpose in shared memory and its P8 key order have not been
built or checked at those widths."""


def check_fp8_head_dim(head_dim: object, head_dims: tuple[int, ...]) -> None:
    """ValueError naming head_dim when the FP8 kernel does not take it (`FP8_HEAD_DIMS`); the 16-bit kernels'
    head dimensions (`head_dims`, attention_config.HEAD_DIMS, which imports this module) outside it (96, 192) are
    named as such, the others left to the 16-bit check."""
    if head_dim in head_dims and head_dim not in FP8_HEAD_DIMS and not isinstance(head_dim, bool):
        raise ValueError(f"head_dim {head_dim} is not supported by the FP8 attention kernel (dtype='e4m3'), which "
                         f"takes head_dim {', '.join(map(str, FP8_HEAD_DIMS))}; head_dim {head_dim} runs in bf16 "
                         "or f16")

DESCALES = ("DescaleQ", "DescaleK", "DescaleV")
"""The kernel's descale inputs, after V, in this order."""


V_TRANSPOSED_ORDERS = ("p8",)
"""`v_transposed="p8"`: V^T with its keys in P8 key order by groups of 16 (`tile.key_order = "p8"`,
`tessera.sm90.fp8.p8_key_positions`), the order the 8-bit P.V wgmma reads: convert-tile-to-sm90 lowers it
without a transpose in the kernel (by the single-stage pipeline too). The kernel promises (`tile.divisible`) seq_k a multiple of 16: V^T's rows of seq_k bytes then start
on the 16 bytes TMA needs, and the order's groups are whole."""


V_TRANSPOSED_NATURAL_REFUSAL = (
    "v_transposed=True (V^T [batch, heads_k, head_dim, seq_k] with its keys in their own order) is not supported: "
    "the kernel could not be lowered below Tile IR. The FP8 P.V wgmma reads P from registers with its keys in P8 "
    "key order (sm90.cvt_pack_fp8, no shuffle), so a V^T operand must hold its keys in that order too, and V^T's "
    "rows of seq_k bytes need not start on the 16 bytes TMA needs. Give V as it is (v_transposed=False, the "
    "default: the producer warpgroup transposes it in shared memory, as FlashAttention-3 does) or V^T in P8 key "
    "order (v_transposed='p8', keys permuted by tessera.sm90.fp8.p8_key_positions, seq_k a multiple of 16)")
"""Why `flash_attention(dtype="e4m3", v_transposed=True)` is refused where the kernel is built, and what to use
instead: every level below Tile IR would refuse it (pipeline-loops cannot ring V^T's unaligned rows, and
convert-tile-to-sm90 takes an 8-bit B in registers' P8 key order only), and a kernel that runs at one level only
is a trap. FlashAttention-3's own column-major V path shuffles P's registers instead (`permute_Aregs_fp8`), which
this compiler does not do."""


def order_v_keys(fn) -> None:
    """Mark kernel `fn`'s V^T input (argument 2) as given in P8 key order and promise seq_k % 16 == 0."""
    from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr

    from tessera.kernel_abi import DIVISIBLE_ATTR, KEY_ORDER_ATTR
    from tessera.sm90.fp8 import P8_KEY_GROUP

    attrs = list(fn.arg_attrs.data)
    attrs[2] = DictionaryAttr({**attrs[2].data, KEY_ORDER_ATTR: StringAttr("p8")})
    fn.arg_attrs = ArrayAttr(attrs)
    fn.attributes[DIVISIBLE_ATTR] = DictionaryAttr({"seq_k": IntegerAttr(P8_KEY_GROUP, 64)})


def fp8_element_type() -> Float8E4M3FNType:
    return Float8E4M3FNType()


def check_fp8_options(dtype: object, *, bias: bool, num_splits: int, mods: bool, cluster: tuple[int, int, int],
                      v_transposed: object) -> bool:
    """Whether `dtype` names the FP8 kernel; ValueError for a dtype no forward kernel takes (naming bf16, f16 and
    e4m3), or naming what FP8 does not combine with (e5m2, bias,
    split-KV, score_mod/mask_mod, clusters), a `v_transposed` without it, or `v_transposed=True`
    (`V_TRANSPOSED_NATURAL_REFUSAL`: it says why and what to use instead)."""
    if dtype == "e5m2":
        raise ValueError("dtype 'e5m2' is not supported by the attention kernels: the FP8 forward takes e4m3 inputs "
                         "(dtype='e4m3'), as FlashAttention-3 does")
    check_choice("dtype", dtype, (*DTYPES, *FP8_DTYPES))  # naming 'e4m3' too: 'float8_e4m3fn' is a near miss
    fp8 = dtype in FP8_DTYPES
    if not isinstance(v_transposed, bool) and v_transposed not in V_TRANSPOSED_ORDERS:
        raise ValueError(f"v_transposed must be False or 'p8'; got {v_transposed!r}")
    if v_transposed and not fp8:
        raise ValueError(f"v_transposed={v_transposed!r} applies to the FP8 kernel (dtype='e4m3') only")
    if v_transposed is True:
        raise ValueError(V_TRANSPOSED_NATURAL_REFUSAL)
    if fp8:
        refused = [name for name, on in (("bias", bias), ("num_splits > 1 (split-KV)", num_splits > 1),
                                         ("score_mod/mask_mod", mods), ("cluster > 1", cluster != (1, 1, 1))) if on]
        if refused:
            raise ValueError(f"dtype='e4m3' (FP8 attention) is not supported with {', '.join(refused)}")
    return fp8


def descale_args(grouped: bool) -> list[ArgSpec]:
    """The f32 descale inputs [batch, heads_k] (heads without grouped heads), after V."""
    dims = ["batch", "heads_k" if grouped else "heads"]
    return [ArgSpec(name, global_tensor([None, None], f32), dims) for name in DESCALES]


def descale_row(b: TileBuilder, tensor: SSAValue, batch: SSAValue, kv_head: SSAValue, rows: int,
                name: str) -> SSAValue:
    """The [rows] f32 row vector holding the descale factor of (batch, kv_head) of `tensor` on every row."""
    window = b.view(tensor, [batch, kv_head], [1], f"{name}_window")
    column = b.load_broadcast(window, rows, f"{name}_column")
    return b.reshape(column, [rows], f"{name}_row")


def load_descales(b: TileBuilder, args: dict[str, SSAValue], batch: SSAValue, kv_head: SSAValue, rows: int,
                  scale: float) -> dict[str, SSAValue]:
    """The block's two factor vectors: "qk" = scale descale_q descale_k (multiplies the scores) and "v" =
    descale_v 2^-P_OFFSET_LOG2 (multiplies the normalised output)."""
    dq, dk, dv = (descale_row(b, args[t], batch, kv_head, rows, t.lower()) for t in DESCALES)
    qk = b.scale(b.binary(tile.MulOp, dq, dk, "descale_qk"), scale, "score_factor")
    return {"qk": qk, "v": b.scale(dv, 2.0**-P_OFFSET_LOG2, "output_factor")}


def round_p(b: TileBuilder, p: SSAValue) -> SSAValue:
    """e4m3(2^8 P): the A operand of the P.V product."""
    return b.cast(b.scale(p, 2.0**P_OFFSET_LOG2, "p_offset"), fp8_element_type(), "p_fp8")
