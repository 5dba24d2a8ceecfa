"""Attention kernels: the pieces every variant shares, and the online one-pass (flash) kernel.

With an additive bias (`flash_attention(bias=True)`), Bias [batch, heads, seq_q, seq_k] is an input after V
(`bias_accumulator`): -inf hides a key (a row that sees no key gives O = 0, LSE = -inf), and a finite bias
stays finite, Bias / scale saturated at +-V (`tile.saturating_scale`; V = 2^127 for any scale below 1.38),
so a mask fill of bf16's lowest value gives a padded query row the uniform average of V, as float64 and
PyTorch's eager attention do.

Every attention kernel is launched over the grid (ceildiv(seq_q, BM), heads, batch): thread block
(x, y, z) computes the output rows [x*BM, x*BM + BM) of head y of batch entry z. Its arguments are

    %Q, %O : !tile.tile<?x?x?xDxT, global>  {tile.dims = #tile.dims<batch, heads, seq_q, D>}   (O: role "out")
    %K, %V : !tile.tile<?x?x?xDxT, global>  {tile.dims = #tile.dims<batch, heads, seq_k, D>}

then any scratch buffers a multi-pass variant needs (`attention_multipass`). Key blocks are BN keys wide; the
last one may be partial (its copy fills zeros and `tile.mask_bounds` hides those keys). With `causal`, the mask
is aligned bottom-right (`tile.mask_causal`, which then hides those keys from every stored row: `apply_masks`),
and key blocks entirely past the diagonal are not visited.

With `return_lse=True` a kernel also writes the log-sum-exp of each query row's scaled scores,

    %LSE : !tile.tile<?x?x?x1xf32, global>  {tile.dims = #tile.dims<batch, heads, seq_q, 1>}  (role "out")

LSE = m + ln(l) with m the running maximum of the scaled scores (row_max * scale) and l the running sum: the
natural log of sum_j exp(scale * s_j), and -inf for a row that sees no key (m = -inf, l = 0; its O is 0). The
trailing 1 is the column in which the lowering stores one f32 per row (a [BM, 1] window, as two-pass attention
stores its row statistics); the memory is LSE[batch, heads, seq_q]. Without it the kernel is unchanged.

With `num_splits = S > 1` (split-KV, flash-decoding; `flash_attention` only) the key blocks a query block
visits are divided into S contiguous ranges of ceildiv(n, S) blocks, one thread block each: the grid is
(ceildiv(seq_q, BM), S x heads, batch), thread block (x, y, z) handling part s = y / heads of head y mod heads,
and the outputs are each part's normalised result and its LSE, in f32,

    %O_partial   : [S x batch, heads, seq_q, D]  f32   O_s = softmax over the part's keys, times V
    %LSE_partial : [S x batch, heads, seq_q, 1]  f32   lse_s of the part's keys (-inf for an empty part)

laid out as [S, batch, heads, seq_q, ...] (index s x batch + b of the leading dimension), which
`attention_combine` (tessera/kernels/attention_split.py) reads and merges into O (and LSE). Two choices keep
the split kernel within the consumer warpgroups' 240 registers, where the kernel with LSE already sits at
head_dim 128: the leading index s x batch + b is one register live through the key loop (not s, b and the
batch size), and the loop counts the part's key blocks from 0 with key positions relative to the part's
first key, kv_base (the masks compare with seq_k - kv_base, the same predicates), so that only the producer,
which addresses K and V at kv_base + k0, holds kv_base.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, StringAttr, UnitAttr
from xdsl.ir import Attribute, SSAValue

from tessera.dialects import tile
from tessera.kernels.common import (
    F32_LARGEST,
    ArgSpec,
    DTYPES,
    TileBuilder,
    apply_cluster,
    ceildiv_dim,
    check_block,
    check_choice,
    check_cluster,
    check_dtype,
    check_flag,
    check_scale,
    f32,
    finish_kernel,
    global_tensor,
    kernel_function,
    register_tile,
    shared_tile,
)
from tessera.variants.index_ranges import check_at_launch
from tessera.variants.trace import trace_mod
from tessera.kernels import attention_fp8
from tessera.kernels.attention_mods import AttentionMods
from tessera.numerics import bias_bound

HEAD_DIMS = (64, 128, 256)
"""Head dimensions the attention builders support."""

PARTIAL_LOOP_OVERLAP = False
"""Whether a block-sparse kernel's loop over partial key blocks overlaps its softmax with the previous trip's
P.V mma (`overlap-softmax`). It does not (`tile.no_overlap`): mask_mod's [BM, BN] index tiles beside two
score tiles and the P.V mma's operands need 261 registers a thread of the consumer warpgroups at head_dim
128, BN 128 (232 are there) and 265 at head_dim 64; the loop over full blocks, which evaluates no mask,
overlaps as the dense kernel's does."""

NO_OVERLAP_ATTR = "tile.no_overlap"
"""`overlap_softmax.NO_OVERLAP_ATTR` (the kernels do not import the passes)."""

DEFAULT_BLOCK_M = 128
"""Queries per thread block: two warpgroups' worth of 64-row wgmma tiles."""

DEFAULT_BLOCK_N = {64: 128, 128: 128, 256: 48}
"""Keys per inner-loop step by head_dim (see `AttentionConfig`)."""

FLASH_BLOCK_N = {**DEFAULT_BLOCK_N, 128: 176}
"""Keys per inner-loop step of `flash_attention`'s dense forward by head_dim (`block_n=None`), 176 at head_dim
128: FlashAttention-3's 128 x 176 tile. It fits the consumers' 240 registers beside the producer's 24
(warp-specialize), without spill, causal or not, GQA, with the LSE or clusters of two. Those that keep
`DEFAULT_BLOCK_N`: with bias (single-stage at 176), causal with the LSE (241 registers: two stages without a
producer at 176), score_mod/mask_mod, split-KV and FP8 (`FP8_BLOCK_N`).
the fixed work of an iteration (descriptors, barriers, the 64-FMUL rescale of the accumulator) is spread over
176 keys instead of 128: 3.37 SASS instructions per key in the steady loop under ptxas 13.0, against 3.74
(`bench/pipeline.py`). The serving, training and multi-pass kernels keep `DEFAULT_BLOCK_N` (a paged cache
copies its pages by TMA when the page size is a multiple of the key block, and powers of two are not of 176)."""


@dataclass(frozen=True)
class AttentionConfig:
    """The checked parameters of an attention kernel.

    Defaults: BM = 128; BN = 128 for head_dim 64 and 128, 48 for head_dim 256. BM = BN = 128 is
    FlashAttention-3's Hopper tile for head_dim 128 (causal) and the BN it uses for head_dim 64; with bf16,
    Q + K + V in shared memory take 96 KiB at head_dim 128 (48 KiB at 64), which leaves room for a second K/V
    stage when the loop is pipelined, and the 128x128 f32 score tile is 64 registers per thread over two
    warpgroups. BN = 64 (FlashAttention-2's Ampere choice) halves the score tile but doubles the loop trips
    and the per-step softmax bookkeeping; on Hopper the register file affords 128.

    At head_dim 256 the [64, 256] f32 accumulator of each consumer warpgroup alone takes 128 registers per
    thread, so the key block shrinks (FlashAttention-3 uses 80): with BN = 48 the full pipeline's two score
    tiles in flight (overlap-softmax) fit the 240 registers a consumer warpgroup gets beside the producer
    (BN = 64 needs 252), and two-pass attention's shared memory fits 227 KiB (BN = 64 needs 257 KiB). A row
    of a 48-wide score tile spans 12 registers of a thread, not a power of two, which the row reductions
    handle. Any multiple of 16 may be asked for; the passes refuse what does not fit, by name.
    """

    head_dim: int
    causal: bool
    dtype: str
    scale: float
    block_m: int
    block_n: int
    return_lse: bool = False
    num_splits: int = 1
    bias: bool = False
    bias_broadcast: tuple[str, ...] = ()
    """The dimensions (of BIAS_BROADCAST_DIMS) along which the bias has size 1 and is broadcast."""
    fp8: bool = False
    """Q, K, V in e4m3 with descale inputs, O in `dtype` (bf16): the FP8 kernel (`attention_fp8`), which only
    `flash_attention(dtype="e4m3")` builds."""
    v_transposed: bool | str = False
    """With `fp8`: V is given as V^T [batch, heads_k, head_dim, seq_k] (True), its keys in P8 key order
    ("p8", `attention_fp8.V_TRANSPOSED_ORDERS`)."""

    @classmethod
    def checked(
        cls,
        head_dim: object,
        causal: object = False,
        dtype: object = "bf16",
        scale: object = None,
        block_m: object = DEFAULT_BLOCK_M,
        block_n: object = None,
        return_lse: object = False,
        num_splits: object = 1,
        bias: object = False,
        bias_broadcast: object = (),
    ) -> AttentionConfig:
        """Validate builder arguments; raises ValueError naming the argument, the value and what is allowed.
        `block_n=None` is the head_dim's default (`DEFAULT_BLOCK_N`)."""
        check_choice("head_dim", head_dim, HEAD_DIMS)
        if block_n is None:
            block_n = DEFAULT_BLOCK_N[head_dim]  # type: ignore[index]
        check_dtype(dtype)
        num_splits = check_num_splits(num_splits)
        if num_splits > 1 and head_dim not in SPLIT_HEAD_DIMS:
            raise ValueError(f"num_splits > 1 (split-KV) supports head_dim {', '.join(map(str, SPLIT_HEAD_DIMS))}; "
                             f"got head_dim {head_dim}: the f32 partial output, {DEFAULT_BLOCK_M} x {head_dim} "
                             "(128 registers per thread beside the accumulator's 128 when it is stored), does not "
                             "fit the consumer warpgroups' 240 registers")
        return cls(
            head_dim=head_dim,  # type: ignore[arg-type]
            causal=check_flag("causal", causal),
            dtype=dtype,  # type: ignore[arg-type]
            scale=check_scale(scale, head_dim),  # type: ignore[arg-type]
            block_m=check_block("block_m", block_m),
            block_n=check_block("block_n", block_n),
            return_lse=check_flag("return_lse", return_lse),
            num_splits=num_splits,
            bias=check_bias_scale(check_flag("bias", bias), check_scale(scale, head_dim)),  # type: ignore[arg-type]
            bias_broadcast=check_bias_broadcast(bias_broadcast, bias, num_splits),
        )

    @property
    def element_type(self) -> Attribute:
        """The element type of Q, K, V (and of P in the P.V product): e4m3 in the FP8 kernel."""
        return attention_fp8.fp8_element_type() if self.fp8 else check_dtype(self.dtype)

    @property
    def output_type(self) -> Attribute:
        """The element type of O: `dtype` (bf16 in the FP8 kernel)."""
        return check_dtype(self.dtype)

    @property
    def split(self) -> bool:
        """Whether the kernel writes split-KV partial results (num_splits > 1) instead of O."""
        return self.num_splits > 1

    def kernel_name(self, variant: str) -> str:
        """`flash_attention_d128_bf16_causal`, `..._bias` with an additive bias (`_bias_b1`, `_bias_h1`,
        `_bias_b1_h1` broadcast over batch and/or heads), `..._lse` with the LSE output, `..._split3` for
        split-KV parts."""
        dtype = attention_fp8.FP8_DTYPES[0] if self.fp8 else self.dtype
        return (f"{variant}_d{self.head_dim}_{dtype}" + ("_vt" if self.v_transposed else "") + ("p8" if self.v_transposed == "p8" else "")
                + ("_causal" if self.causal else "")
                + ("_bias" + "".join(f"_{d[0]}1" for d in self.bias_broadcast) if self.bias else "")
                + ("_lse" if self.return_lse and not self.split else "")
                + (f"_split{self.num_splits}" if self.split else ""))

    def kernel_info(self) -> dict[str, Attribute]:
        if self.split or self.fp8:  # partial results, descale inputs: no "attention" reference describes them
            return {"kind": StringAttr("custom")}
        info = {
            "kind": StringAttr("attention"),
            "causal": IntegerAttr(int(self.causal), 1),
            "scale": FloatAttr(self.scale, f32),
        }
        if self.bias:
            info["bias"] = IntegerAttr(1, 1)
        return info

    def bias_dims(self) -> list[str | int]:
        """The named dimensions of the Bias input: [batch, heads, seq_q, seq_k], with 1 for a broadcast one."""
        return [1 if d in self.bias_broadcast else d for d in BIAS_BROADCAST_DIMS] + ["seq_q", "seq_k"]


BIAS_BROADCAST_DIMS = ("batch", "heads")
"""The dimensions along which a bias may have size 1 (PyTorch SDPA's attn_mask [1, heads, Sq, Sk] or
[batch, 1, Sq, Sk]): the kernel reads it at index 0 there, with no stride of its own to pass."""


def check_bias_broadcast(value: object, bias: object, num_splits: int) -> tuple[str, ...]:
    """The checked `bias_broadcast`: a tuple of distinct names from BIAS_BROADCAST_DIMS, only with `bias`;
    a bias with split-KV is refused by name (ValueError)."""
    if bias is True and num_splits > 1:
        raise ValueError("bias is not supported with num_splits > 1 (split-KV): the partial kernels take no bias")
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, tuple | list) or not all(isinstance(d, str) and d in BIAS_BROADCAST_DIMS for d in value) \
            or len(set(value)) != len(value):
        raise ValueError(f"bias_broadcast must be a tuple of distinct names from {', '.join(BIAS_BROADCAST_DIMS)}; "
                         f"got {value!r}")
    if value and bias is not True:
        raise ValueError(f"bias_broadcast applies to a bias (bias=True); got bias={bias!r}")
    return tuple(d for d in BIAS_BROADCAST_DIMS if d in value)


def check_bias_scale(bias: bool, scale: float) -> bool:
    """`bias`, if the score mma's accumulator can start at Bias / scale (`bias_accumulator`): 1/scale must be a
    finite f32; ValueError naming bias and scale otherwise."""
    if bias and 1.0 / scale > F32_LARGEST:
        raise ValueError(f"bias needs 1/scale to be a finite f32 (the bias enters the scores as Bias / scale); "
                         f"got scale={scale!r}")
    return bias


SPLIT_HEAD_DIMS = (64, 128)
"""Head dimensions of the split-KV kernel (`AttentionConfig.checked` says why not 256)."""

MAX_SPLITS = 256
"""The most key-range splits a split-KV kernel takes (FlashAttention-3 caps its heuristic's choice at 128)."""


def check_num_splits(value: object) -> int:
    """A split count: an int from 1 to MAX_SPLITS; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SPLITS:
        raise ValueError(f"num_splits must be an integer from 1 to {MAX_SPLITS}; got {value!r}")
    return value


LSE_DIMS = ("batch", "heads", "seq_q", 1)
"""The named dimensions of the LSE output: one f32 per query row, in a column of width 1 (module docstring)."""


def lse_arg(rows: Sequence[str] = LSE_DIMS[:-1]) -> ArgSpec:
    """The f32 LSE output argument %LSE [batch, heads, seq_q, 1] (module docstring), or [*rows, 1] for
    another layout of the query rows (packed sequences: [heads, total_q, 1])."""
    return ArgSpec("LSE", global_tensor([None] * len(rows) + [1], f32), [*rows, 1], role="out")


@dataclass
class AttentionBlock:
    """The values one thread block's code is written in terms of (set up by `attention_kernel`). In a split-KV
    part the key loop's positions are relative to the part's first key `kv_base`: n_kv counts the part's key
    blocks and seq_k is seq_k - kv_base; `part_batch` = part x batch + batch indexes the partial outputs."""

    config: AttentionConfig
    args: dict[str, SSAValue]
    batch: SSAValue
    head: SSAValue
    q0: SSAValue
    seq_q: SSAValue
    seq_k: SSAValue
    n_kv: SSAValue
    smem: dict[str, SSAValue] = field(default_factory=dict)
    kv_head: SSAValue | None = None
    """The head of K and V this block reads: `head`, or head // (heads // heads_k) with grouped heads."""
    part_batch: SSAValue | None = None
    kv_base: SSAValue | None = None
    rows_left: SSAValue | None = None
    """With packed sequences, the rows of the block's own sequence from q0 on: its stores stop there."""
    mods: AttentionMods | None = None
    """The traced score_mod / mask_mod and whether the key loop reads block lists (`flash_attention`)."""
    q_block: SSAValue | None = None
    descale: dict[str, SSAValue] = field(default_factory=dict)
    """The FP8 kernel's factor row vectors (`attention_fp8.load_descales`): "qk" and "v"."""

    def window(self, b: TileBuilder, tensor: str, row: SSAValue, col: SSAValue, shape: Sequence[int]) -> SSAValue:
        """The window of argument `tensor` (Q, K, V, Bias, O, LSE or a scratch buffer) at (batch, head, row, col);
        a split-KV partial output (O_partial, LSE_partial) at (part x batch + batch, head, row, col); K and V
        are read at `kv_head` (grouped heads)."""
        name = f"{tensor.lower()}_window"
        lead = self.part_batch if tensor in SPLIT_OUTPUTS else self.batch
        head = self.kv_head if tensor in ("K", "V") and self.kv_head is not None else self.head
        if tensor == "Bias":  # a broadcast dimension has size 1: index 0
            broadcast = self.config.bias_broadcast
            lead, head = (b.const(0) if d in broadcast else v for d, v in zip(BIAS_BROADCAST_DIMS, (lead, head)))
        return b.view(self.args[tensor], [lead, head, row, col], shape, name)

    def copy_key_block(self, b: TileBuilder, tensor: str, row: SSAValue) -> None:
        """Start the copy of the key block of `tensor` (K or V) at key row `row` into its shared tile: one
        `tile.cp_async` of its window (the paged kernel's gather overrides this)."""
        c = self.config
        if tensor == "V" and c.v_transposed:  # V^T [.., head_dim, seq_k]: the key block is a column block
            b.cp_async(self.window(b, tensor, b.const(0), row, [c.head_dim, c.block_n]), self.smem[tensor])
            return
        b.cp_async(self.window(b, tensor, row, b.const(0), [c.block_n, c.head_dim]), self.smem[tensor])

    def key_row(self, b: TileBuilder, k0: SSAValue) -> SSAValue:
        """The row of K and V that key position k0 of the loop is: k0, or kv_base + k0 in a split-KV part."""
        return k0 if self.kv_base is None else b.addi(self.kv_base, k0, "key_row")

    def key_end(self, b: TileBuilder) -> SSAValue:
        """The row of K and V past the block's last key: seq_k, or kv_base + seq_k in a split-KV part (whose
        seq_k counts from kv_base)."""
        return self.seq_k if self.kv_base is None else b.addi(self.kv_base, self.seq_k, "key_end")


SPLIT_OUTPUTS = ("O_partial", "LSE_partial")
"""The outputs of a split-KV kernel, each led by the dimension S x batch (module docstring)."""


def output_args(c: AttentionConfig, rows: Sequence[str] = LSE_DIMS[:-1]) -> list[ArgSpec]:
    """The outputs of an attention kernel: O (and LSE with `return_lse`), or with split-KV the f32 partial
    results O_partial [S x batch, heads, seq_q, D] and LSE_partial [S x batch, heads, seq_q, 1]. `rows` names
    the dimensions of the query rows ([batch, heads, seq_q]; packed sequences: [heads, total_q], whose
    partial results are then [S x heads, total_q, ...])."""
    d = c.head_dim
    free = [None] * len(rows)
    if c.split:
        dims = [tile.DimExprAttr(rows[0], 1, c.num_splits), *rows[1:]]
        o_partial = ArgSpec("O_partial", global_tensor([*free, d], f32), [*dims, d], role="out")
        lse_partial = ArgSpec("LSE_partial", global_tensor([*free, 1], f32), [*dims, 1], role="out")
        return [o_partial, lse_partial]
    o = ArgSpec("O", global_tensor([*free, d], c.output_type), [*rows, d], role="out")
    return [o, lse_arg(rows)] if c.return_lse else [o]


def grid_heads(c: AttentionConfig) -> str | tile.DimExprAttr:
    """The grid's y extent: heads, or S x heads with split-KV (block y handles part y / heads of head
    y mod heads, `split_part`)."""
    return tile.DimExprAttr("heads", 1, c.num_splits) if c.split else "heads"


def attention_kernel(
    config: AttentionConfig, variant: str, scratch: Sequence[ArgSpec] = (), grouped: bool = False,
    mods: AttentionMods | None = None,
) -> tuple[func.FuncOp, TileBuilder, AttentionBlock]:
    """Start an attention kernel: signature, block coordinates, sizes, key-block count, shared tiles, and the
    asynchronous copy of this block's Q tile (one commit group; the first wait in the key loop covers it).

    With `grouped` (GQA/MQA), K and V have their own head count `heads_k` (tile.dims `heads_k`), which must
    divide `heads` (the caller checks it: the kernel reads zeros past K's heads otherwise), and query head h
    reads key head h // (heads // heads_k).

    With `mods` (score_mod / mask_mod), their captured arrays and, with block sparsity, the block lists are
    inputs after V (and Bias): `AttentionMods.inputs`.

    Returns (func, builder, block)."""
    c = config
    elt, d = c.element_type, c.head_dim
    q_dims = ["batch", "heads", "seq_q", d]
    k_dims = ["batch", "heads_k" if grouped else "heads", "seq_k", d]
    tensor = global_tensor([None, None, None, d], elt)
    v_spec = ArgSpec("V", tensor, k_dims)
    if c.v_transposed:
        v_spec = ArgSpec("V", global_tensor([None, None, d, None], elt), [*k_dims[:2], d, "seq_k"])
    args = [
        ArgSpec("Q", tensor, q_dims),
        ArgSpec("K", tensor, k_dims),
        v_spec,
        *(attention_fp8.descale_args(grouped) if c.fp8 else []),
        *([ArgSpec("Bias", global_tensor([None] * 4, elt), c.bias_dims())] if c.bias else []),
        *(mods.inputs(c) if mods is not None else []),
        *output_args(c),
        *scratch,
    ]
    grid = [ceildiv_dim("seq_q", c.block_m), grid_heads(c), "batch"]
    info = c.kernel_info() if mods is None else {"kind": StringAttr("custom")}  # no "attention" reference fits
    fn, b = kernel_function(c.kernel_name(variant), args, info, grid)
    values = dict(zip((a.name for a in args), fn.body.blocks.first.args))

    q_block = b.program_id("x", "q_block")
    head = b.program_id("y", "part_head" if c.split else "head")
    batch = b.program_id("z", "batch")
    seq_q = b.dim(values["Q"], 2, "seq_q")
    seq_k = b.dim(values["K"], 2, "seq_k")
    q0 = b.muli(q_block, b.const(c.block_m), "q0")
    n_kv = key_block_count(b, c, q0, seq_q, seq_k)
    if not c.split:
        blk = AttentionBlock(c, values, batch, head, q0, seq_q, seq_k, n_kv)
    else:
        part, head, count, kv_base, seq_k_part = split_part(b, c, head, b.dim(values["Q"], 1, "heads"), n_kv, seq_k)
        part_batch = b.addi(b.muli(part, b.dim(values["Q"], 0, "batch_size"), "part_offset"), batch, "part_batch")
        blk = AttentionBlock(c, values, batch, head, q0, seq_q, seq_k_part, count, part_batch=part_batch,
                             kv_base=kv_base)
    if grouped:
        blk.kv_head = grouped_kv_head(b, values["Q"], values["K"], blk.head)
    blk.mods, blk.q_block = mods, q_block

    blk.smem["Q"] = b.alloc_shared(shared_tile([c.block_m, d], elt), "q_smem")
    blk.smem["K"] = b.alloc_shared(shared_tile([c.block_n, d], elt), "k_smem")
    v_shape = [d, c.block_n] if c.v_transposed else [c.block_n, d]
    blk.smem["V"] = b.alloc_shared(shared_tile(v_shape, elt), "vt_smem" if c.v_transposed else "v_smem")
    b.cp_async(blk.window(b, "Q", q0, b.const(0), [c.block_m, d]), blk.smem["Q"])
    b.cp_commit_group()
    if c.fp8:
        kv_head = blk.kv_head if blk.kv_head is not None else blk.head
        blk.descale = attention_fp8.load_descales(b, values, blk.batch, kv_head, c.block_m, c.scale)
    return fn, b, blk


def grouped_kv_head(b: TileBuilder, q: SSAValue, k: SSAValue, head: SSAValue) -> SSAValue:
    """The key head of query head `head` under GQA: head // (heads // heads_k), heads and heads_k read from
    dimension 1 of Q and K."""
    group = b.emit(arith.DivUIOp(b.dim(q, 1, "heads"), b.dim(k, 1, "heads_k")), "group")
    return b.emit(arith.DivUIOp(head, group), "kv_head")


def key_block_count(b: TileBuilder, c: AttentionConfig, q0: SSAValue, seq_q: SSAValue, seq_k: SSAValue) -> SSAValue:
    """ceildiv(seq_k, BN) key blocks; with `causal`, only those up to the diagonal of the block's last row:
    min(ceildiv(seq_k, BN), ceildiv(max(0, q0 + BM + seq_k - seq_q), BN)), in signed index arithmetic
    because q0 + BM + seq_k - seq_q is negative for query blocks that see no key."""
    bn = b.const(c.block_n)
    n_all = b.ceildivui(seq_k, bn, "n_kv_all" if c.causal else "n_kv")
    if not c.causal:
        return n_all
    end = b.addi(q0, b.const(c.block_m), "q_end")
    shifted = b.subi(b.addi(end, seq_k, "q_end_plus_seq_k"), seq_q, "visible_end")
    visible = b.maxsi(shifted, b.const(0), "visible_keys")
    return b.minsi(n_all, b.ceildivsi(visible, bn, "n_kv_causal"), "n_kv")


def split_key_range(b: TileBuilder, c: AttentionConfig, part: SSAValue, n_kv: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(first key block, key block count) of part `part` of a block's n_kv key blocks, as FlashAttention-3
    divides them: ceildiv(n_kv, S) blocks per part, the first at part x that, the count
    max(0, min(that, n_kv - first)). Trailing parts may be empty (no trip: they write O = 0, LSE = -inf)."""
    per_part = b.ceildivui(n_kv, b.const(c.num_splits), "n_kv_per_part")
    start = b.muli(part, per_part, "kv_start")
    left = b.maxsi(b.subi(n_kv, start, "n_kv_after_start"), b.const(0), "n_kv_left")
    return start, b.minsi(per_part, left, "n_kv_part")


def split_part(b: TileBuilder, c: AttentionConfig, y: SSAValue, heads: SSAValue, n_kv: SSAValue,
               seq_k: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue, SSAValue]:
    """The split-KV coordinates of a block whose grid y is part x heads + head and whose query block sees
    n_kv key blocks: (part, head, the part's key block count, its first key kv_base, seq_k - kv_base). The
    loop then sees the part's keys from kv_base on (module docstring)."""
    part = b.divui(y, heads, "part")
    head = b.remui(y, heads, "head")
    start, count = split_key_range(b, c, part, n_kv)
    kv_base = b.muli(start, b.const(c.block_n), "kv_base")
    return part, head, count, kv_base, b.subi(seq_k, kv_base, "seq_k_part")


def load_key_block(b: TileBuilder, blk: AttentionBlock, k0: SSAValue, tensors: Sequence[str]) -> None:
    """Copy the key block at k0 of each of `tensors` (K and/or V) into its shared tile and make it visible:
    cp_async each, commit, wait for every group (this also covers the Q copy), barrier."""
    row = blk.key_row(b, k0)
    for name in tensors:
        blk.copy_key_block(b, name, row)
    b.cp_commit_group()
    b.cp_wait_group(0)
    b.barrier()


def apply_masks(b: TileBuilder, blk: AttentionBlock, s: SSAValue, k0: SSAValue, bounds: bool = True) -> SSAValue:
    """-inf for keys past seq_k (unless not `bounds`: a full block of a block mask ends before seq_k; else
    always, as the last key block may be partial) and, if causal, for keys after the bottom-right-aligned
    diagonal. Causal, the diagonal alone: query q < seq_q sees the keys up to q + seq_k - seq_q < seq_k, so
    the bounds mask hides nothing more on any row the kernel stores; only the padding rows of the last query
    block (q >= seq_q, never stored) then see keys past seq_k, whose copies filled zeros. The diagonal of a
    thread's two rows, eight apart, is then one compare per distinct column - row (46 at 176 keys) where the
    two masks together took one per score (88)."""
    if blk.config.causal:
        return b.mask_causal(s, blk.q0, k0, blk.seq_q, blk.seq_k, "s_masked")
    return b.mask_bounds(s, k0, blk.seq_k, "s_masked") if bounds else s


def masked_scores(b: TileBuilder, blk: AttentionBlock, k0: SSAValue, mask_mod: bool = True) -> SSAValue:
    """S = mask(scale * Q K^T [+ Bias]) for the key block at k0, from the shared Q and K tiles: [BM, BN] f32.
    With modifiers (`blk.mods`): S = score_mod(S, ...), then -inf where mask_mod is false, before the bounds
    and causal masks; a full block of the block mask (not `mask_mod`) skips mask_mod and the bounds mask
    (`tessera.variants.block_mask`: its keys all come before seq_k)."""
    c = blk.config
    init = bias_accumulator(b, blk, k0) if c.bias else b.fill(0.0, register_tile([c.block_m, c.block_n]), "s_zero")
    s = b.mma(blk.smem["Q"], blk.smem["K"], init, "s", transpose_b=True)
    if c.fp8:  # scale x descale_q x descale_k, one f32 factor per block
        s = b.binary(tile.MulRowsOp, s, blk.descale["qk"], "s_scaled")
    else:
        s = b.scale(s, c.scale, "s_scaled")
    if blk.mods is not None:
        s = blk.mods.apply(b, blk, s, k0, mask_mod)
    return apply_masks(b, blk, s, k0, bounds=mask_mod)


def bias_accumulator(b: TileBuilder, blk: AttentionBlock, k0: SSAValue) -> SSAValue:
    """The initial value of the score mma's accumulator with a bias: Bias / scale for the block's [BM, BN] bias
    block (batch, head, q0, k0), so that scale * (Bias / scale + Q K^T) = scale Q K^T + Bias.

    The bias is read from global memory straight into the accumulator's registers (`tile.load`, as GEMM's C_in
    epilogue reads its tile), widened to f32 and multiplied by the f32 1/scale; it costs no registers beside the
    score tile's own, which is what lets the pipelined, warp-specialized kernel keep two score tiles in flight.
    The load is bounded: rows past seq_q and columns past seq_k are never addressed and read 0 (those columns
    are masked to -inf after, those rows never stored).

    Bias / scale saturates (`tile.saturating_scale`) at +-V, V = `numerics.bias_bound(scale)` (2^127 for
    scale < 1.38): a finite bias beyond +-V scale (bf16's lowest, -3.39e38, a mask fill, with scale 1/8, which
    plain f32 would overflow to -inf) stays finite and acts as +-V scale, while -inf (and +inf) stay infinite
    through the mma. A row whose every key has such a fill has exactly equal scores -V scale (Q K^T is far
    below V's ulp), and so does a row whose every key has any other huge fill below V scale (-1e12, -1e20,
    -1e30): each gets exactly exp(0) = 1 at every level, because a biased kernel's exponents subtract before
    they scale (`subtract_first` on tile.exp_subtract and tile.exp_diff: ex2((s - m) log2 e), not the unbiased
    kernel's one fma, whose rounding of m log2 e would leave the maximum ex2 of a residual of up to 2^42): the
    uniform average over the keys the row sees, as float64 and PyTorch's eager attention give, with LSE
    -V scale + ln(keys) for a saturated fill (`reference.saturate_bias`); beside any other key a fill weighs 0.
    A -inf bias hides its key, and a row that sees no key gives O = 0, LSE = -inf (FlashAttention's
    convention). Costs per bias element: mul, max, min, two setp and two selp, in place (no register: the
    warp-specialized head_dim 128 kernel keeps its 232 of 240), and for the subtraction first two more f32
    ops per score (mul, sub, mul instead of one fma, in place; one more, fma and mul, where scale is 2^k)."""
    c = blk.config
    window = blk.window(b, "Bias", blk.q0, blk.key_row(b, k0), [c.block_m, c.block_n])
    bias = b.cast(b.load(window, "bias_half"), f32, "bias")
    return b.saturating_scale(bias, 1.0 / c.scale, bias_bound(c.scale), "bias_unscaled")


def accumulate_pv(b: TileBuilder, blk: AttentionBlock, p: SSAValue, acc: SSAValue) -> SSAValue:
    """acc + cast(P) @ V from the shared V tile (P rounded to the kernel's element type for the tensor core; in
    the FP8 kernel 2^8 P rounded to e4m3, `attention_fp8.round_p`, times V or the transposed V^T tile)."""
    c = blk.config
    if c.fp8:
        return b.mma(attention_fp8.round_p(b, p), blk.smem["V"], acc, "acc_next", transpose_b=bool(c.v_transposed))
    p_half = b.cast(p, c.element_type, "p_half")
    return b.mma(p_half, blk.smem["V"], acc, "acc_next")


def store_rows(b: TileBuilder, blk: AttentionBlock, value: SSAValue, tensor: str) -> None:
    """Store the block's [BM, n] tile `value` at its rows of `tensor`: rows past the tensor's end are
    dropped, and with packed sequences (`rows_left`) rows past the sequence's end too (`tile.store_global_rows`:
    they belong to the next sequence)."""
    window = blk.window(b, tensor, blk.q0, b.const(0), list(value.type.get_shape()))
    if blk.rows_left is None:
        b.store_global(value, window)
    else:
        b.emit(tile.StoreGlobalRowsOp(value, window, blk.rows_left))


def store_output(b: TileBuilder, blk: AttentionBlock, o: SSAValue) -> None:
    """Round the normalised [BM, D] output tile to the output type and store it (`store_rows`); the FP8 kernel
    first multiplies it by descale_v 2^-8 (`attention_fp8`)."""
    if blk.config.fp8:
        o = b.binary(tile.MulRowsOp, o, blk.descale["v"], "o_descaled")
    store_rows(b, blk, b.cast(o, blk.config.output_type, "o_half"), "O")


def store_lse(b: TileBuilder, blk: AttentionBlock, m: SSAValue, l: SSAValue, tensor: str = "LSE") -> None:
    """Store LSE = m + ln(l) of the block's rows into `tensor` (LSE or LSE_partial) as a [BM, 1] column;
    a row that saw no key has m = -inf and l = 0, so its LSE is -inf (`store_rows`)."""
    lse = b.binary(tile.AddOp, m, b.unary(tile.LogOp, l, "log_l"), "lse")
    store_rows(b, blk, b.reshape(lse, [blk.config.block_m, 1], "lse_column"), tensor)


def store_results(b: TileBuilder, blk: AttentionBlock, acc: SSAValue, m: SSAValue, l: SSAValue) -> None:
    """The end of an online-softmax kernel: O = acc / l (0 for a row of l = 0) rounded and stored, with the
    LSE if asked; with split-KV, O_partial = acc / l in f32 and LSE_partial instead."""
    o = b.binary(tile.DivRowsOp, acc, l, "o")
    if blk.config.split:
        store_rows(b, blk, o, "O_partial")
        store_lse(b, blk, m, l, "LSE_partial")
        return
    store_output(b, blk, o)
    if blk.config.return_lse:
        store_lse(b, blk, m, l)


def flash_attention(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    block_m: int = DEFAULT_BLOCK_M,
    block_n: int | None = None,
    grouped: bool = False,
    return_lse: bool = False,
    num_splits: int = 1,
    cluster: int = 1,
    bias: bool = False,
    bias_broadcast: Sequence[str] = (),
    *,
    score_mod: Callable | None = None,
    mask_mod: Callable | None = None,
    block_sparse: bool = False,
    v_transposed: bool = False,
) -> ModuleOp:
    """The online one-pass attention kernel (FlashAttention-2 style), `flash_attention_d{D}_{dtype}[_causal]`
    (`flash_attention_gqa_...` with `grouped`: K and V with heads_k heads, see `attention_kernel`).

    `cluster=N` groups N consecutive query blocks of a head into a cluster that shares its K and V copies
    (`tessera.passes.form_clusters`; on sm_90a, TMA multicast): not with `causal` (the members' key ranges
    differ), refused by name.

    Per key block j: S = mask(scale Q K_j^T); m' = max(m, rowmax S); alpha = exp(m - m'); P = exp(S - m');
    l' = alpha l + rowsum P; acc' = alpha acc + P V_j. After the loop O = acc / l. Live per block: the
    running max m [BM], sum l [BM] and accumulator acc [BM, D] (all f32), and one [BM, BN] score tile.
    `block_n=None` takes `FLASH_BLOCK_N` (176 keys at head_dim 128, FlashAttention-3's tile), and
    `DEFAULT_BLOCK_N` with bias, modifiers, split-KV, or causal with the LSE (FP8: `FP8_BLOCK_N`).

    `return_lse=True` adds the LSE output (`..._lse`); `num_splits=S > 1` makes the split-KV kernel
    (`..._split{S}`) whose partial results `attention_combine` merges (module docstring).

    `bias=True` (`..._bias`) adds an input after V, Bias [batch, heads, seq_q, seq_k] in the kernel's element
    type, and computes softmax(scale Q K^T + Bias [+ causal mask]) V: per key block the bias block [BM, BN]
    is loaded into the score tile's register layout and added after the scale, before the masks (a -inf bias
    entry hides its key, like attn_mask in PyTorch's SDPA; a row whose every key is hidden gives O = 0 and
    LSE = -inf). The LSE is then that of the biased scores. The bias block enters as the score mma's initial
    accumulator, Bias / scale (`bias_accumulator`), so the scores are scale (Bias / scale + Q K^T). The lowering
    computes exp(x - m) as ex2((x - m) log2 e), the score x rounded from the accumulator as the row maximum m
    was, then subtracted, then scaled (`subtract_first` on the kernel's tile.exp_subtract and tile.exp_diff: a
    bias may hold huge finite fills, for which the unbiased kernel's one fma ex2(acc scale log2 e - m log2 e)
    would lose exp(0) = 1 for the row's maximum). Bias / scale is an f32 saturated at +-V (`bias_accumulator`,
    `numerics.bias_bound`): a finite bias beyond +-V scale (e.g. bf16's lowest, -3.39e38, used as a mask fill,
    with scale 1/8) acts as +-V scale and stays finite, so a row whose every key has that fill averages V
    uniformly (as float64 and PyTorch's eager attention do), not O = 0. `bias_broadcast` names the dimensions, "batch" and/or
    "heads", in which the bias has size 1 (`..._bias_b1`, `_bias_h1`): read at index 0 there, as PyTorch
    broadcasts an attn_mask [1, heads, Sq, Sk] or [batch, 1, Sq, Sk]. Not with split-KV, grouped heads or
    clusters (refused by name).

    `score_mod(score, b, h, q_idx, kv_idx)` and `mask_mod(b, h, q_idx, kv_idx)` (FlexAttention's modifiers,
    `tessera.variants.trace`; `flex_attention_...`) are traced into the score tile: S = score_mod(scale Q K^T),
    then -inf where mask_mod is false, then the bounds (and causal) masks. q_idx and kv_idx are absolute
    positions from 0 (a mask_mod `q_idx >= kv_idx` is top-left causal). NumPy arrays they read become inputs
    after V (and Bias), named `score_mod_NAME` / `mask_mod_NAME`. `block_sparse=True` (needs mask_mod) adds
    the block lists (`attention_mods.BLOCK_LISTS`, from `tessera.variants.block_mask.create_block_mask`): the loop visits
    each query block's full key blocks without evaluating mask_mod, then its partial ones with it, and never
    an empty one. Not with split-KV or clusters (refused by name).

    `dtype="e4m3"` builds the FP8 kernel (`flash_attention_d{D}_e4m3[_vt]...`, FlashAttention-3's FP8 forward,
    `tessera.kernels.attention_fp8`): Q, K, V in f8E4M3FN with three f32 descale inputs [batch, heads_k] after
    V, O in bf16, the LSE (with `return_lse`) in f32; causal, GQA (`grouped`), any lengths and head_dim
    64/128/256 as above; lowered, the producer warpgroup transposes each V tile in shared memory (the default
    pipeline: passes/convert_tile_to_sm90/transpose.py). `v_transposed=True` takes V as V^T [batch, heads_k,
    head_dim, seq_k]; `v_transposed="p8"` takes V^T with its keys in P8 key order
    (`attention_fp8.V_TRANSPOSED_ORDERS`), lowered without a transpose (seq_k a multiple of 16); its default
    block_n is `attention_fp8.FP8_BLOCK_N`. e5m2, and FP8
    with bias, split-KV, score_mod/mask_mod or clusters, are refused by name."""
    if block_n is None and isinstance(head_dim, int) and isinstance(dtype, str) and dtype in DTYPES \
            and bias is False and score_mod is None and mask_mod is None and num_splits == 1 \
            and not (causal is True and return_lse is True):
        block_n = FLASH_BLOCK_N.get(head_dim)  # None for a head_dim refused by name below
    fp8 = attention_fp8.check_fp8_options(dtype, bias=bias is True, num_splits=num_splits if isinstance(num_splits, int) else 1,
                                          mods=score_mod is not None or mask_mod is not None,
                                          cluster=check_cluster("cluster", cluster, 1), v_transposed=v_transposed)
    if fp8 and block_n is None and head_dim in attention_fp8.FP8_BLOCK_N:
        block_n = attention_fp8.FP8_BLOCK_N[head_dim]
    c = AttentionConfig.checked(head_dim, causal, attention_fp8.FP8_OUTPUT_DTYPE if fp8 else dtype, scale, block_m,
                                block_n, return_lse, num_splits, bias, bias_broadcast)
    if fp8:
        c = replace(c, fp8=True, v_transposed=v_transposed)
    check_flag("grouped", grouped)
    shape = check_cluster("cluster", cluster, 1)
    if c.bias and grouped:
        raise ValueError("bias is not supported with grouped=True (GQA/MQA) yet; expand K and V to the query heads")
    if c.bias and shape != (1, 1, 1):
        raise ValueError("bias is not supported with cluster > 1 yet (a biased kernel is not validated with "
                         "multicast K/V copies); use cluster=1")
    mods = check_mods(score_mod, mask_mod, block_sparse, c, shape)
    variant = "flex_attention" if mods is not None else "flash_attention"
    fn, b, blk = attention_kernel(c, variant + ("_gqa" if grouped else ""), grouped=grouped, mods=mods)
    m, l, acc = flash_loop(b, blk)
    # The one normalisation: O = acc / l (a row that saw no key has l = 0 and gives 0).
    store_results(b, blk, acc, m, l)
    if c.v_transposed == "p8":
        attention_fp8.order_v_keys(fn)
    module = apply_cluster(finish_kernel(fn, b), shape)
    if mods is not None:  # a launch proves the modifiers' reads in bounds for its shapes
        check_at_launch(module, mods.traced())
    return module


def check_mods(score_mod, mask_mod, block_sparse, c: AttentionConfig, cluster) -> AttentionMods | None:
    """The traced modifiers of `flash_attention` (None without any); ValueError naming what is refused."""
    check_flag("block_sparse", block_sparse)
    if block_sparse and mask_mod is None:
        raise ValueError("block_sparse=True needs a mask_mod (the block lists are computed from it)")
    if score_mod is None and mask_mod is None:
        return None
    if c.split:
        raise ValueError("score_mod/mask_mod are not supported with num_splits > 1 (split-KV)")
    if cluster != (1, 1, 1):
        raise ValueError("score_mod/mask_mod are not supported with cluster > 1")
    return AttentionMods(None if score_mod is None else trace_mod(score_mod, "score_mod"),
                         None if mask_mod is None else trace_mod(mask_mod, "mask_mod"), block_sparse)


def flash_loop(b: TileBuilder, blk: AttentionBlock) -> tuple[SSAValue, SSAValue, SSAValue]:
    """The online-softmax loop over the block's `n_kv` key blocks (see `flash_attention`); returns the final
    running max m, sum l and unnormalised accumulator acc. With block sparsity (`blk.mods.block_sparse`) two
    loops: over the query block's full key blocks (no mask_mod), then over its partial ones, each reading the
    key block's index from its list (`tile.load_index`)."""
    c = blk.config
    rows = register_tile([c.block_m])
    m_init = b.fill(float("-inf"), rows, "m_init")
    l_init = b.fill(0.0, rows, "l_init")
    acc_init = b.fill(0.0, register_tile([c.block_m, c.head_dim]), "acc_init")

    def key_step(b: TileBuilder, k0: SSAValue, carried: tuple[SSAValue, ...], mask_mod: bool) -> list[SSAValue]:
        m, l, acc = carried
        load_key_block(b, blk, k0, ("K", "V"))
        s = masked_scores(b, blk, k0, mask_mod)
        m_new = b.binary(tile.ElementMaxOp, m, b.unary(tile.RowMaxOp, s, "s_max"), "m_new")
        # A bias may hold huge finite fills (-1e20), and FP8 descales (300 x 300) make scores of 1e6 to 1e10: the
        # exponents must subtract before they scale (both ops); the fma's rounding of m log2e would move P.
        huge = c.bias or c.fp8
        alpha = b.emit(tile.ExpDiffOp(m, m_new, subtract_first=huge), "alpha")
        p = b.emit(tile.ExpSubtractOp(s, m_new, subtract_first=huge), "p")
        l_new = b.fma(alpha, l, b.unary(tile.RowSumOp, p, "p_sum"), "l_new")
        acc_scaled = b.binary(tile.MulRowsOp, acc, alpha, "acc_scaled")
        acc_new = accumulate_pv(b, blk, p, acc_scaled)
        b.barrier()  # every warp has read K and V before the next step's copies overwrite them
        return [m_new, l_new, acc_new]

    carried = (m_init, l_init, acc_init)
    if blk.mods is None or not blk.mods.block_sparse:
        def dense_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
            return key_step(b, b.muli(j, b.const(c.block_n), "k0"), carried, True)

        return b.for_loop(blk.n_kv, list(carried), ["m", "l", "acc"], dense_step)
    coords = [blk.batch, blk.head, blk.q_block]
    # Both counts are read before the loops: the second count's pointer then does not live through the first
    # loop (the producer warpgroup's registers decide the consumers' budget).
    counts = [b.emit(tile.LoadIndexOp(blk.args[name], coords), name.lower())
              for name in ("FULL_KV_NUM_BLOCKS", "KV_NUM_BLOCKS")]
    for count, list_name, mask_mod in ((counts[0], "FULL_KV_INDICES", False), (counts[1], "KV_INDICES", True)):

        def listed_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...],
                        list_name: str = list_name, mask_mod: bool = mask_mod) -> list[SSAValue]:
            block = b.emit(tile.LoadIndexOp(blk.args[list_name], [*coords, j]), "kv_block")
            return key_step(b, b.muli(block, b.const(c.block_n), "k0"), carried, mask_mod)

        carried = b.for_loop(count, list(carried), ["m", "l", "acc"], listed_step)
        if mask_mod and not PARTIAL_LOOP_OVERLAP:
            carried[0].owner.attributes[NO_OVERLAP_ATTR] = UnitAttr()
    return carried
