"""Host-side block masks for block-sparse attention (FlexAttention's `create_block_mask`).

`create_block_mask(mask_mod, batch, heads, seq_q, seq_k, block_m, block_n)` (also called as FlexAttention's,
`create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=..., BLOCK_SIZE=...)`) evaluates the mask_mod on the host
over every (query, key) position (on NumPy index grids, one query block at a time) and classifies each
(query block, key block) of each (batch, head):

- empty: no visible (query, key) pair among the positions inside [0, seq_q) x [0, seq_k): the kernel skips it
  (no copy, no mma);
- full: every such pair visible and the block's keys all before seq_k: the kernel visits it with no mask
  at all (neither mask_mod nor the bounds mask; its main-loop code is the dense kernel's);
- partial: the rest: the kernel visits it and evaluates mask_mod per element.

The lists are FlexAttention's: per (batch, head, query block) the count of full key blocks and their indices
(ascending, then padded with 0), and the same for partial blocks; a `flash_attention(block_sparse=True)`
kernel takes them, in `attention_mods.BLOCK_LISTS` order, as `BlockMask.inputs()`.
"""

from __future__ import annotations

from collections.abc import Callable
import hashlib
import weakref
from dataclasses import dataclass

import numpy as np

from tessera.variants.index_intervals import LaunchDims
from tessera.variants.index_ranges import check_trace
from tessera.variants.bounds_checks import bounds_checked
from tessera.variants.trace import trace_mod
from tessera.variants.tracing import ModTraceError

EMPTY, PARTIAL, FULL = 0, 1, 2

VISIT_HEAD = 1 << 16
"""A backward work-list entry is h * VISIT_HEAD + m (`BlockMask.backward_inputs`): the kernel unpacks it with a
shift and a mask."""


@dataclass(frozen=True, eq=False)
class BlockMask:
    """The classified blocks, `kinds` [batch, heads, ceildiv(seq_q, BM), ceildiv(seq_k, BN)] of EMPTY, PARTIAL,
    FULL, and the block sizes; from `create_block_mask` also the lengths and the mask_mod they were made for,
    which the lists `inputs()` and `backward_inputs()` give remember (`made_for`: a launch compares them with
    its own, `tessera.variants.launch_lists`)."""

    kinds: np.ndarray
    block_m: int
    block_n: int
    seq_q: int | None = None
    seq_k: int | None = None
    mask_mod: Callable | None = None

    def _lists(self, kind: int) -> tuple[np.ndarray, np.ndarray]:
        chosen = self.kinds == kind
        counts = chosen.sum(axis=-1).astype(np.int32)
        # Stable sort of "not chosen" puts the chosen block indices first, in ascending order.
        order = np.argsort(~chosen, axis=-1, kind="stable").astype(np.int32)
        indices = np.where(np.arange(chosen.shape[-1]) < counts[..., None], order, 0).astype(np.int32)
        return counts, indices

    def inputs(self) -> list[np.ndarray]:
        """FULL_KV_NUM_BLOCKS, FULL_KV_INDICES, KV_NUM_BLOCKS, KV_INDICES (int32), the kernel's block-list inputs
        (each remembered as made by this mask, `made_for`, where it knows its lengths)."""
        return self._made([*self._lists(FULL), *self._lists(PARTIAL)])

    def _made(self, lists: list[np.ndarray]) -> list[np.ndarray]:
        """`lists`, remembered as made by this mask (`made_for`) where it knows its lengths, with their contents'
        digest: a list changed in place is no longer what the mask made."""
        if self.mask_mod is not None:
            for array in lists:
                _MADE[id(array)] = (self, _digest(array))
                weakref.finalize(array, _MADE.pop, id(array), None)
        return lists

    def transposed_inputs(self) -> list[np.ndarray]:
        """The backward's lists (`attention_backward(block_sparse=True)`): per (batch, head, key block) the
        full query blocks and the partial ones, FULL_Q_NUM_BLOCKS, FULL_Q_INDICES, Q_NUM_BLOCKS, Q_INDICES."""
        flipped = BlockMask(np.swapaxes(self.kinds, -1, -2), self.block_n, self.block_m)
        return flipped.inputs()

    def transposed_ranks(self) -> list[np.ndarray]:
        """FULL_Q_RANKS, Q_RANKS (int32, shaped as FULL_Q_INDICES and Q_INDICES): for each query block m of
        key block n's lists, how many key blocks before n visit m (`attention_backward(deterministic=True,
        block_sparse=True)` waits until that many have added their dQ; 0 past a list's count)."""
        visits = self.kinds != EMPTY
        rank = np.swapaxes(np.cumsum(visits, axis=-1) - visits, -1, -2)  # [.., key block, query block]
        full_n, full_i, part_n, part_i = self.transposed_inputs()
        out = []
        for counts, indices in ((full_n, full_i), (part_n, part_i)):
            ranks = np.take_along_axis(rank, indices, axis=-1)
            out.append(np.where(np.arange(indices.shape[-1]) < counts[..., None], ranks, 0).astype(np.int32))
        return out

    def backward_inputs(self, heads_k: int, ranks: bool = False) -> list[np.ndarray]:
        """The backward's work lists (`attention_backward(block_sparse=True)`): per (batch, K/V head, key block),
        i.e. per main-kernel thread block, the (query head of the GQA group, query block) pairs it visits, so that
        its trip counts are numbers read from a list (the warp-specialized kernel's producer walks one loop over
        the full pairs and one over the partial ones, not a loop per head whose counts differ).

        Q_NUM_VISITS [batch, heads_k, kv_blocks, 2]: the full pairs' count, then the partial pairs'. Q_VISITS
        [batch, heads_k, kv_blocks, group * q_blocks]: the full pairs, then the partial ones, each packed as
        h * `VISIT_HEAD` + m (h the query head, one of the K/V head's group, m the query block; head-major, m
        ascending), padded with 0: the absolute head, so that the kernel adds nothing to it. One table, so that the consumers hold one pointer for both loops. With `ranks`, Q_VISIT_RANKS
        (shaped as Q_VISITS): each pair's `transposed_ranks`. `heads_k` must divide the mask's heads."""
        batch, heads, n_q, n_k = self.kinds.shape
        if isinstance(heads_k, bool) or not isinstance(heads_k, int) or heads_k < 1 or heads % heads_k:
            raise ValueError(f"BlockMask.backward_inputs: heads_k must divide the mask's {heads} heads; got {heads_k!r}")
        group = heads // heads_k
        if n_q > VISIT_HEAD or heads * VISIT_HEAD > np.iinfo(np.int32).max:
            raise ValueError(f"BlockMask.backward_inputs: {n_q} query blocks and {heads} heads do not "
                             f"pack into one i32 (at most {VISIT_HEAD} query blocks, "
                             f"{np.iinfo(np.int32).max // VISIT_HEAD} heads)")

        def per_cta(x: np.ndarray) -> np.ndarray:  # [b, heads, n_q, n_k] -> [b, heads_k, n_k, group * n_q]
            x = np.swapaxes(x, -1, -2).reshape(batch, heads_k, group, n_k, n_q)
            return np.moveaxis(x, 3, 2).reshape(batch, heads_k, n_k, group * n_q)

        visits = self.kinds != EMPTY
        rank = per_cta(np.cumsum(visits, axis=-1) - visits)  # key blocks before n that visit (m, head)
        kinds = per_cta(self.kinds)
        # full pairs first, then partial ones, then the empty ones; (g, m) order within each (a stable sort)
        order = np.argsort(np.choose(kinds, [2, 1, 0]), axis=-1, kind="stable")
        counts = np.stack([(kinds == FULL).sum(axis=-1), (kinds == PARTIAL).sum(axis=-1)], axis=-1).astype(np.int32)
        used = np.arange(kinds.shape[-1]) < counts.sum(axis=-1)[..., None]
        first_head = (np.arange(heads_k) * group).reshape(1, -1, 1, 1)  # the absolute head: no add in the kernel
        packed = np.where(used, (first_head + order // n_q) * VISIT_HEAD + order % n_q, 0).astype(np.int32)
        out = self._made([counts, packed])
        if ranks:
            out.append(np.where(used, np.take_along_axis(rank, order, axis=-1), 0).astype(np.int32))
        return out

    @property
    def skipped_fraction(self) -> float:
        """The fraction of (query block, key block) pairs that are empty."""
        return float((self.kinds == EMPTY).mean())

    def visited_fraction(self) -> float:
        """The fraction of pairs the kernel visits (partial or full)."""
        return 1.0 - self.skipped_fraction


_UNSET = object()
"""An argument not given (None is a batch or heads of 1)."""


def _one_of(ours: str, value: object, theirs: str, flex: object) -> object:
    """The argument given as `ours` (Tessera's name, or by position) or as `theirs` (FlexAttention's keyword)."""
    if value is not _UNSET and flex is not _UNSET:
        raise TypeError(f"create_block_mask: {ours} given twice (also as {theirs}=)")
    if value is _UNSET and flex is _UNSET:
        raise TypeError(f"create_block_mask: missing {ours} (FlexAttention's {theirs}=)")
    return flex if value is _UNSET else value


def create_block_mask(mask_mod: Callable, batch: int | None = _UNSET, heads: int | None = _UNSET,
                      seq_q: int = _UNSET, seq_k: int = _UNSET, block_m: int = 128, block_n: int = 128, *,
                      device: object = None, BLOCK_SIZE: int | tuple[int, int] | None = None,  # noqa: N803
                      B: int | None = _UNSET, H: int | None = _UNSET, Q_LEN: int = _UNSET,  # noqa: N803
                      KV_LEN: int = _UNSET, _compile: bool = False) -> BlockMask:  # noqa: N803
    """Classify the blocks of `mask_mod` (module docstring). Its reads of captured arrays are first proved in
    bounds for these dims (`tessera.variants.index_ranges`: IndexRangeError names the read, its line and the
    range it reaches); a mask_mod that cannot be traced runs through `trace.bounds_checked`, where an index
    outside a captured array raises ModTraceError naming it.

    FlexAttention's calls port unchanged: `create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu",
    BLOCK_SIZE=128)`, by position or with its keywords (`B=None, H=None, Q_LEN=..., KV_LEN=...`, `_compile=`,
    which changes nothing here), where a batch or heads of None is 1 (a mask for every batch entry or head,
    evaluated at b = 0 or h = 0, as FlexAttention's), `device` is accepted and unused (the mask is evaluated on
    the host) and `BLOCK_SIZE` (one size, or the (query, key) pair) replaces block_m and block_n."""
    batch, heads = _one_of("batch", batch, "B", B), _one_of("heads", heads, "H", H)
    seq_q, seq_k = _one_of("seq_q", seq_q, "Q_LEN", Q_LEN), _one_of("seq_k", seq_k, "KV_LEN", KV_LEN)
    batch, heads = (1 if batch is None else batch), (1 if heads is None else heads)
    if BLOCK_SIZE is not None:
        sizes = BLOCK_SIZE if isinstance(BLOCK_SIZE, tuple) and len(BLOCK_SIZE) == 2 else (BLOCK_SIZE, BLOCK_SIZE)
        block_m, block_n = sizes
    for name, value in (("batch", batch), ("heads", heads), ("seq_q", seq_q), ("seq_k", seq_k),
                        ("block_m", block_m), ("block_n", block_n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"create_block_mask: {name} must be a positive integer; got {value!r}")
    try:
        trace = trace_mod(mask_mod, "mask_mod")
    except ModTraceError:  # a mask only the host evaluates: bounds_checked names a read outside its array
        trace = None
    if trace is not None:
        check_trace(trace, "mask_mod", LaunchDims(batch, heads, seq_q, seq_k))
    fn = bounds_checked(mask_mod, "mask_mod")
    n_q, n_k = -(-seq_q // block_m), -(-seq_k // block_n)
    kinds = np.empty((batch, heads, n_q, n_k), np.int8)
    b = np.arange(batch).reshape(-1, 1, 1, 1)
    h = np.arange(heads).reshape(1, -1, 1, 1)
    kv = np.arange(seq_k).reshape(1, 1, 1, -1)
    pad = n_k * block_n - seq_k
    for i in range(n_q):
        rows = np.arange(i * block_m, min(seq_q, (i + 1) * block_m)).reshape(1, 1, -1, 1)
        raw = np.asarray(fn(b, h, rows, kv), bool)
        raw = raw.reshape((1,) * (4 - raw.ndim) + raw.shape)
        # A mask that reads neither b nor h (causal, windows, documents shared by the batch) is classified once
        # and broadcast: the (batch, heads) copies would cost batch x heads the work for the same classes.
        own_batch, own_heads = (batch if raw.shape[0] != 1 else 1), (heads if raw.shape[1] != 1 else 1)
        visible = np.broadcast_to(raw, (own_batch, own_heads, rows.size, seq_k))
        # Keys past seq_k are no one's: they neither make a block partial nor visible.
        seen = np.pad(visible, ((0, 0), (0, 0), (0, 0), (0, pad)), constant_values=False)
        inside = np.pad(np.ones(seq_k, bool), (0, pad), constant_values=False).reshape(n_k, block_n)
        per_block = seen.reshape(own_batch, own_heads, rows.size, n_k, block_n)
        any_visible = per_block.any(axis=(2, 4))
        # A block reaching past seq_k is at most partial: a full block is visited with no mask at all.
        all_visible = per_block.all(axis=(2, 4)) & inside.all(axis=1)
        kinds[:, :, i] = np.where(all_visible, FULL, np.where(any_visible, PARTIAL, EMPTY))
    return BlockMask(kinds, block_m, block_n, seq_q, seq_k, mask_mod)


_MADE: dict[int, tuple[BlockMask, bytes]] = {}
"""The mask each list array `BlockMask.inputs()` / `backward_inputs()` gave was made by, and the digest of its
contents then, by the array's id while it lives."""


def _digest(array: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(array).view(np.uint8), digest_size=16).digest()


def made_for(array: object) -> BlockMask | None:
    """The `BlockMask` (its lengths and mask_mod) that made `array`, one of its lists, where the array still
    holds what it made; None for any other array (changed in place, a copy, a list built by hand, a tensor made
    from one)."""
    made = _MADE.get(id(array))
    if made is None or not isinstance(array, np.ndarray) or _digest(array) != made[1]:
        return None
    return made[0]
