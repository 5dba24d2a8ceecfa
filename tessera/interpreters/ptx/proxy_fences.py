"""The proxy rule in the PTX executor's happens-before (`happens_before`, whose docstring has the model): a generic
write must be made visible to the async proxy before an async-proxy access of its bytes.

Proxies [P#memory-consistency-model-proxy-preserved-base-causality-order]: a generic write W is visible
to an async-proxy read R (a TMA or bulk store, a wgmma operand) when a `fence.proxy.async` lies on a
causality path from W to R. `fenced[t, u]` is the last epoch of thread u that a proxy fence on a path into
t's present point covers: a fence by t sets `fenced[t] = clock[t]`, and every edge that carries `clock`
carries `fenced` too. So a warpgroup that stores its tile, meets on a named barrier and lets one thread
fence and issue the TMA store is correct (the barrier carries the stores to the fence), and the same without
the barrier, or with the fence before the barrier, is reported. The path must reach every issuing warp (a
wgmma's four warps each read the B operand; an A operand in shared memory is read a quarter per warp), and
bytes a cp.async.mbarrier.arrive completed need only the completion, unless `strict_proxy`
[memory_model.CP_ASYNC_PROXY]. This check runs whether or not generic races are checked (`races`).
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.truth import any_set
from tessera.sm90 import facts


class ProxyFenceChecks:
    """The async-proxy accesses of `HappensBefore` (its base class: the clocks, `fenced` and the write records are
    `HappensBefore`'s)."""

    def async_read(self, inst, lanes: np.ndarray, flat: np.ndarray, what: str, span: slice | None = None,
                   hull: slice | None = None, own_rows: bool = False, does: str = "reads") -> None:
        """The async proxy reads `flat` for `lanes` (or, `does` "writes", a copy of theirs writes it: two writes
        through two proxies are ordered only by the fence as well): each generic write of those bytes needs a
        fence.proxy.async on a happens-before path into every issuing warp (a path into one of its threads: the
        warp issues the copy or its part of the wgmma as one). A wgmma is issued by the four warps of its
        warpgroup, each `.sync.aligned` across its own warp only, and every warp reads the whole B operand: a
        store by one warp needs a path (a named barrier) into each of the others; the writer's own fence does not
        order it before another warp's read. `own_rows`: `flat` is a shared-memory A operand, row by row, of the
        one warpgroup `lanes`: each warp reads its own quarter of the rows [memory_model.WGMMA_A_ROWS_PER_WARP],
        so the path is needed into that warp only. `span`: the range `flat` fills, when it fills one (no generic
        write in it: nothing to check, decided without a gather); `hull`: a range holding `flat`, the same way.
        Bytes a cp.async.mbarrier.arrive completed need no fence, only the completion happening before the read
        (unless `strict_proxy`) [memory_model.CP_ASYNC_PROXY]."""
        if not self.w_any or (span is not None and not self.written_in(span)):
            return
        if hull is not None and not self.written_in(hull):
            return
        epochs = self.w_clock[flat]
        if not any_set(epochs):
            return
        writers = self.w_lane[flat]
        per_warp = self._per_warp(self.fenced[lanes, :self.threads])
        owner = None
        if own_rows and len(per_warp) == facts.WARPS_PER_WARPGROUP and not len(flat) % facts.WARPS_PER_WARPGROUP:
            owner = np.arange(len(flat)) * facts.WARPS_PER_WARPGROUP // len(flat)  # the warp of each byte's row
            bad = epochs > per_warp[owner, writers % self.threads]
        else:
            bad = epochs > per_warp.min(axis=0)[writers % self.threads]
        if not any_set(bad):
            return
        completed = bad & self.w_mbarrier[flat] if not self.strict_proxy else None
        if completed is not None and any_set(completed):  # visible to the async proxy of whoever it happens before
            known = self._per_warp(self.clock[lanes])
            column = writers % self.threads
            seen = known[owner, column] if owner is not None else known.min(axis=0)[column]
            bad &= ~(completed & (epochs <= seen))
            if not any_set(bad):
                return
        i = int(np.argmax(bad))
        writer, b = int(writers[i]), int(flat[i])
        warp = int(owner[i]) if owner is not None else int(np.argmin(per_warp[:, writer % self.threads]))
        reader = int(lanes[warp * facts.WARP_SIZE]) if len(per_warp) < len(lanes) else int(lanes[warp])
        ordered = int(self.clock[reader, writer % self.threads]) >= int(epochs[i])
        access = "read" if does == "reads" else "write"
        why = (f"no fence.proxy.async lies between the store and this {access} on any synchronisation path" if ordered
               else f"no synchronisation orders the store before this {access}")
        raise self.hazard(inst, f"{what} {does} {self.where(b)}, which {self.describe_lane(writer)} stored through "
                                "the generic proxy and has not made visible to the async proxy (missing "
                                f"fence.proxy.async after the store at line {int(self.w_line[b])}: {why})",
                          reader)

    @staticmethod
    def _per_warp(rows: np.ndarray) -> np.ndarray:
        """Per issuing warp, the best of its lanes' rows (`rows` [lanes, threads]; lanes in whole warps, else
        one row per lane)."""
        if len(rows) % facts.WARP_SIZE:
            return rows
        return rows.reshape(-1, facts.WARP_SIZE, rows.shape[1]).max(axis=1)
