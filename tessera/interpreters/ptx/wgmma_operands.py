"""The operands of wgmma [P#asynchronous-warpgroup-level-matrix-*; facts.wgmma, facts.descriptor]: the multiplicand
types (`MULTIPLICANDS`, their families and exact float64 values), the bytes a matrix descriptor reads from shared
memory (`descriptor_bytes`: decoded once per descriptor value), the read checked and recorded for asynchrony
(`descriptor_read`; `descriptor_reads` for a step's, through its `ReadPlan`) and gathered across CTAs
(`descriptor_tiles`), and the A tile from the four registers of each thread of a warpgroup (`register_operands`,
`facts.a_fragment_coords`). `wgmma` runs the product; `warp_mma` reads its elements with the same readers.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx.shared_chunks import CHUNK, CHUNK_ITEM, chunk_set, chunks_in_order, dense_range
from tessera.interpreters.ptx.state import Machine
from tessera.interpreters.truth import all_set, equal_arrays
from tessera.sm90 import facts


@lru_cache(maxsize=None)
def _a_coords() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    i = np.arange(facts.A_FRAGMENT_REGISTERS)[None, :]
    t = np.arange(facts.WARPGROUP_SIZE)[:, None]
    (r0, k0), (r1, k1) = facts.a_fragment_coords(i, 0, t), facts.a_fragment_coords(i, 1, t)
    return r0, k0, r1, k1


MULTIPLICANDS = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.uint32,
                  "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "s8": np.int8, "u8": np.uint8}
"""wgmma multiplicand type -> the NumPy dtype of its stored element (.tf32 as its 32-bit pattern)."""

FAMILIES = {"f16": "f16", "bf16": "bf16", "tf32": "tf32", "e4m3": "fp8", "e5m2": "fp8", "s8": "int", "u8": "int"}
"""A and B must have the same family (.e4m3/.e5m2 mix freely, so do .s8/.u8)."""

_TF32_MASK = np.uint32(0xFFFFE000)
"""A .tf32 element is an f32 pattern of which the tensor core reads sign, exponent and 10 mantissa bits."""


def multiplicand_values(raw: np.ndarray, name: str) -> np.ndarray:
    """Stored elements (of `MULTIPLICANDS[name]`) as exact float64 values."""
    if name == "tf32":
        return (raw & _TF32_MASK).view(np.float32).astype(np.float64)
    if name == "bf16":  # a bf16 is the upper half of the f32 of the same value: NumPy's casts, not ml_dtypes' loop
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


@lru_cache(maxsize=4096)
def descriptor_bytes(descriptor: int, major: str, e: int, extent: int) -> tuple | str:
    """(element addresses [extent, K elements], byte offsets [extent * K * e], lowest and highest address, the
    range the offsets fill when they fill one, the range [lowest, highest] byte holding them, the 16-byte chunks
    holding them (`chunk_set`), the offsets as 16-byte chunks in order or None) a descriptor reads, or the
    reason it is invalid: computed once per descriptor value and kept across wgmmas, CTAs and launches (a ring's
    slots give a handful of values)."""
    try:
        fields = facts.decode_descriptor(descriptor)
        addresses = np.asarray(facts.descriptor_element_address(
            fields, major, e, np.arange(extent)[:, None], np.arange(facts.WGMMA_K_BYTES // e)[None, :]), np.int64)
    except ValueError as error:
        return str(error)
    offsets = (addresses[..., None] + np.arange(e)).reshape(-1)
    addresses.setflags(write=False)
    offsets.setflags(write=False)
    return (addresses, offsets, int(addresses.min()), int(addresses.max()), dense_range(offsets),
            (int(offsets.min()), int(offsets.max()) + 1), chunk_set(offsets), chunks_in_order(offsets))



def descriptor_read(m: Machine, inst, lanes: np.ndarray, descriptor: int, major: str, extent: int,
                     name: str, operand: str = "B") -> tuple:
    """The [extent, K] operand (K spanning facts.WGMMA_K_BYTES) `lanes` (whole warpgroups of one CTA) read
    through a descriptor from their CTA's shared memory: checked and recorded as an async-proxy read
    (`wgmma_read_tracking.WgmmaReadTracking.wgmma_reads`); returns what `descriptor_tiles` gathers it with."""
    e = np.dtype(MULTIPLICANDS[name]).itemsize
    decoded = descriptor_bytes(descriptor, major, e, extent)
    if isinstance(decoded, str):
        raise m.error(inst, f"matrix descriptor {descriptor:#x}: {decoded}", int(lanes[0]))
    addresses, offsets, low, high, dense, hull, columns, chunks = decoded
    if low < 0 or high + e > m.shared_bytes:
        raise m.error(inst, f"matrix descriptor {descriptor:#x} reads outside shared memory", int(lanes[0]))
    cta = int(m.lane_cta[lanes[0]])
    base = cta * m.shared_bytes
    span = None if dense is None else slice(base + dense[0], base + dense[1])
    own_rows = operand == "A"  # the bytes row by row (addresses [rows, K]): each warp reads its own rows
    m.tracker.wgmma_reads(inst, lanes, None if chunks is not None else offsets + base, operand, span,
                          slice(base + hull[0], base + hull[1]), chunks, base, own_rows=own_rows,
                          chunk_set=columns)
    return cta, (descriptor, major, e, extent), decoded


class ReadPlan(NamedTuple):
    """What a wgmma's descriptor operands need that depends only on its lanes and descriptor values, worked out
    once and kept in the step (a main loop's K steps repeat a handful of them every trip, in every launch of the
    decoded program): `requests`, `descriptor_read`'s arguments in warpgroup order (B once per CTA and
    descriptor, then A per warpgroup); `checks` and `records`, the same reads for
    `WgmmaTracking.wgmma_reads_landed` (None when some request is invalid: `descriptor_read` then raises; a
    check is (lanes, range, the lanes as bytes));
    `a_tiles` and `b_tiles`, `tile_gathers` of the A reads ([extent, K] tiles) and the B reads ([K, extent]: the
    product's right operand, rows of K contiguous); `b_index`, each warpgroup's B read (None
    when each warpgroup has its own); `b_run`, r > 1 when each B read is that of r consecutive warpgroups (the
    consumers of a CTA sharing its K tile: their A tiles stacked are one product with it), else 1."""

    requests: list[tuple]
    checks: list[tuple] | None
    records: list[tuple] | None
    a_tiles: TileGather | None
    b_tiles: TileGather | None
    b_index: np.ndarray | None
    b_run: int = 1


def landed_records(m, reads: list[tuple]) -> list[tuple]:
    """Where `WgmmaTracking.wgmma_reads_landed` writes the records of `reads` ((lanes: whole warpgroups of one CTA,
    the CTA's chunks they read as `wgmma_reads`' `chunk_set`, the CTA) each): one (positions [warpgroups x chunks]
    in the flattened records [warpgroup of a CTA, chunk of the batch], the warpgroups, chunks per warpgroup) per
    chunk set, the warpgroups of every CTA reading it together (one flat assignment: no 2-D index)."""
    per_cta = -(-max(m.shared_bytes, 1) // facts.SWIZZLE_CHUNK_BYTES)  # the records' columns of a CTA
    width = m.tracker.hb.chunk_count()  # the records' columns
    groups_per_cta = -(-m.threads // facts.WARPGROUP_SIZE)
    unit = m.unit_of[facts.WARPGROUP_SIZE]
    by_set: dict[int, tuple] = {}  # one chunk set (a descriptor value) read in several CTAs: one assignment
    for lanes, chunks, cta in reads:
        ws = unit[lanes[::facts.WARPGROUP_SIZE]]
        entry = by_set.setdefault(id(chunks), (chunks, [], []))
        entry[1].append(ws)
        entry[2].append(np.full(len(ws), cta * per_cta))
    records = []
    for chunks, ws, firsts in by_set.values():
        ws = np.concatenate(ws)
        at = np.arange(chunks.start, chunks.stop) if isinstance(chunks, slice) else chunks
        positions = (ws % groups_per_cta)[:, None] * width + np.concatenate(firsts)[:, None] + at
        records.append((positions.reshape(-1), ws, len(at)))
    return records


def plan_reads(m: Machine, requests: list[tuple], b_index: list[int], a_rows: np.ndarray | None = None) -> ReadPlan:
    """The `ReadPlan` of `requests` ((lanes, descriptor, major, extent, name, "A" or "B") each; `b_index`: each
    warpgroup's B request, its position among the B requests); `a_rows`: the order the A tiles' rows are
    gathered in (`tile_gathers`; B's as they lie)."""
    size = m.shared_bytes
    reads, checks = [], []
    for lanes, descriptor, major, extent, name, _ in requests:
        e = np.dtype(MULTIPLICANDS[name]).itemsize
        decoded = descriptor_bytes(descriptor, major, e, extent)
        if isinstance(decoded, str) or decoded[2] < 0 or decoded[3] + e > size:
            return ReadPlan(requests, None, None, None, None, None)
        cta = int(m.lane_cta[lanes[0]])
        low, high = decoded[4] if decoded[4] is not None else decoded[5]
        checks.append((lanes, slice(cta * size + low, cta * size + high), lanes.tobytes()))
        reads.append((cta, (descriptor, major, e, extent), decoded))
    records = landed_records(m, [(q[0], read[2][6], read[0]) for q, read in zip(requests, reads)])
    a_reads = [read for q, read in zip(requests, reads) if q[5] == "A"]
    b_reads = [read for q, read in zip(requests, reads) if q[5] == "B"]
    b_run = len(b_index) // max(len(b_reads), 1)
    if b_run < 2 or b_index != [i // b_run for i in range(len(b_index))]:
        b_run = 1
    a_tiles = tile_gathers(m, a_reads, a_rows) if a_reads else None
    b_tiles = tile_gathers(m, b_reads, k_rows=True)
    return ReadPlan(requests, checks, records, a_tiles, b_tiles,
                    np.array(b_index) if len(b_reads) != len(b_index) else None, b_run)


def descriptor_reads(m: Machine, inst, plan: ReadPlan) -> None:
    """`descriptor_read(m, inst, *request)` for each of the plan's requests, in order: the same checks and
    records, decided and recorded for all of them at once where every operand lies in TMA-landed ranges its
    readers observed (a main loop's K steps in every CTA of the batch: `WgmmaTracking.wgmma_reads_landed`), else
    read one by one (which raises, naming the first failing read)."""
    if plan.checks is None or not m.tracker.wgmma_reads_landed(inst, plan.checks, plan.records):
        for request in plan.requests:
            descriptor_read(m, inst, *request)


_ELEMENT_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}
"""An element's bits by its size: what `descriptor_tiles` moves before converting them to values."""


class TileGather(NamedTuple):
    """How `descriptor_tiles` gathers one operand of a wgmma, one tile per read (CTA and descriptor value), for every
    CTA of a batch in one fancy index of 16-byte chunks, worked out once per plan (`tile_gathers`): `index`, the
    positions in `Machine.shared` of the chunks, in order (`shared_chunks`); `shape`, the elements gathered
    [reads, p, q]; `transpose`, whether p and q are swapped after (the tiles were gathered the other way round);
    `extent_order`, the order the extent axis still has to be put in after that (None: it is in place); `k_rows`,
    whether the tiles are wanted [reads, K, extent] (else [reads, extent, K])."""

    index: np.ndarray
    shape: tuple[int, int, int]
    transpose: bool
    extent_order: np.ndarray | None
    k_rows: bool


def tile_gathers(m: Machine, reads: list[tuple], rows: np.ndarray | None = None, k_rows: bool = False) -> TileGather:
    """How `descriptor_tiles` gathers the operands `reads` (`descriptor_read`'s, one per CTA and descriptor, all of
    one operand of one wgmma) as tiles [reads, extent, K], or [reads, K, extent] when `k_rows` (B as the product
    takes it: rows of K contiguous); `rows`: the extent in this order. The first arrangement of the tiles whose
    bytes are whole chunks in order is gathered, tried from the cheapest: as wanted; swapped (a K-major B: its
    chunks run along K; transposed after); the extent in its own order (an MN-major B: a chunk holds 8
    consecutive columns, which `rows` splits; reordered after); both. A descriptor's bytes are whole chunks along
    its major dimension (its start, strides and swizzle are 16-byte units), so one of the last two always is."""
    size = m.shared_bytes
    values: dict[tuple, np.ndarray] = {}  # descriptor value -> its element addresses [extent, K]
    for _, key, decoded in reads:
        values.setdefault(key, decoded[0])
    e = reads[0][1][2]
    extent, k = reads[0][2][0].shape
    order = np.arange(extent) if rows is None else np.asarray(rows)
    natural = equal_arrays(order, np.arange(extent))

    def chunks(addresses: np.ndarray, swapped: bool, ordered: bool) -> np.ndarray | None:
        tile = addresses[order] if ordered else addresses
        tile = tile.T if swapped != k_rows else tile  # [extent, K] unless the gather is [K, extent]
        return chunks_in_order((tile[..., None] + np.arange(e)).reshape(-1))

    for swapped, ordered in ((False, True), (True, True), (False, False), (True, False)):
        found = {key: chunks(addresses, swapped, ordered) for key, addresses in values.items()}
        if all(c is not None for c in found.values()):
            break
    else:
        raise AssertionError("a descriptor's bytes are whole 16-byte chunks along its major dimension")
    ctas = np.array([cta for cta, _, _ in reads], np.int64)[:, None] * size
    index = (ctas + CHUNK * np.stack([found[key] for _, key, _ in reads])).reshape(-1)
    index.setflags(write=False)
    gathered = (k, extent) if swapped != k_rows else (extent, k)
    return TileGather(index, (len(reads), *gathered), swapped, None if ordered or natural else order, k_rows)


def shared_chunks(m: Machine) -> np.ndarray:
    """The shared memory of every CTA of the batch as overlapping `CHUNK_ITEM`s, one starting at each byte (a view:
    item p is bytes p to p + 15), as `TileGather.index` names them: a chunk of any CTA's window is one item whether
    or not the windows are whole chunks (the flash kernel's are 215,039 bytes)."""
    return np.ndarray((max(m.shared.size - CHUNK + 1, 0),), CHUNK_ITEM, m.shared, strides=(1,))


def descriptor_tiles(m: Machine, gather: TileGather, name: str) -> np.ndarray:
    """[reads, extent, K] float64 (or [reads, K, extent], `TileGather.k_rows`), contiguous: the operands `gather`
    holds."""
    bits = shared_chunks(m)[gather.index].view(_ELEMENT_BITS[np.dtype(MULTIPLICANDS[name]).itemsize])
    bits = bits.reshape(gather.shape)
    if gather.transpose:
        bits = bits.transpose(0, 2, 1)
    if gather.extent_order is not None:
        bits = np.take(bits, gather.extent_order, axis=2 if gather.k_rows else 1)
    elif gather.transpose:
        bits = np.ascontiguousarray(bits)
    return multiplicand_values(bits.view(MULTIPLICANDS[name]), name)


@lru_cache(maxsize=None)
def _a_tile_bytes() -> np.ndarray:
    """For each byte of the 64 x 32-byte A tile (row-major), its position in the bytes of the 128 threads' four
    A registers ([thread, register, byte] flattened): the fragment fills the tile, each byte once.

    Every multiplicand type packs the same bytes of the tile into a register (Figure 148 and its .tf32/8-bit
    siblings): register a[i] holds the 4 bytes of row 16w + g + 8(i & 1) starting at byte 4c + 16(i >> 1) of
    the row's 32 K-bytes, the positions of the f16 fragment's pair (`facts.a_fragment_coords`, half 0)."""
    r0, k0, _, _ = _a_coords()
    source = np.full((facts.WGMMA_M, facts.WGMMA_K_BYTES), -1, np.int64)
    source[r0[..., None], 2 * k0[..., None] + np.arange(4)] = np.arange(r0.size * 4).reshape(*r0.shape, 4)
    assert all_set(source >= 0), "the A fragment fills the tile"
    source.setflags(write=False)
    return source.reshape(-1)


@lru_cache(maxsize=None)
def _a_tile_words_in(rows: tuple[int, ...] | None) -> np.ndarray:
    """`_a_tile_bytes` by 32-bit word, with the tile's rows in the order `rows` (None: as they are): each register
    holds 4 consecutive bytes of a row (`_a_tile_bytes`), so the tile [64, 8 words] is a gather of the 128
    threads' 512 A registers ([thread, register] flattened), a word at a time."""
    source = _a_tile_bytes().reshape(facts.WGMMA_M, -1, 4)
    assert all_set(source == source[..., :1] + np.arange(4)) and all_set(source[..., 0] % 4 == 0), \
        "each A register holds 4 consecutive bytes of a tile row"
    words = source[..., 0] // 4
    index = (words if rows is None else words[list(rows)]).reshape(-1)
    index.setflags(write=False)
    return index


def register_words(lanes: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Where the 64xK A tiles of the warpgroups `lanes` (whole warpgroups, in order) lie, a 32-bit word at a time,
    in their four A registers as rows of a [lanes, 4] array (lane l's register i: word 4l + i of it flattened): the
    positions [warpgroups, 64 x 8 words] that `register_operands` gathers; `rows`: the tiles' rows in this order."""
    source = _a_tile_words_in(None if rows is None else tuple(np.asarray(rows).tolist()))
    threads, register = np.divmod(source, facts.A_FRAGMENT_REGISTERS)
    words = lanes.reshape(-1, facts.WARPGROUP_SIZE)[:, threads] * facts.A_FRAGMENT_REGISTERS + register
    words.setflags(write=False)
    return words


def register_operands(registers: np.ndarray, words: np.ndarray, name: str) -> np.ndarray:
    """The 64xK A tiles [warpgroups, 64, K] from the four 32-bit A registers of each thread (`registers`, a
    contiguous [lanes, 4] array) at the positions `words` (`register_words`), in one gather of whole registers."""
    raw = np.asarray(registers, np.uint32).reshape(-1).take(words)
    return multiplicand_values(raw.view(np.uint8).reshape(len(words), facts.WGMMA_M, facts.WGMMA_K_BYTES)
                                .view(MULTIPLICANDS[name]), name)
