"""How much host memory a simulator may allocate for one launch, checked before it allocates anything, and how
many trips one loop may run (`MAX_LOOP_TRIPS`).

The Tile interpreter, the CTA simulator and the PTX executor hold every tensor of a launch in host memory
(the PTX executor a copy as well, its global memory) and the state of the CTAs they run together (registers,
shared and local memory of a batch). Each launch path adds up what it will need from the sizes alone and calls
`check_memory` first, so that a size of 1e12 elements is refused at once, naming the parts, instead of ending
in a MemoryError (or swapping) after a long wait. The budget is an argument of each launch path
(`memory_budget`), DEFAULT_MEMORY_BUDGET by default.
"""

from __future__ import annotations

MAX_LOOP_TRIPS = 1 << 20
"""The most trips one `scf.for` may run in the Tile interpreter and the CTA simulator, so that a trip count read
from the inputs (`tile.load_index`, a size) that is far too large is refused at the loop, naming it, instead of
running for hours (the PTX executor's bound is `max_steps`). Far above every loop of the suite and the
benchmarks: a K loop over 2^20 tiles of 64 covers a dimension of 2^26."""

DEFAULT_MEMORY_BUDGET = 8 << 30
"""8 GiB: above every launch of the test suite and the benchmarks by orders of magnitude."""


class MemoryBudgetError(ValueError):
    """A launch would need more host memory than its budget; the message names the largest parts."""


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.3g} GiB"


def check_memory(what: str, parts: list[tuple[str, int]], budget: int | None = None) -> None:
    """Refuse a launch of `what` whose `parts` ((description, bytes), estimated from the sizes) add up to
    more than `budget` bytes (DEFAULT_MEMORY_BUDGET when None)."""
    budget = DEFAULT_MEMORY_BUDGET if budget is None else budget
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"memory_budget must be a positive number of bytes, got {budget!r}")
    total = sum(nbytes for _, nbytes in parts)
    if total <= budget:
        return
    largest = sorted(parts, key=lambda part: -part[1])[:3]
    named = "; ".join(f"{name}: {nbytes} bytes" for name, nbytes in largest)
    raise MemoryBudgetError(f"{what} would need about {total} bytes ({_gib(total)}) of host memory, more than "
                            f"the simulator's budget of {budget} bytes ({_gib(budget)}, memory_budget); the "
                            f"largest parts: {named}")
