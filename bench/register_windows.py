"""The register-file check's windows (tessera/interpreters/sm90/register_windows.py) against comparing every read:
random seeded wrong allocations, each run both ways, must end the same (the same error text, or the same bytes).

    python bench/register_windows.py [--swaps 40] [--seed 0] [--head-dim 64] [--keys 200]

Each swap gives one value of the allocator's allocation of flash attention (causal and not, bf16) the registers
of another value of the same class and width, runs the CTA simulator with `RegisterLayout(every_read=True)` (every
read compared, every write recorded) and with the windows, and prints one line: the two outcomes ("ok" or the
error's class), SAME or DIFF, the CPU seconds of each, and the start of the report. Ends with the counts; exit
status 1 on any DIFF. `tests/test_register_windows.py` runs three of these swaps (`-m slow`: twelve).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np

import tessera
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.interpreters.sm90.register_check import RegisterLayout
from tessera.kernel_abi import kernels, signature
from tessera.regalloc import Allocation, allocate_registers


def flash_kernel(head_dim: int, causal: bool):
    module = tessera.kernels.flash_attention(head_dim=head_dim, causal=causal, dtype="bf16")
    sig = signature(kernels(module)[0])
    return sig, tessera.lower_to_target(module, sig.name)


def swaps(allocation: Allocation, rng: random.Random):
    """Endless (value, holder) pairs: two values in registers of the same class and count, given different ones."""
    values = [value for value, names in allocation.names.items()
              if hasattr(value, "op") and any(name.startswith("%") for name in names)]
    while True:
        value, holder = rng.sample(values, 2)
        mine, theirs = allocation.names[value], allocation.names[holder]
        if len(mine) == len(theirs) and mine[0][:2] == theirs[0][:2] and mine != theirs:
            yield value, holder


def outcome(sig, kernel, inputs, allocation: Allocation, every_read: bool) -> tuple[tuple[str, object], float]:
    """(("ok", the output's bytes) or (the error's class, its text), CPU seconds)."""
    arguments, sizes = prepare_arguments(sig, inputs)
    start = time.process_time()
    try:
        run_target_kernel(kernel, arguments, sizes, RegisterLayout(allocation, every_read=every_read))
        result = ("ok", arguments[3].tobytes())
    except Exception as error:  # noqa: BLE001 - any outcome is compared, the two runs must agree
        result = (type(error).__name__, str(error))
    return result, time.process_time() - start


def compare(sig, kernel, inputs, base: Allocation, value, holder):
    """Both outcomes of `base` with `value` moved into `holder`'s registers."""
    names = dict(base.names)
    names[value] = list(base.names[holder])
    seeded = Allocation(names=names, counts=base.counts, peak=base.peak, peak_position=base.peak_position)
    return outcome(sig, kernel, inputs, seeded, True), outcome(sig, kernel, inputs, seeded, False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--swaps", type=int, default=40, help="swaps per kernel (causal and not)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--keys", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    inputs = [rng.standard_normal((1, 1, args.keys, args.head_dim)) for _ in range(3)]
    same = caught = total = 0
    for causal in (False, True):
        sig, kernel = flash_kernel(args.head_dim, causal)
        base = allocate_registers(kernel)
        drawn = swaps(base, random.Random(args.seed))
        for _ in range(args.swaps):
            value, holder = next(drawn)
            (full, t_full), (windowed, t_windowed) = compare(sig, kernel, inputs, base, value, holder)
            total += 1
            same += full == windowed
            caught += full[0] != "ok"
            report = full[1][:110] if full[0] != "ok" else ""
            print(f"causal={causal!s:<5} %{value.name_hint or '?'} -> registers of %{holder.name_hint or '?'}: "
                  f"{full[0]} / {windowed[0]} {'SAME' if full == windowed else 'DIFF'} "
                  f"{t_full:.2f} s / {t_windowed:.2f} s {report}", flush=True)
    print(f"{same} of {total} the same ({caught} reported by comparing every read)")
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
