"""The boxes of TMA tensor copies in the PTX executor (`bulk_copy` runs the instructions): the tensor map an address
names (`tensor_map`), a box's byte offsets in its tensor and the layout of those inside it (`box_offsets`), its
bytes as a copy reads them (`box_data`, elements outside the tensor filled: `oob_fill`), the checks of a copy's
operands (`checked_box`), and the swizzled shared bytes the box fills (`swizzled`, `swizzled_at`). What depends
on values alone is kept across copies, CTAs and launches (`lru_cache`): a grid's boxes give a handful of
coordinates a map and a ring's slots a handful of shared offsets.

TMA [P#data-movement-and-conversion-instructions-cp-async-bulk-tensor; facts.tma]: the box at element coordinates c
(innermost first) of the tensor a map describes, elements outside the tensor reading as zero
(FLOAT_OOB_FILL_NONE), lands row-major from the shared address with the map's swizzle applied to the absolute
shared addresses (`facts.swizzle_address`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import ml_dtypes
import numpy as np

from tessera.interpreters import serving_checks
from tessera.interpreters.ptx import tensormaps
from tessera.interpreters.ptx.global_accesses import StridedBox
from tessera.interpreters.ptx.shared_chunks import as_chunks, chunks_in_order, dense_range
from tessera.interpreters.ptx.state import GLOBAL_BASE, PARAM_WINDOW, WINDOW_SIZE, Machine
from tessera.interpreters.truth import all_set, any_set, equal_arrays
from tessera.sm90 import facts


@dataclass(frozen=True)
class TensorMapObject:
    """A tensor map placed in parameter space: the encode arguments and the global address they name."""

    name: str
    spec: facts.TensorMapSpec
    address: int


def tensor_map(m: Machine, inst, lane: int, address: int) -> TensorMapObject:
    """The tensor map `lane`'s `[map]` operand names: the generic address of a tensor-map parameter (`mov` +
    `cvta.param`), or the global address of a map built on the device (`tensormaps`); anything else is an error."""
    offset = address - PARAM_WINDOW
    found = m.tensor_maps.get(offset) if 0 <= offset < WINDOW_SIZE else None
    if found is None and GLOBAL_BASE <= address:  # built on the device (`tensormaps`)
        spec = tensormaps.read_map(m, inst, lane, address)
        return TensorMapObject(f"the tensor map at {address:#x}", spec, spec.global_address)
    if found is None:
        raise m.error(inst, f"address {address:#x} is not the generic address of a tensor-map parameter, nor a "
                            "global address (a map built on the device)", lane)
    return found


@lru_cache(maxsize=64)
def oob_fill(spec: facts.TensorMapSpec) -> np.ndarray:
    """The bytes a load writes for an element outside the tensor: zeros, or with FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
    a quiet NaN of the element type (the hardware's "OOB-NaN"; its exact bits are not documented). Read-only,
    kept per map."""
    if spec.oob_fill == facts.TensorMapFloatOOBFill.NONE:
        fill = np.zeros(spec.element_bytes, np.uint8)
    else:
        dtype = {2: np.float16, 4: np.float32, 8: np.float64}[spec.element_bytes]
        if spec.dtype == facts.TensorMapDataType.BFLOAT16:
            dtype = ml_dtypes.bfloat16
        fill = np.frombuffer(np.array(np.nan, dtype).tobytes(), np.uint8).copy()
    fill.setflags(write=False)
    return fill


@lru_cache(maxsize=4096)
def box_offsets(spec: facts.TensorMapSpec, coords: tuple[int, ...]
                ) -> tuple[np.ndarray, np.ndarray, tuple | None, tuple | None]:
    """Byte offsets from the tensor's address of the box elements (row-major, innermost last), which of them
    lie inside the tensor (`TensorMapSpec.box_byte_offsets`), the layout of the bytes inside it when they
    form a box (a box wholly inside, or one the tensor's edge clips: first offset, shape, strides:
    `global_accesses.StridedBox`, adjacent contiguous dimensions merged), else None, and where the edge clips
    such a box, the window of it inside (the box's element grid, outermost first, and a slice along each of its
    axes), else None; read-only, kept across copies, CTAs and launches (a grid's boxes give a handful of
    coordinates a map)."""
    offsets, valid = spec.box_byte_offsets(list(coords))
    offsets.setflags(write=False)
    valid.setflags(write=False)
    if not any_set(valid) or not offsets.size:
        return offsets, valid, None, None
    counts = [-(-spec.box_dims[k] // (1 if k == 0 and spec.interleave == facts.TensorMapInterleave.NONE
                                      else spec.strides[k])) for k in reversed(range(spec.rank))]
    grid, inside, window = offsets.reshape(counts), valid.reshape(counts), None
    if not all_set(valid):  # the part inside the tensor, when it is a box: a range of indices along each axis
        ranges = []
        for axis in range(len(counts)):
            hit = np.flatnonzero(inside.any(axis=tuple(a for a in range(len(counts)) if a != axis)))
            if hit[-1] - hit[0] + 1 != len(hit):
                return offsets, valid, None, None
            ranges.append(slice(int(hit[0]), int(hit[-1]) + 1))
        if not all_set(inside[tuple(ranges)]) or inside.sum() != inside[tuple(ranges)].size:
            return offsets, valid, None, None
        window = (tuple(counts), tuple(ranges))
        grid = grid[tuple(ranges)]
        counts = list(grid.shape)
    shape, strides = [spec.element_bytes], [1]
    for axis in reversed(range(len(counts))):
        if counts[axis] == 1:
            continue
        step = int(grid[(0,) * axis + (1,) + (0,) * (len(counts) - axis - 1)] - grid[(0,) * len(counts)])
        if step == shape[0] * strides[0]:
            shape[0] *= counts[axis]
        else:
            shape.insert(0, counts[axis])
            strides.insert(0, step)
    layout = (int(grid[(0,) * len(counts)]), tuple(shape), tuple(strides))
    box = StridedBox(*layout).index().reshape(-1, spec.element_bytes)[:, 0]
    if not equal_arrays(box, offsets[valid]):
        return offsets, valid, None, None
    return offsets, valid, layout, window


def box_data(m: Machine, tmap: TensorMapObject, offsets: np.ndarray, valid: np.ndarray, box,
             window: tuple | None = None) -> np.ndarray:
    """The bytes a load of the box reads (row-major; elements outside the tensor filled, `oob_fill`), a copy
    of global memory as it is now: the `StridedBox` `box` of the elements inside read as a strided view (into
    the `window` of the box the tensor's edge leaves, `box_offsets`'s, where it clips the box), else (`box`
    None) gathered by `offsets`. Read-only: the copies of one box by several CTAs of a step share it."""
    e = tmap.spec.element_bytes
    if box is not None and window is None:  # the whole box lies in the tensor (mostly)
        data = box.view(m.memory.buffer).flatten()
    elif box is not None:  # the tensor's edge clips the box: the elements inside fill the window
        fill = oob_fill(tmap.spec)
        data = np.zeros((len(offsets), e), np.uint8)
        if any_set(fill):
            data[:] = fill
        grid, ranges = window
        inside = data.reshape(*grid, e)[ranges]
        inside[...] = box.view(m.memory.buffer).reshape(inside.shape)
        data = data.reshape(-1)
    else:
        data = m.memory.buffer[(tmap.address - GLOBAL_BASE + offsets)[:, None] + np.arange(e)]
        if not all_set(valid):
            data = np.where(valid[:, None], data, oob_fill(tmap.spec)).astype(np.uint8)
        data = data.reshape(-1)
    data.setflags(write=False)
    return data


class Box(NamedTuple):
    """What a tensor copy of the box at given coordinates into shared offset `smem` needs, checked (`checked_box`)."""

    tmap: TensorMapObject
    offsets: np.ndarray  # `box_offsets`
    valid: np.ndarray
    layout: tuple | None
    window: tuple | None  # `box_offsets`
    size: int  # the box's bytes in shared memory
    swizzle: int
    dense: tuple[int, int] | None  # `swizzled`
    chunks: np.ndarray | None


def checked_box(m: Machine, inst, lane: int, map_address: int, coords: list[int], smem: int, load: bool) -> Box:
    """The tensor map, box and swizzled shared bytes of a tensor copy by `lane` between the box at `coords` and
    shared offset `smem`, after the checks of its operands (coordinates for the map's rank, `smem`'s alignment,
    the box inside shared memory, `serving_checks` for a load): they depend on those values alone."""
    tmap = tensor_map(m, inst, lane, map_address)
    spec = tmap.spec
    if len(coords) != spec.rank:
        raise m.error(inst, f"a rank-{spec.rank} tensor map needs {spec.rank} coordinates, got {len(coords)}", lane)
    if smem % facts.TMA_SMEM_ALIGNMENT:
        raise m.error(inst, f"shared address {smem:#x} is not {facts.TMA_SMEM_ALIGNMENT}-byte aligned", lane)
    if load and serving_checks.active() and \
            (problem := serving_checks.check_box(tmap.name, spec.global_dims, coords, spec.box_dims)):
        raise m.error(inst, problem, lane)
    offsets, valid, layout, window = box_offsets(spec, tuple(coords))
    size = len(offsets) * spec.element_bytes
    if smem < 0 or smem + size > m.shared_bytes:
        raise m.error(inst, f"the {size}-byte box at shared address {smem:#x} overruns shared memory "
                            f"({m.shared_bytes} bytes)", lane)
    swizzle = facts.tensor_map_swizzle_bytes(spec.swizzle)
    _, dense, chunks = swizzled(smem, size, swizzle)
    return Box(tmap, offsets, valid, layout, window, size, swizzle, dense, chunks)


@lru_cache(maxsize=1024)
def swizzled(smem: int, size: int, swizzle: int) -> tuple[np.ndarray, tuple[int, int] | None, np.ndarray | None]:
    """The swizzled shared offsets of the `size` bytes of a box at `smem` (read-only; a ring's slots give a
    handful of values, kept across copies, CTAs and launches), their range when they fill one (`dense_range`),
    and the 16-byte chunks they are, in order, when they are whole chunks (`chunks_in_order`: every swizzle
    moves whole chunks)."""
    offsets = facts.swizzle_address(smem + np.arange(size, dtype=np.int64), swizzle)
    offsets.setflags(write=False)
    return offsets, dense_range(offsets), chunks_in_order(offsets)


@lru_cache(maxsize=64)
def swizzled_at(base: int, smem: int, size: int, swizzle: int) -> np.ndarray:
    """`swizzled`'s offsets from `base` (a CTA's shared memory in the batch): read-only, kept across copies and
    launches (a ring's slots in each CTA of a batch: a few dozen), not made again for every copy."""
    index = base + swizzled(smem, size, swizzle)[0]
    index.setflags(write=False)
    return index


@lru_cache(maxsize=1024)
def _chunk_order(smem: int, size: int, swizzle: int) -> np.ndarray:
    """For a box whose `size` bytes at `smem` fill a range of whole chunks (`swizzled`), the box's chunk (in
    row-major order) that each chunk of the range holds, in the range's order: read-only, kept."""
    _, (low, _), chunks = swizzled(smem, size, swizzle)
    order = np.empty(len(chunks), np.int64)
    order[chunks - low // facts.SWIZZLE_CHUNK_BYTES] = np.arange(len(chunks))
    order.setflags(write=False)
    return order


def in_shared_order(data: np.ndarray, smem: int, size: int, swizzle: int) -> np.ndarray:
    """The bytes `data` of a box (row-major, `box_data`'s) in the order they lie in shared memory, where the box
    at `smem` fills a range of whole 16-byte chunks (`swizzled`'s dense range and chunks; every swizzle moves
    whole chunks): what a landing copies into the range as it lies. Read-only."""
    ordered = as_chunks(data)[_chunk_order(smem, size, swizzle)].view(np.uint8)
    ordered.setflags(write=False)
    return ordered
