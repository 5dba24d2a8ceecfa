"""Block lists proved right for a launch (`check_lists_at_launch`).

A block-sparse forward built from a mask_mod (`flash_attention(mask_mod=, block_sparse=True)`) reads each block's
class from the lists the caller passes (`BlockMask.inputs()`; the backward's main kernel its work lists,
`BlockMask.backward_inputs()`), and the lists say nothing of the lengths they
were made for. Lists made for other lengths with the same block counts (seq_k 128 and 100 at 64-key blocks: two
key blocks each) gave a silently wrong O: a key block listed full at 128 keys reaches past 100 and was visited
with no mask, its missing keys scoring 0 rather than -inf; a query block listed full for fewer queries is
visited unmasked by the others; a block listed empty is skipped though the new length makes it visible.

Such lists are refused by name before the kernel runs (`tessera.launch` and `tessera.interpret` of the module, at
every level). Lists that `create_block_mask` made for the launch's lengths, blocks and mask_mod (and not changed since)
pass at once
(`block_mask.made_for`); any others (made for other lengths, built or changed by hand, copied, converted to
tensors) are decoded into block classes and compared with the mask_mod's at the launch's sizes
(`create_block_mask`, kept by the mask's fingerprint and the sizes): a block listed full must be full, and a
block with a visible position must be listed. Lists more cautious than that (a full block listed partial, a
causal mask's lists, all partial, at another length) give the same O and are accepted. The builder registers
what the launch checks (`lists_at_launch`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from tessera.variants.block_mask import EMPTY, FULL, VISIT_HEAD, BlockMask, create_block_mask, made_for
from tessera.variants.fingerprint import fingerprint

FORWARD_LISTS = ("FULL_KV_NUM_BLOCKS", "FULL_KV_INDICES", "KV_NUM_BLOCKS", "KV_INDICES")
"""The forward's list inputs, in `BlockMask.inputs()` order (`tessera.kernels.attention_mods.BLOCK_LISTS`)."""
BACKWARD_LISTS = ("Q_NUM_VISITS", "Q_VISITS")
"""The backward main kernel's, `BlockMask.backward_inputs()` (`attention_mods.BACKWARD_BLOCK_LISTS`)."""


@dataclass(frozen=True)
class ListedBlocks:
    """What a block-sparse kernel's launch checks of its lists: the mask_mod and the kernel's blocks."""

    mask_mod: Callable
    block_m: int
    block_n: int
    backward: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return BACKWARD_LISTS if self.backward else FORWARD_LISTS


_AT_LAUNCH: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_KEPT: dict[Hashable, BlockMask] = {}
"""The block masks the checks evaluated, by (mask fingerprint, sizes): at most 16, all dropped when full."""


def lists_at_launch(module, mask_mod: Callable, block_m: int, block_n: int, backward: bool = False) -> None:
    """Have every launch of `module` (a block-sparse forward, or with `backward` the backward's main kernel)
    check its lists (`check_lists_at_launch`)."""
    _AT_LAUNCH[module] = ListedBlocks(mask_mod, block_m, block_n, backward)


def _same_mask(a: Callable, b: Callable) -> bool:
    if a is b:
        return True
    key = fingerprint(a)
    return key is not None and key == fingerprint(b)


def _true_mask(listed: ListedBlocks, sizes: dict[str, int]) -> BlockMask:
    key = fingerprint(listed.mask_mod)
    build = lambda: create_block_mask(listed.mask_mod, **sizes, block_m=listed.block_m,  # noqa: E731
                                      block_n=listed.block_n)
    if key is None:
        return build()
    key = (key, tuple(sorted(sizes.items())), listed.block_m, listed.block_n)
    if key not in _KEPT:
        if len(_KEPT) >= 16:
            _KEPT.clear()
        _KEPT[key] = build()
    return _KEPT[key]


def _backward_listed_kinds(lists: list[np.ndarray], heads: int, n_q: int) -> tuple[np.ndarray, np.ndarray] | str:
    """(listed full, listed at all) [batch, heads, n_q, n_k] from the backward's work lists (per (batch, K/V
    head, key block) the counts of full and partial pairs, then the pairs h * VISIT_HEAD + m); or what is wrong."""
    (counts_name, counts), (visits_name, visits) = lists
    batch, heads_k, n_k, width = visits.shape
    group = heads // heads_k
    if width != group * n_q:
        return f"{visits_name} has {width} entries a key block, not {group} heads x {n_q} query blocks"
    if counts.min(initial=0) < 0 or counts.sum(axis=-1).max(initial=0) > width:
        return f"{counts_name} holds counts outside [0, {width}] a key block"
    entry = np.arange(width)
    used = entry < counts.sum(axis=-1)[..., None]
    head, block = visits // VISIT_HEAD, visits % VISIT_HEAD
    kv_head = np.arange(heads_k).reshape(1, -1, 1, 1)
    if ((head // group != kv_head) & used).any() or ((block >= n_q) & used).any() or ((visits < 0) & used).any():
        return f"{visits_name} holds pairs outside its key blocks' heads or the {n_q} query blocks"
    slot = np.where(used, (head - kv_head * group) * n_q + block, width)
    listed = []
    for chosen in (entry < counts[..., :1], used):
        marks = np.zeros(visits.shape[:-1] + (width + 1,), bool)
        np.put_along_axis(marks, np.where(chosen, slot, width), True, axis=-1)
        marks = marks[..., :width].reshape(batch, heads_k, n_k, group, n_q)
        listed.append(np.moveaxis(marks, 2, -1).reshape(batch, heads, n_q, n_k))
    return listed[0], listed[1]


def _listed_kinds(lists: list[np.ndarray], n_k: int) -> tuple[np.ndarray, np.ndarray] | str:
    """(listed full, listed at all) [batch, heads, n_q, n_k] from the forward's four lists; or what is wrong."""
    listed = []
    for (counts_name, counts), (indices_name, indices) in ((lists[0], lists[1]), (lists[2], lists[3])):
        if counts.min(initial=0) < 0 or counts.max(initial=0) > n_k:
            return f"{counts_name} holds counts outside [0, {n_k}]"
        used = np.arange(indices.shape[-1]) < counts[..., None]
        if (indices[used] < 0).any() or (indices[used] >= n_k).any():
            return f"{indices_name} holds key blocks outside [0, {n_k})"
        marks = np.zeros(indices.shape[:-1] + (n_k + 1,), bool)
        np.put_along_axis(marks, np.where(used, indices, n_k), True, axis=-1)
        listed.append(marks[..., :n_k])
    return listed[0], listed[0] | listed[1]


def _first(where: np.ndarray) -> str:
    b, h, i, j = (int(x[0]) for x in np.nonzero(where))
    return f"key block {j} of query block {i} (batch {b}, head {h})"


def check_lists_at_launch(where: str, module, sizes: Mapping[str, int], inputs: Mapping[str, object]) -> None:
    """Refuse, with a ValueError naming the list and the block, lists of a registered kernel (`lists_at_launch`)
    that do not hold the mask_mod's blocks at the launch's `sizes` (module docstring); `inputs` are the launch's
    arrays by name (NumPy arrays or torch tensors). Nothing for any other module."""
    listed = _AT_LAUNCH.get(module)
    if listed is None or not all(name in inputs for name in listed.names) or \
            not all(name in sizes for name in ("batch", "heads", "seq_q", "seq_k")):
        return
    dims = {name: int(sizes[name]) for name in ("batch", "heads", "seq_q", "seq_k")}
    arrays = [inputs[name] for name in listed.names]
    made = made_for(arrays[0])
    if made is not None and all(made_for(a) is made for a in arrays) and _same_mask(made.mask_mod, listed.mask_mod) \
            and (made.seq_q, made.seq_k, made.block_m, made.block_n) == (dims["seq_q"], dims["seq_k"],
                                                                         listed.block_m, listed.block_n):
        return  # made for this launch
    host = [np.asarray(a.detach().cpu() if hasattr(a, "detach") else a) for a in arrays]
    truth = _true_mask(listed, dims).kinds
    named = list(zip(listed.names, host))
    decoded = (_backward_listed_kinds(named, dims["heads"], truth.shape[-2]) if listed.backward
               else _listed_kinds(named, truth.shape[-1]))
    if isinstance(decoded, str):
        raise ValueError(f"{where}: {decoded}")
    full, visited = decoded
    for wrong, what in ((full & (truth != FULL), "lists {} as full, where the mask_mod makes it partial or "
                                                 "empty at these sizes"),
                        (~visited & (truth != EMPTY), "leaves out {}, which the mask_mod makes visible at these "
                                                      "sizes")):
        if wrong.any():
            origin = "" if made is None else (
                f", made by create_block_mask for seq_q {made.seq_q}, seq_k {made.seq_k}"
                + ("" if _same_mask(made.mask_mod, listed.mask_mod) else " and another mask_mod"))
            raise ValueError(f"{where}: the block lists{origin}, {what.format(_first(wrong))} (seq_q "
                             f"{dims['seq_q']}, seq_k {dims['seq_k']}, {listed.block_m} x {listed.block_n} "
                             "blocks): make them with create_block_mask for the launch")

