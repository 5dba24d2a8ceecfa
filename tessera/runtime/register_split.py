"""The compiled kernel's setmaxnreg split checked against ptxas's own count at entry, before any GPU sees it.

warp-specialize sizes the split on `facts.registers_at_entry`, our model of what ptxas gives each thread at entry;
the CTA owns that count times its threads, and a split past them hangs the GPU (a `setmaxnreg.inc` waiting forever
for registers no `.dec` releases: the FP8 forward on an H200). This check takes the count from ptxas's report of
the very cubin the GPU loads ("Used N registers"), so a ptxas that sizes the entry otherwise than the model is
caught on the CPU, with the kernel, the split and the counts named, instead of as a hang.
"""

from __future__ import annotations

import re

from tessera.sm90 import facts

SETMAXNREG = re.compile(r"^\s*setmaxnreg\.(inc|dec)\.sync\.aligned\.u32 (\d+);", re.MULTILINE)


def check_register_split(ptx: str, kernel: str, threads: int, entry_registers: int | None) -> None:
    """ValueError where warp-specialize's split in `ptx` (the producer warpgroup's one `.dec`, every other
    warpgroup's one `.inc`) needs more registers than `threads` x `entry_registers` (ptxas's count for
    `kernel`). A kernel without that split (no setmaxnreg, or another form), or without a count from ptxas, is
    not checked."""
    found = SETMAXNREG.findall(ptx)
    counts = dict(found)
    if entry_registers is None or len(found) != 2 or set(counts) != {"inc", "dec"}:
        return
    producer, consumer = int(counts["dec"]), int(counts["inc"])
    need = facts.WARPGROUP_SIZE * producer + (threads - facts.WARPGROUP_SIZE) * consumer
    if need > threads * entry_registers:
        raise ValueError(f"@{kernel}: its setmaxnreg split {producer}/{consumer} (producer/consumer warpgroups) needs "
                         f"{need} registers, more than the {threads * entry_registers} its CTA owns ({threads} threads x "
                         f"the {entry_registers} ptxas gives each at entry): a setmaxnreg.inc would wait forever on "
                         "the GPU. A compiler bug: please report it")
