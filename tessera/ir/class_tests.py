"""Fast `isinstance` tests against xDSL's op and attribute classes.

xDSL's classes are ABCs: `isinstance(op, SomeOp)` is quick when `op` is exactly a `SomeOp`, but a miss goes
through `ABCMeta.__instancecheck__` (about half a microsecond; a tuple of classes pays it once per class). A
compile of the flash d128 forward asked about 130,000 such questions, most of them misses, in loops over every
op of a kernel. `subclass_test(classes)` answers the same question once per concrete type and remembers it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import UnionType


def subclass_test(classes: type | UnionType | tuple[type, ...]) -> Callable[[object], bool]:
    """A function `test(x)` equal to `isinstance(x, classes)`, decided once per concrete type of `x` (the
    classes of ops and attributes do not change their bases at run time)."""
    known: dict[type, bool] = {}

    def test(x: object) -> bool:
        kind = type(x)
        answer = known.get(kind)
        if answer is None:
            answer = known[kind] = issubclass(kind, classes)
        return answer

    return test
