"""The attention backward as FlashAttention-3 structures it: three Tile IR kernels.

With S = scale Q K^T (masked as the forward masks it), P = softmax(S) = exp(S - LSE) and O = P V, the
gradients of a loss with respect to O (dO) give

    dV = P^T dO        dP = dO V^T        dS = P * (dP - dPsum),  dPsum = rowsum(dO * O) = rowsum(P * dP)
    dQ = scale dS K    dK = scale dS^T Q

1. `preprocess` (grid (ceildiv(seq_q, BM), heads, batch)): dPsum = rowsum(dO * O) in f32 from the rounded
   O and dO; LSE2 = LSE * log2 e (natural log to base 2, so the main kernel recomputes P with one exp2);
   dq_accum = 0 (f32).
2. `main` (grid (ceildiv(seq_k, BN), heads_k, batch)): one thread block per key block of one K/V head. K and
   V stay in shared memory and dK, dV accumulate in f32 registers while the block loops over the query heads
   of its group (GQA) and, for each, over the query blocks that see its keys. Per query block: copy Q and dO
   into shared memory; S = Q K^T (K transposed: `transpose_b`, a K-major B operand as in the forward);
   P = exp2(S * scale log2 e - LSE2) masked like the forward (bounds, bottom-right causal); P rounded to the
   element type and stored to shared memory; dV += P^T dO; dP = dO V^T; dS = P * (dP - dPsum) in f32,
   rounded and stored to shared memory; dK += dS^T Q; dQ partial = dS K, added into dq_accum with
   `tile.atomic_add`. After the loops dK is scaled by `scale`; dK and dV are rounded and stored.
3. `postprocess` (grid (ceildiv(seq_q, BM), heads, batch)): dQ = dq_accum * scale, rounded.

Transposed operands. The tensor core computes A x B with A [M, K] and B [K, N]; the products with P and dS
on the left are transposed (P^T dO and dS^T Q contract over the query rows), so their A operand is P or dS
read transposed, `tile.mma ... transpose_a`: an M-major A, which wgmma takes from shared memory only (a
register A fragment is always K-major). That is why P and dS go through `tile.store_shared`. dP = dO V^T
and S = Q K^T read V and K as K-major B operands (`transpose_b`, as the forward's S does); dS K reads dS
from the shared tile stored for dS^T Q (a K-major A, FlashAttention-3's choice: a register A would keep dS's
packed fragments live beside the dK, dV and dQ accumulators, 24 registers more per thread at head_dim 128, which
leave the warp-specialized kernel with dQ by bulk reduction 2 over the 255 a thread has) and K as an N-major B
([BN, D] = [K, N], the forward's P V layout).

Masks and edges. Keys past seq_k are masked (-inf, so P = 0 and dS = 0 there; K and V read as zero).
LSE2, dPsum and dq_accum have `padded_rows` rows (seq_q rounded up to whole query blocks, FlashAttention-3's
seqlen_q_rounded), which the preprocess fills (0 past seq_q) and the main kernel reads and adds through
`in_bounds` views, with no mask per element. Query rows past seq_q read Q = dO = 0 and LSE2 = dPsum = 0, so
their P is finite and their dP, dS and contributions to dV, dK are exactly 0; their dq_accum rows are padding,
which the postprocess (seq_q a launch size) does not read. A query row that sees no key has LSE = -inf: `tile.exp2_subtract` treats the
-inf row as 0 and every score is -inf, so P = dS = 0 and its dQ is 0, never NaN. With `causal`, key block n
visits query blocks m >= max(0, n BN + seq_q - seq_k) // BM only: exactly the (m, n) pairs the forward
visits (the forward's query block m visits key blocks n with n BN < (m + 1) BM + seq_k - seq_q).

GQA (heads_k dividing heads). dK and dV of a K/V head sum over the heads/heads_k query heads of its group.
The main kernel's thread block loops over the group inside (a per-group pass), so dK and dV stay in
registers and are written once, in the element type: no f32 dK/dV buffers, no atomics on them, no extra
postprocess, and they are bitwise deterministic in every mode. The cost is parallelism: the grid has
heads_k instead of heads blocks per key block (FlashAttention-3 instead adds into f32 dk/dv accumulators
with atomics), which matters only when batch * heads_k * ceildiv(seq_k, BN) is below the SM count.

Deterministic mode (`deterministic=True`). The dQ partials of the key blocks of one query block are added in
key-block order: before its `tile.atomic_add` into query block m of head h, key block n waits until the
semaphore dq_semaphore[b, h, m] (i32, zeroed by the launcher) equals n, and signals (adds 1) after. The key
blocks visiting a query block are always 0 .. N (causal or not), so the count reaches n exactly when the
blocks before n have added; dQ is then bitwise the same whatever order the blocks run in (FlashAttention-3's
scheme). Without it the additions land in any order and dQ may differ between runs in the last bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, ModuleOp, StringAttr
from xdsl.ir import Attribute, SSAValue

from tessera.variants.block_mask import VISIT_HEAD
from tessera.variants.derivative import may_be_unbounded, score_derivative
from tessera.variants.index_ranges import check_at_launch
from tessera.variants.trace import trace_mod
from tessera.dialects import tile
from tessera.kernels.attention_config import AttentionConfig
from tessera.kernels.attention_mods import AttentionMods, ScoreContext, apply_mask_mod, apply_score_mod
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    ceildiv_dim,
    check_choice,
    check_flag,
    f32,
    finish_kernel,
    global_tensor,
    kernel_function,
    register_tile,
    shared_tile,
)

HEAD_DIMS = (64, 128)
"""Head dimensions the backward supports. 256 is refused: the main kernel's dK and dV accumulators alone,
2 x [BN, 256] f32, take 256 registers per thread of two consumer warpgroups at BN = 64 (Hopper gives a
thread at most 255), before S, dP and their fragments."""

DEFAULT_BLOCKS = {64: (128, 128), 128: (64, 128)}
"""(BM, BN) by head_dim: FlashAttention-3's Hopper backward tiles. The dK and dV accumulators [BN, D] f32 stay
live through the whole kernel. At head_dim 64 every register tile has 128 rows (S, dP: BM; dK, dV: BN), two
consumer warpgroups of 64 rows each. At head_dim 128 the main kernel puts keys on the rows
(`_build_main_key_rows`): S^T, dP^T [BN, BM], dK, dV [BN, D] and dQ^T [D, BM] all have BN = D = 128 rows, so the
two consumer warpgroups each own 64 keys of the block with 64 queries (convert-tile-to-sm90 gives every register
tile of a kernel one row count). 64 x 64 (`block_m=64, block_n=64`) is the single-warpgroup kernel."""

MODS_BLOCKS = {64: (64, 64), 128: (64, 64)}
"""(BM, BN) by head_dim with a score_mod or mask_mod: the builder's default, the smallest blocks the lowering
takes (one consumer warpgroup: 256 registers warp-specialized), where soft-cap + ALiBi + a window fits the
default pipeline's first rung at head_dim 64. `tessera.attention_backward` takes the dense kernel's blocks first
where the main kernel lowers warp-specialized with them (`runtime.flex.WARP_SPECIALIZED_FIRST`, which says which
modifiers fit them): at head_dim 64 128 x 128, at head_dim 128 the keys-on-rows 64 x 128, then 64 x 64 with one
thread block per key block, then `MODS_HEAD_SPLIT`."""

MODS_HEAD_SPLIT = {128: 2}
"""Main-kernel thread blocks per key block by head_dim with a score_mod or mask_mod (`attention_backward`'s
`head_split`). At head_dim 128, dK and dV ([64, 128] f32 each: 128 registers a thread) leave no room for a
modifier's tiles beside S and dP (soft-cap + ALiBi + a window with the block lists: 277 registers
warp-specialized, where one consumer warpgroup has 256); each of two thread blocks accumulating 64 of the 128
columns holds 64. The price: both compute S = Q K^T and dP = dO V^T over all 128 columns, 7 units of wgmma
work where one thread block does 5 (1.4x), and copy Q, dO and K slices beside the whole tiles. The builder's
default with 64 x 64 blocks; `tessera.attention_backward` builds the keys-on-rows 64 x 128 kernel, then head_split=1,
first and keeps the first that lowers warp-specialized (`runtime.flex.warp_specialized_refusal`). The
keys-on-rows kernel (`block_m=64, block_n=128`) never splits."""

LOG2E = math.log2(math.e)
"""log2(e): LSE2 = LSE * log2 e, and the main kernel's score scale is scale * log2 e."""


@dataclass(frozen=True)
class BackwardConfig:
    """The checked parameters of the backward kernels: the forward's (`AttentionConfig`) and `deterministic`."""

    attention: AttentionConfig
    deterministic: bool

    @classmethod
    def checked(cls, head_dim: object = 128, causal: object = False, dtype: object = "bf16", scale: object = None,
                block_m: object = None, block_n: object = None, deterministic: object = False) -> BackwardConfig:
        """Validate builder arguments; ValueError naming the argument, the value and what is allowed."""
        if head_dim == 256 and not isinstance(head_dim, bool):
            raise ValueError("head_dim 256 is not supported by the attention backward: its dK and dV accumulators "
                             "(2 x [BN, 256] f32) need more registers than a thread has; head_dim must be 64 or 128")
        check_choice("head_dim", head_dim, HEAD_DIMS)
        bm, bn = DEFAULT_BLOCKS[head_dim]  # type: ignore[index]
        config = AttentionConfig.checked(head_dim, causal, dtype, scale,
                                         bm if block_m is None else block_m, bn if block_n is None else block_n)
        return cls(config, check_flag("deterministic", deterministic))

    @property
    def key_rows(self) -> bool:
        """Whether the main kernel puts keys on the rows of its register tiles (`_build_main_key_rows`): when the
        key block is the larger (FlashAttention-3's 64 x 128 at head_dim 128)."""
        return self.attention.block_n > self.attention.block_m

    def kernel_name(self, part: str) -> str:
        """`attention_backward_preprocess_d128_bf16_causal` and the like (main: `attention_backward_d128_...`,
        with `_deterministic` when it orders its dQ additions)."""
        base = self.attention.kernel_name("attention_backward" + (f"_{part}" if part != "main" else ""))
        return base + ("_deterministic" if part == "main" and self.deterministic else "")

    def kernel_info(self) -> dict[str, Attribute]:
        """The forward's `tile.kernel` entries (causal, scale) with kind "attention_backward"."""
        return {**self.attention.kernel_info(), "kind": StringAttr("attention_backward")}


@dataclass(frozen=True)
class AttentionBackward:
    """The three kernels of the backward, each a verified one-kernel module, run in this order:
    `preprocess`, `main`, `postprocess` (see the module docstring for what each computes)."""

    config: BackwardConfig
    preprocess: ModuleOp
    main: ModuleOp
    postprocess: ModuleOp
    head_split: int = 1
    """The main kernel's thread blocks per key block (`attention_backward`'s `head_split`)."""

    @property
    def modules(self) -> tuple[ModuleOp, ModuleOp, ModuleOp]:
        return (self.preprocess, self.main, self.postprocess)


def _tensor(c: AttentionConfig, heads: str, seq, element=None) -> tuple[object, list]:
    d = c.head_dim
    return global_tensor([None, None, None, d], element or c.element_type), ["batch", heads, seq, d]


def _rows_tensor(seq="seq_q") -> tuple[object, list]:
    return global_tensor([None, None, None], f32), ["batch", "heads", seq]


def padded_rows(c: AttentionConfig) -> tile.DimExprAttr:
    """The rows of the intermediates LSE2, dPsum and dq_accum: seq_q rounded up to whole query blocks,
    BM ceildiv(seq_q, BM) (FlashAttention-3's seqlen_q_rounded). Every query block's window of them lies
    inside, so the main kernel reads and adds them through `tile.view ... in_bounds` views, without a bounds
    mask per element (a predicated `red` costs a branch around it in the SASS); the preprocess writes the
    padding rows (LSE2 = dPsum = dq_accum = 0 there: O, dO and LSE read as 0 past seq_q)."""
    return tile.DimExprAttr("seq_q", c.block_m, c.block_m)


def _build_preprocess(cfg: BackwardConfig) -> ModuleOp:
    """dPsum = rowsum(dO * O) (f32), LSE2 = LSE * log2 e (+inf where LSE = -inf), dq_accum = 0, one [BM] query
    block per thread block."""
    c = cfg.attention
    half, half_dims = _tensor(c, "heads", "seq_q")
    acc, acc_dims = _tensor(c, "heads", padded_rows(c), f32)
    rows, rows_dims = _rows_tensor()
    padded, padded_dims = _rows_tensor(padded_rows(c))
    args = [
        ArgSpec("O", half, half_dims),
        ArgSpec("dO", half, half_dims),
        ArgSpec("LSE", rows, rows_dims),
        ArgSpec("dPsum", padded, padded_dims, role="out"),
        ArgSpec("LSE2", padded, padded_dims, role="out"),
        ArgSpec("dQaccum", acc, acc_dims, role="out"),
    ]
    grid = [ceildiv_dim("seq_q", c.block_m), "heads", "batch"]
    fn, b = kernel_function(cfg.kernel_name("preprocess"), args, cfg.kernel_info(), grid)
    v = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    q0 = b.muli(b.program_id("x", "q_block"), b.const(c.block_m), "q0")
    head, batch = b.program_id("y", "head"), b.program_id("z", "batch")
    zero = b.const(0)

    def window(name: str, shape) -> SSAValue:
        indices = [batch, head, q0] + ([zero] if len(shape) == 2 else [])
        # the outputs' rows are padded to whole query blocks: every window lies inside
        return b.view(v[name], indices, shape, f"{name.lower()}_window", in_bounds=name in ("dPsum", "LSE2", "dQaccum"))

    bm, d = c.block_m, c.head_dim
    o = b.cast(b.load(window("O", [bm, d]), "o"), f32, "o_f32")
    do = b.cast(b.load(window("dO", [bm, d]), "do"), f32, "do_f32")
    b.store_global(b.unary(tile.RowSumOp, b.binary(tile.MulOp, do, o, "do_o"), "dpsum"), window("dPsum", [bm]))
    lse = b.load(window("LSE", [bm]), "lse")
    # a row that sees no key (LSE = -inf) gets LSE2 = +inf: exp2(s - LSE2) = 0 for every score s, -inf included
    # (exp2(-inf - -inf) would be NaN), whichever way the main kernel subtracts it
    sees_none = b.emit(tile.CmpOp("eq", lse, b.fill(float("-inf"), register_tile([bm]), "minus_inf")), "sees_none")
    lse2 = b.emit(tile.SelectOp(sees_none, b.fill(float("inf"), register_tile([bm]), "plus_inf"),
                                b.scale(lse, LOG2E, "lse_log2")), "lse2")
    b.store_global(lse2, window("LSE2", [bm]))
    b.store_global(b.fill(0.0, register_tile([bm, d]), "dq_zero"), window("dQaccum", [bm, d]))
    return finish_kernel(fn, b)


def _build_postprocess(cfg: BackwardConfig) -> ModuleOp:
    """dQ = dq_accum * scale, rounded to the element type. seq_q is a launch size (`tessera.kernel_abi`):
    dq_accum's padded rows (`padded_rows`) do not give it."""
    c = cfg.attention
    acc, acc_dims = _tensor(c, "heads", padded_rows(c), f32)
    half, half_dims = _tensor(c, "heads", "seq_q")
    args = [ArgSpec("dQaccum", acc, acc_dims), ArgSpec("dQ", half, half_dims, role="out")]
    grid = [ceildiv_dim("seq_q", c.block_m), "heads", "batch"]
    fn, b = kernel_function(cfg.kernel_name("postprocess"), args, cfg.kernel_info(), grid, launch_sizes=["seq_q"])
    v = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    q0 = b.muli(b.program_id("x", "q_block"), b.const(c.block_m), "q0")
    head, batch = b.program_id("y", "head"), b.program_id("z", "batch")
    shape = [c.block_m, c.head_dim]
    indices = [batch, head, q0, b.const(0)]
    dq = b.scale(b.load(b.view(v["dQaccum"], indices, shape, "dqaccum_window", in_bounds=True), "dq_accum"), c.scale,
                 "dq_scaled")
    b.store_global(b.cast(dq, c.element_type, "dq"), b.view(v["dQ"], indices, shape, "dq_window"))
    return finish_kernel(fn, b)


@dataclass
class _MainFrame:
    """What both main-kernel builders share: the kernel, its builder and arguments, the block's coordinates, its
    shared tiles (K and V copied in, one commit group), and the query blocks it visits (`trips` from `m_start`)."""

    fn: object
    b: TileBuilder
    v: dict
    n_block: SSAValue
    head_k: SSAValue
    batch: SSAValue
    zero: SSAValue
    seq_q: SSAValue
    seq_k: SSAValue
    group: SSAValue
    k0: SSAValue
    smem: dict
    m_start: SSAValue
    trips: SSAValue
    d0: SSAValue
    """The first head_dim column this thread block accumulates (0 unless the kernel splits head_dim)."""
    dh: int
    """The head_dim columns it accumulates (head_dim / head_split)."""


def _main_frame(cfg: BackwardConfig, mods: AttentionMods | None, shared: dict, head_split: int = 1) -> _MainFrame:
    """The main kernel's arguments (with `mods`' captured arrays after dPsum), grid, coordinates, the shared tiles
    `shared` (name -> shape; K and V copied in, and with `head_split` > 1 this block's slice of K, "Kh") and its
    query-block range. `head_split` > 1: that many thread blocks per key block (program id x = key block *
    head_split + the slice of head_dim)."""
    c = cfg.attention
    elt, d, bm, bn = c.element_type, c.head_dim, c.block_m, c.block_n
    q_t, q_dims = _tensor(c, "heads", "seq_q")
    k_t, k_dims = _tensor(c, "heads_k", "seq_k")
    acc, acc_dims = _tensor(c, "heads", padded_rows(c), f32)
    rows, rows_dims = _rows_tensor(padded_rows(c))
    args = [
        ArgSpec("Q", q_t, q_dims),
        ArgSpec("K", k_t, k_dims),
        ArgSpec("V", k_t, k_dims),
        ArgSpec("dO", q_t, q_dims),
        ArgSpec("LSE2", rows, rows_dims),
        ArgSpec("dPsum", rows, rows_dims),
        *(mods.inputs(c, backward=True, ranks=cfg.deterministic) if mods is not None else []),
        ArgSpec("dQaccum", acc, acc_dims, role="out"),
        ArgSpec("dK", k_t, k_dims, role="out"),
        ArgSpec("dV", k_t, k_dims, role="out"),
    ]
    if cfg.deterministic:
        sem = global_tensor([None, None, None], IntegerType(32))
        args.append(ArgSpec("dQsemaphore", sem, ["batch", "heads", ceildiv_dim("seq_q", bm)], role="scratch"))
    grid = [tile.DimExprAttr("seq_k", bn, head_split), "heads_k", "batch"]
    info = cfg.kernel_info() if mods is None else {"kind": StringAttr("custom")}
    name = cfg.kernel_name("main") + (f"_head_split{head_split}" if head_split > 1 else "")
    fn, b = kernel_function(name, args, info, grid)
    v = dict(zip((a.name for a in args), fn.body.blocks.first.args))

    head_k = b.program_id("y", "head_k")
    batch = b.program_id("z", "batch")
    zero = b.const(0)
    dh = d // head_split
    if head_split == 1:
        n_block, d0 = b.program_id("x", "k_block"), zero
    else:  # program id x = key block * head_split + the slice of head_dim
        part = b.program_id("x", "k_block_part")
        n_block = b.emit(arith.DivUIOp(part, b.const(head_split)), "k_block")
        d0 = b.muli(b.emit(arith.RemUIOp(part, b.const(head_split)), "d_slice"), b.const(dh), "d0")
    seq_q, seq_k = b.dim(v["Q"], 2, "seq_q"), b.dim(v["K"], 2, "seq_k")
    group = b.emit(arith.DivUIOp(b.dim(v["Q"], 1, "heads"), b.dim(v["K"], 1, "heads_k")), "group")
    k0 = b.muli(n_block, b.const(bn), "k0")

    smem = {name: b.alloc_shared(shared_tile(shape, elt), f"{name.lower()}_smem") for name, shape in shared.items()}
    for name in ("K", "V"):
        b.cp_async(b.view(v[name], [batch, head_k, k0, zero], [bn, d], f"{name.lower()}_window"), smem[name])
    if head_split > 1:
        b.cp_async(b.view(v["K"], [batch, head_k, k0, d0], [bn, dh], "kh_window"), smem["Kh"])
    b.cp_commit_group()

    # The query blocks that see this key block: from m_start (causal: the first block with a row that sees
    # key k0) to the last; none when m_start is past the end.
    n_q = b.ceildivui(seq_q, b.const(bm), "n_q")
    m_start = zero
    if c.causal:
        first_row = b.maxsi(b.subi(b.addi(k0, seq_q, "k0_plus_seq_q"), seq_k, "first_row_signed"), zero, "first_row")
        m_start = b.emit(arith.DivUIOp(first_row, b.const(bm)), "m_start")
    trips = b.maxsi(b.subi(n_q, m_start, "q_blocks_signed"), zero, "q_blocks")
    return _MainFrame(fn, b, v, n_block, head_k, batch, zero, seq_q, seq_k, group, k0, smem, m_start, trips, d0, dh)


def _finish_main(cfg: BackwardConfig, f: _MainFrame, dk: SSAValue, dv: SSAValue) -> ModuleOp:
    """After the loops: dK scaled, dK and dV rounded and stored."""
    c, b = cfg.attention, f.b
    b.cp_wait_group(0)  # the K and V copy, had no query block seen this key block
    dk = b.scale(dk, c.scale, "dk_scaled")
    for name, value in (("dK", dk), ("dV", dv)):
        window = b.view(f.v[name], [f.batch, f.head_k, f.k0, f.d0], [c.block_n, f.dh], f"{name.lower()}_window")
        b.store_global(b.cast(value, c.element_type, f"{name.lower()}_half"), window)
    return finish_kernel(f.fn, b)


def _finite_or_zero(b, scored: SSAValue) -> SSAValue:
    """P d score_mod / d score where it is finite, else 0 (`derivative.may_be_unbounded`): the derivative of a
    padded or hidden score, where P is 0 (or a padded query row's P, whose dO and Q are 0), may be infinite,
    and 0 * inf would be NaN in dK and dQ. (At a finite score whose derivative is infinite, |x| ** 0.5 at 0,
    the gradient is then 0 there.)"""
    rows = scored.type.get_shape()[0]
    magnitude = b.emit(tile.AbsOp(scored), "p_dscore_abs")
    finite = b.emit(tile.CmpOp("lt", magnitude, b.fill(float("inf"), register_tile([rows]), "inf")), "p_dscore_finite")
    return b.emit(tile.SelectOp(finite, scored, b.fill(0.0, register_tile([rows]), "dscore_zero")), "p_dscore_seen")


def _build_main(cfg: BackwardConfig, mods: AttentionMods | None = None, head_split: int = 1) -> ModuleOp:
    """One thread block per key block of one K/V head: dK, dV in registers, dQ partials into dq_accum. With
    `mods` (score_mod / mask_mod, `attention_backward`), their captured arrays are inputs after dPsum.
    `head_split` > 1: that many thread blocks per key block, each accumulating dK, dV and dQ for its slice of
    head_dim / head_split columns (from Q, dO and K slices copied beside the whole tiles, which S and dP need)."""
    c = cfg.attention
    elt, d, bm, bn = c.element_type, c.head_dim, c.block_m, c.block_n
    dh = d // head_split
    slices = {"Kh": [bn, dh], "Qh": [bm, dh], "dOh": [bm, dh]} if head_split > 1 else {}
    f = _main_frame(cfg, mods, {"K": [bn, d], "V": [bn, d], "Q": [bm, d], "dO": [bm, d], "P": [bm, bn], "dS": [bm, bn],
                                **slices}, head_split)
    b, v, smem, d0 = f.b, f.v, f.smem, f.d0
    sliced = {name: smem[name + "h" if head_split > 1 else name] for name in ("K", "Q", "dO")}
    """The operands of the dV, dK and dQ products: the whole tiles, or this block's slices of head_dim."""
    n_block, batch, zero, seq_q, seq_k, k0 = f.n_block, f.batch, f.zero, f.seq_q, f.seq_k, f.k0

    def query_block(b: TileBuilder, m: SSAValue, carried, head: SSAValue, masked: bool = True,
                    rank: SSAValue | None = None) -> list[SSAValue]:
        """The work of query block m; not `masked`: a full block of the block lists (no mask_mod, no bounds).
        `rank`: the dQ semaphore count to wait for (default: this key block's index, every key block visits)."""
        dk, dv = carried
        q0 = b.muli(m, b.const(bm), "q0")
        for name in ("Q", "dO"):
            b.cp_async(b.view(v[name], [batch, head, q0, zero], [bm, d], f"{name.lower()}_window"), smem[name])
            if head_split > 1:
                b.cp_async(b.view(v[name], [batch, head, q0, d0], [bm, dh], f"{name.lower()}h_window"),
                           smem[name + "h"])
        b.cp_commit_group()
        b.cp_wait_group(0)  # the first trip's wait also covers K and V
        b.barrier()
        lse2 = b.load(b.view(v["LSE2"], [batch, head, q0], [bm], "lse2_window", in_bounds=True), "lse2")
        def dpsum_rows() -> SSAValue:
            return b.load(b.view(v["dPsum"], [batch, head, q0], [bm], "dpsum_window", in_bounds=True), "dpsum")
        # with a modifier, loaded where it is subtracted: not held beside P and the dP accumulator
        dpsum = dpsum_rows() if mods is None else None

        s = b.mma(smem["Q"], smem["K"], b.fill(0.0, register_tile([bm, bn]), "s_zero"), "s", transpose_b=True)
        dscore = None
        if mods is None:
            s = b.scale(s, c.scale * LOG2E, "s_log2")  # scale and log2 e folded into one f32 factor
        else:  # P from the modified scores, as the forward computed them; then to base 2
            s_raw = b.scale(s, c.scale, "s_scaled")
            ctx = ScoreContext(b, bm, bn, q0, k0, batch, head, {a.name: v[a.name] for a in mods.arrays})
            if mods.score_mod is not None:
                # d score_mod / d score, evaluated beside score_mod (they share nodes such as a soft-cap's tanh)
                # so that the raw score and those nodes die here; it multiplies P before the dP mma.
                s = apply_score_mod(ctx, mods.score_mod, s_raw)
                derivative = score_derivative(mods.score_mod)
                dscore, unbounded = ctx.emit(derivative.result), may_be_unbounded(derivative)
            else:
                s = s_raw
            s = s if mods.mask_mod is None or not masked else apply_mask_mod(ctx, mods.mask_mod, s)
            s = b.scale(s, LOG2E, "s_log2")
        if masked:
            s = b.mask_bounds(s, k0, seq_k, "s_in_bounds" if c.causal else "s_masked")
        if c.causal:
            s = b.mask_causal(s, q0, k0, seq_q, seq_k, "s_masked")
        p = b.binary(tile.Exp2SubtractOp, s, lse2, "p")
        p_scored = p
        if dscore is not None:
            # dS with respect to the raw score is P (dP - dPsum) d score_mod / d score: folded into P before
            # the dP mma, so that one tile, P d score_mod / d score, lives across it; before P's store, so that
            # the store's address arithmetic never runs beside both P and the derivative.
            p_scored = b.binary(tile.MulOp, p, dscore, "p_dscore")
            if unbounded:  # a padded or hidden score's derivative may be inf: 0 there, as the reference
                p_scored = _finite_or_zero(b, p_scored)
        p_half = b.cast(p, elt, "p_half")
        p = p_scored
        b.emit(tile.StoreSharedOp(p_half, smem["P"]))
        dp_zero = b.fill(0.0, register_tile([bm, bn]), "dp_zero")
        if dpsum is not None:
            # dP - dPsum in one product: the accumulator starts at -dPsum (along each row), so that dPsum is not
            # held beside P and the dP accumulator (2 registers a thread, which the deterministic causal kernel
            # at head_dim 64 lacks warp-specialized), as the keys-on-rows kernel does down its columns
            dp = b.mma(smem["dO"], smem["V"], b.binary(tile.SubRowsOp, dp_zero, dpsum, "neg_dpsum"),
                       "dp_minus_dpsum", transpose_b=True)
        else:
            dp = b.binary(tile.SubRowsOp, b.mma(smem["dO"], smem["V"], dp_zero, "dp", transpose_b=True),
                          dpsum_rows(), "dp_minus_dpsum")
        ds = b.binary(tile.MulOp, p, dp, "ds")
        ds_half = b.cast(ds, elt, "ds_half")
        b.emit(tile.StoreSharedOp(ds_half, smem["dS"]))
        b.barrier()  # P and dS published to every warp
        dv = b.mma(smem["P"], sliced["dO"], dv, "dv_next", transpose_a=True)    # P^T dO
        dk = b.mma(smem["dS"], sliced["Q"], dk, "dk_next", transpose_a=True)    # dS^T Q
        dq = b.mma(smem["dS"], sliced["K"], b.fill(0.0, register_tile([bm, dh]), "dq_zero"), "dq_part")  # dS K
        dq_window = b.view(v["dQaccum"], [batch, head, q0, d0], [bm, dh], "dqaccum_window", in_bounds=True)
        if cfg.deterministic:
            sem = b.view(v["dQsemaphore"], [batch, head, m], [1], "sem_window")
            b.emit(tile.SemWaitOp(sem, n_block if rank is None else rank))
            b.emit(tile.AtomicAddOp(dq, dq_window))
            b.emit(tile.SemSignalOp(sem))
        else:
            b.emit(tile.AtomicAddOp(dq, dq_window))
        b.barrier()  # every warp has read Q, dO, P and dS before the next trip overwrites them
        return [dk, dv]

    dk, dv = _visit_query_blocks(cfg, f, mods, b.fill(0.0, register_tile([bn, dh]), "acc_zero"), query_block)
    return _finish_main(cfg, f, dk, dv)


def _visit_query_blocks(cfg: BackwardConfig, f: _MainFrame, mods: AttentionMods | None, acc_zero: SSAValue,
                        query_block) -> tuple[SSAValue, SSAValue]:
    """(dK, dV) after `query_block(b, m, (dk, dv), head, masked=, rank=)` over the query blocks this key block
    visits, from `acc_zero`: with the block lists (`mods.block_sparse`), its full pairs (`masked=False`) then its
    partial ones; else, for each head of the GQA group, the query blocks from `m_start`."""
    b, v, c = f.b, f.v, cfg.attention
    if mods is not None and mods.block_sparse:
        # The work lists (`BlockMask.backward_inputs`): this thread block's full (head, query block) pairs, then
        # its partial ones, each one loop whose trip count is read from the lists (over the GQA group's heads
        # together): two loops refilling the same Q and dO tiles, which pipeline-loops gives one ring.
        coords = [f.batch, f.head_k, f.n_block]
        full = b.emit(tile.LoadIndexOp(v["Q_NUM_VISITS"], [*coords, f.zero]), "full_visits")
        partial = b.emit(tile.LoadIndexOp(v["Q_NUM_VISITS"], [*coords, b.const(1)]), "partial_visits")
        carried = [acc_zero, acc_zero]
        for count, first, masked in ((full, None, False), (partial, full, True)):
            def listed(b: TileBuilder, t: SSAValue, inner, first=first, masked=masked) -> list[SSAValue]:
                i = t if first is None else b.addi(first, t, "visit")
                visit = b.emit(tile.LoadIndexOp(v["Q_VISITS"], [*coords, i]), "packed_visit")
                head = b.emit(arith.DivUIOp(visit, b.const(VISIT_HEAD)), "head")
                m = b.emit(arith.RemUIOp(visit, b.const(VISIT_HEAD)), "m")
                rank = b.emit(tile.LoadIndexOp(v["Q_VISIT_RANKS"], [*coords, i]), "rank") if cfg.deterministic else None
                return query_block(b, m, inner, head, masked=masked, rank=rank)
            carried = list(b.for_loop(count, carried, ["dk", "dv"], listed, iv_name="t"))
        return carried[0], carried[1]

    def group_head(b: TileBuilder, g: SSAValue, carried) -> list[SSAValue]:
        head = b.addi(b.muli(f.head_k, f.group, "group_first_head"), g, "head")

        def step(b: TileBuilder, t: SSAValue, inner) -> list[SSAValue]:
            return query_block(b, b.addi(f.m_start, t, "m") if c.causal else t, inner, head)
        return list(b.for_loop(f.trips, list(carried), ["dk", "dv"], step, iv_name="t"))

    dk, dv = b.for_loop(f.group, [acc_zero, acc_zero], ["dk", "dv"], group_head, iv_name="g")
    return dk, dv


def _build_main_key_rows(cfg: BackwardConfig, mods: AttentionMods | None = None) -> ModuleOp:
    """The main kernel with keys on the rows of every register tile (FlashAttention-3's SdP_swapAB and
    dQ_swapAB at head_dim 128): S^T = K Q^T and dP^T = V dO^T are [BN, BM], dK and dV [BN, D], dQ^T = K^T dS^T
    [D, BM], so with BN = D every register tile has BN rows and two consumer warpgroups each own BN/2 keys of
    the block. P^T and dS^T are then already the A operands of dV += P^T dO and dK += dS^T Q, taken from
    registers (no shared round trip for P); dS^T goes to shared memory once, as the B operand of dQ^T, which is
    added into dq_accum transposed (`tile.atomic_add ... transpose`). LSE2 and dPsum are per query, i.e. per
    column: broadcast down the columns (`tile.load_broadcast`). The masks are written with coordinates
    (`tile.iota`/`tile.cmp`/`tile.select`): key rows past seq_k, and bottom-right causal. The arguments, grid,
    traversal (GQA group loop, causal first query block) and results are `_build_main`'s.

    With `mods` (score_mod / mask_mod, `attention_backward`), as `_build_main` applies them, on S^T
    (`ScoreContext.keys_on_rows`: kv_idx runs down the rows, q_idx along the columns), the block lists walked
    by `_visit_query_blocks` (full blocks with no mask_mod and no bounds), and d score_mod / d score folded into P^T
    before the dP^T mma, after P^T's store: P^T and dS^T reach the dV and dK products through shared memory."""
    c = cfg.attention
    elt, d, bm, bn = c.element_type, c.head_dim, c.block_m, c.block_n
    shared = {"K": [bn, d], "V": [bn, d], "Q": [bm, d], "dO": [bm, d], "dS": [bn, bm]}
    f = _main_frame(cfg, mods, shared if mods is None else {**shared, "P": [bn, bm]})
    b, v, smem = f.b, f.v, f.smem
    n_block, batch, zero, seq_q, seq_k, k0 = f.n_block, f.batch, f.zero, f.seq_q, f.seq_k, f.k0
    # LSE2 and dPsum come through shared memory with Q and dO (one-row tiles, FlashAttention-3's sLSE and
    # sdPsum): the copy's producer loads them, and each consumer thread reads its columns with ld.shared
    # instead of its own ld.global of each (48 LDG at 64 x 128, their addresses live beside the accumulators)
    for name in ("LSE2", "dPsum"):
        smem[name] = b.alloc_shared(shared_tile([1, bm], f32), f"{name.lower()}_smem")
    i32 = IntegerType(32)
    # key k of row r is k0 + r; a key past seq_k is masked. Causal (bottom-right): key k is hidden from
    # query q = q0 + c when k > q + seq_k - seq_q.
    if not c.causal:
        key_rows = b.emit(tile.IotaOp("rows", register_tile([bn], i32), k0), "key")
        seq_k_rows = b.emit(tile.SplatOp(seq_k, register_tile([bn], i32)), "seq_k_rows")
        keys_inside = b.emit(tile.CmpOp("lt", key_rows, seq_k_rows), "key_inside")
    minus_inf = b.fill(float("-inf"), register_tile([bn, bm]), "minus_inf")
    score_scale = b.fill(c.scale * LOG2E if mods is None else LOG2E, register_tile([bn, bm]), "score_scale")

    def query_block(b: TileBuilder, m: SSAValue, carried, head: SSAValue, masked: bool = True,
                    rank: SSAValue | None = None) -> list[SSAValue]:
        """The work of query block m; not `masked`: a full block of the block lists (no mask_mod, no bounds).
        `rank`: the dQ semaphore count to wait for (default: this key block's index, every key block visits)."""
        dk, dv = carried
        q0 = b.muli(m, b.const(bm), "q0")
        # LSE2 after Q and dPsum after dO: pipelined, each row rides on the barriers of the tile copied before it
        # (convert-tile-to-sm90's riding rings), read when that tile is (S^T's exponent, dP^T's initial value)
        for name, row in (("Q", "LSE2"), ("dO", "dPsum")):
            b.cp_async(b.view(v[name], [batch, head, q0, zero], [bm, d], f"{name.lower()}_window"), smem[name])
            # rows padded to whole query blocks: every window lies inside
            b.cp_async(b.view(v[row], [batch, head, q0], [1, bm], f"{row.lower()}_window", in_bounds=True), smem[row])
        b.cp_commit_group()
        b.cp_wait_group(0)  # the first trip's wait also covers K and V
        b.barrier()
        st = b.mma(smem["K"], smem["Q"], b.fill(0.0, register_tile([bn, bm]), "st_zero"), "st", transpose_b=True)
        dscore = None
        if mods is not None:  # S^T from the modified scores, as the forward computed them
            st = b.scale(st, c.scale, "st_scaled")
            ctx = ScoreContext(b, bn, bm, q0, k0, batch, head, {a.name: v[a.name] for a in mods.arrays},
                               keys_on_rows=True)
            if mods.score_mod is not None:
                st = apply_score_mod(ctx, mods.score_mod, st)
                derivative = score_derivative(mods.score_mod)
                dscore, unbounded = ctx.emit(derivative.result), may_be_unbounded(derivative)
            if mods.mask_mod is not None and masked:
                st = apply_mask_mod(ctx, mods.mask_mod, st)
        if masked or c.causal:  # (a full block of the lists is masked by the built-in causal mask all the same)
            if c.causal:  # a key past seq_k is past every query's diagonal too (q < seq_q): one mask does both
                # (the diagonal added on the query side, per trip, from q0: k0 - (seq_k - seq_q) or seq_k - seq_q
                # would hold a register across the loops)
                diagonal = b.subi(b.addi(q0, seq_k, "q0_plus_seq_k"), seq_q, "q0_diagonal")
                keys = b.emit(tile.IotaOp("rows", register_tile([bn], i32), k0), "key")
                queries = b.emit(tile.IotaOp("cols", register_tile([1, bm], i32), diagonal), "query_diagonal")
                visible = b.emit(tile.CmpOp("le", keys, queries), "visible")
            else:
                visible = keys_inside
            st = b.emit(tile.SelectOp(visible, st, minus_inf), "st_masked")
        lse2 = b.load_broadcast(smem["LSE2"], bn, "lse2")
        st_log2 = b.fma(st, score_scale, b.emit(tile.NegOp(lse2), "neg_lse2"), "st_log2")
        pt = b.emit(tile.Exp2Op(st_log2), "pt")
        # Where a modifier's tiles are computed (a score_mod, or a partial block's mask_mod), P^T and dS^T are the
        # A operands of dV += P^T dO and dK += dS^T Q from shared memory (K-major, as stored), not registers:
        # their rounded tiles are then never live in registers (each is rounded a slab at a time as it is
        # stored), which leaves room for the modifier's. A full block's trip is the dense kernel's.
        shared_p = mods is not None and (masked or dscore is not None)
        if shared_p:
            b.emit(tile.StoreSharedOp(b.cast(pt, elt, "pt_half"), smem["P"]))
            if dscore is not None:
                # dS^T = P^T (dP^T - dPsum) d score_mod / d score: the derivative folded into P^T before the dP^T
                # mma, so that one [BN, BM] tile lives across it
                scored = b.binary(tile.MulOp, pt, dscore, "pt_dscore")
                pt = _finite_or_zero(b, scored) if unbounded else scored
        # dP^T - dPsum in one product: the accumulator starts at -dPsum (down each column), so that dPsum is
        # never held beside P^T and dP^T (16 registers a thread, which the warp-specialized consumers lack)
        dpsum = b.load_broadcast(smem["dPsum"], bn, "dpsum")
        # (-1 x dPsum: one multiplication per accumulator register, which the accumulator's initial values cost anyway)
        neg_dpsum = b.scale(dpsum, -1.0, "neg_dpsum")
        dpt = b.mma(smem["V"], smem["dO"], neg_dpsum, "dpt_minus_dpsum", transpose_b=True)
        dst = b.binary(tile.MulOp, pt, dpt, "dst")
        if not shared_p:
            pt_half = b.cast(pt, elt, "pt_half")
            dst_half = b.cast(dst, elt, "dst_half")
            b.emit(tile.StoreSharedOp(dst_half, smem["dS"]))
            dv = b.mma(pt_half, smem["dO"], dv, "dv_next")                                # P^T dO
            dk = b.mma(dst_half, smem["Q"], dk, "dk_next")                                # dS^T Q
            b.barrier()  # dS^T published to every warp
        else:
            b.emit(tile.StoreSharedOp(b.cast(dst, elt, "dst_half"), smem["dS"]))
            b.barrier()  # P^T and dS^T published to every warp
            dv = b.mma(smem["P"], smem["dO"], dv, "dv_next")                              # P^T dO
            dk = b.mma(smem["dS"], smem["Q"], dk, "dk_next")                              # dS^T Q
        dqt = b.mma(smem["K"], smem["dS"], b.fill(0.0, register_tile([d, bm]), "dqt_zero"), "dqt_part",
                    transpose_a=True)                                                     # K^T dS^T
        dq_window = b.view(v["dQaccum"], [batch, head, q0, zero], [bm, d], "dqaccum_window", in_bounds=True)
        if cfg.deterministic:
            sem = b.view(v["dQsemaphore"], [batch, head, m], [1], "sem_window")
            b.emit(tile.SemWaitOp(sem, n_block if rank is None else rank))
            b.emit(tile.AtomicAddOp(dqt, dq_window, transpose=True))
            b.emit(tile.SemSignalOp(sem))
        else:
            b.emit(tile.AtomicAddOp(dqt, dq_window, transpose=True))
        b.barrier()  # every warp has read Q, dO and dS^T before the next trip overwrites them
        return [dk, dv]

    dk, dv = _visit_query_blocks(cfg, f, mods, b.fill(0.0, register_tile([bn, d]), "acc_zero"), query_block)
    return _finish_main(cfg, f, dk, dv)


def attention_backward(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    deterministic: bool = False,
    *,
    score_mod=None,
    mask_mod=None,
    block_sparse: bool = False,
    head_split: int | None = None,
) -> AttentionBackward:
    """The backward's three kernels (preprocess, main, postprocess; see the module docstring) for one
    configuration. head_dim 64 or 128 (256 refused by name), bf16 or f16, causal (bottom-right) or not;
    `block_m`/`block_n` default to `DEFAULT_BLOCKS` (`MODS_BLOCKS` with a modifier); `deterministic=True`
    orders the dQ additions with a semaphore per query block (an extra scratch argument of the main kernel;
    with `block_sparse`, the ranks `BACKWARD_RANKS` are inputs after the lists). GQA needs nothing here: K, V,
    dK and dV have `heads_k` heads, any divisor of `heads` (the launcher checks it). Kernel arguments, in
    order:

        preprocess:  O, dO [batch, heads, seq_q, D]; LSE [batch, heads, seq_q] f32 (natural log, -inf for a
                     row that sees no key) -> dPsum, LSE2 [batch, heads, R] f32, dQaccum [.., R, D] f32,
                     R = BM ceildiv(seq_q, BM) (`padded_rows`)
        main:        Q, K, V, dO, LSE2, dPsum -> dQaccum (added into), dK, dV [batch, heads_k, seq_k, D]
                     [, dQsemaphore [batch, heads, ceildiv(seq_q, BM)] i32 scratch, zeroed]
        postprocess: dQaccum, launch size seq_q -> dQ [batch, heads, seq_q, D]

    `score_mod` and `mask_mod` (those of `flash_attention`, whose O and LSE the backward takes) change only the
    main kernel: P is recomputed from mask_mod(score_mod(scale Q K^T)), and dS is multiplied by the traced
    derivative of score_mod with respect to the score (`tessera.variants.derivative.score_derivative`; the arrays it reads
    need no gradient) before dQ and dK. Their captured arrays are main-kernel inputs after dPsum. Every key
    block visits every query block (with `causal`, those the causal mask allows), or with `block_sparse=True`
    the pairs of its work lists (`BlockMask.backward_inputs(heads_k)`, main-kernel inputs after the arrays: per
    (batch, K/V head, key block) its full (head of the GQA group, query block) pairs, visited with no mask, then
    its partial ones, with mask_mod; empty ones never): one loop each, whose trip count is read from the lists,
    so that the default pipeline warp-specializes it (the producer walks the same lists).

    `head_split` (1 or 2; default `MODS_HEAD_SPLIT` with a modifier, else 1): the main kernel's thread blocks
    per key block, each accumulating dK, dV and dQ for head_dim / head_split columns (S and dP still take the
    whole head_dim), so that a modifier's tiles fit beside dK and dV; not with `deterministic` (refused by
    name). `tessera.attention_backward` takes head_split=2 at head_dim 64 too when a modifier's kernel does
    not fit without it (`tessera.runtime.flex`).
    """
    if (score_mod is not None or mask_mod is not None) and block_m is None and block_n is None \
            and head_dim in MODS_BLOCKS and not isinstance(head_dim, bool):
        block_m, block_n = MODS_BLOCKS[head_dim]
    cfg = BackwardConfig.checked(head_dim, causal, dtype, scale, block_m, block_n, deterministic)
    modified = score_mod is not None or mask_mod is not None
    if head_split is None:
        head_split = MODS_HEAD_SPLIT.get(cfg.attention.head_dim, 1) if modified and not deterministic \
            and not cfg.key_rows else 1
    check_choice("head_split", head_split, (1, 2))
    if head_split > 1 and deterministic:
        raise ValueError(f"head_split={head_split} is not supported with deterministic=True: the dQ semaphores "
                         "count one addition per key block, and each of its head_split thread blocks adds one")
    mods = None
    if score_mod is not None or mask_mod is not None:
        mods = AttentionMods(None if score_mod is None else trace_mod(score_mod, "score_mod"),
                             None if mask_mod is None else trace_mod(mask_mod, "mask_mod"))
        if mods.score_mod is not None:
            score_derivative(mods.score_mod)  # refuse an underivable score_mod now, by name
        if check_flag("block_sparse", block_sparse):
            if mask_mod is None:
                raise ValueError("block_sparse=True needs a mask_mod (the block lists are computed from it)")
            mods = AttentionMods(mods.score_mod, mods.mask_mod, block_sparse=True)
    elif block_sparse:
        raise ValueError("block_sparse=True needs a mask_mod (the block lists are computed from it)")
    if cfg.key_rows:
        if head_split > 1:
            raise ValueError(f"head_split={head_split} is not supported by the keys-on-rows main kernel "
                             f"({cfg.attention.block_m} x {cfg.attention.block_n} blocks at head_dim "
                             f"{cfg.attention.head_dim}); it splits head_dim only with block_m == block_n")
        main = _build_main_key_rows(cfg, mods)
    else:
        main = _build_main(cfg, mods, head_split)
    if mods is not None:  # a launch proves the modifiers' reads in bounds for its shapes
        check_at_launch(main, mods.traced())
    return AttentionBackward(cfg, _build_preprocess(cfg), main, _build_postprocess(cfg), head_split)


def attention_backward_preprocess(**options) -> ModuleOp:
    """The preprocess kernel alone, for `attention_backward(**options)` (the runtime compiles kernels one
    module at a time, by builder name)."""
    return _build_preprocess(BackwardConfig.checked(**options))


def attention_backward_main(**options) -> ModuleOp:
    """The main kernel alone, for `attention_backward(**options)`."""
    cfg = BackwardConfig.checked(**options)
    return _build_main_key_rows(cfg) if cfg.key_rows else _build_main(cfg)


def attention_backward_postprocess(**options) -> ModuleOp:
    """The postprocess kernel alone, for `attention_backward(**options)`."""
    return _build_postprocess(BackwardConfig.checked(**options))
