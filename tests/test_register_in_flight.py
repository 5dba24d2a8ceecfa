"""The registers of in-flight wgmma groups in the register-file check (`RegisterFileChecker._issue`, `_pending`).

The checker lists, per warpgroup, the wgmmas issued and not yet seen complete, with the mask of the registers they
hold. Over random issues, commits, completions and accesses by random threads, it finds the same register, wgmma,
role, group and thread as the per-register table it replaced: per warpgroup and register, the newest group holding
it and the entry of its newest holder (the last role of that wgmma holding it), pending where that group is newer
than the warpgroup's completed group, looked up in the first active warpgroup with one pending.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from xdsl.dialects import test as test_dialect
from xdsl.dialects.builtin import f32

from tessera.interpreters.sm90.register_check import RegisterFileChecker
from tessera.interpreters.sm90.register_layout import RegisterLayout, column_mask
from tessera.regalloc import Allocation
from tessera.sm90 import facts

REGISTERS, WARPGROUPS = 24, 3
SIZE = facts.WARPGROUP_SIZE


class _Table:
    """The per-register table: newest group and newest entry per warpgroup and register."""

    def __init__(self):
        self.flight = np.full((WARPGROUPS, REGISTERS), -1, np.int64)
        self.flight_entry = np.full((WARPGROUPS, REGISTERS), -1, np.int64)
        self.entries = []

    def issue(self, wgmma, warpgroups, open_):
        for w in warpgroups:
            for columns, role in wgmma.roles:
                self.flight[w, columns] = open_[w]
                self.flight_entry[w, columns] = len(self.entries)
                self.entries.append((w, int(open_[w]), wgmma, role))

    def pending(self, active, columns, done):
        warpgroups = [w for w in range(WARPGROUPS) if active[w * SIZE : (w + 1) * SIZE].any()]
        if not warpgroups:
            return None
        pending = self.flight[warpgroups][:, columns] > done[warpgroups][:, None]
        if not pending.any():
            return None
        i, j = np.unravel_index(int(np.argmax(pending)), pending.shape)
        w, group, wgmma, role = self.entries[int(self.flight_entry[warpgroups[i], columns[j]])]
        return int(j), (w, group, wgmma, role), w * SIZE + int(np.argmax(active[w * SIZE : (w + 1) * SIZE]))


def _checker():
    values = [test_dialect.TestOp(result_types=[f32]).results[0] for _ in range(REGISTERS)]
    layout = RegisterLayout(Allocation(names={v: [f"%f{i}"] for i, v in enumerate(values)}, counts={"f": REGISTERS},
                                       peak=0, peak_position=0))
    unit = SimpleNamespace(open=np.zeros(WARPGROUPS, np.int64), done=np.full(WARPGROUPS, -1, np.int64))
    cta = SimpleNamespace(threads=WARPGROUPS * SIZE, active=None, wgmma=unit, races=False)
    checker = RegisterFileChecker(cta, layout)
    return checker, cta, unit


@pytest.mark.parametrize("seed", range(8))
def test_in_flight_lists_find_what_the_per_register_table_found(seed):
    rng = np.random.default_rng(seed)
    checker, cta, unit = _checker()
    table = _Table()
    wgmmas = []
    for _ in range(5):
        roles = tuple((np.sort(rng.choice(REGISTERS, rng.integers(1, 8), replace=False)), role)
                      for role in ("accumulator", "A fragment")[: rng.integers(1, 3)])
        masks = tuple((column_mask(columns), role) for columns, role in roles)
        union = 0
        for mask, _ in masks:
            union |= mask
        wgmmas.append(SimpleNamespace(roles=roles, held=(union, masks)))
    found = 0
    for _ in range(400):
        active = np.zeros(WARPGROUPS * SIZE, bool)
        for w in rng.choice(WARPGROUPS, rng.integers(1, WARPGROUPS + 1), replace=False):
            active[w * SIZE : (w + 1) * SIZE] = rng.random(SIZE) < rng.choice([0.05, 1.0])
        cta.active = active
        warpgroups = [w for w in range(WARPGROUPS) if active[w * SIZE : (w + 1) * SIZE].any()]
        action = rng.integers(4)
        if action == 0:
            wgmma = wgmmas[rng.integers(len(wgmmas))]
            table.issue(wgmma, warpgroups, unit.open)
            checker._issue(wgmma, active, wgmma.held)
        elif action == 1:
            unit.open[warpgroups] += 1
        elif action == 2:
            for w in warpgroups:
                unit.done[w] = rng.integers(unit.done[w], unit.open[w]) if unit.open[w] > unit.done[w] + 1 else \
                    unit.done[w]
        elif checker.issues is not None:
            columns = rng.choice(REGISTERS, rng.integers(1, 7), replace=False).astype(np.intp)
            expected = table.pending(active, columns, unit.done)
            got = checker._pending(active, columns, column_mask(columns))
            if expected is None:
                assert got is None
                continue
            found += 1
            j, entry, thread = got
            assert (j, (entry.warpgroup, entry.group, entry.op, entry.role), thread) == expected
    assert found > 10
