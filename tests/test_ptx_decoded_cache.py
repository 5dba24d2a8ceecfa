"""The PTX executor keeps a parsed text and its decoded program (machine, steps, closures) across launches
(tessera/interpreters/ptx/launch_setup.py): a second launch of the same program gives the same results, takes its
own arguments, and a launch that failed leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError, launch
from tessera.interpreters.ptx import launch_setup

VECTOR_ADD = (Path(__file__).parent / "ptx_kernels" / "vector_add.ptx").read_text()


def _add(n: int, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(n, dtype=np.float32) + offset
    b = np.full(n, 2.0, np.float32)
    out = launch(VECTOR_ADD, "add_kernel", grid=-(-n // 128), block=128, args=[a, b, np.zeros(n, np.float32),
                                                                              np.uint32(n)])
    return out[2], a + b


def test_a_program_launched_again_reuses_its_decoded_machine_with_new_arguments():
    first, want = _add(1000)
    np.testing.assert_array_equal(first, want)
    module = launch_setup._parse_cached(VECTOR_ADD, "<ptx>")
    kept = launch_setup._decoded(module)
    assert any(kept.values()), "the decoded machine is handed back after the launch"
    again, want = _add(1000, offset=5.0)
    np.testing.assert_array_equal(again, want)
    other, want = _add(300, offset=1.0)  # another grid: another key, decoded anew
    np.testing.assert_array_equal(other, want)


_RACY = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry racy(.param .u64 out, .param .u32 sync)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<1>;
    .reg .pred %p<2>;
    mov.u32 %r0, %tid.x;
    ld.param.u32 %r1, [sync];
    ld.param.u64 %rd0, [out];
    setp.eq.u32 %p0, %r0, 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p0 st.global.u32 [%rd0], 1;
    @%p1 bar.sync 0;
    @!%p0 ld.global.u32 %r2, [%rd0];
    ret;
}
"""


def test_a_failed_launch_leaves_the_next_one_clean():
    with pytest.raises(PtxHazardError, match="no synchronisation orders the two"):
        launch(_RACY, "racy", 1, 64, [np.zeros(1, np.uint32), np.uint32(0)])
    out = launch(_RACY, "racy", 1, 64, [np.zeros(1, np.uint32), np.uint32(1)])[0]
    assert out[0] == 1
    with pytest.raises(PtxHazardError, match="no synchronisation orders the two"):
        launch(_RACY, "racy", 1, 64, [np.zeros(1, np.uint32), np.uint32(0)])
