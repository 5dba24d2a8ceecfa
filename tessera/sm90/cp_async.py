"""The non-bulk asynchronous copy `cp.async` (Ampere's, still on sm_90a) and its completion mechanisms.

Source: PTX ISA 9.1, https://docs.nvidia.com/cuda/parallel-thread-execution/#x with x =
data-movement-and-conversion-instructions-cp-async [P#...-cp-async], -cp-async-commit-group,
-cp-async-wait-group, and parallel-synchronization-and-communication-instructions-cp-async-mbarrier-arrive.

    cp.async.ca.shared{::cta}.global [dst], [src], cp-size{, src-size};   cp-size in {4, 8, 16}
    cp.async.cg.shared{::cta}.global [dst], [src], 16{, src-size};        .cg (cache at L2 only): 16 bytes only
    cp.async.commit_group;                 close the executing thread's current group of cp.async
    cp.async.wait_group N;                 wait until at most the N most recent groups of the thread are pending
    cp.async.mbarrier.arrive{.noinc}{.shared{::cta}}.b64 [mbar];

- src-size (a 32-bit register or immediate) is the number of bytes read from src; the remaining cp-size -
  src-size bytes of dst are filled with zeros; src-size larger than cp-size is undefined. With src-size 0
  nothing is read (src need not point at valid memory), which is how a copy past a tensor's end zero-fills.
- dst and src must be aligned to cp-size.
- Completion is per thread: the writes of a thread's cp.async are made visible to it by a covering
  `cp.async.wait_group` (or `wait_all`), or they trigger an arrive-on of the mbarrier of a
  `cp.async.mbarrier.arrive` that follows them in the thread, once all of them have completed.
  Without `.noinc` the pending count is incremented before that asynchronous arrive-on (a net change of 0:
  the thread arrives as well, separately); with `.noinc` it is not, so the asynchronous arrive-on counts as
  one of the arrivals the phase expects and the init count must include one per arriving thread.
- The writes of cp.async are generic-proxy writes [P#...-cp-async: "cp.async is treated as a weak memory operation
  performed in the generic proxy"]: by the ISA's letter wgmma (async proxy) reads of them need a
  `fence.proxy.async` after they are visible to the reader. NVIDIA's cp.async mainloops (CUTLASS's sm90 cp.async
  GMMA, FlashAttention-3's packed-GQA Q) omit it after a `cp.async.mbarrier.arrive` completion; the simulators
  accept that and check the letter on request (`memory_model.CP_ASYNC_PROXY` records the evidence).
"""

from __future__ import annotations

CP_ASYNC_SIZES = (4, 8, 16)
"""cp-size of `cp.async.ca`: 4, 8 or 16 bytes."""

CP_ASYNC_CG_BYTES = 16
"""`cp.async.cg` (bypassing L1) copies 16 bytes only; it is the form for streaming tiles."""

CP_ASYNC_NOINC_ARRIVALS = 1
"""Arrivals one thread's `cp.async.mbarrier.arrive.noinc` contributes to the mbarrier's phase (its init count
counts them); without .noinc it contributes 0 net (it increments the pending count first)."""


def cp_async_zero_fill(cp_size: int, src_size: int) -> tuple[int, int]:
    """(bytes read from src, bytes of dst filled with zero) of a cp.async of `cp_size` with `src_size`.
    ValueError for a cp-size the instruction does not have or a src-size above it (undefined in PTX)."""
    if cp_size not in CP_ASYNC_SIZES:
        raise ValueError(f"cp.async copies {CP_ASYNC_SIZES} bytes, got cp-size {cp_size}")
    if not 0 <= src_size <= cp_size:
        raise ValueError(f"cp.async src-size must be in [0, cp-size = {cp_size}], got {src_size}")
    return src_size, cp_size - src_size
