"""The synchronisation edges of the PTX executor's happens-before (`happens_before`, whose docstring has the model):
what each barrier, mbarrier, cluster barrier and proxy fence does to the lanes' vector clocks.

- a release joins the releasing lanes' clocks (`clock`, `fenced`, and what they know of other CTAs, `remote`) and
  advances their own epochs; an acquire joins a release into the acquiring lanes' clocks;
- named and CTA barriers release at arrival and acquire at completion; mbarrier arrives release into the
  pending phase, a completed phase publishes it, a successful wait acquires what was published;
- a cluster barrier (a release at each .release arrival, an acquire at each wait) and an arrive on a peer's
  mbarrier carry clocks between CTAs (`peer_known` translates a lane's clock into a peer's frame);
- `fence.proxy.async` sets a lane's `fenced` row to its clock, in the state spaces it names.

The arrives and waits of a batch's CTAs as one unit (`arrive_ctas`, `waited_ctas`) keep, for the block of lanes
they ran for, bounds of its clock rows (`block_bounds`: [CTA, thread] each): `high`, the join of its rows,
exactly (what its next release publishes, without a pass over the rows), and `low`, a bound below every row
(an acquire of a clock at or under it changes no row, and one above it in a few columns changes only those); and
the same two of its `fenced` rows ([CTA, 2 x thread]: consumers that fenced once, before their main loop, release
and acquire fenced clocks every trip). A consumer block's release and acquire in a main loop then read no row,
and write only the columns that change.
A `bar.sync` of one CTA's row of the block (`_kept_row`: its release is the kept joins, its completion writes
rows whose bounds are known) and a fence.proxy.async of the whole block keep them too, updated exactly. Any other
change of a row of the block (`rows_changed`: a release, acquire or fence of some of its lanes, a new batch) drops
its bounds.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ranges import consecutive, lane_block
from tessera.interpreters.truth import any_set


class SyncEdges:
    """The synchronisation edges of `HappensBefore` (its base class: the clocks and records are `HappensBefore`'s)."""

    def _release(self, lanes: np.ndarray) -> tuple:
        """(clock, fenced, remote): the join of `lanes`' clocks, fenced clocks and knowledge of other CTAs
        (None: none); their own epochs advance past it. Where `lanes` are one CTA's row of a block whose joins are
        kept (`_kept_row`: a CTA's consumers at a `bar.sync`), the joins are those, and stay kept: no row is read."""
        rows = consecutive(lanes)
        kept = self._kept_row(rows)
        if kept is not None:
            bounds, k, within = kept
            c = bounds[1][k].copy()
            own = _own_epochs(self.clock, slice(rows.start // self.threads, rows.start // self.threads + 1), within)
            own += 1  # each the greatest of its column: the join's own columns are now these
            np.maximum(bounds[1][k:k + 1, within], own, out=bounds[1][k:k + 1, within])
            return c, bounds[3][k], None
        c = self.clock[rows].max(axis=0)
        f = self.fenced[rows].max(axis=0) if any_set(self.fenced_rows[rows]) else np.zeros(2 * self.threads, np.int32)
        self.rows_changed(lanes)
        self.clock.reshape(-1)[self.own_flat[lanes]] += 1
        return c, f, self._remote_of(lanes)

    def _remote_of(self, lanes: np.ndarray) -> dict | None:
        if not self.remote:
            return None
        joined: dict[int, np.ndarray] = {}
        for lane in np.asarray(lanes).tolist():
            for rank, row in self.remote.get(lane, {}).items():
                joined[rank] = row if rank not in joined else np.maximum(joined[rank], row)
        return joined or None

    def learn(self, lanes, known: dict | None) -> None:
        """`lanes` acquire `known` ({CTA rank: [thread] epochs}) about other CTAs."""
        if not known:
            return
        for lane in np.asarray(lanes).reshape(-1).tolist():
            mine = self.remote.setdefault(lane, {})
            for rank, row in known.items():
                mine[rank] = row if rank not in mine else np.maximum(mine[rank], row)

    @staticmethod
    def join(a: tuple | None, b: tuple) -> tuple:
        """The join of two released (clock, fenced, remote) triples."""
        if a is None:
            return b
        remote = dict(a[2] or {})
        for rank, row in (b[2] or {}).items():
            remote[rank] = row if rank not in remote else np.maximum(remote[rank], row)
        return np.maximum(a[0], b[0]), np.maximum(a[1], b[1]), remote or None

    def _acquire(self, lanes: np.ndarray, c: np.ndarray, f: np.ndarray, r: dict | None = None) -> None:
        self.learn(lanes, r)
        self.rows_changed(lanes)
        rows = consecutive(lanes)
        fenced = any_set(f)
        if isinstance(rows, slice):
            np.maximum(self.clock[rows], c, out=self.clock[rows])
            if fenced:
                np.maximum(self.fenced[rows], f, out=self.fenced[rows])
        else:
            self.clock[rows] = np.maximum(self.clock[rows], c)
            if fenced:
                self.fenced[rows] = np.maximum(self.fenced[rows], f)
        if fenced:
            self.fenced_rows[rows] = True

    def barrier(self, participants: np.ndarray, waiters: np.ndarray) -> None:
        """A barrier completed: `participants` arrived (released), `waiters` leave it (acquire)."""
        if len(participants):
            released = self._release(participants)
            if len(waiters):
                self._acquire(waiters, *released)

    def bar_arrived(self, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrive at named barrier `key` = (barrier, CTA slot) (bar.sync, bar.arrive, bar.red): a release
        at this point of theirs. A `bar.arrive` thread runs on, so what it does after arriving is not released
        to the waiters, whenever the barrier completes [memory_model.BARRIER_ORDERING]."""
        if len(lanes):
            self.bar_released[key] = self.join(self.bar_released.get(key), self._release(lanes))
            self.bar_arrivals[key] = self.bar_arrivals.get(key, 0) + len(lanes)

    def bar_completed(self, key: tuple[int, int], waiters: np.ndarray) -> None:
        """Named barrier `key` completed: `waiters` acquire what its arrivals released.

        Where the waiters are the lanes that arrived, consecutive (a `__syncthreads()` of a CTA or of its
        consumer warpgroups), the acquire writes the rows without reading them: a waiter is blocked from its
        arrival, so its rows are those it released, each joined into the release `c`, and its own epoch, the
        greatest of its column, one past c's (the release advanced it); so its row becomes c with its own epoch
        one more, and its fenced row the fenced join. (The waiters are among the lanes that arrived since the
        last completion; as many arrivals as waiters make them the same lanes.) Where they are one CTA's row of a
        kept block (`_kept_row`), its bounds become those rows': c below each, c with the own epochs their join."""
        released = self.bar_released.pop(key, None)
        arrivals = self.bar_arrivals.pop(key, 0)
        if released is None or not len(waiters):
            return
        rows = consecutive(waiters)
        if arrivals != len(waiters) or not isinstance(rows, slice) or released[2] is not None:
            self._acquire(waiters, *released)
            return
        c, f, _ = released
        kept = self._kept_row(rows)
        if kept is None:
            self.rows_changed(waiters)
        clocks = self.clock[rows]
        clocks[...] = c
        cta, first = divmod(rows.start, self.threads)
        own = _own_epochs(self.clock, slice(cta, cta + 1), slice(first, first + rows.stop - rows.start))
        own += 1
        fenced = any_set(f)
        if fenced:
            self.fenced[rows] = f
            self.fenced_rows[rows] = True
        if kept is not None:  # the row's bounds: c below every row, c with the own epochs its join (`block_bounds`)
            bounds, k, within = kept
            if bounds[0] is not None:
                bounds[0] = bounds[0].copy()
                bounds[0][k] = c
            bounds[1][k] = c
            bounds[1][k, within] = own[0]
            if fenced:  # (else no fenced row changed: their join, f, is zero)
                for i in (2, 3):
                    if bounds[i] is not None:
                        bounds[i] = bounds[i].copy()
                        bounds[i][k] = f
                bounds[3].setflags(write=False)

    def arrive(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` arrive on the mbarrier at `key`: a release into its pending phase."""
        self.check_init(inst, key, lanes)
        self.pending[key] = self.join(self.pending.get(key), self._release(lanes))

    def arrive_ctas(self, inst, keys: list[tuple[int, int]], lanes: np.ndarray, block: tuple[slice, slice]) -> bool:
        """`arrive` of the lanes of each CTA of `block` (`ranges.lane_block`) on its own mbarrier `keys[k]`, as one unit:
        every CTA's join at once, its lanes' fenced clocks joined through the block's bounds (`_fenced_join`). False
        (nothing done) where some init check would report (`check_init`), or a lane's knowledge of other CTAs joins
        in: the caller then arrives key by key."""
        t = self.threads
        ctas, within = block
        if self.remote:
            return False
        clocks = self.clock.reshape(-1, t, t)[ctas, within]  # [CTA, lane, thread]
        if not self._inits_seen(keys, block, clocks):
            return False
        bounds = self._bounds_of(block)
        if bounds[1] is None:
            bounds[1] = clocks.max(axis=1)
        joined = bounds[1].copy()  # [CTA, thread]: the join of the rows (`block_bounds`)
        own = _own_epochs(self.clock, ctas, within)  # each lane's own epoch, the greatest of its column
        own += 1
        high = bounds[1][:, within]
        np.maximum(high, own, out=high)
        fenced = self._fenced_join(block, bounds)  # [CTA, 2 * thread] (read-only: `join` never writes a release)
        for k, key in enumerate(keys):
            self.pending[key] = self.join(self.pending.get(key), (joined[k], fenced[k], None))
        return True

    def _fenced_join(self, block: tuple[slice, slice], bounds: list) -> np.ndarray:
        """The join of the `fenced` rows of `block` per CTA ([CTA, 2 * thread], read-only): zeros where no row of it
        may be nonzero, else kept in its bounds (`block_bounds`: a release of the block changes no fenced row)."""
        t = self.threads
        ctas, within = block
        if bounds[3] is None:
            if any_set(self.fenced_rows.reshape(-1, t)[ctas, within]):
                bounds[3] = self.fenced.reshape(-1, t, 2 * t)[ctas, within].max(axis=1)
            else:
                bounds[3] = np.zeros((ctas.stop - ctas.start, 2 * t), np.int32)
            bounds[3].setflags(write=False)
        return bounds[3]

    def _inits_seen(self, keys: list[tuple[int, int]], block: tuple[slice, slice], clocks: np.ndarray) -> bool:
        """Whether `check_init` passes for the lanes of each CTA of `block` (`clocks`: their rows, [CTA, lane,
        thread]) on its mbarrier `keys[k]`. Once it passed it passes until an init (`inits_seen`: clocks only
        grow)."""
        seen = (tuple(keys), block[0].start, block[0].stop, block[1].start, block[1].stop)
        if seen in self.inits_seen:
            return True
        records = [(k, self.inits[key]) for k, key in enumerate(keys) if key in self.inits] if self.races else []
        if not records:
            return True
        rows = np.array([k for k, _ in records])
        columns = np.array([lane % self.threads for _, (lane, _, _) in records])
        epochs = np.array([epoch for _, (_, epoch, _) in records])
        if any_set(clocks[rows, :, columns] < epochs[:, None]):
            return False
        self.inits_seen.add(seen)
        return True

    def waited_ctas(self, inst, keys: list[tuple[int, int]], block: tuple[slice, slice]) -> bool:
        """`waited` of the lanes of each CTA of `block` (`ranges.lane_block`) on its own mbarrier `keys[k]`, as one unit:
        every CTA's acquire at once, a published fenced clock taken into the `fenced` rows as the clock into the
        clock rows (bounds `fenced low`, `fenced high`). False (nothing done) where some init check would report,
        or a published release carries knowledge of other CTAs: the caller then acquires key by key."""
        t = self.threads
        ctas, within = block
        done = [self.published.get(key) for key in keys]
        if any(d is not None and d[2] for d in done):
            return False
        clocks = self.clock.reshape(-1, t, t)[ctas, within]  # [CTA, lane, thread]
        if not self._inits_seen(keys, block, clocks):
            return False
        zero, unfenced = np.zeros(t, self.clock.dtype), np.zeros(2 * t, np.int32)
        published = np.array([zero if d is None else d[0] for d in done])  # [CTA, thread]
        bounds = self._bounds_of(block)
        bounds[0] = _raise_rows(clocks, published, bounds[0])
        if bounds[1] is not None:
            bounds[1] = np.maximum(bounds[1], published)
        fenced = np.array([unfenced if d is None else d[1] for d in done])  # [CTA, 2 * thread]
        if any_set(fenced):  # a fence on a path into the releases: the rows take it in (`fenced_rows` set)
            rows = self.fenced.reshape(-1, t, 2 * t)[ctas, within]
            bounds[2] = _raise_rows(rows, fenced, bounds[2])
            self.fenced_rows.reshape(-1, t)[ctas, within] = True
            if bounds[3] is not None:
                bounds[3] = np.maximum(bounds[3], fenced)
                bounds[3].setflags(write=False)
        return True

    def _kept_row(self, rows) -> tuple[list, int, slice] | None:
        """(bounds, k, threads) where `rows` (`consecutive` lanes) are the threads of CTA slot k of a block whose
        bounds (`block_bounds`) hold its join and fenced join (`high`, `fenced high`), and no lane knows of other
        CTAs; else None. (Kept blocks share no lane: one at most holds them.)"""
        if not self.block_bounds or self.remote or not isinstance(rows, slice):
            return None
        cta, start = divmod(rows.start, self.threads)
        stop = start + rows.stop - rows.start
        for (c0, c1, w0, w1), bounds in self.block_bounds.items():
            if c0 <= cta < c1 and w0 == start and w1 == stop and bounds[1] is not None and bounds[3] is not None:
                return bounds, cta - c0, slice(w0, w1)
        return None

    def _bounds_of(self, block: tuple[slice, slice]) -> list:
        """[low, high, fenced low, fenced high] of `block` (`block_bounds`: None each where not known), kept; the
        bounds of blocks sharing a lane with it dropped."""
        ctas, within = block
        key = (ctas.start, ctas.stop, within.start, within.stop)
        bounds = self.block_bounds.get(key)
        if bounds is None:
            for other in [k for k in self.block_bounds if _meet(k, key)]:
                del self.block_bounds[other]
            bounds = self.block_bounds[key] = [None, None, None, None]
        return bounds

    def rows_changed(self, lanes) -> None:
        """The clock rows of `lanes` (any shape) change other than through `arrive_ctas` and `waited_ctas`: the
        bounds of a block holding one of them (`block_bounds`) no longer apply."""
        if not self.block_bounds:
            return
        lanes = np.asarray(lanes)
        if not lanes.size:
            return
        t = self.threads
        low, high = int(lanes.min()), int(lanes.max())
        first, last = divmod(low, t), divmod(high, t)
        span = (first[0], last[0] + 1) + ((first[1], last[1] + 1) if first[0] == last[0] else (0, t))
        for key in [k for k in self.block_bounds if _meet(k, span)]:
            del self.block_bounds[key]

    def arrive_from_peer(self, key: tuple[int, int], lanes: np.ndarray, rank: int, home: int) -> None:
        """`lanes` (all of the CTA of grid rank `rank`) arrive on the mbarrier at `key` of another CTA of their
        cluster (grid rank `home`), through a shared::cluster address: a release into its pending phase, carried
        in the barrier's CTA's frame. Clock columns are threads of one CTA, so the arrivals' clocks travel as what
        the waiters learn of CTA `rank` (`remote`), and what the arrivals knew of CTA `home` as its columns: a
        producer that waits on its own empty barrier, which its peer's consumers release remotely (CUTLASS's
        cluster pipelines), is ordered after their reads of their own slots [memory_model.WRITE_ORDER]."""
        c, f, r = self._release(lanes)
        known = (r or {}).get(home)
        t = self.threads
        clock = known[:t].copy() if known is not None else np.zeros(t, np.int32)
        fenced = np.zeros(2 * t, np.int32)
        if known is not None:
            fenced[t:] = known[t:]
        remote = {k: v for k, v in (r or {}).items() if k != home}
        remote[rank] = np.concatenate([c, f[t:]]) if rank not in remote else \
            np.maximum(remote[rank], np.concatenate([c, f[t:]]))
        self.pending[key] = self.join(self.pending.get(key), (clock, fenced, remote))

    def cluster_arrived(self, group: int, rank: int, released: tuple) -> None:
        """Threads of the CTA of grid rank `rank` arrive at the barrier of cluster `group`, releasing `released`
        (`_release` at the arrival for .release, so what they do after arriving and before their wait is not
        released, whenever the phase completes) into the barrier's pending phase
        [memory_model.CLUSTER_BARRIER_ORDERING]."""
        pending = self.cluster_pending.setdefault(group, {})
        pending[rank] = self.join(pending.get(rank), released)

    def cluster_completed(self, group: int) -> None:
        """The pending phase of cluster `group`'s barrier completed: its releases are published to the waits."""
        new = self.cluster_pending.pop(group, None)
        published = self.cluster_published.setdefault(group, {})
        for rank, released in (new or {}).items():
            published[rank] = self.join(published.get(rank), released)

    def cluster_waited(self, group: int, rank: int, lanes: np.ndarray) -> None:
        """`lanes` (of the CTA of grid rank `rank`) passed a `barrier.cluster.wait` (.acquire) of cluster `group`:
        they acquire what the arrivals of its completed phases released, their own CTA's threads' as clocks, the
        other CTAs' as what they know of those CTAs (`remote`). (Published releases accumulate over phases: a
        thread waits for the phase it arrived in, and no later phase completes before its wait, since that needs
        its next arrival.)"""
        published = self.cluster_published.get(group)
        if not published or not len(lanes):
            return
        t = self.threads
        known: dict[int, np.ndarray] = {}
        for other, (c, f, remote) in published.items():
            if other == rank:
                self._acquire(lanes, c, f, {k: v for k, v in (remote or {}).items() if k != rank} or None)
                continue
            for k, v in [(other, np.concatenate([c, f[t:]]))] + list((remote or {}).items()):
                if k != rank:
                    known[k] = v if k not in known else np.maximum(known[k], v)
        self.learn(lanes, known)

    def peer_known(self, lane: int, rank: int) -> np.ndarray:
        """[threads] epochs: what `lane` knows of the threads of the CTA of grid rank `rank` (another CTA)."""
        row = self.remote.get(lane, {}).get(rank)
        return row[:self.threads] if row is not None else np.zeros(self.threads, np.int32)

    def cluster_rows(self, lanes: np.ndarray) -> np.ndarray:
        """[lanes, cluster threads]: what each lane knows of every thread of its cluster, column = the thread's
        position in the cluster (CTA rank x threads + thread): its own clock for its CTA's threads, `peer_known`
        for the others'."""
        t, size = self.threads, self.cluster_size
        rows = np.zeros((len(lanes), size * t), np.int32)
        rank_of = self.peer_frame[1]
        for i, lane in enumerate(np.asarray(lanes).tolist()):
            mine = lane // t
            first = mine - mine % size
            for slot in range(first, first + size):
                columns = slice((slot - first) * t, (slot - first + 1) * t)
                rows[i, columns] = self.clock[lane] if slot == mine else self.peer_known(lane, rank_of(slot))
        return rows

    def phase_completed(self, key: tuple[int, int]) -> None:
        """The pending phase of the mbarrier at `key` completed: its releases are published to waiters."""
        new = self.pending.pop(key, None)
        if new is None:
            return
        self.published[key] = self.join(self.published.get(key), new)

    def waited(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        """`lanes` waited successfully on the mbarrier at `key`: they acquire its completed phases."""
        self.check_init(inst, key, lanes)
        done = self.published.get(key)
        if done is not None:
            self._acquire(lanes, *done)

    def init(self, inst, key: tuple[int, int], lane: int) -> None:
        """`mbarrier.init` by `lane`: a write of the barrier that its later users must be ordered after."""
        self.inits[key] = (lane, int(self.clock[lane, lane % self.threads]), inst.line)
        self.inits_seen.clear()
        self.pending.pop(key, None)
        self.published.pop(key, None)

    def check_init(self, inst, key: tuple[int, int], lanes: np.ndarray) -> None:
        record = self.inits.get(key)
        if record is None or not self.races:
            return
        lane, epoch, line = record
        unseen = self.clock[lanes, lane % self.threads] < epoch
        if any_set(unseen):
            i = int(np.argmax(unseen))
            raise self.hazard(inst, f"uses the mbarrier at shared address {key[1]:#x}, which the mbarrier.init at line "
                                    f"{line} ({self.describe_lane(lane)}) initialises, with no synchronisation "
                                    "ordering the init before this use (race: missing bar.sync after mbarrier.init)",
                              int(lanes[i]))

    def fence(self, lanes: np.ndarray, shared: bool = True, global_: bool = True) -> None:
        """fence.proxy.async by `lanes`: every generic write that happens before it is made visible to the
        async proxy along any path through it, in the state spaces it names (`shared`, `global_`: both for a
        fence.proxy.async without one)."""
        t = self.threads
        block = lane_block(lanes, t)  # (a batch's consumer warpgroups: views, not gathers of [lanes, threads] rows)
        bounds = None if block is None or self.remote else \
            self.block_bounds.get((block[0].start, block[0].stop, block[1].start, block[1].stop))
        if bounds is not None and (bounds[1] is None or bounds[3] is None):
            bounds = None
        for on, columns in ((shared, slice(0, t)), (global_, slice(t, 2 * t))):
            if not on:
                continue
            if block is not None:
                fenced = self.fenced.reshape(-1, t, 2 * t)[block + (columns,)]
                np.maximum(fenced, self.clock.reshape(-1, t, t)[block], out=fenced)
            else:
                self.fenced[lanes, columns] = np.maximum(self.fenced[lanes, columns], self.clock[lanes])
            self.fenced_rows[lanes] = True
            if bounds is not None:  # a kept block: its fenced bounds take its clock bounds (joins of maxima)
                bounds[3] = bounds[3].copy()
                np.maximum(bounds[3][:, columns], bounds[1], out=bounds[3][:, columns])
                bounds[3].setflags(write=False)
                if bounds[2] is not None and bounds[0] is not None:
                    bounds[2] = bounds[2].copy()
                    np.maximum(bounds[2][:, columns], bounds[0], out=bounds[2][:, columns])
        if bounds is None:
            self.rows_changed(lanes)
        if global_ and self.remote:  # other CTAs' stores known to happen before: fenced too (new rows: shared)
            for lane in np.asarray(lanes).reshape(-1).tolist():
                known = self.remote.get(lane)
                for rank, row in (known or {}).items():
                    known[rank] = np.concatenate([row[:t], np.maximum(row[t:], row[:t])])
        self.clock.reshape(-1)[self.own_flat[lanes]] += 1
        if bounds is not None:  # each own epoch the greatest of its column: the join's own columns are these
            high = bounds[1][:, block[1]]
            np.maximum(high, _own_epochs(self.clock, *block), out=high)

    def global_fenced(self, lanes: np.ndarray, threads: np.ndarray) -> np.ndarray:
        """The epochs of `threads` [lanes, k] (of each lane's CTA) whose generic global writes a
        fence.proxy.async on a path into each lane has made visible to the async proxy."""
        return self.fenced[lanes[:, None], self.threads + threads]


def _raise_rows(rows: np.ndarray, published: np.ndarray, low: np.ndarray | None) -> np.ndarray:
    """Every row of `rows` ([CTA, lane, column], a view) joined with its CTA's `published` ([CTA, column]), reading
    only the columns where some row may lie under it (`low`: a bound below every row, or None); the new bound."""
    if low is None:
        np.maximum(rows, published[:, None, :], out=rows)
        return published
    columns = np.flatnonzero((published > low).any(axis=0))
    if 8 * len(columns) > rows.shape[2]:  # (most of them: one pass over the rows costs less than a gather)
        np.maximum(rows, published[:, None, :], out=rows)
    elif len(columns):
        rows[:, :, columns] = np.maximum(rows[:, :, columns], published[:, None, columns])
    return np.maximum(low, published)


def _own_epochs(clock: np.ndarray, ctas: slice, within: slice) -> np.ndarray:
    """[CTA, lane]: a writable view of the own epochs of the threads `within` of each CTA slot of `ctas` in `clock`
    ([lane, thread], contiguous): thread i's own column is i, so its epoch lies on the diagonal of its CTA's
    [thread, thread] block, every (threads + 1)-th element of the block (a slice: no gather)."""
    t = clock.shape[1]
    return clock.reshape(-1, t * t)[ctas, within.start * (t + 1):within.stop * (t + 1):t + 1]


def _meet(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether two blocks (CTA start, stop, thread start, stop) share a lane."""
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
