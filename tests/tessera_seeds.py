"""One-edit synchronisation bugs seeded into three of Tessera's kernels the detectors were not written for, applied
to their Target IR (CTA simulator) and to their PTX (PTX executor) alike: issue 31's kinds, and the cluster's own.

Kernels (`KERNELS`), each through the default pipeline: the split-KV flash kernel (head_dim 64, bf16, causal,
the keys in 3 parts, partial O and LSE per part), the flash kernel in clusters of two (head_dim 64, bf16: each CTA
of the pair loads half of every K and V tile and multicasts it to both, the consumers release each slot on both
CTAs' empty barriers through `mapa` + `mbarrier.arrive.release.cluster`, a cluster barrier after the inits and
one before exit), and the warp-specialized GEMM (bf16, a TMA producer warp, one consumer warpgroup).

Edits are tests/backward_seeds.py's `At`/`Edit` (the n-th op of a kind in a region, located the same way in both
forms), with the cluster's kinds added there (`cluster_arrive`, `cluster_wait`, `remote_release`, `multicast`)
and the action "mask" (a multicast's CTA mask). `CATALOGUE[kernel]` lists `(kind, name, edit, expected,
reason)`: R or C per cell (`CELLS`: CTA simulator on the short and the long shape, PTX executor on both), with the
reason for every C. The short shape fills each ring slot at most once; the long one refills every slot.
tests/test_tessera_races.py runs one seed per kind (the rest with `-m slow`); `python bench/races_target.py
--tessera` and `python bench/races.py --tessera` run the whole matrix.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np

import race_templates
import tessera
from backward_seeds import At, Edit, apply_ptx, apply_target
from tessera import find_kernel, reference

KERNELS = {
    "split-KV": lambda: tessera.kernels.flash_attention(head_dim=64, dtype="bf16", causal=True, num_splits=3),
    "cluster 2": lambda: tessera.kernels.flash_attention(head_dim=64, dtype="bf16", cluster=2),
    "gemm": lambda: tessera.kernels.gemm(dtype="bf16"),
}

SHAPES = {
    "split-KV": {"short": (3, 300), "long": (130, 1400)},
    "cluster 2": {"short": (256, 128), "long": (256, 500)},
    "gemm": {"short": (128, 128, 128), "long": (256, 512, 128)},
}
"""Per kernel, the short shape (each K/V or A/B slot filled at most once) and the long one (slots refilled):
attention (seq_q, seq_k) with 128-key blocks in a two-slot ring (split-KV: 100 keys a part, then three or four
blocks a part on two query blocks, the second ragged; clusters: one pair of query blocks over one key block, then
four, the last ragged), GEMM (M, K, N) with 64-deep k-blocks in a four-slot ring (two, then eight on two row
blocks)."""

_OUTPUTS = {"split-KV": slice(3, 5), "cluster 2": slice(3, 4), "gemm": slice(2, 3)}


# region kernels and runs
@lru_cache(maxsize=None)
def compiled(kernel: str):
    """(signature, Target IR module, PTX text) of `kernel` through the default pipeline."""
    module = KERNELS[kernel]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = tessera.compile(module, target="target")
        text = tessera.compile(module, target="ptx")
    return find_kernel(module), lowered, text


def inputs(kernel: str, shape: str) -> list[np.ndarray]:
    rng = np.random.default_rng(sum(SHAPES[kernel][shape]))
    dims = SHAPES[kernel][shape]
    if kernel == "gemm":
        return [rng.standard_normal(dims[:2]), rng.standard_normal(dims[1:])]
    seq_q, seq_k = dims
    return [rng.standard_normal((1, 1, n, 64)) for n in (seq_q, seq_k, seq_k)]


def target_kernel(kernel: str):
    """A fresh copy of `kernel`'s Target IR kernel."""
    from tessera.kernel_abi import is_target_kernel

    return next(op for op in compiled(kernel)[1].walk() if is_target_kernel(op)).clone()


def run(level: str, kernel: str, shape: str, fn=None, text: str | None = None, **kw) -> list[np.ndarray]:
    """Every argument array after one run of `kernel` (Target IR `fn` or PTX `text`, the unseeded one if None) at
    `level` on `shape` (hazards and deadlocks propagate)."""
    from tessera.host import describe
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.ptx.launcher import launch_described
    from tessera.interpreters.sm90 import run_target_kernel

    sig, lowered, unseeded = compiled(kernel)
    arrays, sizes = prepare_arguments(sig, inputs(kernel, shape))
    if level == "target":
        run_target_kernel(target_kernel(kernel) if fn is None else fn, arrays, sizes, **kw)
    else:
        launch_described(unseeded if text is None else text, describe(lowered)[0], arrays, sizes,
                         source="seeded.ptx", **kw)
    return arrays


def right(kernel: str, arrays: list[np.ndarray]) -> bool:
    """Whether one run's outputs match NumPy (split-KV: its parts combined by their LSEs)."""
    if kernel == "gemm":
        return reference.check_gemm(arrays[2], arrays[0], arrays[1], arrays[0].dtype).ok
    if kernel == "split-KV":
        parts = arrays[3].shape[0] // arrays[0].shape[0]
        o_parts, lse_parts = (x.reshape((parts, 1) + x.shape[1:]).astype(np.float64) for x in arrays[3:5])
        lse = np.logaddexp.reduce(lse_parts, axis=0)
        out = (np.exp(lse_parts - lse) * o_parts).sum(axis=0)
        return reference.check_attention(out, *arrays[:3], arrays[0].dtype, causal=True).ok
    return reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False).ok


@lru_cache(maxsize=None)
def clean(level: str, kernel: str, shape: str) -> tuple[bytes, ...]:
    """The unseeded kernel's outputs (bytes), the answer a seeded run must reproduce to count as right."""
    return tuple(a.tobytes() for a in run(level, kernel, shape)[_OUTPUTS[kernel]])


def seeded_run(level: str, kernel: str, edit: Edit, shape: str, **kw) -> bool:
    """Run `kernel` with `edit` at `level` on `shape`: whether the outputs are bitwise the unseeded kernel's."""
    if level == "target":
        fn = target_kernel(kernel)
        apply_target(fn, edit)
        out = run(level, kernel, shape, fn=fn, **kw)
    else:
        out = run(level, kernel, shape, text=apply_ptx(compiled(kernel)[2], edit), **kw)
    return tuple(a.tobytes() for a in out[_OUTPUTS[kernel]]) == clean(level, kernel, shape)


# endregion
# region the catalogue
C, P = "consumer loop", "producer loop"
ALL = "RRRR"
"""Per (CTA simulator short, long; PTX executor short, long): R reported (a hazard naming both sides, a deadlock
naming what each blocked thread waits for, or an error at the CTA's exit), C clean with bitwise the unseeded
kernel's outputs (the edit is not a bug on that shape, the reason says why), G clean with the right answer but a
bug a detector misses (a gap, the reason names the simulator and the rule)."""

_UNREACHED = ("on the short shape (one key block a part, one pair of key blocks in the cluster's ring) the consumer "
              "loop runs its first trip only, which branches past the previous trip's P.V update (its V wait, "
              "wgmmas and V release; overlap-softmax's fold), and the producer's loop never runs: no slot is "
              "refilled")
_LEDGER = ("on the short shape the slot is never awaited again: not a race at that length; the CTA simulator "
           "reports it by its end-of-kernel ledger (every ring slot released as often as it was filled)")
_LEDGER_CLUSTER = ("on the short shape the slot is never awaited again: not a race at that length; the CTA "
                   "simulator's end-of-kernel ledger, which reports it in a CTA of its own, does not count the "
                   "arrivals of a cluster's remote releases")
_INIT_FENCE = ("memory_model.MBARRIER_INIT_FENCE, one rule at both levels: the fence releases inits to other CTAs "
               "of a cluster; inside one CTA the bar.sync after the inits orders them for every use")
_INIT_FENCE_CLUSTER = ("memory_model.MBARRIER_INIT_FENCE: the cluster barrier after the inits arrives with "
                       ".release (barrier.cluster.arrive.release; a Target IR cluster_arrive), which releases the "
                       "inits to the peer as the fence would; CUTLASS's .relaxed arrive needs the fence")
_FOLDED_PV = (_UNREACHED + " in the Target IR; the PTX printer runs the last trip's P.V in the loop (its V wait, "
              "wgmmas and commit; tessera/ptx/fold_epilogue.py, compile17), so in the PTX the loop's op runs on the "
              "short shape too: reported there (the clusters' loop, whose V release is a remote arrive, is printed "
              "unfolded)")
_FIRST_TRIP = ("the folded loop's first trip runs on the short shape too (overlap-softmax's fold: no trip is peeled "
               "before the loop), so the loop's op is the first key block's as well: reported on both shapes")
_FIRST_TRIP_K = ("a race on the long shape since the fold: the loop's first trip has no V release of a trip before it, "
                 "so nothing orders its K reads before the producer refills that K slot (on later trips the V "
                 "release still does); on the short shape no slot is refilled")
_S_FENCE_MOVED = ("the loop's S fence moved before the loop (the consumers' bar.sync after the Q wait): the "
                  "warpgroup's first wgmma keeps a fence, every later S has none, as when the first trip was peeled "
                  "before the loop and only the loop's fence was deleted; on the short shape the loop runs its first "
                  "trip only")
_WAIT_GROUP_1, _WAIT_GROUP_0 = At(C, "wait_group", 1), At(C, "wait_group", 2)
"""The loop's wgmma.wait_group 1 after S = Q K^T and its wait_group 0 after O += P V: the loop's first wait_group
(`At(C, "wait_group", 0)`) is the first trip's own wait_group 0, on its path past the P.V update (overlap-softmax's
fold)."""
_FIRST_FILLS = ("on the short shape (two k-blocks, four slots) every fill is a slot's first: its empty barrier is "
                "fresh and the producer's wait passes at once, so deleting it changes nothing there")


def _flash(empty: int, cluster: bool) -> list:
    """Seeds of both flash kernels (split-KV; clusters of two if `cluster`), `empty` the empty barriers' arrival
    count: the loop's groups are S = Q K^T then O += P V, each waited on (the second 0 pending); the cluster
    kernel, not causal, commits mask-by-mma's bias group between them on its masked trips."""
    return [
        ("wait deleted", "the consumers' Q wait", Edit("delete", At("consumer", "wait", 0)), ALL, ""),
        ("wait deleted", "the consumers' first K full wait (the loop's K wait since the fold)",
         Edit("delete", At("consumer", "wait", 1)), ALL, ""),
        ("wait deleted", "the K full wait in the consumer loop", Edit("delete", At(C, "wait", 0)), ALL,
         _FIRST_TRIP),
        ("wait deleted", "the V full wait in the consumer loop", Edit("delete", At(C, "wait", 1)),
         *(("CRCR", _UNREACHED) if cluster else ("CRRR", _FOLDED_PV))),
        ("wait deleted", "the producer's K empty wait in its loop", Edit("delete", At(P, "wait", 0)), "CRCR",
         _UNREACHED),
        ("parity flipped", "the K full wait in the consumer loop", Edit("flip", At(C, "wait", 0)), ALL,
         _FIRST_TRIP),
        ("parity flipped", "the V full wait in the consumer loop", Edit("flip", At(C, "wait", 1)),
         *(("CRCR", _UNREACHED) if cluster else ("CRRR", _FOLDED_PV))),
        ("parity flipped", "the producer's K empty wait in its loop", Edit("flip", At(P, "wait", 0)), "CRCR",
         _UNREACHED),
        ("parity flipped", "the producer's first K empty wait", Edit("flip", At("producer", "wait", 0)), ALL, ""),
        ("expect_tx too small", "the producer's first K", Edit("scale", At("producer", "expect_tx", 0), 0.5), ALL,
         ""),
        ("expect_tx too small", "the consumers' Q", Edit("scale", At("consumer", "expect_tx", 0), 0.5), ALL, ""),
        ("expect_tx too large", "the producer's first V", Edit("scale", At("producer", "expect_tx", 1), 2), ALL,
         ""),
        ("expect_tx deleted", "the producer's first K", Edit("delete", At("producer", "expect_tx", 0)), ALL, ""),
        ("wgmma.commit_group deleted", "S = Q K^T in the loop", Edit("delete", At(C, "commit", 0)), ALL,
         _FIRST_TRIP),
        ("wgmma.commit_group deleted", "O += P V in the loop", Edit("delete", At(C, "commit", 2 if cluster else 1)),
         *(("CRCR", _UNREACHED) if cluster else ("CRRR", _FOLDED_PV))),
        ("wgmma.wait_group deleted", "the first in the loop", Edit("delete", _WAIT_GROUP_1), "CRCR",
         _UNREACHED),
        ("wgmma.wait_group deleted", "the second in the loop", Edit("delete", _WAIT_GROUP_0), "CRCR",
         _UNREACHED),
        ("wgmma.wait_group weakened", "the second in the loop, 0 -> 1", Edit("pending", _WAIT_GROUP_0, 1),
         "CRCR", _UNREACHED),
        ("wgmma.fence deleted", "the consumers' first (the loop's S fence since the fold)",
         Edit("delete", At("consumer", "wgmma_fence", 0)), ALL, ""),
        ("wgmma.fence deleted", "before S = Q K^T in the loop, kept before the loop for the warpgroup's first",
         Edit("move", At(C, "wgmma_fence", 0), other=At("consumer", "bar_sync", 0)), "CRCR", _S_FENCE_MOVED),
        ("bar.sync deleted", "after mbarrier.init", Edit("delete", At("kernel", "bar_sync", 0)),
         *(("CCCC", "the cluster barrier right after it (every thread of both CTAs arrives with release and waits "
            "with acquire) orders the inits before every use in either CTA") if cluster else (ALL, ""))),
        ("bar.sync count wrong", "the bar.sync after the inits counts only the consumers",
         Edit("count", At("kernel", "bar_sync", 0), 256), ALL, ""),
        ("mbarrier count wrong", "a full barrier counts two arrivals", Edit("count", At("kernel", "init", 1), 2),
         ALL, ""),
        ("mbarrier count wrong", "the first K empty barrier counts half its arrivals",
         Edit("count", At("kernel", "init", 2), empty // 2), *(("CRCR", _LEDGER_CLUSTER) if cluster else
                                                                 ("RRCR", _LEDGER))),
        ("fence.mbarrier_init deleted", "after the inits", Edit("delete", At("kernel", "fence_mbarrier_init", 0)),
         "CCCC", _INIT_FENCE_CLUSTER if cluster else _INIT_FENCE),
    ]


_RELEASES = [
    ("slot released before its wait_group", "V, before the loop's wait_group 0 (keeping its first-trip branch)",
     Edit("move", At(C, "release", 1), 1, other=_WAIT_GROUP_0), "CRCR", _UNREACHED),
    ("slot release deleted", "the first K's", Edit("delete", At("consumer", "release", 0)), "RRCR", _LEDGER),
    ("slot release deleted", "V in the loop", Edit("delete", At(C, "release", 1)), "CRCR", _UNREACHED),
    ("release on the wrong barrier", "K's release arrives on V's empty barrier",
     Edit("retarget", At(C, "release", 0), other=At(C, "release", 1)), "RRCR",
     _LEDGER + " (the loop's first trip, which runs on the short shape since the fold, releases K on V's barrier)"),
    ("slot released before the read", "K, before the loop's S = Q K^T (its wgmma_fence)",
     Edit("move", At(C, "release", 0), other=At(C, "wgmma_fence", 0)), "CRCR", _FIRST_TRIP_K),
]
"""Releases in a CTA of its own (split-KV): `mbarrier.arrive` on the local empty barrier."""

_CLUSTER = [
    ("remote arrive deleted", "K's release on the second CTA's empty barrier, in the loop",
     Edit("delete", At(C, "remote_release", 1)), "CRCR", _UNREACHED),
    ("remote arrive deleted", "V's release on the first CTA's empty barrier, in the loop",
     Edit("delete", At(C, "remote_release", 2)), "CRCR", _UNREACHED),
    ("remote arrive deleted", "the first K's release on the second CTA",
     Edit("delete", At("consumer", "remote_release", 1)), "CRCR", _LEDGER_CLUSTER),
    ("remote arrive sent home", "K's two releases in the loop both arrive on the CTA's own empty barrier",
     Edit("home", At(C, "remote_release", 0), other=At(C, "remote_release", 1)), "CRCR",
     "every arrival count stays right (each empty barrier counts its own consumers twice); on the short shape no "
     "slot is refilled; on the long one, since the fold, the loop's first trip has no V releases of a trip before "
     "it, so nothing orders the peer's reads of the first K slot before the producer's multicast refill into it "
     "(CUTLASS's release sent home, as for V; on later trips the V releases still order it)"),
    ("remote arrive sent home", "V's two releases in the loop both arrive on the CTA's own empty barrier",
     Edit("home", At(C, "remote_release", 2), other=At(C, "remote_release", 3)), "CRCR",
     _UNREACHED + "; on the long one every count is right, but the producer multicasts into its peer's V slot "
     "with nothing ordering the peer's wgmma reads before it (CUTLASS's release sent home)"),
    ("multicast mask wrong", "the first K half delivered to the first CTA only",
     Edit("mask", At("producer", "multicast", 0), 1), ALL, ""),
    ("multicast mask wrong", "the first V half delivered to the second CTA only",
     Edit("mask", At("producer", "multicast", 2), 2), ALL, ""),
    ("cluster barrier deleted", "the arrive after the inits", Edit("delete", At("kernel", "cluster_arrive", 0)),
     ALL, ""),
    ("cluster barrier deleted", "the wait after the inits", Edit("delete", At("kernel", "cluster_wait", 0)), ALL,
     ""),
    ("cluster barrier deleted", "the wait before exit", Edit("delete", At("kernel", "cluster_wait", 1)), ALL,
     "a CTA may exit while its peer still arrives on its empty barriers (the peer's last releases): the CTA "
     "simulator reports the pending remote arrivals at exit, the PTX executor a remote arrive no cluster wait of "
     "the exiting CTA orders before its exit (memory_model.CLUSTER_EXIT_WAIT)"),
    ("cluster barrier deleted", "the arrive before exit", Edit("delete", At("kernel", "cluster_arrive", 1)), ALL,
     ""),
    ("slot released before the read", "K's release on the first CTA, before the loop's S = Q K^T",
     Edit("move", At(C, "remote_release", 0), other=At(C, "wgmma_fence", 0)), "CRCR", _FIRST_TRIP_K),
    ("slot released before its wait_group", "V's release on the first CTA, before the loop's wait_group 0 (keeping "
     "its first-trip branch)", Edit("move", At(C, "remote_release", 2), 1, other=_WAIT_GROUP_0), "CRCR", _UNREACHED),
]
"""The cluster's own kinds (clusters of two)."""

_GEMM = [
    ("wait deleted", "the full wait in the consumer loop", Edit("delete", At(C, "wait", 0)), ALL, ""),
    ("wait deleted", "the producer's empty wait in its loop", Edit("delete", At(P, "wait", 0)), "CRCR",
     _FIRST_FILLS),
    ("wait deleted", "the producer's first empty wait", Edit("delete", At("producer", "wait", 0)), "CCCC",
     "the first fill of a slot needs no wait (its empty barrier is fresh); every later fill waits in the loop"),
    ("parity flipped", "the full wait in the consumer loop", Edit("flip", At(C, "wait", 0)), ALL, ""),
    ("parity flipped", "the producer's empty wait in its loop", Edit("flip", At(P, "wait", 0)), ALL, ""),
    ("expect_tx too small", "the producer's first", Edit("scale", At("producer", "expect_tx", 0), 0.5), ALL, ""),
    ("expect_tx too large", "the producer's first", Edit("scale", At("producer", "expect_tx", 0), 2), ALL, ""),
    ("expect_tx deleted", "the producer's first", Edit("delete", At("producer", "expect_tx", 0)), ALL, ""),
    ("wgmma.commit_group deleted", "in the loop", Edit("delete", At(C, "commit", 0)), ALL, ""),
    ("wgmma.wait_group deleted", "in the loop", Edit("delete", At(C, "wait_group", 0)), ALL, ""),
    ("wgmma.wait_group weakened", "in the loop, -> 2", Edit("pending", At(C, "wait_group", 0), 2), ALL, ""),
    ("wgmma.fence deleted", "in the loop", Edit("delete", At(C, "wgmma_fence", 0)), ALL, ""),
    ("bar.sync deleted", "after mbarrier.init", Edit("delete", At("kernel", "bar_sync", 0)), ALL, ""),
    ("bar.sync count wrong", "the bar.sync after the inits counts only the consumers",
     Edit("count", At("kernel", "bar_sync", 0), 256), ALL, ""),
    ("slot released before its wait_group", "the loop's release",
     Edit("move", At(C, "release", 0), other=At(C, "wait_group", 0)), "CRCR",
     "on the short shape no slot is refilled (two k-blocks, four slots)"),
    ("slot released before the read", "the loop's release, before its wgmma_fence",
     Edit("move", At(C, "release", 0), other=At(C, "wgmma_fence", 0)), "CRCR",
     "on the short shape no slot is refilled (two k-blocks, four slots)"),
    ("slot release deleted", "the first", Edit("delete", At(C, "release", 0)), "RRCR", _LEDGER),
    ("slot release deleted", "the second", Edit("delete", At(C, "release", 1)), "RRCR", _LEDGER),
    ("mbarrier count wrong", "the first full barrier counts two arrivals", Edit("count", At("kernel", "init", 0), 2),
     ALL, ""),
    ("mbarrier count wrong", "the first empty barrier counts half its arrivals",
     Edit("count", At("kernel", "init", 1), 128), "RRCR", _LEDGER),
    ("fence.mbarrier_init deleted", "after the inits", Edit("delete", At("kernel", "fence_mbarrier_init", 0)),
     "CCCC", _INIT_FENCE),
]
"""The warp-specialized GEMM: a TMA producer warp filling a four-slot ring of A and B tiles, two consumer
warpgroups (one wgmma group a k-block, waited on at once, then the slot released)."""

CATALOGUE = {"split-KV": _flash(256, False) + _RELEASES, "cluster 2": _flash(512, True) + _CLUSTER, "gemm": _GEMM}
"""kernel -> [(kind, name, edit, expected, reason)]; `expected` as `ALL` says."""

LEVELS = ("target", "ptx")
CELLS = [(level, shape) for level in LEVELS for shape in ("short", "long")]
"""The order of the four outcomes in `expected`."""


def verdict(level: str, kernel: str, edit: Edit, shape: str) -> tuple[str, str]:
    """("R", the report's start) or ("C", "right") or ("WRONG", ...): one seeded run."""
    from tessera.interpreters.block_batch import KernelHazardError
    from tessera.interpreters.ptx import PtxExecutionError

    try:
        same = seeded_run(level, kernel, edit, shape)
    except (KernelHazardError, PtxExecutionError) as error:
        return "R", str(error).splitlines()[0] if level == "target" else " ".join(str(error).split("\n")[:2])
    return ("C", "clean, bitwise right") if same else ("WRONG", "silent with a WRONG answer")


def one_per_kind() -> list[tuple[str, int]]:
    """(kernel, index) of the first seed of each kind reported on every cell (the fast slice)."""
    return race_templates.one_per_kind(CATALOGUE, ALL)


# endregion


def matrix(level: str, out=print) -> int:
    """Run every seed of every kernel at `level` on both shapes, print one line each and return how many differ
    from `expected`."""
    return race_templates.run_matrix(CATALOGUE, level, CELLS, ("short", "long"), verdict,
                                     lambda kernel: f"{level}, {kernel}:", out)
