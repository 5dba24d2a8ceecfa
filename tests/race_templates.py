"""What the race tests share, written once: the seeded-bug catalogues' bookkeeping (tests/tessera_seeds.py,
tests/backward_seeds.py) and the PTX pieces of the small kernels the PTX executor's race tests launch
(tests/test_ptx_races.py, test_ptx_global_races.py, test_ptx_race_matrix.py, test_ptx_cluster.py).

A catalogue maps a kernel (or a variant) to its seeds, each `(kind, name, edit, expected, reason)`: `expected` has
one letter a cell (level, shape), R reported naming both sides, C clean and bitwise the unseeded kernel's outputs,
G a known gap (clean and right); `reason` says why a cell is not R (empty only for a seed reported everywhere).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

# region Seed catalogues


def matches(got: str, want: str) -> bool:
    """Whether outcome `got` (R, C, WRONG) is what `want` (R, C, G) asks for: G is a known gap, clean and right."""
    return got == want or (want == "G" and got == "C")


def one_per_kind(catalogue: Mapping[str, Sequence], everywhere: str) -> list[tuple[str, int]]:
    """(kernel, index) of the first seed of each kind whose expectation is `everywhere` (reported on every cell):
    the fast slice."""
    seen, picked = set(), []
    for kernel, seeds in catalogue.items():
        for i, (kind, _, _, expected, _) in enumerate(seeds):
            if expected == everywhere and kind not in seen:
                seen.add(kind)
                picked.append((kernel, i))
    return picked


def check_expectations(catalogue: Mapping[str, Sequence], letters: str, everywhere: str, kinds: int) -> None:
    """Every seed has one letter of `letters` a cell, every seed not reported `everywhere` a reason, and the
    catalogue at least `kinds` kinds of bug."""
    assert len({kind for seeds in catalogue.values() for kind, *_ in seeds}) >= kinds
    for seeds in catalogue.values():
        for kind, name, _, expected, reason in seeds:
            assert re.fullmatch(f"[{letters}]{{{len(everywhere)}}}", expected) and (reason or expected == everywhere), \
                (kind, name)


def run_matrix(catalogue: Mapping[str, Sequence], level: str, cells: Sequence[tuple[str, str]], shapes: Iterable[str],
               verdict: Callable[[str, str, object, str], tuple[str, str]], heading: Callable[[str], str],
               out=print) -> int:
    """Run every seed of every kernel of `catalogue` at `level` on each of `shapes`, print one line each (outcome,
    expected, the report's start) under `heading(kernel)`, and return how many differ from their expectation."""
    missed = 0
    shapes = tuple(shapes)
    for kernel, seeds in catalogue.items():
        out(heading(kernel))
        for kind, name, edit, expected, _ in seeds:
            for shape in shapes:
                want = expected[cells.index((level, shape))]
                got, text = verdict(level, kernel, edit, shape)
                missed += not matches(got, want)
                note = "" if matches(got, want) else f"  MISMATCH (expected {want})"
                note += "  (a known gap)" if want == "G" else ""
                out(f"  {got} {kind}: {name} [{shape}]{note}\n      {text[:220]}")
    return missed


# endregion
# region PTX kernels

PTX_HEADER = """.version 8.0
.target sm_90a
.address_size 64
"""
"""The first lines of every hand-written test kernel: PTX 8.0 (the lowest the sm_90a features need), 64-bit."""


def ptx_entry(body: str, regs: str, params: str = ".param .u64 out", extra: str = "", directives: str = "") -> str:
    """A module of one entry, `k(params)` with `directives`, declaring the registers `regs` and running `body`:
    `PTX_HEADER`, then `extra` (module-scope declarations) and a line before the entry."""
    return f"{PTX_HEADER}{extra}\n.visible .entry k({params}){directives}\n{{{regs}{body}\n}}\n"

STORE_TID_TO_TILE = """    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    shl.b32 %r2, %r0, 2;
    add.u32 %r2, %r1, %r2;
    st.shared.u32 [%r2], %r0;
"""
"""Every thread stores its index into word %tid.x of the shared `tile` (%r0 the index, %r1 the tile's address):
the first half of an epilogue that then bulk-stores the tile."""

SYNC_CLUSTER = """
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
"""

INIT_LOCAL_BARRIER = """
    mov.u32 %r20, bar;
    setp.eq.u32 %p7, %r0, 0;
    @%p7 mbarrier.init.shared::cta.b64 [%r20], {count};
    @%p7 fence.mbarrier_init.release.cluster;
""" + SYNC_CLUSTER
"""Thread 0 initialises the CTA's `bar` for {count} arrivals and releases it to the cluster, which then meets."""

WAIT_LOCAL_BARRIER = """
WAIT{tag}:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p6, [%r20], {parity};
    @!%p6 bra WAIT{tag};
"""

REMOTE_ARRIVE_THEN_WAIT = """
    mov.u32 %r1, %cluster_ctarank;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra WAITER;
    mapa.shared::cluster.u32 %r6, %r20, 0;
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];
    bra END;
WAITER:
""" + WAIT_LOCAL_BARRIER.format(tag="0", parity=0) + """
END:
    mov.u32 %r9, 5;
    """
"""After `INIT_LOCAL_BARRIER` (count 1): rank 1 arrives on rank 0's barrier, rank 0 waits on it; both leave 5."""

# endregion
