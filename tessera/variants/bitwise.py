"""Bitwise operators of a traced integer and a constant, in the ops the kernel has (i32 `+ - * // %`).

Tile IR has no bitwise integer op, but two's complement makes each of these its arithmetic ops exactly, for
every i32 x (NumPy's int64 gives the same values wherever the result fits i32, which `tessera.variants.ranges`
checks before a launch):

- `x & (2^n - 1)` is `x % 2^n` (a floor modulus: -3 & 7 == -3 % 8 == 5); `x & c` for another constant c >= 0
  is the sum, over each run of set bits [lo, hi) of c, of `x % 2^hi - x % 2^lo`; `x & c` for c < 0 is
  `x - (x & ~c)` (`x & ~7` clears the low three bits);
- `x | c` is `x + c - (x & c)` and `x ^ c` is `x + c - 2 (x & c)`;
- `~x` is `-x - 1`;
- `x >> n` is `x // 2^n` (an arithmetic shift is a floor division) and `x << n` is `x * 2^n`, 0 <= n <= 30.

The functions take the traced value (`tessera.variants.traced.Traced`, whose Python operators record the ops)
and the constant as a Python int. `&`, `|` and `^` of two traced integers, a shift by a traced amount
(`1 << h`) and a constant outside [-2^30, 2^30) are refused by name (`refuse(construct)` makes the caller's located
error).
"""

from __future__ import annotations

from collections.abc import Callable

MAX_SHIFT = 30
"""The largest shift traced: 2^30 is the largest power of two an i32 constant holds."""

SYMBOLS = {"and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>"}


def _and_constant(x, c: int, refuse: Callable[[str], Exception]):
    if c < 0:
        return x - _and_constant(x, ~c, refuse)
    if c >> MAX_SHIFT:  # a run of bits through bit 30 would need x % 2^31, and 2^31 is no i32
        raise refuse(f"'&' with the constant {c} (bit 30 or above set: constants in [-2^30, 2^30) are traced)")
    result, lo = 0, 0
    while c >> lo:
        if not c >> lo & 1:
            lo += 1
            continue
        hi = lo
        while c >> hi & 1:
            hi += 1
        run = x % (1 << hi) - x % (1 << lo) if lo else x % (1 << hi)
        result = run if isinstance(result, int) else result + run
        lo = hi
    return result


def binary(op: str, x, c, refuse: Callable[[str], Exception]):
    """`x op c` for op "and", "or", "xor" of a traced integer x and c, which must be a Python int (module
    docstring); a traced c is refused."""
    if not isinstance(c, int):
        raise refuse(f"'{SYMBOLS[op]}' of two traced integers (a bitwise op with a constant is traced: kv_idx & 7, "
                     "q_idx ^ 1)")
    both = _and_constant(x, c, refuse)
    if op == "and":
        return both
    return x + c - both if op == "or" else x + c - both * 2


def invert(x):
    """~x of a traced integer: -x - 1."""
    return -x - 1


def shift(op: str, x, n, refuse: Callable[[str], Exception]):
    """x << n ("lshift") or x >> n ("rshift") of a traced integer by a Python int 0 <= n <= 30."""
    if not isinstance(n, int):
        raise refuse(f"'{SYMBOLS[op]}' by a traced amount (a shift by a constant is traced: q_idx >> 6; for "
                     "1 << h write 2.0 ** h)")
    if not 0 <= n <= MAX_SHIFT:
        raise refuse(f"'{SYMBOLS[op]}' by {n} (shifts of 0 to {MAX_SHIFT} are traced)")
    return x * (1 << n) if op == "lshift" else x // (1 << n)
