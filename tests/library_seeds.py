"""One-edit synchronisation bugs seeded into library PTX that nvcc compiled from CUTLASS and FlashAttention-3
(tests/ptx_library/build.py builds it; nothing here is committed PTX): the race detector on code it was not written
for, in nvcc's dialect of PTX (waits as inline-asm `LAB_WAIT` loops on a predicate, byte counts and barrier ids in
registers, releases through `mapa` + `mbarrier.arrive.shared::cluster`).

`LIBRARY_BUGS` are `(kind, name, edit)`; `edit(lines)` changes the lines in place and raises LookupError where the
kernel has no such instruction. `run(name, text, sizes)` launches a (seeded) text as the library's host code
describes and returns whether the output matches NumPy. tests/test_backward_races.py and
`python bench/races.py --library` run them.
"""

from __future__ import annotations

import re

import numpy as np

from ptx_library.build import CONFIGS
from ptx_library.library import (attention_reference, backward_reference, built, gemm_reference, launch_backward,
                                 launch_library)

SIZES = {"fa3": [(1, 2, 128, 128, 128), (1, 1, 200, 333, 128)], "cutlass": [(128, 128, 64, 1), (128, 128, 512, 1)],
         "cutlass_cluster": [(512, 128, 64, 1), (512, 128, 512, 1)]}
"""Problem sizes per library: one with a single k-block (or key block) and one with several (and, for FA3, two
query blocks on one SM: the persistent scheduler's second tile reuses the epilogue's shared buffer; for
CUTLASS, more k-blocks than pipeline stages, so that every slot is refilled; in clusters of 2 x 1, one 256-row tile
for each CTA of the cluster, sharing B by multicast)."""


def run(name: str, text: str, sizes: tuple[int, ...]) -> bool:
    """Launch PTX `text` as configuration `name` on one SM (two for clusters of two: a persistent grid of one
    cluster); whether the output matches NumPy."""
    tensors, _, _ = launch_library(name, sizes, sms=2 if "cluster" in name else 1, text=text)
    if name.startswith("cutlass"):
        return bool(np.allclose(tensors["D"], gemm_reference(tensors), rtol=1e-5, atol=1e-4))
    out, lse = attention_reference(tensors, causal=bool(CONFIGS[name]["IS_CAUSAL"]))
    return bool(np.allclose(tensors["O"].astype(np.float64), out, atol=2e-3, rtol=2e-3)
                and np.allclose(tensors["LSE"], lse, atol=1e-4, rtol=1e-5))


def sizes_of(name: str) -> list[tuple[int, ...]]:
    if name.startswith("cutlass"):
        return SIZES["cutlass_cluster" if "cluster" in name else "cutlass"]
    return SIZES["fa3"]


LIBRARY = ["fa3_fwd_hdim128", "cutlass_cooperative_128x128x64", "cutlass_pingpong_64x128x64",
           "cutlass_cooperative_256x128x64_cluster2x1"]
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



# region a cluster's own kinds (CUTLASS's cooperative GEMM in clusters of 2 x 1: B multicast to both CTAs)
def multicast_mask(n: int, value: int):
    """The n-th multicast TMA load delivers to the CTAs of mask `value` (nvcc sets the mask register with a
    mov.u16 just before it)."""
    def edit(lines):
        i = _nth([j for j in _all(lines, "cp.async.bulk.tensor") if "multicast::cluster" in lines[j]], n)
        mask = re.search(r"\], (%rs\d+), %rd\d+;", lines[i]).group(1)
        j = [k for k in range(i) if re.match(rf"\s*mov.u16\s+{re.escape(mask)}, \d+;", lines[k])][-1]
        lines[j] = re.sub(r", \d+;", f", {value};", lines[j])
    return edit


def release_home(n: int):
    """The consumers' n-th slot release arrives on its own CTA's empty barrier instead of the CTA it signals
    (`mapa` to %cluster_ctarank): the peer that multicast into the slot never learns it is free."""
    def edit(lines):
        i = _nth(_all(lines, "mapa.shared::cluster"), n)
        lines[i] = re.sub(r", (%r\d+);", ", %seeded_rank;", lines[i])
        lines.insert(i, "\tmov.u32 %seeded_rank, %cluster_ctarank;")
        lines.insert(_nth(_all(lines, ".reg"), 0), "\t.reg .b32 %seeded_rank;")
    return edit


CLUSTER_BUGS = [
    ("cluster barrier deleted", "the arrive after the inits", delete("barrier.cluster.arrive")),
    ("cluster barrier deleted", "the wait after the inits", delete("barrier.cluster.wait")),
    ("fence.mbarrier_init deleted", "the mainloop pipeline's (the cluster arrive after it is .relaxed)",
     delete("fence.mbarrier_init")),
    ("fence.mbarrier_init deleted", "every one (the same thread's later fences release its earlier inits too)",
     lambda lines: [lines.__delitem__(i) for i in reversed(_all(lines, "fence.mbarrier_init"))]),
    ("multicast mask wrong", "the first multicast delivers to the first CTA only", multicast_mask(0, 1)),
    ("multicast mask wrong", "the first multicast delivers to the second CTA only", multicast_mask(0, 2)),
    ("remote arrive sent home", "the consumers' first release arrives on its own CTA's barrier", release_home(0)),
]
"""(kind, name, edit): a cluster's own kinds in nvcc's PTX of CUTLASS's clustered GEMM (`barrier.cluster.arrive
.relaxed` after the inits, so the fence is needed; B multicast with a mask register; releases through `mapa` to
the CTA each consumer thread signals)."""


# endregion
# region FlashAttention-3's backward (tests/ptx_library/src/fa3_bwd_run.cu: three entries, edits in the main one)
def within(kernel: str, edit):
    """`edit` applied to the lines of the entry whose name contains `kernel` only (registers it declares go into
    that entry)."""
    def seeded(lines):
        entry = re.compile(r"(\.visible )?\.entry ")
        start = next(i for i, line in enumerate(lines) if entry.match(line) and kernel in line)
        stop = next((i for i in range(start + 1, len(lines)) if entry.match(lines[i])), len(lines))
        part = lines[start:stop]
        edit(part)
        lines[start:stop] = part
    return seeded


def _after(prefix: str, n: int, then: str, k: int = 0):
    """The k-th instruction starting with `then` after the n-th starting with `prefix`."""
    return lambda lines: _nth(_all(lines, then, _nth(_all(lines, prefix), n)), k)


def _before(prefix: str, n: int, then: str):
    """The last instruction starting with `then` before the n-th starting with `prefix`."""
    return lambda lines: _all(lines, then, 0, _nth(_all(lines, prefix), n))[-1]


def _in_writer(prefix: str, n: int = 0):
    """The n-th instruction starting with `prefix` in the dQ writer (the producer warpgroup's second warp, which
    starts at setmaxnreg.dec: it waits on a named barrier for a consumer warpgroup's dQ in shared memory, adds it
    into dQaccum with cp.reduce.async.bulk, waits for the read and frees the buffer with bar.arrive)."""
    return lambda lines: _nth(_all(lines, prefix, _nth(_all(lines, "setmaxnreg.dec"), 0)), n)


def wait_group_after_release(k: int):
    """The last wgmma.wait_group before the consumers' k-th slot release moved just after that release (FA3's
    backward releases a slot some 90 lines after the wait_group that completes the wgmmas reading it)."""
    def edit(lines):
        release = _nth(_all(lines, "mbarrier.arrive.shared::cluster"), k)
        i = _all(lines, "wgmma.wait_group", 0, release)[-1]
        line = lines.pop(i)
        lines.insert(_after_asm(lines, release - 1) - 1, line)
    return edit


def delete_at(pick):
    def edit(lines):
        del lines[pick(lines)]
    return edit


FA3_BACKWARD = "fa3_bwd_hdim128"
_ONE_BLOCK = "on one query block the edited wait or op is never reached (the producer loop refills nothing)"
_DO_COVERED = ("the producer refills a dO slot only after its wait on the same stage's Q empty barrier, which the "
               "consumers release after the wait_group 0 that completes every wgmma of the trip")
_MAIN = [
    ("wait deleted", "the consumers' first mbarrier wait (Q)", wait("consumer", 0, "delete"), "RR", ""),
    ("wait deleted", "the consumers' second mbarrier wait (dO)", wait("consumer", 1, "delete"), "RR", ""),
    ("wait deleted", "the consumers' K and V wait", wait("other", 0, "delete"), "RR", ""),
    ("wait deleted", "the producer's first mbarrier wait", wait("producer", 0, "delete"), "CC",
     "the first fill of a slot needs no wait (its empty barrier is fresh)"),
    ("wait deleted", "the producer's Q empty wait in its loop", wait("producer", 4, "delete"), "CR", _ONE_BLOCK),
    ("parity flipped", "the consumers' first mbarrier wait (Q)", wait("consumer", 0, "flip"), "RR", ""),
    ("parity flipped", "the consumers' second mbarrier wait (dO)", wait("consumer", 1, "flip"), "RR", ""),
    ("parity flipped", "the producer's first mbarrier wait", wait("producer", 0, "flip"), "RR", ""),
    ("parity flipped", "the producer's Q empty wait in its loop", wait("producer", 4, "flip"), "CR", _ONE_BLOCK),
    ("expect_tx too small", "the producer's first", scale_expect_tx(0, "shr"), "RR", ""),
    ("expect_tx too large", "the producer's first", scale_expect_tx(0, "shl"), "RR", ""),
    ("wgmma.fence deleted", "the consumers' first", delete("wgmma.fence"), "RR", ""),
    ("wgmma.commit_group deleted", "the consumers' first", delete("wgmma.commit_group"), "RR", ""),
    ("wgmma.wait_group deleted", "the consumers' first", delete("wgmma.wait_group"), "RR", ""),
    ("slot released before its wait_group", "dO's (the consumers' first release)", wait_group_after_release(0),
     "CC", _DO_COVERED),
    ("slot released before its wait_group", "Q's (the consumers' second release)", wait_group_after_release(1),
     "CR", "on one query block no slot is refilled"),
    ("slot release deleted", "dO's", delete("mbarrier.arrive.shared::cluster"), "RR", ""),
    ("slot release deleted", "Q's", delete("mbarrier.arrive.shared::cluster", 1), "RR", ""),
    ("bar.sync deleted", "after mbarrier.init", lambda lines: lines.__delitem__(_after_init(lines)), "RR", ""),
    ("fence.mbarrier_init deleted", "the first", delete("fence.mbarrier_init"), "CC",
     "memory_model.MBARRIER_INIT_FENCE: no cluster (FA3's backward launches clusters of one); the bar.sync after "
     "the inits orders them for every use in the CTA"),
    ("fence.proxy.async deleted", "after the dS stores", delete("fence.proxy.async"), "RR", ""),
    ("bar.sync deleted", "after the dS stores (dS read by both warpgroups' wgmmas)",
     delete_at(_after("fence.proxy.async", 0, "bar.sync")), "RR", ""),
    ("dQ: fence.proxy.async deleted", "after the consumers' dQ stores", delete("fence.proxy.async", 1), "RR", ""),
    ("dQ: bar.arrive deleted", "the consumers' arrive publishing dQ to the writer",
     delete_at(_after("fence.proxy.async", 1, "bar.arrive")), "RR", ""),
    ("dQ: bar.sync deleted", "the consumers' wait for the dQ buffer before their stores",
     delete_at(_before("fence.proxy.async", 1, "bar.sync")), "CR",
     "on one query block the buffer is written once: its first empty wait"),
    ("dQ: bar.sync deleted", "the writer's wait for the first dQ", delete_at(_in_writer("bar.sync")), "CR",
     "on one query block the writer's first section skips the reduction after this barrier (a trap put there is "
     "never reached); the last block's dQ goes through a later section, which waits"),
    ("dQ: bulk wait deleted", "the writer's first cp.async.bulk.wait_group.read",
     delete_at(_in_writer("cp.async.bulk.wait_group")), "CR",
     "one query block writes each dQ buffer once; on several the writer frees the buffer (bar.arrive) while its "
     "bulk reduction may still read it: the consumers' next stores are ordered after the bar.arrive, not after "
     "the writer's later wait_group.read that covers the read (happens_before, "
     "memory_model.BULK_READ_BEFORE_EXIT)"),
    ("dQ: bar.arrive deleted", "the writer's first release of a dQ buffer", delete_at(_in_writer("bar.arrive")),
     "CR", "on one query block nothing waits for that release"),
    ("fence.proxy.async deleted", "the dK/dV epilogue's", delete("fence.proxy.async", 2), "RR", ""),
    ("bar.sync deleted", "the dK/dV epilogue's, before the TMA store",
     delete_at(_after("fence.proxy.async", 2, "bar.sync")), "RR", ""),
    ("bulk wait deleted", "the dK/dV epilogue's cp.async.bulk.wait_group.read before exit",
     lambda lines: lines.__delitem__(_all(lines, "cp.async.bulk.wait_group")[-1]), "RR",
     "the CTA exits while its TMA stores of dK and dV may still read its shared memory, which the next CTA on the "
     "SM may overwrite (memory_model.BULK_READ_BEFORE_EXIT)"),
]
FA3_BACKWARD_BUGS = [(kind, name, within("FlashAttnBwdSm90", edit), expected, reason)
                     for kind, name, edit, expected, reason in _MAIN]
"""(kind, name, edit, expected, reason): issue 31's kinds and the dQ accumulation's own in nvcc's PTX of FA3's
Hopper backward (hdim 128: 80 x 128 tiles, two consumer warpgroups, a TMA producer warp and a dQ writer warp that
adds each warpgroup's dQ from shared memory with cp.reduce.async.bulk, named barriers between them). `expected`
per size of `FA3_BACKWARDS[name]`: R reported, C clean and right (the reason says why it is no bug there), G clean
and right but a bug the PTX executor misses (a gap)."""

FA3_BACKWARDS = {"fa3_bwd_hdim128": [(1, 1, 80, 128, 128), (1, 1, 200, 160, 128)],
                 "fa3_bwd_hdim64": [(1, 1, 128, 128, 64), (1, 1, 300, 200, 64)]}
"""Per configuration, one query block on one key block (every ring slot filled once), and three query blocks (the
last ragged) on two key blocks (the second ragged): Q and dO slots refilled, dQ buffers reused. hdim 128 runs 80 x
128 tiles, hdim 64 128 x 128: the catalogue was written for hdim 128 and holds for hdim 64 cell for cell."""
FA3_BACKWARD_SIZES = FA3_BACKWARDS[FA3_BACKWARD]


def run_backward(text: str | None, sizes: tuple[int, ...], name: str = FA3_BACKWARD) -> tuple[bool, tuple[bytes, ...]]:
    """FA3's backward (configuration `name`: seeded PTX `text`, or the built one) on `sizes`: (whether dQ, dK, dV
    match NumPy, their bytes)."""
    tensors = launch_backward(name, sizes, text=text)
    ok = all(np.allclose(tensors[name].astype(np.float64), expected, atol=2e-3, rtol=2e-3)
             for name, expected in zip(("dQ", "dK", "dV"), backward_reference(tensors)))
    return ok, tuple(tensors[name].tobytes() for name in ("dQ", "dK", "dV"))


# endregion


def seed(text: str, edit) -> str:
    lines = text.splitlines()
    edit(lines)
    return "\n".join(lines) + "\n"
