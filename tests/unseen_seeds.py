"""One-edit synchronisation bugs seeded mechanically at every synchronisation op of ten of Tessera's kernels
that the detectors were not written for, the same edit in Target IR (CTA simulator) and in PTX (PTX executor):
issue 31's kinds, on a one-block shape and a longer one each.

Kernels (`KERNELS`, each through its pipeline): GEMMs of three layouts and three structures (TT warp-specialized
with separate A and B rings; TN single-stage, PTX_PIPELINE: no producer, every thread waits; NT with
`aligned=False`: A and B loaded with ld.global and stored with st.shared, a fence.proxy.async and a bar.sync before
the wgmma), the GEMM in clusters of 2 x 1 (B multicast to both CTAs, B's empty barrier counting both CTAs'
consumers through remote releases), the FP8 forward (e4m3, head_dim 64: V TMA-loaded into a staging slot and
transposed there by the producer warpgroup with st.shared + fence.proxy.async into V^T), the varlen forward
(packed sequences, causal), the paged forward with the row gather (page size 32: cp.async rows into the ring,
fenced and released by the producer), the deterministic backward (head_dim 64: dQ additions ordered by a
semaphore per query block, `ld.acquire` / `red.release`), the forward with a bias (the kernel a StableHLO graph's
attention is rewritten into), and decoding over a TMA-paged cache (page size 128: each
key block one TMA box of one page through the page table; two key heads for four query heads; two split-KV parts
writing O_partial and LSE_partial). The varlen and TMA-paged forwards zero the V rows their last key block reads past
a sequence's keys (tile.clear_rows: st.shared, fence.proxy.async and bar.sync, on the loop's masked trips, after a
wait on the V slot's full barrier). The forwards' consumer loops run their first trip too (overlap-softmax's fold:
the previous trip's P.V update, its V wait and V release under a branch the first trip takes past them), so their
V release, alone under that branch, has no op before it to be moved before.

The PTX is printed without the printer's fold of a forward's last P.V into its loop (compile17), so that it
has the Target IR's synchronisation ops one for one; the folded form's are seeded by tests/race_seeds.py (the
flash forward) and tests/tessera_seeds.py (split-KV).

`mechanical(kernel)` lists every seed: each op of a kind of `backward_seeds.KINDS` deleted (an mbarrier.init is
miscounted instead, a multicast's CTA mask set to the first CTA only), each wait's parity flipped, each expect_tx halved and doubled, each init counting one more
arrival and half its arrivals, each bar.sync counting one warp less, each wgmma.wait_group allowing one more group
pending, each release moved before the nearest wgmma.wait_group and wgmma.fence before it. `EXPECTED[kernel]`
lists `(pattern, expected, reason)` for the seeds not reported on every cell: the first pattern matching
"kind: name" gives the outcome per cell (`CELLS`: CTA simulator on the one-block shape and the long one, then the
PTX executor on both; R reported, C clean with bitwise the unseeded outputs) and why the memory model accepts the
edit there. Seeds no pattern matches must be reported on every cell. `python bench/races_target.py --unseen` and
`python bench/races.py --unseen` run the whole matrix (exit 1 on a mismatch); tests/test_unseen_races.py runs a
slice, and every seed with `-m slow`. Triton's PTX: tests/triton_seeds.py.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import ml_dtypes
import numpy as np

import race_templates
import tessera
from backward_seeds import KINDS, At, Edit, apply_ptx, apply_target, find_ptx, find_target
from tessera import find_kernel, passes, reference_attention


# region kernels and inputs
def _bf16(rng, *shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _gemm(transpose_a: bool, transpose_b: bool):
    def make(rng, m, k, n):
        return [rng.standard_normal((k, m) if transpose_a else (m, k)),
                rng.standard_normal((n, k) if transpose_b else (k, n))], None
    return make


def _fp8(rng, seq_q, seq_k):
    x = [(rng.standard_normal((1, 1, n, 64)) * 2).astype(ml_dtypes.float8_e4m3fn) for n in (seq_q, seq_k, seq_k)]
    return x + [np.full((1, 1), s, np.float32) for s in (0.5, 0.25, 0.75)], None


def _packed(rng, lengths_q):
    starts = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    return _bf16(rng, 1, int(starts[-1]), 64), starts[:-1], starts[1:]


def _varlen(rng, lengths_q, lengths_k):
    q, start_q, end_q = _packed(rng, lengths_q)
    starts_k = np.concatenate([[0], np.cumsum(lengths_k)]).astype(np.int32)
    k, v = (_bf16(rng, 1, int(starts_k[-1]), 64) for _ in range(2))
    return [q, k, v, start_q, end_q, starts_k[:-1], np.asarray(lengths_k, np.int32)], {"max_seqlen_q": max(lengths_q)}


def _shuffled_pages(rng, lengths_k, page_size: int) -> tuple[np.ndarray, int]:
    """(page table, pages): a cache of twice the pages the sequences need, each sequence's pages drawn in a random
    order."""
    need = [-(-n // page_size) for n in lengths_k]
    order = iter(rng.permutation(2 * sum(need)))
    table = np.zeros((len(lengths_k), max(need)), np.int32)
    for b, n in enumerate(need):
        table[b, :n] = [next(order) for _ in range(n)]
    return table, 2 * sum(need)


def _paged(page_size: int):
    def make(rng, lengths_q, lengths_k):
        """A cache of twice the pages the sequences need, in a random order."""
        table, pages = _shuffled_pages(rng, lengths_k, page_size)
        k, v = (_bf16(rng, pages, page_size, 1, 64) for _ in range(2))
        q, start_q, end_q = _packed(rng, lengths_q)
        return [q, k, v, start_q, end_q, table, np.asarray(lengths_k, np.int32)], {"max_seqlen_q": max(lengths_q)}
    return make


def _paged_tma(rng, lengths_q, lengths_k):
    """Decoding over a TMA-paged cache: pages of 128 rows in the kernel's layout [num_pages, heads_k, 128, 64],
    twice the pages the sequences need in a random order, two key heads for four query heads (GQA)."""
    table, pages = _shuffled_pages(rng, lengths_k, 128)
    k, v = (_bf16(rng, pages, 2, 128, 64) for _ in range(2))
    starts = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    q = _bf16(rng, 4, int(starts[-1]), 64)
    return [q, k, v, starts[:-1], starts[1:], table, np.asarray(lengths_k, np.int32)], {"max_seqlen_q": max(lengths_q)}


def _biased(rng, seq_q, seq_k):
    """Q, K, V of one batch entry and two heads, and an f32 bias [1, 2, seq_q, seq_k] (the attention a StableHLO
    graph's softmax(Q K^T s + bias) V is rewritten into)."""
    return [_bf16(rng, 1, 2, n, 64) for n in (seq_q, seq_k, seq_k)] + [
        rng.standard_normal((1, 2, seq_q, seq_k)).astype(np.float32)], None


@lru_cache(maxsize=None)
def _backward():
    return tessera.kernels.attention_backward(head_dim=64, deterministic=True)


def _backward_inputs(rng, seq_q, seq_k):
    """Q, K, V, dO, LSE2 and dPsum of one head (the preprocess run at Tile level)."""
    q, k, v, do, o = (_bf16(rng, 1, 1, s, 64) for s in (seq_q, seq_k, seq_k, seq_q, seq_q))
    lse = reference_attention.attention_lse(q, k).astype(np.float32)
    dpsum, lse2, _ = tessera.interpret(_backward().preprocess, o, do, lse, level="tile")
    return [q, k, v, do, lse2, dpsum], None


@dataclass(frozen=True)
class Kernel:
    """`build()` the Tile IR module, `inputs(rng, *shape)` its inputs and launch sizes (or None), `shapes` the
    one-block shape then the long one, `pipeline` (None: the default)."""

    build: Callable
    inputs: Callable
    shapes: tuple
    pipeline: str | None = None


_K = tessera.kernels
KERNELS = {
    "gemm TT": Kernel(lambda: _K.gemm(transpose_a=True, transpose_b=True), _gemm(True, True),
                      ((128, 64, 128), (256, 512, 128))),
    "gemm TN single-stage": Kernel(lambda: _K.gemm(transpose_a=True), _gemm(True, False),
                                   ((128, 64, 128), (128, 256, 256)), passes.PTX_PIPELINE),
    "gemm NT unaligned": Kernel(lambda: _K.gemm(transpose_b=True, aligned=False), _gemm(False, True),
                                ((100, 60, 70), (130, 200, 72))),
    "gemm cluster 2x1": Kernel(lambda: _K.gemm(cluster=(2, 1)), _gemm(False, False), ((256, 64, 128), (256, 512, 128))),
    "fp8": Kernel(lambda: _K.flash_attention(head_dim=64, dtype="e4m3"), _fp8, ((64, 100), (130, 700))),
    "varlen": Kernel(lambda: _K.flash_attention_varlen(head_dim=64, causal=True), _varlen,
                     (([5, 60], [7, 100]), ([1, 130], [3, 500]))),
    "paged gather": Kernel(lambda: _K.flash_attention_paged(head_dim=64, page_size=32), _paged(32),
                           (([1, 2], [5, 100]), ([1, 3], [40, 600]))),
    "backward deterministic": Kernel(lambda: _backward().main, _backward_inputs, ((128, 128), (300, 200))),
    "flash with bias (StableHLO rewrite)": Kernel(lambda: _K.flash_attention(head_dim=64, bias=True), _biased,
                                                  ((64, 100), (130, 700))),
    "paged TMA decode, GQA, 2 splits": Kernel(
        lambda: _K.flash_attention_paged(head_dim=64, page_size=128, num_splits=2), _paged_tma,
        (([1, 1], [5, 100]), ([1, 2], [300, 1100]))),
}
"""Shapes: GEMM (M, K, N), one k-block then several (more than the ring's slots); attention (seq_q, seq_k) or
per-sequence lengths (queries, keys), one key block then several (the last ragged); the backward one trip of
the query loop, then three on two CTAs; the paged decode (one or two queries a sequence) one key block a part,
then up to five (1100 keys: nine blocks in two parts, every slot refilled)."""

SHAPES = ("one block", "long")
LEVELS = ("target", "ptx")
CELLS = [(level, shape) for level in LEVELS for shape in SHAPES]
ALL = "RRRR"


@lru_cache(maxsize=None)
def compiled(kernel: str):
    """(signature, Target IR module, PTX text) of `kernel`: the PTX printed op for op as the Target IR has it
    (`fold_epilogue=False`: the printer's fold runs a forward's epilogue P.V in its loop and prints the
    epilogue's V wait nowhere, which would leave the seeds' n-th op of a kind a different op at each level)."""
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    spec = KERNELS[kernel]
    module = spec.build()
    options = {} if spec.pipeline is None else {"pipeline": spec.pipeline}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = tessera.compile(module, target="target", **options)
    text = print_ptx(lowered, registers=allocated_registers, fold_epilogue=False)
    return find_kernel(module), lowered, text


def target_kernel(kernel: str):
    """A fresh copy of `kernel`'s Target IR kernel."""
    from tessera.kernel_abi import is_target_kernel

    return next(op for op in compiled(kernel)[1].walk() if is_target_kernel(op)).clone()


def run(level: str, kernel: str, shape: str, fn=None, text: str | None = None, **kw) -> list[np.ndarray]:
    """The output arrays of one run (hazards and deadlocks propagate)."""
    from tessera.host import describe
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.ptx.launcher import launch_described
    from tessera.interpreters.sm90 import run_target_kernel

    spec = KERNELS[kernel]
    sig, lowered, unseeded = compiled(kernel)
    inputs, sizes = spec.inputs(np.random.default_rng(7), *spec.shapes[SHAPES.index(shape)])
    arrays, sizes = prepare_arguments(sig, inputs, sizes)
    if level == "target":
        run_target_kernel(target_kernel(kernel) if fn is None else fn, arrays, sizes, **kw)
    else:
        launch_described(unseeded if text is None else text, describe(lowered)[0], arrays, sizes,
                         source="seeded.ptx", **kw)
    return [a for a, arg in zip(arrays, sig.args) if arg.role == "out"]


@lru_cache(maxsize=None)
def clean(level: str, kernel: str, shape: str) -> tuple[bytes, ...]:
    """The unseeded kernel's outputs, the answer a seeded run must reproduce to count as right."""
    return tuple(a.tobytes() for a in run(level, kernel, shape))


def verdict(level: str, kernel: str, edit: Edit, shape: str) -> tuple[str, str]:
    """("R", the report's start), ("C", ...) clean and bitwise right, or ("WRONG", ...)."""
    from tessera.interpreters.block_batch import KernelHazardError
    from tessera.interpreters.ptx import PtxExecutionError

    try:
        if level == "target":
            fn = target_kernel(kernel)
            apply_target(fn, edit)
            out = run(level, kernel, shape, fn=fn)
        else:
            out = run(level, kernel, shape, text=apply_ptx(compiled(kernel)[2], edit))
    except (KernelHazardError, PtxExecutionError) as error:
        return "R", str(error).splitlines()[0] if level == "target" else " ".join(str(error).split("\n")[:2])
    same = tuple(a.tobytes() for a in out) == clean(level, kernel, shape)
    return ("C", "clean, bitwise right") if same else ("WRONG", "silent with a WRONG answer")


# endregion
# region the mechanical seeds
def _ops(fn, kind: str) -> list:
    found = []
    while True:
        try:
            found.append(find_target(fn, At("kernel", kind, len(found))))
        except LookupError:
            return found


def _ptx_count(lines: list[str], kind: str) -> int:
    n = 0
    while True:
        try:
            find_ptx(lines, At("kernel", kind, n))
        except LookupError:
            return n
        n += 1


def _preceding(ops: list, op) -> int | None:
    """The index in `ops` of the nearest one before `op` in its block (None: none)."""
    index = {id(o): i for i, o in enumerate(ops)}
    o = op.prev_op
    while o is not None and id(o) not in index:
        o = o.prev_op
    return None if o is None else index[id(o)]


@lru_cache(maxsize=None)
def mechanical(kernel: str) -> tuple[tuple[str, str, Edit], ...]:
    """(kind, name, edit) of every seed of `kernel` (module docstring); a kind whose ops the two forms count
    differently (none of these kernels) is refused."""
    fn, lines = target_kernel(kernel), compiled(kernel)[2].splitlines()
    seeds = []
    for kind in KINDS:
        ops = _ops(fn, kind)
        if len(ops) != _ptx_count(lines, kind):
            raise LookupError(f"{kernel}: {len(ops)} {kind} ops in Target IR, {_ptx_count(lines, kind)} in PTX")
        for n, op in enumerate(ops):
            at, name = At("kernel", kind, n), f"{kind} #{n}"
            if kind == "init":
                count = op.properties["count"].value.data
                seeds.append(("mbarrier count wrong", f"{name} counts {count + 1}", Edit("count", at, count + 1)))
                if count > 1:
                    seeds.append(("mbarrier count wrong", f"{name} counts {count // 2}", Edit("count", at, count // 2)))
                continue
            if kind == "multicast":
                seeds.append(("multicast mask wrong", f"{name} delivered to the first CTA only", Edit("mask", at, 1)))
                continue
            seeds.append((f"{kind} deleted", name, Edit("delete", at)))
            if kind == "wait":
                seeds.append(("parity flipped", name, Edit("flip", at)))
            elif kind == "expect_tx":
                seeds.append(("expect_tx too small", name, Edit("scale", at, 0.5)))
                seeds.append(("expect_tx too large", name, Edit("scale", at, 2)))
            elif kind == "bar_sync":
                threads = op.properties["threads"].value.data
                seeds.append(("bar.sync count wrong", f"{name} counts {threads - 32}", Edit("count", at, threads - 32)))
            elif kind == "wait_group":
                pending = op.properties["pending"].value.data
                seeds.append(("wgmma.wait_group weakened", f"{name} -> {pending + 1}", Edit("pending", at, pending + 1)))
            elif kind in ("release", "remote_release"):
                for other in ("wait_group", "wgmma_fence"):
                    before = _preceding(_ops(fn, other), op)
                    if before is not None:
                        seeds.append((f"slot released before its {other}", f"{name} before {other} #{before}",
                                      Edit("move", at, other=At("kernel", other, before))))
    return tuple(seeds)


# endregion
# region the expectations
_FIRST_FILL = ("the producer's wait on a slot's fresh empty barrier before its first fill passes at once (the "
               "parity it waits for is the phase before the init): the first fill of a slot needs no wait")
_ONE_BLOCK = ("on the one-block shape the op never runs or its slot is never filled or awaited again (one k-block, "
              "key block or trip): not a race there")
_LEDGER = ("on the one-block shape the slot is never awaited again: not a race there; the CTA simulator reports "
           "it by its end-of-kernel ledger (every ring slot released as often as it was filled)")
_LEDGER_CLUSTER = ("on the one-block shape the slot is never awaited again: not a race there; the CTA simulator's "
                   "end-of-kernel ledger does not count a cluster's remote releases")
_INIT_FENCE = ("memory_model.MBARRIER_INIT_FENCE, one rule at both levels: the fence releases inits to other CTAs "
               "of a cluster; inside one CTA the bar.sync after the inits orders them for every use")
_INIT_FENCE_CLUSTER = ("memory_model.MBARRIER_INIT_FENCE: the cluster barrier after the inits arrives with "
                       ".release, which releases the inits to the peer as the fence would")
_INIT_BAR_CLUSTER = ("the cluster barrier right after it (every thread of both CTAs arrives with release and waits "
                     "with acquire) orders the inits before every use in either CTA")
_B_COVERED_BY_A = ("A and B have rings of their own, released by the consumers together after the wait_group that "
                   "completes the wgmma reading both; the producer refills a slot's B only after its wait on the "
                   "same slot's A empty barrier, which orders those reads before the refill as B's would")
_OWN_WAIT = ("every thread waits on the mbarrier itself, so each observes the phase that lands its bytes; the "
             "bar.sync after the wait orders nothing more")
_END_OF_TRIP = "on one k-block no slot is refilled: the bar.sync at the end of the trip orders nothing there"
_LATER_FENCE = ("each thread's fence.proxy.async after its B stores also orders its A stores, earlier in program "
                "order, before the bar.sync and the wgmma (memory_model.PROXY_FENCE: a fence on the path)")
_BAR_COVERS_MBARRIER = ("thread 0 arrives on the mbarrier after its stores and fence and every thread waits on it, "
                        "but every thread's stores and fence are also ordered before every wgmma by the bar.sync "
                        "after the wait, so the mbarrier orders nothing more")
_K_BEFORE_WAIT_GROUP_1 = ("the consumer loop's K release moved before its wait_group 1: on the first trip the path "
                          "past the P.V update retired S (wait_group 0) before it (overlap-softmax's fold); on later "
                          "trips _K_COVERED_BY_V")
_FIRST_TRIP_K = ("the consumer loop's K release moved before S = Q K^T reads the slot: a race on the long shape since "
                 "the fold (the loop's first trip has no V release of a trip before it, so nothing orders its K reads "
                 "before the producer refills that slot); on the one-block shape no slot is refilled")
_FOLDED = ("since overlap-softmax's fold (compile11) the consumer loop runs its first trip too, branching past the "
           "previous trip's P.V update (its V wait, fence, wgmmas, commit and V release: no trip before it), and no "
           "trip is peeled before either role's loop: the patterns number the folded kernels' ops")
_K_COVERED_BY_V = ("the producer refills a K slot only after its wait on a V slot's empty barrier that the "
                   "consumers release after the wait_group completing the K reads (the loop's last wait_group 0 "
                   "completes S = Q K^T of the same iteration too): that chain orders the reads before the refill")
_V_COVERED_BY_K = ("the consumers' wait for the loop's V slot: the next K slot's full barrier, which they waited on "
                   "first, completes on the producers' cp.async.mbarrier.arrive made after they requested that V "
                   "slot's copies, so its phase publishes those copies too (memory_model.CP_ASYNC_MBARRIER)")
_V_FENCE_BY_K = ("the consumers' fence before the loop's P V: their fence after the next K slot's wait already lies "
                 "on the path from the V slot's cp.async copies (published by that K phase, "
                 "memory_model.CP_ASYNC_MBARRIER) to the P V wgmma (memory_model.PROXY_FENCE)")
_CP_ASYNC_PROXY = ("the consumers' fence after a K/V slot's wait: the slot's cp.async copies completed through "
                   "cp.async.mbarrier.arrive, whose phase makes them visible to the waiters' async proxy "
                   "(memory_model.CP_ASYNC_PROXY, NVIDIA's practice; the ISA's letter, `strict_proxy=True`, asks "
                   "for the fence)")
_Q_EMPTY_COVERS = ("the producer refills a dO slot only after its wait on the same slot's Q empty barrier, released "
                   "after the wait_group 0 that completes every wgmma reading Q and dO of that trip")
_KV_WAITED = "the consumers waited for the same phase of the K/V barrier before the loop: observed already"
_SLOT_ONCE = ("the second ring slot is filled once on three trips and never awaited again (not at all on one): not "
              "a race; the CTA simulator's end-of-kernel ledger reports the miscounted barrier on three trips")
_CHAINED_FENCE = ("the wgmma.fence before dP already orders every earlier access of the chained accumulators dV "
                  "and dK (nothing touches their registers in between; memory_model.WGMMA_FENCE)")
_SCALE_D_FENCE = ("the fence before dQ = dS K (scale-d 0): no instruction writes the folded zero accumulator and "
                  "nothing touched dQ's registers since the previous fence (memory_model.WGMMA_FENCE_SCALE_D): the "
                  "PTX executor judges the registers; the CTA simulator without a register allocation takes a "
                  "constant accumulator as no access (an immediate the scale-d 0 wgmma does not read) and finds no "
                  "read of dQ's chain after the previous fence")
_MERGED_COMMIT = ("dV's commit: the next commit (dQ's) takes its wgmmas, and the wait_group 1 before dQ is added "
                  "completes that group (dK's, committed after dQ in convert-tile-to-sm90's default order, stays "
                  "pending; deleting dQ's own commit leaves dQ in dK's group, pending there: reported)")
_DPSUM_BEFORE_S = ("the fence before dP: dP's accumulator is set to -dPsum before S's fence (mma-order=first-read "
                   "computes a wgmma's register operands before the groups in flight at its issue), which orders "
                   "those writes for dP too (memory_model.WGMMA_FENCE)")
_P_FENCE = ("the fence after the P stores: the fence after the dS stores and the bar.sync after it lie on the path "
            "from the P stores to the wgmma reading them too")
_SEMAPHORE_BARRIER = ("the bar.syncs around the dQ additions order them with the semaphore (thread 0's ld.acquire "
                      "before, its red.release after) only for determinism: red.global.add are atomics, which never "
                      "race (memory_model.ATOMICS_ARE_INDIVISIBLE), so no rule of the memory model is broken; the "
                      "order of the f32 sums is what the semaphore fixes, and the bar.sync at the end of the trip "
                      "still orders every wgmma completion before the next trip's stores")
_LAST_V = "the last V slot release: no fill follows it on any shape, nothing waits on it again"
_PV_FENCE = ("the wgmma.fence before S = Q K^T of the same iteration already orders every earlier access of P "
             "and O (nothing touches their registers in between; memory_model.WGMMA_FENCE)")
_Q_BAR = ("the consumers' bar.sync after the Q wait: every consumer waits on Q's mbarrier itself and the barrier "
          "is used once")

_V_WAITED_BY_CLEAR = ("the consumers' wait for the last V slot before the P.V mma after the loop: that key block's "
                      "tile.clear_rows (its last trip is a masked one on both shapes: ragged lengths, the causal "
                      "diagonal) waited on the same phase of the same full barrier already, and a phase seen complete "
                      "stays complete until the slot is released")

_V_WAITED_BY_CLEAR_ONE_BLOCK = ("on the one-block shape the consumers' wait for the last V slot after the loop follows "
                                "the wait of that key block's tile.clear_rows on the same phase (_V_WAITED_BY_CLEAR); "
                                "on the long one a split part whose keys end before its sequence's clears nothing "
                                "and needs it")


def _forward(clears: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The expectations of the online forward (the varlen kernel, the biased one, the TMA-paged decode): `clears`
    first (the last V slot's wait after the loop, decided by the kernel's tile.clear_rows where it has one), then
    the shared ones (`_FOLDED`): waits #0-#1 the producer's first fills, #2-#3 its loop's, #4 the consumers' Q, #5
    the loop's K, #6 the loop's V of the trip before (under the first-trip branch), then the clear's and the last
    V's; releases #0 the loop's K, #1 its V (under the branch), #2 the last V's."""
    return [
        *clears,
        (r"wait deleted: wait #[01]$", "CCCC", _FIRST_FILL),
        (r"(wait deleted|parity flipped): wait #[236]$", "CRCR", _ONE_BLOCK),
        (r"expect_tx .*: expect_tx #[23]$", "CRCR", _ONE_BLOCK),
        (r"release deleted: release #0$", "RRCR", _LEDGER),
        (r"release deleted: release #2$", "RRCC", _LAST_V + "; the CTA simulator's end-of-kernel ledger reports "
                                                         "it (every ring slot released as often as it was filled)"),
        (r"release deleted: release #1$", "CRCR", _ONE_BLOCK),
        (r"slot released .*: release #0 before wait_group", "CCCC", _K_BEFORE_WAIT_GROUP_1),
        (r"slot released .*: release #0 before wgmma_fence", "CRCR", _FIRST_TRIP_K),
        (r"slot released .*: release #2 before", "CCCC", _LAST_V),
        (r"mbarrier count wrong: init #[26] counts", "RRCR", _LEDGER),
        (r"mbarrier count wrong: init #[3478] counts", "CRCR", _ONE_BLOCK),
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE),
        (r"wgmma_fence deleted: wgmma_fence #1$", "CCCC", _PV_FENCE),
        (r"(wgmma_fence|commit) .*#1\b|wait_group .*#[12]\b", "CRCR", _ONE_BLOCK),
        (r"bar_sync deleted: bar_sync #1$", "CCCC", _Q_BAR),
    ]


EXPECTED: dict[str, list[tuple[str, str, str]]] = {
    "gemm TT": [
        (r"wait deleted: wait #[01]$", "CCCC", _FIRST_FILL),
        (r"wait deleted: wait #3$", "CCCC", _B_COVERED_BY_A),
        (r"(wait deleted|parity flipped): wait #[23]$", "CRCR", _ONE_BLOCK),
        (r"expect_tx .*: expect_tx #[23]$", "CRCR", _ONE_BLOCK),
        (r"release deleted: release #[01]$", "RRCR", _LEDGER),
        (r"slot released .*: release #0 before", "CRCR", _ONE_BLOCK),
        (r"slot released .*: release #1 before", "CCCC", _B_COVERED_BY_A),
        (r"mbarrier count wrong: init #[15] counts", "RRCR", _LEDGER),
        (r"mbarrier count wrong: init #[2367] counts", "CRCR", _ONE_BLOCK),
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE),
    ],
    "gemm TN single-stage": [
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE),
        (r"bar_sync deleted: bar_sync #1$", "CCCC", _OWN_WAIT),
        (r"bar_sync deleted: bar_sync #2$", "CRCR", _END_OF_TRIP),
    ],
    "gemm NT unaligned": [
        (r"wait deleted: wait #0$", "CCCC", _BAR_COVERS_MBARRIER),
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE),
        (r"fence_proxy deleted: fence_proxy #0$", "CCCC", _LATER_FENCE),
        (r"bar_sync deleted: bar_sync #2$", "CRCR", _END_OF_TRIP),
    ],
    "gemm cluster 2x1": [
        (r"wait deleted: wait #[01]$", "CCCC", _FIRST_FILL),
        (r"(wait deleted|parity flipped): wait #[23]$", "CRCR", _ONE_BLOCK),
        (r"expect_tx .*: expect_tx #[23]$", "CRCR", _ONE_BLOCK),
        (r"release deleted: release #0$", "RRCR", _LEDGER),
        (r"remote_release deleted", "CRCR", _LEDGER_CLUSTER),
        (r"slot released before", "CRCR", _ONE_BLOCK),
        (r"mbarrier count wrong: init #1 counts|mbarrier count wrong: init #5 counts 513", "RRCR", _LEDGER),
        (r"mbarrier count wrong: init #5 counts 256", "CRCR", _LEDGER_CLUSTER),
        (r"mbarrier count wrong: init #[2367] counts", "CRCR", _ONE_BLOCK),
        (r"multicast mask wrong: multicast #[4-7] ", "CRCR", _ONE_BLOCK),
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE_CLUSTER),
        (r"bar_sync deleted: bar_sync #0$", "CCCC", _INIT_BAR_CLUSTER),
    ],
    "fp8": [  # _FOLDED: waits #4-#7 the producer's and transposer's loop, #8 Q, #9 K, #10 V (branch), #11 last V
        (r"wait deleted: wait #[012]$", "CCCC", _FIRST_FILL),
        (r"(wait deleted|parity flipped): wait #([4-7]|10)$", "CRCR", _ONE_BLOCK),
        (r"expect_tx .*: expect_tx #[23]$", "CRCR", _ONE_BLOCK),
        (r"release deleted: release #[04]$", "RRCR", _LEDGER),
        (r"release deleted: release #[235]$", "CRCR", _ONE_BLOCK),
        (r"release deleted: release #6$|slot released .*: release #6 before", "CCCC", _LAST_V),
        (r"slot released .*: release #4 before wait_group", "CCCC", _K_BEFORE_WAIT_GROUP_1),
        (r"slot released .*: release #4 before wgmma_fence", "CRCR", _FIRST_TRIP_K),
        (r"mbarrier count wrong: init #([26]|8 counts 128)", "RRCR", _LEDGER),
        (r"mbarrier count wrong: init #([349]|1[0-2]|8 counts 257)", "CRCR", _ONE_BLOCK),
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE),
        (r"wgmma_fence deleted: wgmma_fence #1$", "CCCC", _PV_FENCE),
        (r"(wgmma_fence|commit) .*#1\b|wait_group .*#[12]\b", "CRCR", _ONE_BLOCK),
        (r"fence_proxy deleted: fence_proxy #1$", "CRCR", _ONE_BLOCK),
        (r"bar_sync deleted: bar_sync #1$", "CCCC", _Q_BAR),
    ],
    "varlen": _forward([(r"wait deleted: wait #8$", "CCCC", _V_WAITED_BY_CLEAR)]),
    "paged gather": [  # _FOLDED: as the forward's, with no clear (wait #7 the last V) and the gather's fences
        (r"wait deleted: wait #[01]$", "CCCC", _FIRST_FILL),
        (r"wait deleted: wait #6$", "CCCC", _V_COVERED_BY_K),
        (r"(wait deleted|parity flipped): wait #[236]$", "CRCR", _ONE_BLOCK),
        (r"release deleted: release #2$|slot released .*: release #2 before", "CCCC", _LAST_V),
        (r"slot released .*: release #0 before wait_group", "CCCC", _K_BEFORE_WAIT_GROUP_1),
        (r"slot released .*: release #0 before wgmma_fence", "CRCR", _FIRST_TRIP_K),
        (r"release deleted: release #[01]$", "CRCR", _ONE_BLOCK),
        (r"mbarrier count wrong: init #[26] counts 128", "RRCR", _LEDGER),
        (r"mbarrier count wrong: init #[2-46-8] counts", "CRCR", _ONE_BLOCK),
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE),
        (r"wgmma_fence deleted: wgmma_fence #1$", "CCCC", _PV_FENCE),
        (r"fence_proxy deleted: fence_proxy #1$", "CCCC", _V_FENCE_BY_K),
        (r"fence_proxy deleted: fence_proxy #[02]$", "CCCC", _CP_ASYNC_PROXY),
        (r"(wgmma_fence|commit) .*#1\b|wait_group .*#[12]\b", "CRCR", _ONE_BLOCK),
        (r"bar_sync deleted: bar_sync #1$", "CCCC", _Q_BAR),
    ],
    "backward deterministic": [
        (r"wait deleted: wait #[01]$", "CCCC", _FIRST_FILL),
        (r"wait deleted: wait #3$|slot released .*: release #1 before", "CCCC", _Q_EMPTY_COVERS),
        (r"wait deleted: wait #7$", "CCCC", _KV_WAITED),
        (r"(wait deleted|parity flipped): wait #[23]$", "CRCR", _ONE_BLOCK),
        (r"expect_tx .*: expect_tx #[23]$", "CRCR", _ONE_BLOCK),
        (r"release deleted: release #[01]$", "RRCR", _LEDGER),
        (r"slot released .*: release #0 before", "CRCR", _ONE_BLOCK),
        (r"mbarrier count wrong: init #[26] counts", "RRCR", _LEDGER),
        (r"mbarrier count wrong: init #[48] counts", "CRCC", _SLOT_ONCE),
        (r"mbarrier count wrong: init #[37] counts", "CRCR", _ONE_BLOCK),
        (r"fence_mbarrier_init deleted", "CCCC", _INIT_FENCE),
        (r"wgmma_fence deleted: wgmma_fence #1$", "CCCC", _DPSUM_BEFORE_S),
        (r"wgmma_fence deleted: wgmma_fence #[24]$", "CCCC", _CHAINED_FENCE),
        (r"wgmma_fence deleted: wgmma_fence #3$", "CCCC", _SCALE_D_FENCE),
        (r"commit deleted: commit #2$", "CCCC", _MERGED_COMMIT),
        (r"fence_proxy deleted: fence_proxy #0$", "CCCC", _P_FENCE),
        (r"bar_sync deleted: bar_sync #1$", "CCCC", _OWN_WAIT),
        (r"bar_sync deleted: bar_sync #[34]$", "CCCC", _SEMAPHORE_BARRIER),
        (r"bar_sync deleted: bar_sync #5$", "CRCR", _ONE_BLOCK),
    ],
}
"""kernel -> [(pattern on "kind: name", expected per cell, reason)], the first match deciding."""
EXPECTED["flash with bias (StableHLO rewrite)"] = _forward([])
"""The bias kernel has the varlen forward's synchronisation, op for op, but for the varlen kernel's clearing of the V
rows past a sequence's keys (each thread reads its bias from global memory: no synchronisation op of its own), and
every seed gives the matching varlen seed's cells, for the same reasons."""
EXPECTED["paged TMA decode, GQA, 2 splits"] = _forward([
    (r"wait deleted: wait #8$", "CRCR", _V_WAITED_BY_CLEAR_ONE_BLOCK),
])
"""The TMA-paged decode's seeds are decided by the varlen forward's rules, pattern for pattern (its cells differ
only in how many seeds each rule decides), but for the last V slot's wait after the loop: a split part whose keys
end before its sequence's clears nothing and needs it."""


def expectation(kernel: str, kind: str, name: str) -> tuple[str, str]:
    """(expected per cell, reason) of one seed."""
    for pattern, expected, reason in EXPECTED.get(kernel, []):
        if re.search(pattern, f"{kind}: {name}"):
            return expected, reason
    return ALL, ""


@lru_cache(maxsize=None)
def catalogue() -> dict[str, list[tuple]]:
    """kernel -> [(kind, name, edit, expected, reason)], every mechanical seed with its expectation."""
    return {kernel: [(kind, name, edit, *expectation(kernel, kind, name)) for kind, name, edit in mechanical(kernel)]
            for kernel in KERNELS}


# endregion


def matrix(level: str, out=print) -> int:
    """Run every seed of every kernel at `level` on both shapes, print one line each, return the mismatches."""
    return race_templates.run_matrix(catalogue(), level, CELLS, SHAPES, verdict,
                                     lambda kernel: f"{level}, {kernel}:", out)
