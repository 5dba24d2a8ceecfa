"""A shared store's checks against copies in flight and pending wgmma reads decided over each CTA's hull of its bytes
(`AsyncCopies.hulls_clear`): a clear hull must mean clear bytes, and a launch must give the same bits and the same
findings with the bytes looked at one by one. The warp-specialized flash kernel's key-bias table (mask-by-mma) is
filled by such stores of every CTA of the batch while its K and V slots are in flight and read."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import launch, tagged_accesses
from tessera.interpreters.ptx.async_copies import FLIGHT, LANDED, AsyncCopies
from tessera.interpreters.ptx.asynchrony import AsyncTracker
from tessera.interpreters.ptx.byte_ranges import cta_hulls
from tessera.interpreters.ptx.happens_before import HappensBefore
from tessera.interpreters.ptx.tagged_accesses import TaggedAccesses
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts

from test_ptx_ctas_together import _launch
from test_ptx_hazards import _attention
from test_ptx_wgmma_groups import _RELEASE, _RELEASE_ARRIVE
from text_edits import filled


def _bytes_clear(tracker, flat: np.ndarray) -> bool:
    """`check_writable`'s byte-by-byte look: no byte of `flat` in flight, no pending wgmma reading one."""
    if tracker.tagged:
        tracker.write_out(flat)
        if any_set(tracker.state[flat] == FLIGHT):
            return False
    if tracker.reading:
        cta = flat // max(tracker.m.shared_bytes, 1)
        groups = tracker.wg_read[:, tracker.hb.chunk_of(flat)].astype(np.int64) - 1
        w = cta[None, :] * tracker.groups_per_cta + np.arange(tracker.groups_per_cta)[:, None]
        if any_set(groups > tracker.wg_done[w]):
            return False
    return True


def test_a_clear_hull_means_clear_bytes_and_the_key_bias_stores_take_it(monkeypatch):
    decided = []
    hulls_clear = AsyncCopies.hulls_clear

    def checked(self, flat, hulls=None):
        clear = hulls_clear(self, flat, hulls)
        if clear:
            assert _bytes_clear(self, flat)
        decided.append(clear)
        return clear
    monkeypatch.setattr(AsyncCopies, "hulls_clear", checked)
    out = _launch(_attention(True)[2])
    assert isinstance(out, np.ndarray)
    assert any(decided)


def test_hulls_without_completed_async_reads_hold_bytes_without_any(monkeypatch):
    """`AsyncRecords._after_async_reads` returns before its gather when no CTA's hull holds a completed async read's
    record: the gather (`_async_ends`) then finds none at any byte, which is where the byte path returns too."""
    decided = []
    after = HappensBefore._after_async_reads

    def checked(self, inst, lanes, index, what, clocks, span=None, hulls=None):
        hulls = cta_hulls(index.reshape(-1), self._cta_bytes()) if hulls is None else hulls
        if span is None and self.races and self.completions and hulls is not None:
            skipped = not any(self._async_read_in(hull) for hull in hulls)
            if skipped:
                assert int(self._async_ends(index).max(initial=0)) == 0
            decided.append(skipped)
        return after(self, inst, lanes, index, what, clocks, span, hulls)
    monkeypatch.setattr(HappensBefore, "_after_async_reads", checked)
    out = _launch(_attention(True)[2])
    assert isinstance(out, np.ndarray)
    assert any(decided)


def test_the_same_bits_with_the_bytes_looked_at_one_by_one(monkeypatch):
    together = _launch(_attention(True)[2])
    monkeypatch.setattr(AsyncCopies, "hulls_clear", lambda *args: False)
    monkeypatch.setattr(HappensBefore, "_async_read_in", lambda *args: True)
    one_by_one = _launch(_attention(True)[2])
    assert isinstance(together, np.ndarray) and together.tobytes() == one_by_one.tobytes()


@pytest.mark.parametrize("hulls", [True, False], ids=["hulls", "bytes"])
def test_a_store_over_a_pending_wgmma_read_is_reported_either_way(monkeypatch, hulls):
    """A hull that a pending wgmma may read is not clear: the bytes decide, and the finding is the same."""
    if not hulls:
        monkeypatch.setattr(AsyncCopies, "hulls_clear", lambda *args: False)
    text = filled(_RELEASE, EARLY=_RELEASE_ARRIVE, LATE="")
    with pytest.raises(Exception, match=r"st.shared.u32: the store overwrites shared address 0x0(, which| while) "):
        launch(text, "release", 1, 160, [np.full(128, 7, np.float32)], shared_bytes=4096)


def test_a_hull_spanning_a_read_chunk_is_not_clear_but_its_bytes_are():
    """Bytes on either side of a chunk a pending wgmma reads: their hull holds the chunk, so `hulls_clear` declines,
    and the byte look (`check_writable`) passes them."""

    class Machine:
        shared_bytes = 256
        ctas = 2

    class HB:
        def chunk_of(self, flat):
            return flat // 16

    tracker = AsyncTracker.__new__(AsyncTracker)
    tracker.m, tracker.hb, tracker.tagged, tracker.reading = Machine(), HB(), False, True
    tracker.groups_per_cta = 1
    tracker.wg_read = np.zeros((1, 32), np.int32)
    tracker.wg_read[0, 16 + 4] = 1  # CTA 1's chunk 4 read by its warpgroup's group 0, not yet waited for
    tracker.wg_done = np.full(2, -1, np.int64)
    flat = np.array([0, 4, 256 + 48, 256 + 80])  # CTA 1's bytes around its chunk 4 (bytes 64..79)
    assert not tracker.hulls_clear(flat) and _bytes_clear(tracker, flat)
    assert tracker.hulls_clear(np.array([80, 84, 256 + 80, 256 + 96]))
    # the CTAs' hulls in their own windows are asked together: CTA 0's bytes below the chunk put it in the extent
    assert not tracker.hulls_clear(np.array([0, 4, 256 + 80, 256 + 96]))
    assert not tracker.hulls_clear(np.array([256 + 64, 4]))  # CTAs out of order: the bytes decide
    assert facts.SWIZZLE_CHUNK_BYTES == 16


def test_a_store_of_the_batch_keeps_the_landed_ranges_of_the_windows_between(monkeypatch):
    """A store of every CTA's key-bias table forgets the landed ranges of each CTA's hull of its bytes, not those of
    the whole span from the first CTA's table to the last's (the other CTAs' Q, K and V tiles): the dummy trip's
    wgmma then finds its operands landed. Every range read as landed (`_landed_read`) agrees with its bytes: landed
    from one barrier in a phase every reader observed, and no generic write since; the bits are the same when the
    store forgets the whole span."""
    passed = []
    landed_read = TaggedAccesses._landed_read

    def checked(self, lanes, where):
        ok = landed_read(self, lanes, where)
        if ok:
            b, _ = self._landed_cover(where)
            self.write_out(where)
            assert all_set(self.state[where] == LANDED) and all_set(self.tag[where] == b)
            assert self._seen(lanes, b) > int(self.phase[where].max())
            assert not self.hb.w_any or not np.count_nonzero(self.hb.w_clock[where])
        passed.append(ok)
        return ok
    monkeypatch.setattr(TaggedAccesses, "_landed_read", checked)
    looked = []  # the async-proxy reads that were not decided as landed
    async_read = TaggedAccesses.async_read
    monkeypatch.setattr(TaggedAccesses, "async_read", lambda self, *args, **kwargs: (
        looked.append(args[2]), async_read(self, *args, **kwargs))[1])
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and any(passed)
    walked, looked[:] = len(looked), []
    monkeypatch.setattr(tagged_accesses, "cta_hulls", lambda *args: None)
    forgotten = _launch(_attention(True)[2])
    assert kept.tobytes() == forgotten.tobytes()
    assert walked < len(looked)


def test_the_write_records_kept_in_w_spans_decide_as_a_count_and_reset_to_zeros():
    """`HappensBefore.w_spans` (each CTA's hull of a generic write or a cp.async landing since the last reset) holds
    every byte whose write records may be nonzero: among random stores of several CTAs' lanes, landings and async
    copies (which clear the records of their range), `written_in` finds a record in a range exactly where a count
    of its `w_clock` does, and a reset leaves every write record zero, as filling the arrays did."""
    class Inst:
        line = 7

    rng = np.random.default_rng(29)
    hb = HappensBefore(4 * 8, 8, 4 * 512, None, str, str, races=False)
    for trial in range(6):
        for _ in range(40):
            lanes = np.sort(rng.choice(32, int(rng.integers(1, 9)), replace=False))
            width = int(rng.choice([1, 4, 16]))
            index = (lanes // 8 * 512 + rng.integers(0, 512 - width, len(lanes)))[:, None] + np.arange(width)
            kind = rng.choice(["store", "landed", "async"], p=[.5, .2, .3])
            if kind == "store":
                hb.write(Inst(), lanes, index, atomic=bool(rng.random() < .3))
            elif kind == "landed":
                hb.landed(lanes, index, np.full(len(lanes), 9), bool(rng.random() < .5))
            else:
                start = int(rng.integers(0, 4 * 512 - 64))
                hb.w_clock[start:start + 64] = 0  # (an asynchronous copy's range: `async_write`)
            for _ in range(5):
                low = int(rng.integers(0, 4 * 512 - 1))
                span = slice(low, low + int(rng.integers(1, 300)))
                assert hb.written_in(span) == (hb.w_any and bool(np.count_nonzero(hb.w_clock[span]))), (trial, span)
        assert hb.w_any and hb.w_spans
        hb.reset()
        assert not any(np.count_nonzero(a) for a in (hb.w_clock, hb.w_mbarrier, hb.w_atomic, hb.w_cta))
        assert not hb.w_spans and not hb.w_any
