"""`setmaxnreg` in the PTX executor moves registers through the CTA's pool, as the hardware does: every warp starts
with what ptxas gives it at entry (`facts.registers_at_entry` of the launch bounds), `.dec` gives registers back,
`.inc` waits until the pool has them. FlashAttention-3's 384-thread split (24 / 240 / 240, all 64512 registers the
CTA owns) runs, whichever warpgroup gets there first; one step more (248) waits forever and is reported as the
deadlock it is on the GPU; without launch bounds ptxas ignores setmaxnreg (C7508) and so does the pool."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxDeadlockError, PtxExecutionError, launch
from setmaxnreg_kernels import split_kernel as _kernel


def _run(text: str) -> np.ndarray:
    return launch(text, "k", 1, 384, [np.zeros(384, np.uint32)])[0]


@pytest.mark.parametrize("producer_first", [True, False])
def test_a_split_of_the_registers_the_cta_owns_runs(producer_first):
    assert np.array_equal(_run(_kernel(24, 240, producer_first)), np.arange(384))


@pytest.mark.parametrize("producer_first", [True, False])
def test_a_split_past_them_waits_forever(producer_first):
    with pytest.raises(PtxDeadlockError, match=r"128 thread\(s\), first thread \(\d+, 0, 0\) of CTA \(0, 0, 0\): wait "
                                               r"in setmaxnreg.inc for registers of the CTA's pool, which holds \d+ "
                                               r".*384 x 168 = 64512 registers"):
        _run(_kernel(24, 248, producer_first))


def test_the_count_at_entry_bounds_dec_and_inc():
    """Every warp starts with 168 at `.reqntid 384 .minnctapersm 1`: `.dec 176` would raise it."""
    with pytest.raises(PtxExecutionError, match=".dec to 176 from 168"):
        _run(_kernel(176, 176, True))


def test_without_launch_bounds_there_is_no_pool():
    """ptxas cannot size the registers at entry (C7508: setmaxnreg ignored): the counts alone are checked."""
    assert np.array_equal(_run(_kernel(24, 248, True, directives="")), np.arange(384))
