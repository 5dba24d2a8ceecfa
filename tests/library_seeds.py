"""One-edit synchronisation bugs seeded into library PTX that nvcc compiled from CUTLASS and FlashAttention-3
(tests/ptx_library/build.py builds it; nothing here is committed PTX): the race detector on code it was not written
for, in nvcc's dialect of PTX (waits as inline-asm `LAB_WAIT` loops on a predicate, byte counts and barrier ids in
registers, releases through `mapa` + `mbarrier.arrive.shared::cluster`).

`LIBRARY_BUGS` are `(kind, name, edit)`; `edit(lines)` changes the lines in place and raises LookupError where the
kernel has no such instruction. `run(name, text, sizes)` launches a (seeded) text as the library's host code
describes and returns whether the output matches NumPy. tests/test_library_races.py and
`python bench/races.py --library` run them.
"""

from __future__ import annotations

import re

import numpy as np

from ptx_library.build import CONFIGS
from ptx_library.library import attention_reference, built, gemm_reference, launch_library

SIZES = {"fa3": [(1, 2, 128, 128, 128), (1, 1, 200, 333, 128)], "cutlass": [(128, 128, 64, 1), (128, 128, 512, 1)]}
"""Problem sizes per library: one with a single k-block (or key block) and one with several (and, for FA3, two
query blocks on one SM: the persistent scheduler's second tile reuses the epilogue's shared buffer; for
CUTLASS, more k-blocks than pipeline stages, so that every slot is refilled)."""


def run(name: str, text: str, sizes: tuple[int, ...]) -> bool:
    """Launch PTX `text` as configuration `name` on one SM; whether the output matches NumPy."""
    tensors, _, _ = launch_library(name, sizes, sms=1, text=text)
    if name.startswith("cutlass"):
        return bool(np.allclose(tensors["D"], gemm_reference(tensors), rtol=1e-5, atol=1e-4))
    out, lse = attention_reference(tensors, causal=bool(CONFIGS[name]["IS_CAUSAL"]))
    return bool(np.allclose(tensors["O"].astype(np.float64), out, atol=2e-3, rtol=2e-3)
                and np.allclose(tensors["LSE"], lse, atol=1e-4, rtol=1e-5))


def sizes_of(name: str) -> list[tuple[int, ...]]:
    return SIZES["cutlass" if name.startswith("cutlass") else "fa3"]


LIBRARY = ["fa3_fwd_hdim128", "cutlass_cooperative_128x128x64", "cutlass_pingpong_64x128x64"]
"""The configurations of tests/ptx_library/build.py seeded here."""


def available() -> list[str]:
    return [name for name in LIBRARY if built(name)]


# region locating instructions in nvcc's PTX
def _instruction(line: str) -> str:
    return re.sub(r"^@!?%?\w+ ", "", line.strip())


def _all(lines, prefix: str, start: int = 0, stop: int | None = None) -> list[int]:
    return [i for i in range(start, len(lines) if stop is None else stop) if _instruction(lines[i]).startswith(prefix)]


def _nth(found: list[int], n: int) -> int:
    if n >= len(found):
        raise LookupError("not enough instructions")
    return found[n]


def _wait_sites(lines, role: str) -> list[list[int]]:
    """The consumers' or the producer's mbarrier waits, each the try_wait lines of one site (nvcc emits a probe
    and a blocking LAB_WAIT loop on the same barrier and parity, a few lines apart). nvcc places the role
    branches in any order, so a wait's role is what follows it first: a wgmma (a consumer waiting for a full
    slot) or an expect_tx or TMA load (the producer waiting for an empty one) before the next wait."""
    sites: list[list[int]] = []
    for i in _all(lines, "mbarrier.try_wait"):
        operands = re.search(r"\[(\S+)\], (%\w+)", lines[i]).groups()
        last = sites[-1][-1] if sites else None
        if last is not None and i - last < 16 and re.search(r"\[(\S+)\], (%\w+)", lines[last]).groups() == operands:
            sites[-1].append(i)
        else:
            sites.append([i])

    def role_of(site) -> str:
        for j in range(site[-1] + 1, len(lines)):
            s = _instruction(lines[j])
            if s.startswith("wgmma."):
                return "consumer"
            if s.startswith(("mbarrier.arrive.expect_tx", "cp.async.bulk.tensor")) and ".global.shared" not in s:
                return "producer"
            if s.startswith("mbarrier.try_wait"):  # e.g. the producer's tail, waiting for every slot's release
                return "other"
        return "other"

    return [site for site in sites if role_of(site) == role]


def _after_asm(lines, i: int) -> int:
    """The line after the inline-asm block that holds line i."""
    return next(j for j in range(i, len(lines)) if lines[j].strip() == "// end inline asm") + 1


# endregion
# region edits
def wait(role: str, n: int, action: str):
    """The consumer's or producer's n-th mbarrier wait: "delete" (every try_wait of the site succeeds at once) or
    "flip" (it tests the other parity)."""
    def edit(lines):
        site = _nth(_wait_sites(lines, role), n)
        for i in reversed(site):
            predicate, parity = re.search(r"try_wait\S* (\w+), \[\S+\], (%\w+)", lines[i]).groups()
            if action == "delete":
                lines[i] = f"\tsetp.eq.u32 {predicate}, {parity}, {parity};"
            else:
                lines[i] = lines[i].replace(f"], {parity}", "], %seeded_parity", 1)
                lines.insert(i, f"\txor.b32 %seeded_parity, {parity}, 1;")
        if action == "flip":
            lines.insert(_nth(_all(lines, ".reg"), 0), "\t.reg .b32 %seeded_parity;")
    return edit


def scale_expect_tx(n: int, shift: str):
    """The n-th expect_tx (the producer's) announces half ("shr") or twice ("shl") its bytes (a register in nvcc's
    PTX)."""
    def edit(lines):
        i = _nth(_all(lines, "mbarrier.arrive.expect_tx"), n)
        count = re.search(r", (%\w+);\s*$", lines[i]).group(1)
        lines[i] = lines[i].replace(f", {count};", ", %seeded_bytes;")
        lines.insert(i, f"\t{shift}.b32 %seeded_bytes, {count}, 1;")
        lines.insert(_nth(_all(lines, ".reg"), 0), "\t.reg .b32 %seeded_bytes;")
    return edit


def delete(prefix: str, n: int = 0):
    """Delete the n-th instruction starting with `prefix`."""
    def edit(lines):
        del lines[_nth(_all(lines, prefix), n)]
    return edit


def release_before_its_wait_group(n: int):
    """The consumer's n-th wgmma.wait_group moved after the slot release that follows it (the release block:
    `mapa` + `mbarrier.arrive.shared::cluster`): the producer may refill the slot the wgmma still reads."""
    def edit(lines):
        i = _nth(_all(lines, "wgmma.wait_group"), n)
        release = _nth(_all(lines, "mbarrier.arrive.shared::cluster", i), 0)
        if release - i > 40:
            raise LookupError("no release right after this wait_group")
        line = lines.pop(i)
        lines.insert(_after_asm(lines, release - 1) - 1, line)
    return edit


def _after_init(lines) -> int:
    return _nth(_all(lines, "bar.sync", _all(lines, "mbarrier.init")[-1]) + _all(lines, "barrier.sync", _all(
        lines, "mbarrier.init")[-1]), 0)


LIBRARY_BUGS = [
    ("wait deleted", "the consumers' first mbarrier wait", wait("consumer", 0, "delete")),
    ("wait deleted", "the consumers' second mbarrier wait", wait("consumer", 1, "delete")),
    ("wait deleted", "the producer's first mbarrier wait", wait("producer", 0, "delete")),
    ("parity flipped", "the consumers' first mbarrier wait", wait("consumer", 0, "flip")),
    ("parity flipped", "the producer's first mbarrier wait", wait("producer", 0, "flip")),
    ("expect_tx too small", "the producer's first", scale_expect_tx(0, "shr")),
    ("expect_tx too large", "the producer's first", scale_expect_tx(0, "shl")),
    ("wgmma.fence deleted", "the consumers' first", delete("wgmma.fence")),
    ("wgmma.commit_group deleted", "the consumers' first", delete("wgmma.commit_group")),
    ("wgmma.wait_group deleted", "the consumers' first", delete("wgmma.wait_group")),
    ("slot released before its wait_group", "the consumers' first release", release_before_its_wait_group(0)),
    ("slot release deleted", "the consumers' first", delete("mbarrier.arrive.shared::cluster")),
    ("bar.sync deleted", "after mbarrier.init", lambda lines: lines.__delitem__(_after_init(lines))),
    ("fence.proxy.async deleted", "the epilogue's", delete("fence.proxy.async")),
    ("bar.sync deleted", "the epilogue's, before the TMA store",
     lambda lines: lines.__delitem__(_nth(_all(lines, "bar.sync", _nth(_all(lines, "fence.proxy.async"), 0)), 0))),
    ("bar.arrive deleted", "the consumers' first named-barrier arrive", delete("bar.arrive")),
    ("bulk wait deleted", "the epilogue's cp.async.bulk.wait_group.read", delete("cp.async.bulk.wait_group")),
]
"""(kind, name, edit): the kinds of issue 31 in nvcc's PTX of CUTLASS's and FA3's warp-specialized kernels."""

# endregion


def seed(text: str, edit) -> str:
    lines = text.splitlines()
    edit(lines)
    return "\n".join(lines) + "\n"
