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

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp

from tessera.kernels.attention_backward_config import HEAD_SPLIT, MODS_BLOCKS, MODS_HEAD_SPLIT, BackwardConfig
from tessera.kernels.attention_backward_key_rows import build_main_key_rows
from tessera.kernels.attention_backward_pre_post import build_postprocess, build_preprocess
from tessera.kernels.attention_backward_query_rows import build_main_query_rows
from tessera.kernels.attention_mods import AttentionMods
from tessera.kernels.common import check_choice, check_flag
from tessera.variants.derivative import captured_derivatives, score_derivative
from tessera.variants.index_ranges import check_at_launch
from tessera.variants.launch_lists import lists_at_launch
from tessera.variants.trace import trace_mod


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
    captured_grads: tuple[str, ...] = (),
) -> AttentionBackward:
    """The backward's three kernels (preprocess, main, postprocess; see the module docstring) for one
    configuration. head_dim 64, 96, 128 or 192 (256 refused by name), bf16 or f16, causal (bottom-right) or not;
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

    `head_split` (1 or 2; default `MODS_HEAD_SPLIT` with a modifier, else `HEAD_SPLIT`): the main kernel's
    thread blocks per key block, each accumulating dK, dV and dQ for head_dim / head_split columns (S and dP still take the
    whole head_dim), so that a modifier's tiles fit beside dK and dV; not with `deterministic` (refused by
    name). `tessera.attention_backward` takes head_split=2 at head_dim 64 too when a modifier's kernel does
    not fit without it (`tessera.runtime.flex`).

    `captured_grads`: kernel input names (`CapturedArray.name`, e.g. "score_mod_rel") of float arrays the
    score_mod reads whose gradient the main kernel adds into outputs `d_<name>` after dV (f32, the array's
    shape), each score's dS_mod times d score_mod / d (the value read) scattered where it was read
    (`tile.scatter_add`, atomic: not with `deterministic`, refused by name; `tile.scatter_add` lowers to one
    red.global.add.f32 per register). With `head_split` > 1 every thread block of a key block computes the whole
    dS_mod, and only the first (head_dim columns from 0) adds it: the others' scatter indices lie outside the
    arrays (`attention_backward_frame.split_scatter_index`), so each score's gradient is added once. What gets
    no gradient is refused by name (`tessera.variants.derivative.captured_derivatives`).
    """
    if (score_mod is not None or mask_mod is not None) and block_m is None and block_n is None \
            and head_dim in MODS_BLOCKS and not isinstance(head_dim, bool):
        block_m, block_n = MODS_BLOCKS[head_dim]
    cfg = BackwardConfig.checked(head_dim, causal, dtype, scale, block_m, block_n, deterministic)
    modified = score_mod is not None or mask_mod is not None
    if head_split is None:
        splits = MODS_HEAD_SPLIT if modified else HEAD_SPLIT
        head_split = splits.get(cfg.attention.head_dim, 1) if not deterministic and not cfg.key_rows else 1
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
        if captured_grads:
            if mods.score_mod is None:
                raise ValueError("captured_grads needs a score_mod (the gradients are those of the arrays it reads)")
            if deterministic:
                raise ValueError("captured_grads is not supported with deterministic=True: the gradients of captured "
                                 "arrays are added with atomic scatter-adds (tile.scatter_add), in no fixed order")
            captured_derivatives(mods.score_mod, list(captured_grads), mods.mask_mod)  # refused now, by name
            mods = AttentionMods(mods.score_mod, mods.mask_mod, grads=tuple(captured_grads))
        if check_flag("block_sparse", block_sparse):
            if mask_mod is None:
                raise ValueError("block_sparse=True needs a mask_mod (the block lists are computed from it)")
            mods = AttentionMods(mods.score_mod, mods.mask_mod, block_sparse=True, grads=mods.grads)
    elif captured_grads:
        raise ValueError("captured_grads needs a score_mod (the gradients are those of the arrays it reads)")
    elif block_sparse:
        raise ValueError("block_sparse=True needs a mask_mod (the block lists are computed from it)")
    if cfg.key_rows:
        if head_split > 1:
            raise ValueError(f"head_split={head_split} is not supported by the keys-on-rows main kernel "
                             f"({cfg.attention.block_m} x {cfg.attention.block_n} blocks at head_dim "
                             f"{cfg.attention.head_dim}); it splits head_dim only with block_m == block_n")
        main = build_main_key_rows(cfg, mods)
    else:
        main = build_main_query_rows(cfg, mods, head_split)
    if mods is not None:  # a launch proves the modifiers' reads in bounds for its shapes
        check_at_launch(main, mods.traced())
    if mods is not None and mods.block_sparse:  # and its work lists made for its lengths
        lists_at_launch(main, mods.mask_mod.function, cfg.attention.block_m, cfg.attention.block_n, backward=True)
    return AttentionBackward(cfg, build_preprocess(cfg), main, build_postprocess(cfg), head_split)


def attention_backward_preprocess(**options) -> ModuleOp:
    """The preprocess kernel alone, for `attention_backward(**options)` (the runtime compiles kernels one
    module at a time, by builder name)."""
    return build_preprocess(BackwardConfig.checked(**options))


def attention_backward_main(**options) -> ModuleOp:
    """The main kernel alone, for `attention_backward(**options)`."""
    cfg = BackwardConfig.checked(**options)
    split = 1 if cfg.deterministic else HEAD_SPLIT.get(cfg.attention.head_dim, 1)
    return build_main_key_rows(cfg) if cfg.key_rows else build_main_query_rows(cfg, head_split=split)


def attention_backward_postprocess(**options) -> ModuleOp:
    """The postprocess kernel alone, for `attention_backward(**options)`."""
    return build_postprocess(BackwardConfig.checked(**options))
