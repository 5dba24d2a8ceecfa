"""What the wgmma checks keep to decide without a look, against the look, on the three-CTA grid of the
warp-specialized flash kernel: a wgmma's reads of landed bytes kept once they passed
(`WgmmaTracking.wgmma_reads_landed`, `landed_seen`: every call decides as judging each of its reads by `_landed_read`
does, most reads are decided by the kept ones, and the output bits are those of a launch that judges every read;
`ByteRanges.holding`, which names the ranges a read lies in, finds the ranges `covering` finds), and a chain's
lanes clean of touches since their wgmma.fence (`check_fenced_in_chain`: each wgmma it passes passes
`check_fenced`)."""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.byte_ranges import ByteRanges
from tessera.interpreters.ptx.tagged_accesses import TaggedAccesses
from tessera.interpreters.ptx.wgmma_tracking import WgmmaTracking

from test_ptx_ctas_together import _launch
from test_ptx_hazards import _attention


def test_holding_finds_the_ranges_covering_finds():
    """Ranges with gaps and adjacent ones, some dropped: for every [low, high) `holding` holds it exactly when
    `covering` does, with the same values in order."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        ranges, at = ByteRanges(), 0
        for _ in range(int(rng.integers(0, 8))):
            at += 8 * int(rng.integers(0, 3))  # a gap, or none (adjacent ranges)
            stop = at + 8 * int(rng.integers(1, 5))
            ranges.put(at, stop, (int(rng.integers(0, 3)), int(rng.integers(0, 3))))
            at = stop
        if ranges and rng.random() < 0.3:
            ranges.pop(int(rng.choice(ranges.starts)))
        for _ in range(30):
            low = int(rng.integers(0, at + 16))
            high = low + int(rng.integers(1, 40))
            held, cover = ranges.holding(low, high), ranges.covering(low, high)
            assert (held is None) == (cover is None), (ranges.ranges, low, high)
            if held is not None:
                assert [value for _, value in held] == cover


def test_kept_landed_reads_decide_as_each_read_judged(monkeypatch):
    decided, looked, checked = [], [], []
    landed, judge = WgmmaTracking.wgmma_reads_landed, TaggedAccesses._landed_read

    def judged(self, inst, checks, records):
        each = all(judge(self, lanes, where) for lanes, where, _ in checks)
        result = landed(self, inst, checks, records)
        decided.append((result, each))
        checked.append(len(checks))
        return result

    def counted(self, lanes, where):
        looked.append(1)
        return judge(self, lanes, where)
    monkeypatch.setattr(WgmmaTracking, "wgmma_reads_landed", judged)
    monkeypatch.setattr(TaggedAccesses, "_landed_read", counted)
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray)
    assert decided and all(result == each for result, each in decided)
    assert sum(result for result, _ in decided) > len(decided) // 2
    assert len(looked) < sum(checked) // 2, (len(looked), sum(checked))  # most reads decided by kept ones
    monkeypatch.undo()
    monkeypatch.setattr(ByteRanges, "holding", lambda self, low, high: None)  # every read judged
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()


def test_a_clean_chain_passes_its_a_registers_as_check_fenced_does(monkeypatch):
    """The P.V chains (register A) of the grid open clean and their wgmmas pass `check_fenced_in_chain` without a
    look; each would pass `check_fenced`, and the bits are those of a launch that checks each one."""
    passed = []
    in_chain, check = WgmmaTracking.check_fenced_in_chain, WgmmaTracking.check_fenced

    def compared(self, inst, lanes, roles):
        in_chain(self, inst, lanes, roles)
        passed.append(self.chain[7])
        check(self, inst, lanes, roles)  # raises where the look would
    monkeypatch.setattr(WgmmaTracking, "check_fenced_in_chain", compared)
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and passed and all(passed)
    monkeypatch.undo()
    monkeypatch.setattr(WgmmaTracking, "check_fenced_in_chain", check)
    assert kept.tobytes() == _launch(_attention(True)[2]).tobytes()
