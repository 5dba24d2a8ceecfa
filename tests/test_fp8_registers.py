"""The FP8 forward's setmaxnreg split fits the registers its CTA owns, and the simulators hang where the GPU did.

Every FP8 forward hung on an H200 (stuck in `torch.cuda.synchronize`, any shape) while the PTX executor ran the
same PTX to the right answer. The cause: warp-specialize sized the split of the head_dim 128 kernel (producer
warpgroup `setmaxnreg.dec 160`, two consumer warpgroups `setmaxnreg.inc 176`) on the SM's 65536 registers, but
setmaxnreg only moves the CTA's own registers, 384 threads x the 168 ptxas gives each at entry = 64512: the second
consumer warpgroup's `.inc` (SASS `USETMAXREG.TRY_ALLOC.CTAPOOL` in a retry loop) waited forever for the 1024
registers the pool never had (head_dim 256: 112/200/200, the same). Now the split is 152/176/176 (head_dim 256:
104/200/200), what FlashAttention-3 and CUTLASS do (24 + 2 x 240 = 3 x 168), and the CTA simulator and the PTX
executor keep the CTA's pool, so the old split deadlocks there, named at its `setmaxnreg.inc`."""

from __future__ import annotations

import re
import warnings
from functools import lru_cache

import numpy as np
import pytest
from xdsl.dialects.builtin import IntegerAttr

import tessera
from tessera import reference as R
from tessera.dialects import sm90
from tessera.host import describe
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import PtxDeadlockError
from tessera.interpreters.ptx.launcher import launch_described
from tessera.interpreters.sm90 import run_target_kernel
from tessera.kernels import flash_attention
from tessera.runtime.register_split import check_register_split
from tessera.sm90 import facts
from fp8_inputs import fp8_inputs
from text_edits import checked

SPLIT = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32 (\d+);")
HUNG = {"dec": 160, "inc": 176}
"""The head_dim 128 split that hung on the H200 (65536 registers of the CTA's 64512)."""


@lru_cache(maxsize=None)
def _compiled():
    """(signature, Target IR kernel, host description, PTX) of the default pipeline's FP8 head_dim 128 kernel."""
    module = flash_attention(head_dim=128, dtype="e4m3")
    sig = tessera.find_kernel(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel = tessera.lower_to_target(module, sig.name, None)
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    return sig, kernel, describe(kernel.parent_op())[0], print_ptx(kernel.parent_op(), registers=allocated_registers)


def _inputs():
    q, k, v, ds = fp8_inputs(11, 1, 1, 1, 64, 128, 128)
    return (q, k, v, *ds)


def test_the_split_fits_what_the_cta_owns():
    """Producer 128 x dec + consumers 256 x inc <= 384 threads x the registers ptxas gives each at entry."""
    _, _, host, ptx = _compiled()
    split = dict(SPLIT.findall(ptx))
    threads = host.block[0]
    counts = [int(split["dec"])] + [int(split["inc"])] * ((threads - 128) // 128)
    facts.check_register_budget(counts, 128, threads)
    with pytest.raises(ValueError, match="wait forever"):
        facts.check_register_budget([HUNG["dec"], HUNG["inc"], HUNG["inc"]], 128, threads)


def test_the_split_fits_ptxas_count_at_entry(ptxas):
    """The same against ptxas itself, not our model of it: its "Used N registers" is what each thread owns at
    entry (USETMAXREG moves only those), and no ptxas spills; `runtime.register_split`, which the runtime's compile
    runs on every kernel it assembles, refuses the split that hung."""
    from tessera import toolchain

    _, _, host, ptx = _compiled()
    split = dict(SPLIT.findall(ptx))
    entry = toolchain.compile_ptx(ptx, ptxas=ptxas).entry()
    threads = host.block[0]
    assert entry.spill_store_bytes == 0
    assert 128 * int(split["dec"]) + (threads - 128) * int(split["inc"]) <= entry.registers * threads
    # the runtime's compile makes the same check on every kernel it assembles, before a GPU loads it
    check_register_split(ptx, host.kernel, threads, entry.registers)
    hung = checked(ptx).replace(f"setmaxnreg.dec.sync.aligned.u32 {split['dec']};",
                                f"setmaxnreg.dec.sync.aligned.u32 {HUNG['dec']};")
    with pytest.raises(ValueError, match=r"split 160/176 .* needs 65536 registers, more than the 64512 its CTA owns "
                                         r"\(384 threads x the 168 ptxas gives each at entry\)"):
        check_register_split(hung, host.kernel, threads, entry.registers)


def test_the_ptx_executor_runs_it_and_deadlocks_on_the_split_that_hung():
    """The PTX the GPU gets, on the host description's launch: right; with the old split, a deadlock at the
    consumers' setmaxnreg.inc (the hang), not an answer."""
    sig, _, host, ptx = _compiled()
    arrays, sizes = prepare_arguments(sig, list(_inputs()))
    launch_described(ptx, host, arrays, sizes, source="fp8.ptx")
    assert R.check_attention_fp8(arrays[6], *arrays[:6], causal=False).ok
    split = dict(SPLIT.findall(ptx))
    hung = checked(ptx).replace(f"setmaxnreg.dec.sync.aligned.u32 {split['dec']};",
                                f"setmaxnreg.dec.sync.aligned.u32 {HUNG['dec']};")
    arrays, sizes = prepare_arguments(sig, list(_inputs()))
    with pytest.raises(PtxDeadlockError, match=r"deadlock: no thread can make progress\n(.|\n)*128 thread\(s\), "
                                               r"first thread \(\d+, 0, 0\) of CTA \(0, 0, 0\): wait in "
                                               r"setmaxnreg.inc for registers of the CTA's pool, which holds 0 .* "
                                               r"384 x 168 = 64512 registers"):
        launch_described(hung, host, arrays, sizes, source="fp8.ptx")


def test_the_cta_simulator_deadlocks_on_the_split_that_hung():
    sig, kernel, _, _ = _compiled()
    kernel = kernel.clone()
    for op in kernel.walk():
        if isinstance(op, sm90.SetMaxNRegOp):
            op.count = IntegerAttr(HUNG[op.action.data], 64)
    arrays, sizes = prepare_arguments(sig, list(_inputs()))
    with pytest.raises(KernelHazardError, match=r'sm90.setmaxnreg "inc" 176: deadlock: setmaxnreg.inc in warpgroup '
                                                r"\d waits for 1024 registers of the CTA's pool, which holds 0"):
        run_target_kernel(kernel, arrays, sizes)
    assert np.all(arrays[6] == 0)  # nothing was stored: no answer from a kernel that hangs
