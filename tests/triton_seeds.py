"""One-edit synchronisation bugs seeded mechanically at every synchronisation instruction of Triton's PTX (another
compiler's: tests/ptx_samples/external), run in the PTX executor: issue 31's kinds on kernels the detector was not
written for, at PTX level only (there is no Target IR).

Kernels: Triton's TMA matmul (`triton_matmul_tma`: three-stage ring of mbarriers, one warpgroup, wgmma with one
group in flight, an elected thread issuing every expect_tx and TMA between bar.syncs, a TMA store epilogue), on one
k-block, three (the ring filled once) and eight (slots refilled); the tutorial's causal flash attention forward
(`triton_attention_fwd`: cp.async groups into a three-stage ring, wgmma), compiled for N_CTX 128 (a constexpr),
on query block 0 alone (its off-diagonal loop runs no trip) and on both query blocks of two heads.

`edits(text)` lists every seed: each mbarrier wait deleted and its parity flipped, each expect_tx deleted, halved
and doubled, each mbarrier.init counting 2, each wgmma.fence, commit_group and wait_group, fence.proxy.async,
bar.sync, cp.async commit and wait, bulk commit and wait deleted, each bar.sync counting one warp, each wait_group
allowing one more group. `EXPECTED[kernel]` gives the seeds not reported on every shape, by pattern, with the
reason the memory model accepts the edit there (the first match decides; the rest must be reported everywhere).
`python bench/races.py --triton` runs the matrix; tests/test_unseen_races.py a slice (all with `-m slow`).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

import tessera

SYNC = {
    # kind: regex of the instruction (after an optional guard)
    "wait": r"mbarrier\.try_wait",
    "expect_tx": r"mbarrier\.arrive\.expect_tx",
    "init": r"mbarrier\.init",
    "wgmma_fence": r"wgmma\.fence",
    "commit": r"wgmma\.commit_group",
    "wait_group": r"wgmma\.wait_group",
    "fence_proxy": r"fence\.proxy\.async",
    "bar_sync": r"bar\.sync",
    "cp_async_commit": r"cp\.async\.commit_group",
    "cp_async_wait": r"cp\.async\.wait_group",
    "bulk_commit": r"cp\.async\.bulk\.commit_group",
    "bulk_wait": r"cp\.async\.bulk\.wait_group",
}


def _sites(lines: list[str], kind: str) -> list[int]:
    pattern = re.compile(r"(@!?%?\w+ )?" + SYNC[kind] + r"\b")
    return [i for i, line in enumerate(lines) if pattern.match(line.strip())]


@lru_cache(maxsize=None)
def edits(text: str) -> tuple:
    """(kind, name, edit(lines)) for every synchronisation instruction of `text` (module docstring)."""
    lines = text.splitlines()
    out = []
    for kind in SYNC:
        for n, i in enumerate(_sites(lines, kind)):
            label = f"{kind} #{n} (line {i + 1})"
            if kind != "init":
                out.append((f"{kind} deleted", label, _delete(i, kind)))
            if kind == "wait":
                out.append(("parity flipped", label, _flip(i)))
            if kind == "expect_tx":
                out.append(("expect_tx too small", label, _scale(i, 0.5)))
                out.append(("expect_tx too large", label, _scale(i, 2)))
            if kind == "init":
                out.append(("mbarrier count wrong", label + " counts 2", _sub(i, r", 1;$", ", 2;")))
            if kind == "bar_sync":
                out.append(("bar.sync count wrong", label + " counts one warp", _sub(i, r"bar\.sync\s+0;", "bar.sync 0, 32;")))
            if kind in ("wait_group", "cp_async_wait", "bulk_wait"):
                out.append((f"{kind} weakened", label, _weaken(i)))
    return tuple(out)


def _delete(i: int, kind: str):
    def edit(lines):
        if kind == "wait":  # and its branch back
            j = next(j for j in range(i + 1, i + 4) if re.match(r"@!\S+ bra", lines[j].strip()))
            del lines[j]
        del lines[i]
    return edit


def _flip(i):
    def edit(lines):
        parity = re.search(r"\], (%r\d+);", lines[i]).group(1)
        lines[i] = lines[i].replace(f"], {parity};", "], %seeded_parity;")
        lines.insert(i, f"\txor.b32 %seeded_parity, {parity}, 1;")
        first = next(k for k, s in enumerate(lines) if s.strip().startswith(".reg"))
        lines.insert(first, "\t.reg .b32 %seeded_parity;")
    return edit


def _scale(i, factor):
    def edit(lines):
        count = re.search(r", (\d+);$", lines[i])
        lines[i] = lines[i][:count.start()] + f", {int(int(count.group(1)) * factor)};"
    return edit


def _sub(i, pattern, replacement):
    def edit(lines):
        new = re.sub(pattern, replacement, lines[i])
        assert new != lines[i], lines[i]
        lines[i] = new
    return edit


def _weaken(i):
    def edit(lines):
        lines[i] = re.sub(r"(\d+);$", lambda m: f"{int(m.group(1)) + 1};", lines[i])
    return edit


def seed(text: str, edit) -> str:
    """`text` with one edit applied."""
    lines = text.splitlines()
    edit(lines)
    return "\n".join(lines) + "\n"


def _external():
    import test_ptx_external

    return test_ptx_external


KERNELS = {"triton matmul (TMA)": "triton_matmul_tma", "triton attention (cp.async)": "triton_attention_fwd"}
SHAPES = {
    "triton matmul (TMA)": {"one k-block": 64, "three k-blocks": 192, "eight k-blocks": 512},
    "triton attention (cp.async)": {"query block 0": (1, 1), "both query blocks, two heads": (2, 2)},
}
"""Per kernel, its shapes in the order of the letters of an expectation: the matmul's K (M 128, N 64), the
attention's (query blocks, heads)."""


def source(kernel: str) -> str:
    return _external().source(KERNELS[kernel])


def run(kernel: str, shape: str, text: str) -> np.ndarray:
    """The output array of one launch of `text` (hazards and deadlocks propagate)."""
    external = _external()
    rng = np.random.default_rng(0)
    threads, shared = external.header_launch(text)
    hidden = [np.zeros(0, np.uint8), np.zeros(0, np.uint8)]
    launch = tessera.interpreters.ptx.launch
    if kernel == "triton matmul (TMA)":
        m, n, k = 128, 64, SHAPES[kernel][shape]
        a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)
        c = np.zeros((m, n), np.float16)
        args = [*external.descriptor_args(a), *external.descriptor_args(b), *external.descriptor_args(c), k]
        return launch(text, "matmul_tma_kernel", (m // 64, n // 64, 1), (threads, 1, 1), [*args, *hidden],
                      shared_bytes=shared, source="seeded.ptx")[10]
    blocks, heads = SHAPES[kernel][shape]
    n, d = 128, 64
    q, k, v = (rng.standard_normal((1, heads, n, d)).astype(np.float16) for _ in range(3))
    strides = [heads * n * d, n * d, d]
    return launch(text, "_attn_fwd", (blocks, heads, 1), (threads, 1, 1),
                  [q, k, v, np.float32(0.5), np.zeros(heads * n, np.float32), np.zeros_like(q), *strides * 4, 1,
                   heads, *hidden], shared_bytes=shared, source="seeded.ptx")[5]


@lru_cache(maxsize=None)
def clean(kernel: str, shape: str) -> bytes:
    """The unseeded kernel's output (its numerics are tests/test_ptx_external.py's)."""
    return run(kernel, shape, source(kernel)).tobytes()


def verdict(kernel: str, edit, shape: str) -> tuple[str, str]:
    """("R", the report's start), ("C", ...) clean and bitwise the unseeded output, or ("WRONG", ...)."""
    from tessera.interpreters.ptx import PtxExecutionError

    try:
        out = run(kernel, shape, seed(source(kernel), edit))
    except PtxExecutionError as error:
        return "R", " ".join(str(error).split("\n")[:2])
    return ("C", "clean, bitwise right") if out.tobytes() == clean(kernel, shape) else ("WRONG", "silent with a WRONG answer")


# region the expectations
_ONE_BLOCK = "on one k-block the op is predicated off or its slot is never awaited"
_NO_REFILL = ("with at most three k-blocks (the ring's stages) no slot that a wgmma read is refilled: the "
              "wait_group 1 that orders each read before its slot's refill orders nothing there")
_PROLOGUE_BARRIERS = ("Triton brackets every single-thread step (the inits, each expect_tx and TMA issue of the "
                      "prologue) with bar.syncs: the elected thread that initialises the barriers issues every "
                      "expect_tx and copy in program order, and the next bar.sync orders the inits before every "
                      "other thread's wait, so any one of these barriers deleted leaves the same orders")
_OWN_WAIT = ("every thread waits on the full barrier itself (each observes the phase that lands the tile): the "
             "bar.sync after the wait orders nothing more")
_REFILL_BARRIERS = ("three bar.syncs stand between every warp's wgmma.wait_group 1 and the refill's expect_tx and "
                    "TMA issue (one thread): any two of them order the wgmma reads before the refill")
_INVAL_BARRIERS = ("the mbarrier.invals after the loop: every thread's last wait is ordered before them by the "
                   "bar.sync after the wait in the last trip, and the invals are one thread's, in program order")
_LAST = "the last instruction before exit: nothing follows it"
_NO_LOOP = "on query block 0 the off-diagonal loop runs no trip: the op never runs"
_PV_FENCE = ("the fence after the loop's cp.async.wait_group 2 and bar.sync (which complete and publish the V "
             "tile's copies as well as K's) already puts a proxy fence on every path from the copies to the P V "
             "wgmma (memory_model.PROXY_FENCE: the fence may be the reader's, after the barrier)")
_SAME_ROWS = ("every thread copies the same rows of a slot each time, and the wgmma reads of the slots are complete "
              "at each thread's own wgmma.wait_group 0 (one warpgroup: its group is the warpgroup's, "
              "memory_model.WGMMA_WAIT_PER_THREAD): the barrier orders nothing the next stage writes")
_ONE_DIAGONAL_TRIP = ("BLOCK_M = BLOCK_N: the diagonal stage runs one trip, whose prefetch writes the third slot, "
                      "which no wgmma read since the same threads' earlier copies into it")
_ONE_OFF_DIAGONAL_TRIP = ("N_CTX 128: the off-diagonal loop runs at most one trip, whose prefetch writes the third "
                          "slot, which no wgmma read since the same threads' earlier copies into it")
_EPILOGUE = ("the epilogue's first stores write bytes of K's first slot, whose copies were published by the "
             "bar.sync after the stage's cp.async.wait_group 2 and whose wgmma reads completed at each thread's "
             "own wgmma.wait_group 0 (one warpgroup)")
_MERGED_GROUP = ("a commit deleted merges its copies into the next group, and the wait that follows still "
                 "completes that group (wait_group 2 leaves the two newest pending; a wait_group 0 leaves none)")
_LAST_PREFETCH = ("the last prefetch is of a block past the end (its copies zero-fill the third slot): nothing "
                  "reads or writes those bytes again before exit")

EXPECTED = {
    "triton matmul (TMA)": [
        (r"expect_tx .* #[12] ", "CRR", _ONE_BLOCK),
        (r"mbarrier count wrong init #[12] ", "CRR", _ONE_BLOCK),
        (r"wait_group (deleted|weakened) wait_group #0 ", "CCR", _NO_REFILL),
        (r"bar_sync deleted bar_sync #[0-5] ", "CCC", _PROLOGUE_BARRIERS),
        (r"bar_sync deleted bar_sync #6 ", "CCC", _OWN_WAIT),
        (r"bar_sync deleted bar_sync #[789] ", "CCC", _REFILL_BARRIERS),
        (r"bar_sync deleted bar_sync #1[01] ", "CCC", _INVAL_BARRIERS),
        (r"bar_sync deleted bar_sync #13 ", "CCC", _LAST),
    ],
    "triton attention (cp.async)": [
        (r"fence_proxy deleted fence_proxy #[13] ", "CC", _PV_FENCE),
        (r"bar_sync deleted bar_sync #2 ", "CC", _SAME_ROWS),
        (r"bar_sync deleted bar_sync #1 ", "CC", _ONE_OFF_DIAGONAL_TRIP),
        (r"bar_sync deleted bar_sync #4 ", "CC", _ONE_DIAGONAL_TRIP),
        (r"bar_sync deleted bar_sync #5 ", "CC", _EPILOGUE),
        (r"cp_async_commit deleted cp_async_commit #([0456]|1[01]) ", "CC", _MERGED_GROUP),
        (r"cp_async_wait (deleted|weakened) cp_async_wait #3 ", "CC", _LAST_PREFETCH),
        (r"(wgmma_fence|commit|wait_group) .* #[01] |fence_proxy deleted fence_proxy #0 |bar.sync.* #[01] |"
         r"cp_async_commit deleted cp_async_commit #[12] |cp_async_wait .* #0 ", "CR", _NO_LOOP),
    ],
}
"""kernel -> [(pattern on "kind name", expected per shape, reason)], the first match deciding."""


def expectation(kernel: str, kind: str, name: str) -> tuple[str, str]:
    """(expected per shape, reason) of one seed."""
    for pattern, expected, reason in EXPECTED[kernel]:
        if re.search(pattern, f"{kind} {name}"):
            return expected, reason
    return "R" * len(SHAPES[kernel]), ""


def catalogue() -> dict[str, list[tuple]]:
    """kernel -> [(kind, name, edit, expected, reason)]."""
    return {kernel: [(kind, name, edit, *expectation(kernel, kind, name)) for kind, name, edit in edits(source(kernel))]
            for kernel in KERNELS}


# endregion


def matrix(out=print) -> int:
    """Every seed on every shape: one line each, the number of outcomes that differ from their expectation."""
    missed = 0
    for kernel, seeds in catalogue().items():
        out(f"{kernel}: unseeded {'clean' if all(clean(kernel, s) for s in SHAPES[kernel]) else '?'}")
        for kind, name, edit, expected, _ in seeds:
            for shape, want in zip(SHAPES[kernel], expected):
                got, text = verdict(kernel, edit, shape)
                missed += got != want
                note = "" if got == want else f"  MISMATCH (expected {want})"
                out(f"  {got} {kind}: {name} [{shape}]{note}\n      {text[:220]}")
    return missed
