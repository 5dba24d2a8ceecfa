"""The CTA simulator's per-byte records read and written by range: byte boxes (strided views standing for index
arrays), TMA copies landing as one shared range, and TMA reads of global memory recorded when something needs them.
Each fast path is compared with the index-array path it replaces, on random cases."""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.byte_box import ByteBox, byte_box, put, take
from tessera.interpreters.sm90.global_race_records import _Side
from tessera.interpreters.sm90.global_races import GlobalAccesses
from tessera.interpreters.sm90.tma import TensorMap, shared_box
from tessera.sm90 import facts


def test_byte_box_is_its_index_array():
    where = byte_box(40, (3, 2, 5), (100, 10, 1))
    expected = np.array([40 + 100 * i + 10 * j + k for i in range(3) for j in range(2) for k in range(5)])
    assert isinstance(where, ByteBox) and np.array_equal(where, expected)
    assert where.box == (40, (3, 2, 5), (100, 10, 1))
    assert byte_box(7, (4, 8), (8, 1)).box == (7, (32,), (1,))  # rows back to back: one range
    assert where[where > 100].box is None and (where + 1).box is None  # derived arrays are plain indices


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.uint8])
def test_take_and_put_match_indexing(dtype):
    rng = np.random.default_rng(0)
    for shape, strides in [((16,), (1,)), ((6, 12), (40, 1)), ((3, 4, 8), (300, 50, 1)), ((5, 3), (7, 2))]:
        where = byte_box(int(rng.integers(0, 20)), shape, strides)
        plain = np.asarray(where).view(np.ndarray)
        records = rng.integers(0, 2 if dtype is np.bool_ else 100, 1200).astype(dtype)
        taken = take(records, where)
        assert np.array_equal(taken, records[plain])
        taken[...] = 0  # a copy, as indexing gives
        assert np.array_equal(take(records, where), records[plain])
        values = rng.integers(0, 2, len(plain)).astype(dtype)
        for value in (values, dtype(1)):
            ours, theirs = records.copy(), records.copy()
            put(ours, where, value)
            theirs[plain] = value
            assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("start", [0, 128, 384, 1024 + 640])
def test_shared_box_lands_the_swizzled_bytes(swizzle, start):
    """The bytes a TMA copy writes, as a range in address order, are the swizzled copy's."""
    size = 4096
    data = np.random.default_rng(start + swizzle).integers(0, 256, size).astype(np.uint8)
    addresses, ordered = shared_box(start, data, swizzle)
    assert getattr(addresses, "box", None) == (start, (size,), (1,))
    expected = np.zeros(start + size, np.uint8)
    expected[facts.swizzle_address(start + np.arange(size), swizzle)] = data
    landed = np.zeros(start + size, np.uint8)
    put(landed, addresses, ordered)
    assert np.array_equal(landed, expected)


def test_shared_box_off_a_line_keeps_the_swizzled_addresses():
    data = np.arange(200, dtype=np.uint8)  # not whole 128-byte lines: the swizzle leaves the range
    addresses, ordered = shared_box(128, data, 128)
    assert getattr(addresses, "box", None) is None and ordered is data
    assert np.array_equal(addresses, facts.swizzle_address(128 + np.arange(200), 128))


def test_box_offsets_inside_and_across_the_edge():
    rng = np.random.default_rng(3)
    for shape, box, dtype in [((300, 128), (64, 64), ml_dtypes.bfloat16), ((5, 77, 96), (32, 16, 2), np.float32),
                              ((40,), (16,), np.float16)]:
        tensor_map = TensorMap.encode("t", np.zeros(shape, dtype), box, 0)
        for _ in range(12):
            coords = [int(rng.integers(-3, d)) for d in reversed(shape)]
            offsets, valid = tensor_map.spec.box_byte_offsets(coords)
            expected = (offsets[valid][:, None] + np.arange(tensor_map.spec.element_bytes)).reshape(-1)
            assert np.array_equal(tensor_map.box_offsets(coords), expected)


def _sides(record) -> list[np.ndarray]:
    sides = [getattr(side, name) for side in (record.read, record.other_read)
             for name in ("cta", "thread", "time", "op", "atomic", "proxy_async")]
    return sides + ([getattr(record.until, name) for name in ("cta", "thread", "op", "barrier", "phase")]
                    if record.until is not None else [])


def test_deferred_tma_reads_leave_the_records_of_recording_each():
    """Random TMA reads by several CTAs of overlapping boxes, some with an `until`: recorded when a later access
    needs them, the per-byte records equal recording each read as it came."""
    rng = np.random.default_rng(5)
    size, tensor, op = 4096, 0, object()
    for trial in range(6):
        deferred, eager = GlobalAccesses(["t"], (4, 1, 1)), GlobalAccesses(["t"], (4, 1, 1))
        clock = iter(range(1, 10**6))
        boxes = [byte_box(int(rng.integers(0, 8)) * 256, (4, 128), (256, 1)) for _ in range(3)]
        boxes.append(np.arange(300, 900, 3))  # bytes that are no box (a copy across the tensor's edge)
        for _ in range(40):
            rank = int(rng.integers(0, 3))
            cta = SimpleNamespace(cta_id=(rank, 0, 0), grid=(4, 1, 1), races=True, tick=lambda: next(clock))
            where = boxes[int(rng.integers(0, len(boxes)))]
            thread = int(rng.integers(0, 256))
            until = (int(rng.integers(0, 4)), int(rng.integers(0, 3))) if rng.random() < 0.7 else None
            deferred.async_read(cta, op, tensor, size, where, thread, until)
            now = cta.tick()
            record = eager._record(tensor, size)
            eager._record_read(record, where, rank, thread, now - 1, eager._index(op), False, True)
            if until is not None:
                eager._until(record, size, where, rank, thread, eager._index(op), *until)
        record = deferred.tensors[tensor]
        assert record.deferred and len(record.deferred) <= len(boxes)
        deferred._settle(record)
        for ours, theirs in zip(_sides(record), _sides(eager.tensors[tensor]), strict=True):
            assert np.array_equal(ours, theirs), trial
        assert isinstance(record.read, _Side)


def test_record_pool_lends_refilled_arrays():
    from tessera.interpreters.sm90.record_pool import RecordPool

    pool = RecordPool()
    first = pool.full((3, 5), -1, np.int64)
    first[...] = 9  # a CTA's records
    second = pool.full((3, 5), -1, np.int64)
    assert second is not first  # still lent
    pool.reclaim()
    again = [pool.full((3, 5), -1, np.int64) for _ in range(2)]
    assert {id(a) for a in again} == {id(first), id(second)}  # the same memory, as np.full would give it
    assert all((a == -1).all() for a in again)
    assert pool.full((3, 5), 0, np.int32).dtype == np.int32


def test_record_pool_refills_only_what_a_borrower_changed():
    """An array whose borrower says which part it changed is refilled there only (nothing, some rows), and a free
    array already holding the value asked for is lent before one that must be refilled; every array lent holds
    its value everywhere."""
    from tessera.interpreters.sm90.record_pool import RecordPool

    pool = RecordPool()
    untouched = pool.full((3, 5), -1, np.int32, changed=lambda: None)
    rows = pool.full((3, 5), -1, np.int32, changed=lambda: np.array([1]))
    rows[1] = 4
    zeros = pool.full((3, 5), 0, np.int32)
    zeros[...] = 7
    pool.reclaim()
    assert pool.full((3, 5), 0, np.int32) is zeros  # lent with 0, its changes unsaid: refilled all over
    again = [pool.full((3, 5), -1, np.int32) for _ in range(2)]
    assert {id(a) for a in again} == {id(untouched), id(rows)}
    assert (zeros == 0).all() and all((a == -1).all() for a in again)
    pool.reclaim()
    rows[...] = 5  # said to have changed all of it (no `changed`): refilled all over, even for the same value
    assert all((pool.full((3, 5), -1, np.int32) == -1).all() for _ in range(2))


def test_record_pool_lends_unset_arrays_without_a_refill():
    """`unset` lends a free array as it is, one that a `full` would refill whole first; taken back, it is refilled
    whole for the next `full`, whatever it holds."""
    from tessera.interpreters.sm90.record_pool import RecordPool

    pool = RecordPool()
    kept = pool.full(16, -1, np.int32, changed=lambda: None)  # left as lent: lent again without a refill
    dirty = pool.full(16, -1, np.int32)
    dirty[3] = 9
    pool.reclaim()
    unset = pool.unset(16, np.int32)
    assert unset is dirty and unset[3] == 9  # the one to refill whole anyway, not refilled
    unset[...] = -1  # what it holds says nothing: its next `full` refills it
    pool.reclaim()
    again = [pool.full(16, -1, np.int32) for _ in range(2)]
    assert {id(a) for a in again} == {id(kept), id(dirty)} and all((a == -1).all() for a in again)
    assert pool.unset(8, np.int8).shape == (8,)  # none free of that shape: a new one


def test_unset_records_are_read_only_where_their_unit_set_them(monkeypatch):
    """Records lent unset (`RecordPool.unset`: shared memory's bytes, copy barriers and phases, a global side's
    fields but its CTA rank): flash runs whose unset arrays are poisoned (every barrier past the last instance,
    thread and op past the last, huge times and phases, every flag set, bytes 77) end as runs with zeros, with the
    same outputs and no hazard: no check or operand reads a record its unit did not set."""
    import tessera
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.sm90 import run_target_kernel
    from tessera.interpreters.sm90.record_pool import RecordPool
    from tessera.kernel_abi import kernels, signature
    from tessera.regalloc import allocate_registers

    module = tessera.kernels.flash_attention(head_dim=64, causal=True)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    allocation = allocate_registers(target)
    inputs = [np.random.default_rng(4).standard_normal((1, 1, 256, 64)) for _ in range(3)]
    unset = RecordPool.unset

    def run(poison: bool) -> list[np.ndarray]:
        def filled(self, shape, dtype, launch=False):
            array = unset(self, shape, dtype, launch)
            array[...] = (True if array.dtype == bool else 1 << 30 if array.itemsize >= 4 else 77) if poison else 0
            return array

        monkeypatch.setattr(RecordPool, "unset", filled)
        arrays, sizes = prepare_arguments(sig, inputs)
        run_target_kernel(target, arrays, sizes, allocation)
        run_target_kernel(target, arrays, sizes, allocation)  # its records from the first launch's pool
        return [np.asarray(a).copy() for a in arrays]

    for ours, theirs in zip(run(True), run(False), strict=True):
        assert np.array_equal(ours, theirs)


def test_record_pool_lends_launch_records_until_the_launch_ends():
    """A launch's own records (its global race records) stay lent when its CTAs' are reclaimed, and are lent
    again, refilled, only after the launch."""
    from tessera.interpreters.sm90.record_pool import RecordPool

    pool = RecordPool()
    launch = pool.full(64, -1, np.int32, launch=True)
    pool.reclaim()  # a batch of CTAs ends
    assert pool.full(64, -1, np.int32) is not launch
    pool.reclaim(launch=True)  # the launch ends
    launch[...] = 3
    assert pool.full(64, -1, np.int32) is launch and (launch == -1).all()


def test_a_side_allocates_its_records_at_the_first_access_only():
    """Asking whether a side recorded anything allocates nothing; its first recorded access allocates its arrays
    (lent by the launch's pool where there is one)."""
    from tessera.interpreters.sm90.record_pool import RecordPool

    side = _Side.empty(32, RecordPool())
    assert not side.recorded and not side.recorded
    side.set(np.arange(4), 1, np.arange(4), 5, 0, False)
    assert side.recorded and side.cta[:5].tolist() == [1, 1, 1, 1, -1] and side.pool.nbytes


def test_read_box_is_the_per_byte_read():
    """A TMA box read as strided rows (or moved origin offsets) holds the bytes the map's element offsets name,
    zero outside the tensor, for row-major and padded-pitch tensors, boxes inside, at and across the edges."""
    rng = np.random.default_rng(11)
    padded = np.zeros((70, 160), ml_dtypes.bfloat16)[:, :96]
    for array, box in [(np.zeros((300, 128), ml_dtypes.bfloat16), (64, 64)), (padded, (32, 16)),
                       (np.zeros((5, 77, 96), np.float32), (32, 16, 2)), (np.zeros((40,), np.float16), (16,))]:
        array[...] = rng.standard_normal(array.shape).astype(array.dtype)
        tensor_map = TensorMap.encode("t", array, box, 0)
        spec, e = tensor_map.spec, tensor_map.spec.element_bytes
        for _ in range(12):
            coords = [int(rng.integers(-3, d)) for d in reversed(array.shape)]
            offsets, valid = spec.box_byte_offsets(coords)
            expected = np.where(valid[:, None], tensor_map.memory[np.where(valid, offsets, 0)[:, None] + np.arange(e)],
                                0).reshape(-1)
            assert np.array_equal(tensor_map.read_box(coords), expected), coords


def test_boxes_over_every_edge_read_their_inside_rows():
    """A box over the tensor's edges in any dimensions, or wholly outside it (clipped to the rows inside: a last
    key block), reads and records the bytes the map's element offsets name, as the per-byte path does."""
    rng = np.random.default_rng(5)
    padded = np.zeros((9, 6, 64), np.float16)[:, 1:5, :48]
    for array, box in [(np.zeros((7, 5, 32), np.float16), (16, 4, 3)), (padded, (8, 3, 4)),
                       (np.zeros((3, 48), np.uint8), (32, 2))]:
        array[...] = rng.integers(0, 100, array.shape).astype(array.dtype)
        tensor_map = TensorMap.encode("t", array, box, 0)
        spec, e = tensor_map.spec, tensor_map.spec.element_bytes
        for _ in range(40):
            coords = [int(rng.integers(-b - 2, d + 2)) for b, d in zip(box, reversed(array.shape))]
            offsets, valid = spec.box_byte_offsets(coords)
            expected = np.where(valid[:, None], tensor_map.memory[np.where(valid, offsets, 0)[:, None] + np.arange(e)],
                                0).reshape(-1)
            assert np.array_equal(tensor_map.read_box(coords), expected), coords
            recorded = (offsets[valid][:, None] + np.arange(e)).reshape(-1)
            assert np.array_equal(tensor_map.box_offsets(coords), recorded), coords


@pytest.mark.parametrize("major", ["K", "MN"])
@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_wgmma_operand_gather_is_the_per_byte_gather(major, swizzle):
    """A wgmma operand's bytes gathered by 16-byte chunk or 16-bit element (`OperandBytes.gather`) are the per-byte
    gather of its byte addresses, in every row order, for a CTA's shared memory and a batch's followers'."""
    from tessera.interpreters.sm90 import fragment_view
    from tessera.interpreters.sm90.wgmma_operands import operand_addresses
    from tessera.sm90.descriptor import encode_descriptor

    rng = np.random.default_rng(7)
    smem = rng.integers(0, 256, (3, 64 << 10), dtype=np.uint8)
    lbo, sbo = (128, 1024) if swizzle else (128, 256)
    for extent, order in [(64, fragment_view.operand_order("A", 128)), (128, fragment_view.operand_order("B", 128)),
                          (176, None)]:
        operand = operand_addresses(encode_descriptor(4096, lbo, sbo, swizzle), major, extent, 16, 2)
        _, byte_addresses = operand.ordered(order)
        assert np.array_equal(operand.gather(smem[0], order), smem[0][byte_addresses])
        assert np.array_equal(operand.gather(smem, order), np.take(smem, byte_addresses, axis=1))


@pytest.mark.parametrize("major", ["K", "MN"])
@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_wgmma_operand_mark_is_the_per_byte_store(major, swizzle):
    """A wgmma operand's records stored by run of chunks (`OperandBytes.mark`) are the per-byte store at its byte
    addresses, for int32 and int64 records, a row of a 2-D record array, records whose size is not a whole number
    of runs, and records that are not contiguous."""
    from tessera.interpreters.sm90.wgmma_operands import operand_addresses
    from tessera.sm90.descriptor import encode_descriptor

    lbo, sbo = (128, 1024) if swizzle else (128, 256)
    for extent, k in [(64, 16), (176, 16), (128, 8)]:
        operand = operand_addresses(encode_descriptor(4096, lbo, sbo, swizzle), major, extent, k, 32 // k)
        assert swizzle == 0 or operand.runs is not None
        for size, dtype in [(64 << 10, np.int32), ((64 << 10) + 48, np.int64)]:
            records, expected = np.full((3, size), -1, dtype), np.full((3, size), -1, dtype)
            operand.mark(records[1], 7)
            expected[1][operand.byte_addresses] = 7
            assert np.array_equal(records, expected), (extent, k, size)
        strided, expected = np.full((64 << 10, 2), -1, np.int32), np.full((64 << 10, 2), -1, np.int32)
        operand.mark(strided[:, 1], 5)  # not contiguous: through a [runs, run bytes] view
        expected[operand.byte_addresses, 1] = 5
        assert np.array_equal(strided, expected)


@pytest.mark.parametrize("swizzle", [32, 64, 128])
def test_shared_box_lands_each_byte_at_its_swizzled_address(swizzle):
    """Bytes permuted as whole 16-byte chunks land where the swizzle puts each byte (facts.swizzle_address)."""
    rng = np.random.default_rng(swizzle)
    for _ in range(8):
        start = int(rng.integers(0, 8)) * 128 + 1024 * int(rng.integers(0, 3))
        data = rng.integers(0, 256, 128 * int(rng.integers(1, 40)), np.uint8)
        addresses, ordered = shared_box(start, data, swizzle)
        landed, expected = np.zeros(8192, np.uint8), np.zeros(8192, np.uint8)
        put(landed, addresses, ordered)
        expected[facts.swizzle_address(start + np.arange(data.size), swizzle)] = data
        assert addresses.box is not None and np.array_equal(landed, expected)


def test_launch_pool_outlives_a_launch_and_not_a_failure():
    from tessera.interpreters.sm90 import record_pool

    with record_pool.launch_pool() as pool:
        lent = pool.full((4, 6), -1, np.int32)
        lent[...] = 7
    with record_pool.launch_pool() as again:  # the next launch refills the first one's array
        assert again is pool and again.full((4, 6), -1, np.int32) is lent and (lent == -1).all()
    with pytest.raises(RuntimeError), record_pool.launch_pool() as failing:
        failing.full((4, 6), -1, np.int32)
        raise RuntimeError("a CTA failed")
    with record_pool.launch_pool() as fresh:  # the failed launch's pool is not reused
        assert fresh is not failing and fresh.full((4, 6), -1, np.int32) is not lent
    with record_pool.launch_pool(False) as none:
        assert none is None
