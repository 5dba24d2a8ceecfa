"""A TMA box's asynchrony tags kept as one range (`tag_ranges.TagRanges`): the kept ranges override the per-byte
tags, are written out exactly where bytes are needed (a kept range reaching past a new one, an index meeting
one), and decide every check as the per-byte tags would: on a grid of three CTAs of the warp-specialized flash
kernel the clean run writes none out and gives the same bits as tags written per byte at once, and every seeded
bug of tests/race_seeds.py that reaches the tags is reported with the same text."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx.async_copies import FLIGHT, LANDED, PLAIN
from tessera.interpreters.ptx.byte_ranges import ByteRanges
from tessera.interpreters.ptx.tag_ranges import TagRanges

from race_seeds import FLASH_BUGS, seed
from test_ptx_ctas_together import _launch
from test_ptx_hazards import _attention


class _Tags(TagRanges):
    """The per-byte tags of `AsyncTracker` over 64 bytes, with nothing kept."""

    def __init__(self):
        self.state, self.tag, self.phase = np.zeros(64, np.int8), np.zeros(64, np.int32), np.zeros(64, np.int32)
        self.tag_ranges, self.tagged = ByteRanges(), True

    def view(self) -> list[tuple[int, int, int]]:
        """Every byte's (state, tag, phase) as a check sees them: kept ranges over the arrays."""
        kept = _Tags()
        kept.state[:], kept.tag[:], kept.phase[:] = self.state, self.tag, self.phase
        for start, (stop, (state, tag, phase)) in self.tag_ranges.ranges.items():
            kept.state[start:stop], kept.tag[start:stop] = state, tag
            if state == LANDED:
                kept.phase[start:stop] = phase
        return [(int(s), int(t), int(p) if s == LANDED else 0) for s, t, p in zip(kept.state, kept.tag, kept.phase)]


def test_a_kept_range_overrides_the_bytes_and_is_written_out_where_bytes_are_needed():
    tags = _Tags()
    tags.keep_tags(slice(16, 32), FLIGHT, 3)
    assert tags.state.any() == 0 and tags.flight_in(slice(20, 24)) and not tags.flight_in(slice(0, 16))
    tags.keep_tags(slice(16, 32), LANDED, 1, 5)  # the landing replaces the range: nothing written out
    assert tags.tag_ranges.starts == [16] and not tags.state.any()
    assert tags.tag_ranges.covering(18, 30) == [(LANDED, 1, 5)] and tags.tag_ranges.covering(8, 30) is None
    tags.keep_tags(slice(32, 48), LANDED, 1, 6)
    assert tags.tag_ranges.covering(24, 40) == [(LANDED, 1, 5), (LANDED, 1, 6)]
    before = tags.view()
    tags.keep_tags(slice(40, 56), FLIGHT, 4)  # reaches into a kept range: that one is written out first
    assert tags.tag_ranges.starts == [16, 40] and (tags.state[32:40] == LANDED).all() and (tags.phase[32:40] == 6).all()
    assert tags.view()[:40] == before[:40] and tags.view()[40:56] == [(FLIGHT, 4, 0)] * 16
    tags.write_out(np.array([[30, 17]]))  # an index: the ranges its hull meets
    assert tags.tag_ranges.starts == [40] and tags.view()[16:32] == [(LANDED, 1, 5)] * 16
    assert tags.flight_in(slice(0, 41)) and not tags.flight_in(slice(0, 40))  # (written out: from the bytes)
    assert not tags.tag_ranges
    assert tags.view()[40:56] == [(FLIGHT, 4, 0)] * 16 and tags.view()[56:] == [(PLAIN, 0, 0)] * 8


def _written_at_once(monkeypatch) -> None:
    """Every kept range written out as soon as it is kept: the per-byte tags of before `tag_ranges`."""
    keep = TagRanges.keep_tags

    def keep_and_write(self, span, *args):
        keep(self, span, *args)
        self.write_out(span)
    monkeypatch.setattr(TagRanges, "keep_tags", keep_and_write)


def test_the_grid_keeps_its_boxes_and_gives_the_same_bits(monkeypatch):
    written = []
    write_range = TagRanges._write_range
    monkeypatch.setattr(TagRanges, "_write_range", lambda self, start: (written.append(start),
                                                                        write_range(self, start)))
    kept = _launch(_attention(True)[2])
    assert isinstance(kept, np.ndarray) and not written
    monkeypatch.undo()
    _written_at_once(monkeypatch)
    at_once = _launch(_attention(True)[2])
    assert kept.dtype == at_once.dtype and kept.tobytes() == at_once.tobytes()


BUGS = ["wait deleted: the K full wait in the consumer loop", "parity flipped: the V full wait in the consumer loop",
        "slot released before the read: V, right after its full wait", "wait deleted: the consumers' Q wait"]


@pytest.mark.parametrize("bug", BUGS)
def test_a_seeded_bug_reports_the_same(bug, monkeypatch):
    kind, name, edit = next(b for b in FLASH_BUGS if f"{b[0]}: {b[1]}" == bug)
    text = seed(_attention(True)[2], edit)
    kept = _launch(text)
    _written_at_once(monkeypatch)
    assert isinstance(kept, str) and "error" in kept, kept
    assert kept == _launch(text)
