"""Helpers of tests/test_unseen_ptx_races.py and tests/test_unseen_ptx_cluster_races.py: hand-written sm_90a
PTX entries named `k`, launched on the PTX executor."""

from __future__ import annotations

from tessera.interpreters.ptx import launch

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def line_of(text: str, snippet: str) -> int:
    """The 1-based line of `text` (with HEAD before it) holding `snippet` first."""
    return next(i for i, line in enumerate((HEAD + text).splitlines(), 1) if snippet in line)


def run(text: str, grid, block, args, **kw):
    return launch(HEAD + text, "k", grid, block, args, **kw)


WAIT = """{
    .reg .pred complete;
    waitLoop:
    mbarrier.try_wait.parity.shared::cta.b64 complete, [%r1], PARITY;
    @!complete bra.uni waitLoop;
    }"""
"""An mbarrier wait as Triton writes it (a scope of its own, its predicate and label inside)."""
