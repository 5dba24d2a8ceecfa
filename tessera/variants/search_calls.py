"""np.searchsorted, np.digitize, torch.searchsorted and torch.bucketize of a traced value (`search_call`): the
boundaries (a captured array, or one the function makes) are checked sorted and finite here, and the count is
built by `tessera.variants.searches` (compares unrolled, or a binary search gathering from a kernel input).

The function takes the traced value (`tessera.variants.traced.Traced`). It records each count's range (`Count`,
which `tessera.variants.index_ranges` uses to prove a read it indexes in bounds) and each search by its count's
node, so that `searchsorted(a, q_idx) == searchsorted(a, kv_idx)` can compare bounds once
(`searches.SearchedEqual`)."""

from __future__ import annotations

import numpy as np

from tessera.variants import searches, torch_mods
from tessera.variants.nodes import BOOL, F32, I32, CapturedArray, Count
from tessera.variants.tracing import ArrayOperand


def search_call(t, function: str, boundaries: object, value: object, side: object = "left",
                sorter: object = None, digitize: bool = False):
    """`function` (np.searchsorted, torch.searchsorted, torch.bucketize; with `digitize` np.digitize, `side`
    its `right`) of a traced value in sorted boundaries: a captured array or one made in the function,
    checked here (`searches.boundaries_problem`), searched as `tessera.variants.searches` builds it. A
    sorter=, a traced side, boundaries computed from traced values and a boolean value are refused."""
    tracing = t._tracing
    if sorter is not None:
        raise tracing.refuse(f"{function} with sorter= (sort the boundaries on the host: a search needs them sorted)")
    if digitize and not isinstance(side, (bool, np.bool_)):
        raise tracing.refuse(f"{function} with right={side!r} (True or False)")
    if not digitize and side not in searches.SIDES:
        raise tracing.refuse(f"{function} with side={side!r} ('left' or 'right')")
    capture = None
    if isinstance(boundaries, ArrayOperand):
        capture = boundaries.captured()
        name, array = boundaries.name, boundaries.array
    elif isinstance(boundaries, type(t)):
        raise tracing.refuse(f"{function} in boundaries computed from traced values (search a captured array)")
    else:
        name = "the boundaries made in the function"
        array = torch_mods.as_numpy(boundaries) if torch_mods.is_tensor(boundaries) else np.asarray(boundaries)
    node = t._lift(value)
    if node.dtype == BOOL:
        raise tracing.refuse(f"{function} of a boolean value (use np.where to turn a condition into numbers)")
    problem = searches.boundaries_problem(array, decreasing=digitize)
    if problem:
        raise tracing.refuse(f"{function} of {name}: {problem}")

    def table(c: np.ndarray) -> CapturedArray:
        """The kernel input the binary search gathers the compared boundaries c from: the captured array
        itself where the kernel reads c from it, else an input of its own."""
        kept = capture is not None and capture.dtype == (F32 if c.dtype.kind == "f" else I32)
        found = capture if kept and np.array_equal(capture.array, c) else None
        if found is None:
            key = (capture.name if capture is not None else "", c.dtype.str, c.tobytes())
            if key not in tracing.searched:
                stem = f"{boundaries.name}_searched" if capture is not None else "boundaries"
                tracing.searched[key] = CapturedArray(tracing.unique_name(stem), c)
            found = tracing.searched[key]
        tracing.arrays.setdefault(id(found), found)
        return found

    if digitize:
        count, search = searches.digitize_count(node, array, bool(side), table)
    else:
        search = searches.search_count(node, array, str(side), table)
        count = search.count
    tracing.searches[id(count)] = (search, table, count is not search.count)  # n - count: decreasing bins
    tracing.counts[id(count)] = Count(len(array), function, name, node)
    return t._wrap(count)

