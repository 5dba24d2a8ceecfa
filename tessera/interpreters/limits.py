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

MAX_GRID_BLOCKS = 1 << 20
"""The most thread blocks one launch may run in the interpreters (`check_grid`), so that a grid sized by a launch
size far larger than the kernel needs (the packed kernels' max_seqlen_q = 2^31 - 1: 2^24 query blocks a
sequence, each exiting at once, memory no object) is refused at the launch, naming it, instead of running for
hours. Far above every launch of the suite and the benchmarks (thousands of blocks)."""


def check_grid(what: str, grid: tuple[int, int, int], sizes: dict[str, int], launch_sizes=()) -> None:
    """ValueError naming `what`'s grid when it has more than `MAX_GRID_BLOCKS` blocks, and the launch sizes
    among `sizes` that size it (a larger value than needed only adds blocks without work)."""
    blocks = grid[0] * grid[1] * grid[2]
    if blocks <= MAX_GRID_BLOCKS:
        return
    given = ", ".join(f"{name} = {sizes[name]}" for name in launch_sizes)
    hint = f"; a launch size larger than the kernel needs ({given}) only adds blocks without work" if given else ""
    raise ValueError(f"{what}: grid {tuple(grid)} is {blocks} thread blocks, more than the {MAX_GRID_BLOCKS} the "
                     f"interpreters run in one launch{hint}")


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
