"""The CTA simulator's check of a write against pending wgmma reads of its bytes
(`WgmmaGroups.check_not_read_by_pending`) looks only at the rows of warpgroups with a pending wgmma that read shared
memory, each through a view of a TMA copy's box (`byte_box.look`), before it stacks every row to name the first
byte. Against its definition (every row stacked and compared): the same report, or none."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tessera.interpreters.byte_box import byte_box
from tessera.interpreters.sm90.wgmma import WgmmaUnit


class _Failed(Exception):
    pass


def _unit(rng, warpgroups: int = 3, size: int = 512) -> WgmmaUnit:
    unit = WgmmaUnit.__new__(WgmmaUnit)
    unit.read_group = rng.integers(-1, 6, (warpgroups, size)).astype(np.int32)
    unit.read_group[rng.integers(0, warpgroups)] = -1  # a producer's row: never read
    unit.newest_read = unit.read_group.max(axis=1).astype(np.int64)
    unit.done = rng.integers(-1, 7, warpgroups).astype(np.int64)
    unit.group_ops = {(w, g): f"wgmma {w}.{g}" for w in range(warpgroups) for g in range(-1, 7)}

    def fail(op, message, thread):
        raise _Failed(message, thread)

    unit.cta = SimpleNamespace(fail=fail, smem=SimpleNamespace(locate=lambda address: f"byte {int(address)}"))
    return unit


@pytest.mark.parametrize("seed", range(40))
def test_pending_reads_report_as_the_stacked_rows(seed, monkeypatch):
    """`check_not_read_by_pending` against its definition (every row's groups stacked, compared with `done`):
    the same report, or none."""
    import tessera.interpreters.sm90.wgmma as wgmma

    rng = np.random.default_rng(seed)
    unit = _unit(rng)
    if seed % 2:  # a TMA copy's box: a contiguous range
        start = int(rng.integers(0, 448))
        addresses = byte_box(start, (int(rng.integers(1, 512 - start)),), (1,))
    else:
        addresses = np.sort(rng.choice(512, rng.integers(1, 64), replace=False))
    threads = rng.integers(0, 384, len(addresses))
    pending = np.stack([groups[addresses] for groups in unit.read_group]) > unit.done[:, None]
    expected = None
    if pending.any():
        w, i = np.unravel_index(np.argmax(pending), pending.shape)
        reader = unit.group_ops[(int(w), int(unit.read_group[w, addresses[i]]))]
        expected = (f"st overwrites byte {int(addresses[i])} while `{reader}` of warpgroup {w} may still read it "
                    "(wgmma_wait_group first)", int(threads[i]))
    monkeypatch.setattr(wgmma, "describe_op", str)
    try:
        unit.check_not_read_by_pending("op", addresses, threads, "st")
        got = None
    except _Failed as failed:
        got = failed.args
    assert got == expected
