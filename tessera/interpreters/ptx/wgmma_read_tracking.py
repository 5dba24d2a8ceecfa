"""The shared-memory reads of wgmma in the PTX executor's asynchrony checks (`wgmma_tracking.WgmmaTracking`, and
through it `asynchrony.AsyncTracker`, inherit these): a wgmma's operand bytes stay read until a `wgmma.wait_group`
covers its warpgroup's group [memory_model.WGMMA_WAIT_PER_THREAD], and a write into bytes a pending wgmma may read
is a hazard.

- Records: one per 16-byte chunk (a descriptor reads whole chunks) and per warpgroup (`wg_read`: [local warpgroup,
  chunk], the reading group + 1; `HappensBefore.chunk_of`), with the instruction of each (warpgroup, group) in
  `read_inst`.
- `wgmma_reads` checks and records one operand read by whole warpgroups; `wgmma_reads_landed` records a step's
  reads of every CTA at once where each lies in landed ranges its readers observed.
- `_check_not_read_by_wgmma` is the hazard check of a write (a store, a copy): by each CTA's hull first
  (`_read_by_wgmma`, `_read_by_wgmma_ctas`), then byte by byte where one may be read.

The state lives on the tracker (`asynchrony.AsyncTracker.reset`).
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.byte_ranges import cta_hulls
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts

_CHUNK = facts.SWIZZLE_CHUNK_BYTES
"""The bytes of a wgmma operand's chunk (`WgmmaReadTracking.wgmma_reads`), which every swizzle keeps together."""


class WgmmaReadTracking:
    """The shared-memory reads of wgmma (see the module docstring); a base of `wgmma_tracking.WgmmaTracking`."""

    def wgmma_reads(self, inst, lanes: np.ndarray, flat: np.ndarray | None, operand: str, span: slice | None = None,
                    hull: slice | None = None, chunks: np.ndarray | None = None, base: int = 0,
                    own_rows: bool = False, chunk_set: np.ndarray | slice | None = None) -> None:
        """The warpgroups of `lanes` (whole warpgroups of one CTA, in order) each read their wgmma operand at
        `flat` (checked once as an async-proxy read of them all); the bytes stay read until a wgmma.wait_group
        covers each warpgroup's group. `span`: the range `flat` fills, when it fills one (a swizzled tile);
        `hull`: a range holding `flat` (`async_read`). `chunks`: `flat` as whole 16-byte chunks of the CTA's
        shared memory at `base` (bytes base + 16c to base + 16c + 15 for each c: 16 bytes of a core matrix row
        each); `flat` may then be None (made from the chunks where a check walks the bytes). `own_rows`: the
        operand is A, its bytes row by row, each warp reading its own rows [memory_model.WGMMA_A_ROWS_PER_WARP].
        The records are one per chunk (`HappensBefore.chunk_of`): `chunk_set` the CTA's chunks the operand reads
        (numbered from the CTA's first, a range where they are consecutive), else found from `flat`."""
        if flat is None:
            def flat_bytes():
                return base + (chunks[:, None] * _CHUNK + np.arange(_CHUNK)).reshape(-1)
        else:
            def flat_bytes():
                return flat
        where = span if span is not None else hull
        if where is None or not self._landed_read(lanes, where):
            self.async_read(inst, lanes, flat_bytes(), f"wgmma operand {operand}", span, hull, own_rows)
        if self.wg_read is None:
            self.wg_read = self.hb.wgmma_reads = np.zeros((self.groups_per_cta, self.hb.chunk_count()), np.int32)
        records = self.wg_read
        if chunk_set is None:
            at = np.unique(self.hb.chunk_of(flat_bytes()))
        else:  # the CTA's chunks: its columns of the records
            first = base // max(self.m.shared_bytes, 1) * -(-max(self.m.shared_bytes, 1) // _CHUNK)
            records = records[:, first:]
            at = chunk_set
        unit = self.m.unit_of[facts.WARPGROUP_SIZE]
        for start in range(0, len(lanes), facts.WARPGROUP_SIZE):  # each warpgroup reading it (whole warpgroups)
            w = int(unit[lanes[start]])
            group = int(self.wg_open[w])
            records[w % self.groups_per_cta, at] = group + 1
            self.read_inst.setdefault((w, group), inst)
        self.reading = True

    def wgmma_reads_landed(self, inst, checks: list[tuple], records: list[tuple]) -> bool:
        """`wgmma_reads` of a wgmma's operands in every CTA of the batch at once (`wgmma_operands.ReadPlan`), when
        every one lies in landed ranges its readers have observed (`checks`: (lanes, range, the lanes as bytes)
        each, judged by `_landed_read`: nothing to check byte by byte): their records written in one assignment
        per chunk set (`records`, `wgmma_operands.landed_records`), not per warpgroup. Returns False, having recorded nothing,
        when some read needs the byte checks: the caller then makes the reads one by one, in order.

        A read passes without a look where a read by the same lanes of bytes held by landed ranges of the same
        entries (`ByteRanges.holding`: ends, barriers and phases) passed before in the batch (`landed_seen`):
        `_landed_read` finds the same barrier and phase, which the lanes had observed, and their `observed`
        phases only grow. A main loop's K steps read a slot's tile so: one look per fill and readers."""
        ranges, seen = self.landed_ranges, self.landed_seen
        for lanes, where, readers in checks:
            held = ranges.holding(where.start, where.stop)
            if held is None or (held, readers) not in seen:
                if not self._landed_read(lanes, where):
                    return False
                if held is not None:
                    seen.add((held, readers))
        if self.wg_read is None:
            self.wg_read = self.hb.wgmma_reads = np.zeros((self.groups_per_cta, self.hb.chunk_count()), np.int32)
        flat = self.wg_read.reshape(-1)
        for positions, ws, chunks in records:
            groups = self.wg_open[ws].tolist()
            if min(groups) == max(groups):  # the warpgroups' open groups agree (a main loop's): one value
                flat[positions] = groups[0] + 1
            else:
                flat[positions] = np.repeat(np.array(groups, flat.dtype) + 1, chunks)
            for key in zip(ws.tolist(), groups):
                self.read_inst.setdefault(key, inst)
        self.reading = True
        return True

    def _read_by_wgmma(self, span: slice) -> bool:
        """Whether a wgmma whose group no wait_group has covered yet may read a byte of `span` (one CTA's)."""
        cta = span.start // max(self.m.shared_bytes, 1)
        w = cta * self.groups_per_cta + np.arange(self.groups_per_cta)
        if span.stop <= span.start:
            return False
        chunks = self.hb.chunk_span(span)
        return any_set(self.wg_read[:, chunks].max(axis=1).astype(np.int64) - 1 > self.wg_done[w])

    def _read_by_wgmma_ctas(self, rows: slice | np.ndarray, first: int, stop: int) -> bool:
        """`_read_by_wgmma` of the chunks [first, stop) of each CTA of `rows` (CTA slots) at once."""
        if stop <= first:
            return False
        gpc = self.groups_per_cta
        reads = self.wg_read.reshape(gpc, self.m.ctas, -1)[:, rows, first:stop].max(axis=2)  # [warpgroup, CTA]
        return any_set(reads.astype(np.int64) - 1 > self.wg_done.reshape(self.m.ctas, gpc)[rows].T)

    def _check_not_read_by_wgmma(self, inst, lanes, flat: np.ndarray, what: str, acquired: int | None) -> None:
        hulls = cta_hulls(flat, self.m.shared_bytes)  # (a store of a batch's CTAs: each CTA's hull of its bytes)
        if hulls is not None and not any(self._read_by_wgmma(hull) for hull in hulls):
            return
        cta = flat // max(self.m.shared_bytes, 1)
        if len(cta) and cta[0] == cta[-1] and cta.min() == cta.max():
            cta = cta[:1]  # one CTA's bytes (a copy, a store): one row of warpgroups for all of them
        groups = self.wg_read[:, self.hb.chunk_of(flat)].astype(np.int64) - 1  # [local warpgroup, byte]
        w = cta[None, :] * self.groups_per_cta + np.arange(self.groups_per_cta)[:, None]
        pending = groups > self.wg_done[w]
        if any_set(pending):
            w = np.broadcast_to(w, groups.shape)
            local, i = np.unravel_index(np.argmax(pending), pending.shape)
            reader = self.read_inst[(int(w[local, i]), int(groups[local, i]))]
            released = ""
            if acquired is not None:
                group_lanes = np.flatnonzero(self.m.unit_of[facts.WARPGROUP_SIZE] == w[local, i])
                lines = self.released[acquired, group_lanes]
                if any_set(lines):
                    released = (f"; warpgroup {int(local)} released it with the arrive on "
                                f"{self.barrier_name(acquired)} at line {int(lines.max())} before a wgmma.wait_group "
                                "covered that wgmma (a release before the consumer's last read)")
            raise self.hazard(inst, f"{what} overwrites {self.where(flat[i])} while the wgmma at line {reader.line} "
                                    f"of warpgroup {int(local)} may still read it (no wgmma.wait_group covers its "
                                    f"group yet){released}", lanes[i])
