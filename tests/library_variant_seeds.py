"""Issue 31's kinds seeded into the seven library configurations tests/ptx_library/build.py added for the
variants (CUTLASS's FP8 cooperative GEMM with alpha/beta, its bf16 bias + ReLU ping-pong GEMM with a TMA-store
epilogue, its stream-K scheduler on 2 and 4 SMs and split-K in 3; FA3's forward in FP8 e4m3 with descale factors,
with soft-capping, with a sliding window and with packed GQA), each on a short size and a long one.

`VARIANTS[label]` is `(configuration, [short, long] sizes, SMs, describe options)`; the seeds of a label are
`library_seeds.LIBRARY_BUGS` (the 17 kinds; no configuration here runs in clusters, so `CLUSTER_BUGS` do not apply)
and, for the stream-K and split-K launches, `FIXUP_BUGS`: their partial tiles meet in a global workspace, the
units of one tile ordered by a flag per tile (CUTLASS's `GenericBarrier`: thread 0 of a consumer warpgroup spins
on `ld.acquire.gpu` until the flag reaches its count and a named barrier hands that to the warpgroup; after
storing or adding its partial, the warpgroup meets at the named barrier and thread 0 releases the flag with
`fence.acq_rel.gpu` + `red.relaxed.gpu.add`). Each edit there applies to every instance (the scheduler picks the
path at run time).

`EXPECTED[label]` lists `(pattern on "kind: name", expected per size, reason)` for the seeds not reported on both
sizes: R reported (a hazard, a deadlock, an error), C clean and right (the reason says why the memory model
accepts it there, or that the size never reaches it). A cell of a stream-K or split-K launch runs on the min-pc
schedule and then on the delayed one with each CTA delayed in turn (`schedules`): the CTAs meet through flags in
the workspace, and a peer late by its share of k-blocks is a timing only the delayed schedule tries.
`python bench/races.py --library` runs every cell (exit 1 on a mismatch); tests/test_library_variant_races.py runs
a slice, and all with -m slow.
"""

from __future__ import annotations

import re

import numpy as np

from library_seeds import LIBRARY_BUGS, _all, _instruction, seed
from ptx_library.build import CONFIGS
from ptx_library.library import BUILD, built, describe, launch_library

VARIANTS = {
    "cutlass fp8 cooperative, alpha/beta": ("cutlass_fp8_cooperative_128x128x128", [(128, 128, 128, 1),
                                                                                   (128, 128, 1024, 1)], 1,
                                            {"alpha": 0.5, "beta": 1.5}),
    "cutlass bf16 bias+ReLU ping-pong": ("cutlass_bf16_bias_relu_pingpong_64x128x64", [(128, 128, 64, 1),
                                                                                      (128, 128, 512, 1)], 1,
                                         {"alpha": 0.5, "beta": 1.5}),
    "cutlass stream-K, 2 SMs": ("cutlass_streamk_cooperative_128x128x64", [(384, 128, 192, 1), (384, 128, 1024, 1)],
                                2, {"decomposition": "streamk"}),
    "cutlass stream-K nondeterministic, 4 SMs": ("cutlass_streamk_cooperative_128x128x64",
                                                 [(384, 256, 384, 1), (384, 128, 1024, 1)], 4,
                                                 {"decomposition": "streamk", "reduction": "nondeterministic"}),
    "cutlass split-K in 3": ("cutlass_streamk_cooperative_128x128x64", [(128, 128, 192, 1), (330, 100, 520, 1)], 2,
                             {"decomposition": "splitk", "splits": 3}),
    "fa3 fp8 e4m3, descales": ("fa3_fwd_fp8_hdim128", [(1, 1, 128, 128), (1, 1, 200, 500)], 2, {}),
    "fa3 soft-cap": ("fa3_fwd_hdim128_softcap", [(1, 1, 128, 128), (1, 1, 200, 333)], 2, {"softcap": 2.5}),
    "fa3 local": ("fa3_fwd_hdim64_local", [(1, 1, 128, 128), (1, 1, 200, 333)], 2, {"wl": 50, "wr": 10}),
    "fa3 packed GQA": ("fa3_fwd_hdim64_packgqa", [(1, 4, 64, 128), (1, 4, 100, 333)], 2, {"hk": 2}),
}
"""label -> (configuration, [short, long] sizes, SMs, options). GEMMs (M N K L): one k-block, then more k-blocks
than the pipeline's stages (every slot refilled); stream-K and split-K: a short size CUTLASS's heuristic keeps
data-parallel (stream-K; no fixup runs) or with one k-block per split (split-K: one tile's three splits on two
CTAs), and a long one whose split tiles meet across CTAs: three output tiles on two SMs and on four, three ragged
tiles in three splits on two SMs (on four tiles every fixup kind but the deleted increment ran clean, as it must
if each tile's splits run in one CTA, whose program order and named barriers order the workspace without the flag).
FA3 (B H SQ SK): one key block, then several (the last ragged) over two query blocks; packed GQA four query heads
on two K/V heads."""


def available() -> list[str]:
    return [label for label, (name, *_) in VARIANTS.items() if built(name)]


def base_text(label: str) -> str:
    """The PTX a label's seeds edit: the built kernel."""
    return (BUILD / VARIANTS[label][0] / "kernel.ptx").read_text()


def run(label: str, text: str, size: int, **schedule) -> bool:
    """Launch PTX `text` as `label` on its size number `size` (with `launch_library`'s `schedule`,
    `schedule_seed`): whether the output is right (the checks of tests/test_ptx_library.py: alpha A B^T + beta C
    (+ bias, ReLU) for the GEMMs, softmax(S) V with the window, soft-cap and FP8 bounds for FA3)."""
    from test_ptx_library import _attention_check, _descales, _gemm_check

    name, sizes, sms, options = VARIANTS[label]
    try:
        if name.startswith("cutlass"):
            tensors, _, _ = launch_library(name, sizes[size], sms, options=options, text=text,
                                           **schedule)
            _gemm_check(name, tensors, options)
        else:
            tensors, _, _ = launch_library(name, (*sizes[size], CONFIGS[name]["HDIM"]), sms, options=options,
                                           prepare=_descales, text=text, **schedule)
            _attention_check(name, tensors, options)
    except AssertionError:
        return False
    return True


def schedules(label: str, size: int) -> list[dict]:
    """The schedules a cell runs on (`run`'s keywords): min-pc, and for a stream-K or split-K launch, whose CTAs
    meet in the workspace, the delayed schedule with each CTA of the grid its host code gives delayed in turn
    (`launch(schedule="delayed")`: that CTA runs only when no other can)."""
    name, sizes, sms, options = VARIANTS[label]
    if "decomposition" not in options:
        return [{}]
    ctas = int(np.prod(describe(name, sizes[size], sms, options)["grid"]))
    return [{}] + [{"schedule": "delayed", "schedule_seed": cta} for cta in range(ctas)]


# region the stream-K fixup's own kinds
def _spins(lines) -> list[int]:
    """The `ld.global.acquire.gpu` of every flag wait (CUTLASS's `GenericBarrier::wait_eq` / `wait_lt`)."""
    return _all(lines, "ld.global.acquire.gpu")


def _back_branch(lines, i: int) -> int:
    """The branch that loops back over the wait at line i (`@%p bra LOOP;` to the label before it)."""
    label = next(lines[j].strip()[:-1] for j in range(i, -1, -1) if re.match(r"\s*\$\w+:$", lines[j]))
    return next(j for j in range(i, i + 12) if re.search(rf"bra(\.uni)?\s+{re.escape(label)};", lines[j]))


def _each(pick):
    """Delete the line `pick(lines, i)` gives for every flag wait or release i (collected first, deleted from the
    last); LookupError when there is none."""
    def edit(lines):
        found = sorted({pick(lines, i) for i in pick.sites(lines)}, reverse=True)
        if not found:
            raise LookupError("no flag wait or release in this kernel")
        for j in found:
            del lines[j]
    return edit


def _site(sites, pick):
    pick.sites = sites
    return pick


def _releases(lines) -> list[int]:
    """The `fence.acq_rel.gpu` before each flag increment (`GenericBarrier::arrive_inc`: thread 0's release)."""
    return [i for i in _all(lines, "fence.acq_rel.gpu")
            if any(_instruction(lines[j]).startswith("red.relaxed.gpu.global.add") for j in range(i, i + 8))]


def _nearest(lines, start: int, step: int, prefix: str, reach: int = 14) -> int:
    for j in range(start, start + step * reach, step):
        if _instruction(lines[j]).startswith(prefix):
            return j
    raise LookupError(f"no {prefix} within {reach} lines")


def _weaken_acquire(lines):
    found = _spins(lines)
    if not found:
        raise LookupError("no flag wait in this kernel")
    for i in found:
        lines[i] = lines[i].replace("ld.global.acquire.gpu", "ld.global.relaxed.gpu", 1)


FIXUP_BUGS = [
    ("fixup: acquire weakened", "every flag wait's ld.acquire.gpu made ld.relaxed.gpu", _weaken_acquire),
    ("fixup: wait deleted", "every flag wait passes at once (its spin loop's branch deleted)",
     _each(_site(_spins, lambda lines, i: _back_branch(lines, i)))),
    ("fixup: bar.sync deleted", "the named barrier after each flag wait (thread 0's acquire to its warpgroup)",
     _each(_site(_spins, lambda lines, i: _nearest(lines, i, 1, "bar.sync")))),
    ("fixup: fence deleted", "the fence.acq_rel.gpu before each flag increment (the release)",
     _each(_site(_releases, lambda lines, i: i))),
    ("fixup: bar.sync deleted", "the named barrier before each release (the warpgroup's partial stores to thread 0)",
     _each(_site(_releases, lambda lines, i: _nearest(lines, i, -1, "bar.sync")))),
    ("fixup: flag increment deleted", "every red.relaxed.gpu.add of a flag",
     _each(_site(_releases, lambda lines, i: _nearest(lines, i, 1, "red.relaxed.gpu.global.add")))),
]
"""(kind, name, edit): the cross-CTA reduction's synchronisation in CUTLASS's stream-K and split-K fixup."""


# endregion
# region the expectations
def seeds(label: str) -> list[tuple]:
    """(kind, name, edit) of `label`: the 17 kinds, and the fixup's for stream-K and split-K launches."""
    return LIBRARY_BUGS + (FIXUP_BUGS if "decomposition" in VARIANTS[label][3] else [])


_ONE_K_BLOCK = "one k-block never reaches the second (the wait and its slot are the second k-block's)"
_FIRST_FILL = ("the first fill of a slot needs no wait: its empty barrier is fresh, and one k-block fills no slot "
               "twice")
_NEVER_REFILLED = "one k-block never refills the slot, so nothing waits for its release"
_LATER_BULK_WAIT = ("the epilogue's first cp.async.bulk.wait_group.read deleted: a later wait covers its TMA store's "
                    "read before the buffer is written again, and the last one before exit")
_PINGPONG_LOOP = ("this wgmma.wait_group 1 is in the mainloop's steady state, which one k-block never runs: the "
                  "wait_group 0 after the loop completes the prologue's wgmma before its slot is released")
_DATA_PARALLEL = ("CUTLASS's stream-K heuristic keeps this size data-parallel (its describe gives no workspace): "
                  "every tile is one unit, so no fixup runs")
_FA3_LOOP = "one key block never runs the main loop, where this wait is (the loop's K wait)"
_FA3_FIRST_FILL = ("the producer's first wait is for the first fill of a fresh slot (its empty barrier is fresh, "
                   "the parity waited for is the phase before the init): no fill needs it, on any size")
_SPLIT_ONE_K_BLOCK = ("each split is one k-block here: the mainloop's steady state, where this is, never runs (the "
                      "wait_group 0 after the loop completes the prologue's wgmma), and the first fill needs no wait")

_FA3 = [
    (r"wait deleted: the consumers' second", "CR", _FA3_LOOP),
    (r"wait deleted: the producer's first", "CC", _FA3_FIRST_FILL),
]
_CUTLASS_COMMON = [
    (r"wait deleted: the consumers' second", "CR", _ONE_K_BLOCK),
    (r"wait deleted: the producer's first", "CR", _FIRST_FILL),
    (r"slot release deleted", "CR", _NEVER_REFILLED),
    (r"bulk wait deleted", "CC", _LATER_BULK_WAIT),
]
_STREAM_K = [
    (r"bulk wait deleted", "CC", _LATER_BULK_WAIT),
    (r"fixup: ", "CR", _DATA_PARALLEL),
]
EXPECTED: dict[str, list[tuple[str, str, str]]] = {
    "cutlass fp8 cooperative, alpha/beta": _CUTLASS_COMMON,
    "cutlass bf16 bias+ReLU ping-pong": [(r"wgmma.wait_group deleted", "CR", _PINGPONG_LOOP)] + _CUTLASS_COMMON,
    "cutlass stream-K, 2 SMs": _STREAM_K,
    "cutlass stream-K nondeterministic, 4 SMs": _STREAM_K,
    "cutlass split-K in 3": [(r"wait deleted: the producer's first|wgmma.wait_group deleted", "CR",
                              _SPLIT_ONE_K_BLOCK),
                             (r"bulk wait deleted", "CC", _LATER_BULK_WAIT)],
    "fa3 fp8 e4m3, descales": _FA3,
    "fa3 soft-cap": _FA3,
    "fa3 local": _FA3,
    "fa3 packed GQA": [(r"wait deleted: the producer's first", "CR",
                        "on one key block the slot this wait guards is filled once, and a first fill needs no wait"),
                       (r"bar.sync deleted: the epilogue's", "CR",
                        "in this PTX (hdim 64, P through shared memory) the first fence.proxy.async follows the "
                        "consumers' P stores (stmatrix), and the bar.sync after it is the warpgroups' scheduling "
                        "barrier of the key loop: one key block has no later iteration for it to order; on several "
                        "the refill it orders is reported")]
                      + _FA3,
}
"""label -> [(pattern on "kind: name", expected per size, reason)], the first match deciding; a seed no pattern
matches must be reported on both sizes."""


def expectation(label: str, kind: str, name: str) -> tuple[str, str]:
    for pattern, expected, reason in EXPECTED.get(label, []):
        if re.search(pattern, f"{kind}: {name}"):
            return expected, reason
    return "RR", ""


def verdict(label: str, text: str, size: int) -> tuple[str, str]:
    """("R", the report's start), ("C", "clean, right") or ("WRONG", ...) of a cell: its runs on each of its
    `schedules` up to the first report or wrong answer (a delayed one named in front)."""
    from tessera.interpreters.ptx import PtxExecutionError

    for schedule in schedules(label, size):
        where = f"[CTA {schedule['schedule_seed']} delayed] " if schedule else ""
        try:
            ok = run(label, text, size, **schedule)
        except PtxExecutionError as error:
            return "R", where + " ".join(str(error).split("\n")[:2])
        if not ok:
            return "WRONG", where + "silent with a WRONG answer"
    return "C", "clean, right"


def matrix(out=print, labels=None) -> int:
    """Every seed of every built label on both sizes, one line each; the number of cells that differ from their
    expectation (an unseeded run that is not clean and right counts too)."""
    missed = 0
    for label in labels or available():
        text = base_text(label)
        for size in (0, 1):
            got, report = verdict(label, text, size)
            missed += got != "C"
            out(f"{label} {VARIANTS[label][1][size]}: unseeded {got} {report[:200]}")
        for kind, name, edit in seeds(label):
            try:
                seeded = seed(text, edit)
            except LookupError as error:
                out(f"  {kind}: {name}: no such instruction ({error})")
                continue
            expected, _ = expectation(label, kind, name)
            for size in (0, 1):
                got, report = verdict(label, seeded, size)
                note = "" if got == expected[size] else f"  MISMATCH (expected {expected[size]})"
                missed += got != expected[size]
                out(f"  {got} {kind}: {name} [{VARIANTS[label][1][size]}]{note}\n      {report[:220]}", flush=True)
    return missed


# endregion
