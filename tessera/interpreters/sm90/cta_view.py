"""`CtaView`: what a unit of the CTA simulator may use of the CTA it belongs to.

The units (`shared_memory`, `mbarrier`, `tma`, `wgmma`, `reductions`, `cp_async`, and `global_memory`, which the
CTAs of a grid share) take the CTA as their first argument: to fail with a located error, read the clock and the
active threads, and reach the sibling units. `cta.CtaState` implements this and builds the units; the units
import this protocol, not `cta`, so the imports run one way (cta -> units -> this).
"""

from __future__ import annotations

from typing import Any, NoReturn, Protocol

import numpy as np
from xdsl.ir import Operation


class CtaView(Protocol):
    """The members of `cta.CtaState` the units use (see the module docstring)."""

    threads: int
    smem_bytes: int
    cta_id: tuple[int, int, int]
    grid: tuple[int, int, int]
    rank: int
    """%cluster_ctarank."""
    cluster: Any
    """The `cluster.Cluster` the CTA runs in (None: a cluster of one)."""
    scheduler: Any
    """The `strands.Scheduler` of the CTA's strands."""
    hb: Any
    """The `happens_before.HappensBefore` of the CTA (`hb.ordered[w, r]`: see there)."""
    traffic: dict[str, int]
    # the sibling units, typed loosely: each unit module imports only this one
    smem: Any
    mbarriers: Any
    tma: Any
    wgmma: Any
    bulk: Any
    cp_async: Any

    @property
    def active(self) -> np.ndarray: ...

    @property
    def warpgroups(self) -> int: ...

    def tick(self) -> int: ...

    def fail(self, op: Operation, message: str, threads=None) -> NoReturn: ...

    def describe(self, op: Operation, message: str, threads=None) -> tuple[str, str]: ...

    def converged_units(self, op: Operation, unit: int, what: str) -> list[int]: ...
