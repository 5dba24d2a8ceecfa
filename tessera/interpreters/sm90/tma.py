"""Tensor maps and TMA bulk tensor copies in the CTA simulator.

A `TensorMap` is what the host would encode with cuTensorMapEncodeTiled for a kernel argument: the global
tensor (a NumPy array, row-major or a strided view with a contiguous innermost dimension; its dimensions
innermost first are `reversed(shape)`, its byte strides the map's globalStrides), the box and the swizzle. `facts.TensorMapSpec.validate` refuses what the driver refuses (e.g. a box whose inner row is wider
than the swizzle span, or row strides that are not multiples of 16 bytes).

`sm90.tma_load` reads the box at the given coordinates (elements outside the tensor read as zero, the
FLOAT_OOB_FILL_NONE rule), lays it out row-major in shared memory from the destination address, applies the
map's swizzle to the *absolute* addresses (`facts.swizzle_address`), and completes `box bytes` of transaction
on the mbarrier. The copy is asynchronous: its bytes are marked in flight at issue, and it lands (data
written, complete-tx applied, bytes tagged with the barrier phase they belong to) when a thread next waits on
that barrier. Every executing thread issues its own copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
from xdsl.ir import Operation

from tessera.interpreters import serving_checks
from tessera.interpreters.byte_box import box_view, byte_box
from tessera.interpreters.sm90.wgmma_operands import chunk_dtype
from tessera.interpreters.truth import all_set, any_set, equal_arrays
from tessera.sm90 import facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView
    from tessera.interpreters.sm90.global_memory import GlobalMemory
    from tessera.interpreters.sm90.mbarrier import MBarrier

_DATA_TYPES = {
    np.dtype(np.uint8): facts.TensorMapDataType.UINT8,
    np.dtype(np.uint16): facts.TensorMapDataType.UINT16,
    np.dtype(np.uint32): facts.TensorMapDataType.UINT32,
    np.dtype(np.int32): facts.TensorMapDataType.INT32,
    np.dtype(np.uint64): facts.TensorMapDataType.UINT64,
    np.dtype(np.int64): facts.TensorMapDataType.INT64,
    np.dtype(np.float16): facts.TensorMapDataType.FLOAT16,
    np.dtype(np.float32): facts.TensorMapDataType.FLOAT32,
    np.dtype(np.float64): facts.TensorMapDataType.FLOAT64,
    np.dtype(ml_dtypes.bfloat16): facts.TensorMapDataType.BFLOAT16,
    # 8-bit floats move as bytes: cuTensorMapEncodeTiled has no FP8 data type on sm_90 (FlashAttention-3 maps
    # them as UINT8); the tensor core reads the bytes as e4m3/e5m2.
    np.dtype(ml_dtypes.float8_e4m3fn): facts.TensorMapDataType.UINT8,
    np.dtype(ml_dtypes.float8_e5m2): facts.TensorMapDataType.UINT8,
}


@dataclass(frozen=True, eq=False)
class TensorMap:
    """A `!sm90.tensormap` kernel argument: the encode arguments `spec` and the global bytes it spans, `memory`
    (byte 0 = the tensor's first element, the map's globalAddress)."""

    name: str
    array: np.ndarray
    spec: facts.TensorMapSpec
    swizzle: int
    memory: np.ndarray

    @classmethod
    def encode(cls, name: str, array: np.ndarray, box: tuple[int, ...], swizzle: int) -> TensorMap:
        """The map of `array` with `box` (innermost first): a row-major array, or a view of a larger one (rows
        of a padded pitch, a slice, transposed outer dimensions) whose innermost dimension is contiguous,
        encoded with the view's byte strides as cuTensorMapEncodeTiled's globalStrides. ValueError names a
        broken encode rule."""
        if array.dtype not in _DATA_TYPES:
            raise ValueError(f"tensor map {name}: no CUtensorMapDataType for elements of {array.dtype}")
        if array.ndim == 0:
            raise ValueError(f"tensor map {name}: the global tensor needs at least one dimension")
        dims = tuple(reversed(array.shape))
        e = array.dtype.itemsize
        if array.flags.c_contiguous:
            strides = tuple(math.prod(dims[:i]) * e for i in range(1, len(dims)))
        else:
            if array.strides[-1] != e or any(s < 0 for s in array.strides):
                raise ValueError(f"tensor map {name}: the global tensor's innermost dimension must be contiguous "
                                 f"and its strides positive (byte strides {array.strides})")
            strides = tuple(reversed(array.strides[:-1]))
        spec = facts.TensorMapSpec(_DATA_TYPES[array.dtype], dims, strides, tuple(box),
                                   swizzle=facts.tensor_map_swizzle(swizzle))
        spec.validate()
        span = e + sum((d - 1) * s for d, s in zip(dims, (e,) + strides))
        memory = np.lib.stride_tricks.as_strided(array.view(np.uint8), shape=(span,), strides=(1,), writeable=False)
        return cls(name, array, spec, swizzle, memory)

    def box_offsets(self, coords: list[int]) -> np.ndarray:
        """The byte offsets (from the tensor's first byte) of every byte a copy of the box at `coords` reads,
        the fill outside the tensor left out: what the global-memory records note for a TMA load."""
        spec = self.spec
        rows = _box_rows(spec, tuple(coords))
        if rows is not None:  # rows of the tensor at its strides: records read and written through as a view
            return byte_box(*rows)
        shift = _inside_shift(spec, tuple(coords))
        if shift is not None:
            return _box_bytes_at_origin(spec) + shift
        clipped = _clipped_rows(spec, tuple(coords))
        if clipped is not None:  # the part inside the tensor is a box of its rows (or nothing)
            return byte_box(*clipped[0]) if clipped[0] is not None else np.empty(0, np.int64)
        offsets, valid = spec.box_byte_offsets(coords)
        return (offsets[valid][:, None] + np.arange(spec.element_bytes)).reshape(-1)

    def read_box(self, coords: list[int]) -> np.ndarray:
        """The bytes of the box at element coordinates `coords` (innermost first), zero outside the tensor,
        in shared-memory order (innermost dimension contiguous): element (c0 + i0, c1 + i1, ...) is read at
        byte (c0 + i0) * element bytes + sum (ck + ik) * globalStrides[k - 1] of the map."""
        spec = self.spec
        rows = _box_rows(spec, tuple(coords))
        if rows is not None:  # the whole box in the tensor, unstrided: a strided copy of its rows
            return box_view(self.memory, *rows).reshape(-1)
        shift = _inside_shift(spec, tuple(coords))
        if shift is not None:  # the whole box in the tensor: every byte read, none filled
            return self.memory[_box_bytes_at_origin(spec) + shift]
        clipped = _clipped_rows(spec, tuple(coords))
        if clipped is not None:  # a box over the tensor's edge (a last key block): its inside rows copied into
            # zeros, instead of a gather of every byte and a select
            rows, inside, shape = clipped
            data = np.zeros(shape, np.uint8)
            if rows is not None:
                data[inside] = box_view(self.memory, *rows)
            return data.reshape(-1)
        e = spec.element_bytes
        offsets, valid = spec.box_byte_offsets(coords)
        data = self.memory[offsets[:, None] + np.arange(e)]
        return np.where(valid[:, None], data, 0).astype(np.uint8).reshape(-1)


@lru_cache(maxsize=64)
def _box_bytes_at_origin(spec: facts.TensorMapSpec) -> np.ndarray | None:
    """The byte offsets of every byte of the box at coordinates 0 (as `read_box` reads them), or None if the box
    does not fit the tensor there."""
    offsets, valid = spec.box_byte_offsets((0,) * spec.rank)
    if not all_set(valid):
        return None
    offsets = (offsets[:, None] + np.arange(spec.element_bytes)).reshape(-1)
    offsets.flags.writeable = False
    return offsets


def _inside_shift(spec: facts.TensorMapSpec, coords: tuple[int, ...]) -> int | None:
    """The byte offset of the box at `coords` from the box at the origin if it lies wholly inside the tensor
    (its bytes are the origin's moved by it), else None: `read_box`'s common case without recomputing the box."""
    if _box_bytes_at_origin(spec) is None:
        return None
    strides = (spec.element_bytes,) + tuple(spec.global_strides)
    shift = 0
    for dim, c in enumerate(coords):
        step = 1 if dim == 0 and spec.interleave == facts.TensorMapInterleave.NONE else spec.strides[dim]
        if c < 0 or c + step * (math.ceil(spec.box_dims[dim] / step) - 1) >= spec.global_dims[dim]:
            return None
        shift += c * strides[dim]
    return shift


def _clipped_rows(spec: facts.TensorMapSpec, coords: tuple[int, ...]) -> tuple | None:
    """For a box with no interleave and unit element strides: (the rows of the tensor inside the box as
    `_box_rows` gives them, or None if no element is inside; the slices of the box's rows they fill; the box's
    rows' shape, outermost dimension first, the innermost row as its bytes). None for other boxes. The inside
    elements, in row-major order, are the box's elements inside the tensor in shared-memory order, as
    `box_byte_offsets` selects them."""
    if spec.interleave != facts.TensorMapInterleave.NONE or any(s != 1 for s in spec.strides):
        return None
    e, strides = spec.element_bytes, (spec.element_bytes,) + tuple(spec.global_strides)
    start, extents, slices = 0, [], []
    for dim, c in enumerate(coords):
        low, high = max(0, -c), min(spec.box_dims[dim], spec.global_dims[dim] - c)
        if high <= low:
            low = high = 0
        start += (c + low) * strides[dim]
        extents.append(high - low)
        slices.append(slice(low * e, high * e) if dim == 0 else slice(low, high))
    shape = tuple(reversed(spec.box_dims[1:])) + (spec.box_dims[0] * e,)
    inside = tuple(reversed(slices))
    if min(extents) == 0:
        return None, inside, shape
    rows = (start, tuple(reversed(extents[1:])) + (extents[0] * e,), tuple(reversed(spec.global_strides)) + (1,))
    return rows, inside, shape


def _box_rows(spec: facts.TensorMapSpec, coords: tuple[int, ...]) -> tuple | None:
    """(start, shape, strides) of the box at `coords` as rows of the tensor (outermost dimension first, the
    innermost row as its bytes), for a box wholly inside the tensor with no interleave and unit element
    strides; else None. Its row-major offsets are the box's bytes in shared-memory order (`box_byte_offsets`)."""
    if spec.interleave != facts.TensorMapInterleave.NONE or any(s != 1 for s in spec.strides):
        return None
    shift = _inside_shift(spec, coords)
    if shift is None:
        return None
    strides = tuple(spec.global_strides)
    return (shift, tuple(reversed(spec.box_dims[1:])) + (spec.box_dims[0] * spec.element_bytes,),
            tuple(reversed(strides)) + (1,))


def shared_box(start: int, data: np.ndarray, swizzle: int) -> tuple[np.ndarray, np.ndarray]:
    """(the shared addresses a copy of the box bytes `data` to `start` writes under `swizzle`, its bytes in the
    same order). Where the swizzle permutes 16-byte chunks only inside the copy's range (a start and size that
    are whole 128-byte lines), the addresses are that range in order, as a `ByteBox` (the per-byte records are
    then written as one slice) and the bytes are permuted to match; otherwise the swizzled address of each byte."""
    order = _range_order(data.size, swizzle, start % facts.swizzle_period_bytes(swizzle))
    if order is None:
        return facts.swizzle_address(start + np.arange(data.size, dtype=np.int64), swizzle), data
    if order is _IDENTITY:
        return byte_box(start, (data.size,), (1,)), data
    chunks = _chunk_order(data.size, swizzle, start % facts.swizzle_period_bytes(swizzle))
    if chunks is None:
        ordered = data[order]
    else:  # one item per chunk (`chunk_dtype`)
        ordered = np.ascontiguousarray(data).view(chunk_dtype(1))[chunks].view(np.uint8)
    return byte_box(start, (data.size,), (1,)), ordered


@lru_cache(maxsize=64)
def _chunk_order(size: int, swizzle: int, phase: int) -> np.ndarray | None:
    """`_range_order` as whole 16-byte chunks (the box chunk landing at each chunk of the range), where it moves
    chunks intact (a range that starts and ends on chunk boundaries): a gather of a sixteenth of the indices."""
    order = _range_order(size, swizzle, phase)
    chunk = facts.SWIZZLE_CHUNK_BYTES
    if order is None or order is _IDENTITY or size % chunk:
        return None
    rows = order.reshape(-1, chunk)
    if not equal_arrays(rows, rows[:, :1] + np.arange(chunk)) or any_set(rows[:, 0] % chunk):
        return None
    chunks = rows[:, 0] // chunk
    chunks.flags.writeable = False
    return chunks


_IDENTITY = np.zeros(0, np.intp)


@lru_cache(maxsize=64)
def _range_order(size: int, swizzle: int, phase: int) -> np.ndarray | None:
    """For a copy of `size` bytes to an address `phase` bytes past a swizzle period: the box byte landing at each
    address of the range (`_IDENTITY` without swizzle), or None if the swizzled addresses are not that range.
    A period's multiple added to the start moves the swizzled addresses by the same amount (the swizzle reads
    only the address bits below the period)."""
    if swizzle == 0:
        return _IDENTITY
    relative = facts.swizzle_address(phase + np.arange(size, dtype=np.int64), swizzle) - phase
    order = np.argsort(relative, kind="stable")
    if not equal_arrays(relative[order], np.arange(size)):
        return None
    order.flags.writeable = False
    return order


@dataclass(eq=False)
class TmaCopy:
    op: Operation
    thread: int
    barrier: MBarrier
    addresses: np.ndarray
    data: np.ndarray
    nbytes: int
    phase: int | None = None
    """The phase of `barrier` when the copy was issued: it must land in that phase (expect_tx = bytes)."""
    issuer: int | None = None
    """The %cluster_ctarank of the CTA that issued it (a multicast from a peer), None for this CTA's own."""
    follower_data: np.ndarray | None = None
    """The same copy's bytes in each follower of the CTA ([F, n], `followers`), landing with it."""
    follower_same: bool = False
    """Whether every follower's bytes are `data` (a box at the leader's coordinates: `Followers.same_lines`)."""


class TmaUnit:
    """The TMA copies of a CTA that have been issued and not yet landed, oldest first."""

    def __init__(self, cta: CtaView):
        self.cta = cta
        self.in_flight: list[TmaCopy] = []

    def load(self, op: Operation, tensor_map: TensorMap, coords: list[np.ndarray], dest: np.ndarray,
             mbarrier: np.ndarray, memory: GlobalMemory | None = None) -> None:
        """Issue the copies of the active threads; `memory` (the launch's global memory) records each copy's
        global reads as the async proxy's (`GlobalMemory.note_async_read`)."""
        cta, smem = self.cta, self.cta.smem
        spec = tensor_map.spec
        cta.scheduler.current.producer = True
        for thread in np.nonzero(cta.active)[0]:
            if len(coords) != spec.rank:
                cta.fail(op, f"a rank-{spec.rank} tensor map needs {spec.rank} coordinates, got {len(coords)}", thread)
            start = int(dest[thread])
            if start % facts.TMA_SMEM_ALIGNMENT:
                cta.fail(op, f"TMA destination {smem.locate(start)} is not {facts.TMA_SMEM_ALIGNMENT}-byte aligned",
                         thread)
            barrier = cta.mbarriers.get(op, thread, int(mbarrier[thread]))
            cta.mbarriers.note_refill(int(thread), barrier)
            at = [int(c[thread]) for c in coords]
            problem = serving_checks.check_box(tensor_map.name, spec.global_dims, at, spec.box_dims)
            if problem:
                cta.fail(op, problem, thread)
            data = tensor_map.read_box(at)
            if memory is not None:
                memory.note_async_read(cta, op, tensor_map, at, int(thread), (barrier.index, barrier.state.phase))
            if start < 0 or start + data.size > smem.size:  # (reported as every write's bounds are)
                smem.check_bounds(op, np.array([start]), np.array([thread]), data.size, "the TMA copy writes")
            buffer = smem.buffer_at(start)
            if buffer is not None:
                if buffer.swizzle != tensor_map.swizzle:
                    cta.fail(op, f"tensor map {tensor_map.name} swizzles {tensor_map.swizzle}B but its destination, "
                                 f"buffer '{buffer.name}', is declared with swizzle {buffer.swizzle}", thread)
                if start + data.size > buffer.offset + buffer.size:
                    cta.fail(op, f"the {data.size}-byte box of tensor map {tensor_map.name} at "
                                 f"{smem.locate(start)} overruns buffer '{buffer.name}' ({buffer.size} bytes)", thread)
            addresses, data = shared_box(start, data, tensor_map.swizzle)
            smem.begin_async_write(op, int(thread), addresses, barrier.index)
            self.in_flight.append(TmaCopy(op, int(thread), barrier, addresses, data, spec.box_bytes,
                                          barrier.state.phase))
            cta.traffic[tensor_map.name] = cta.traffic.get(tensor_map.name, 0) + spec.box_bytes

    def in_flight_on(self, barrier: MBarrier) -> bool:
        return any(copy.barrier is barrier for copy in self.in_flight)

    def land_all(self, barrier: MBarrier) -> None:
        """Complete every in-flight copy on `barrier`, in issue order: write its bytes (tagged with the phase
        they count towards) and complete its transaction bytes."""
        landing = [copy for copy in self.in_flight if copy.barrier is barrier]
        if not landing:
            return
        self.in_flight = [copy for copy in self.in_flight if copy.barrier is not barrier]
        for copy in landing:
            if copy.phase is not None and copy.phase != barrier.state.phase:
                self.cta.fail(copy.op, f"this copy, issued while its mbarrier at {self.cta.smem.locate(barrier.address)} "
                                       f"was in phase {copy.phase}, lands in phase {barrier.state.phase}: the earlier "
                                       "copies completed the phase, so the expect_tx bytes are fewer than the bytes "
                                       "delivered", copy.thread)
            self.cta.smem.land(copy.addresses, copy.data, barrier.index, barrier.state.phase)
            if copy.follower_data is not None:
                followers = getattr(self.cta, "followers", None)
                if followers is not None and followers.dropped is None:
                    followers.land(copy.addresses, copy.follower_data, copy.follower_same)
            self.cta.mbarriers.complete_tx(copy.op, copy.thread, barrier, copy.nbytes)

    def check_drained(self) -> None:
        if self.in_flight:
            copy = self.in_flight[0]
            self.cta.fail(copy.op, "the kernel ends with this TMA copy in flight (no thread waited on its mbarrier "
                                   f"at {self.cta.smem.locate(copy.barrier.address)})", copy.thread)
