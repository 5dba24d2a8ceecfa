"""The "delayed" schedule of the PTX executor (`schedule`): one CTA, picked by the seed, runs only when no other
CTA can, so a flag wait that was deleted shows as the race it is on a GPU where the peer is late.

A split-K-style handoff in two CTAs: CTA 1 stores its partials to a workspace, meets its CTA at a barrier, and
thread 0 releases a flag with `red.release`; CTA 0's thread 0 spins on `ld.acquire` of the flag, a barrier hands
that to its CTA, and every thread adds the peer's partial to its own. With the spin's back branch deleted, the one
`ld.acquire` left still acquires whatever release it reads: min-pc and the adversarial seeds run the peer's stores
and release first, so the run is ordered and right; only a schedule that holds the peer back until the reducer has
read the workspace makes the read happen before the peer's release, and then the peer's store races it (both sides
named). The CUTLASS stream-K and split-K cells of tests/library_variant_seeds.py are the same bug in NVIDIA's PTX."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError, launch
from text_edits import checked

HANDOFF = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry splitk(.param .u64 work, .param .u64 flag, .param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [work];
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd4, %rd0, %rd3;
    add.u64 %rd5, %rd2, %rd3;
    setp.eq.u32 %p0, %r0, 0;
    mov.u32 %r1, %ctaid.x;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra REDUCE;
    add.u32 %r2, %r0, 100;
    st.global.u32 [%rd4], %r2;
    bar.sync 0;
    @%p0 red.release.gpu.global.add.u32 [%rd1], 1;
    ret;
REDUCE:
    @!%p0 bra SYNC;
WAIT:
    ld.acquire.gpu.global.u32 %r3, [%rd1];
    setp.lt.u32 %p2, %r3, 1;
    @%p2 bra WAIT;
SYNC:
    bar.sync 0;
    ld.global.u32 %r4, [%rd4];
    add.u32 %r5, %r4, %r0;
    st.global.u32 [%rd5], %r5;
    ret;
}
"""
WAIT_DELETED = checked(HANDOFF).replace("    @%p2 bra WAIT;\n", "")
THREADS = 64


def _line(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if line.strip().startswith(start))


def _run(text: str, **schedule) -> np.ndarray:
    args = [np.zeros(THREADS, np.uint32), np.zeros(1, np.uint32), np.zeros(THREADS, np.uint32)]
    return launch(text, "splitk", 2, THREADS, args, **schedule)[2]


RIGHT = 2 * np.arange(THREADS) + 100


@pytest.mark.parametrize("schedule", [{}, {"schedule": "delayed", "seed": 0}, {"schedule": "delayed", "seed": 1}],
                         ids=["min-pc", "reducer delayed", "peer delayed"])
def test_the_handoff_runs_clean_and_right_with_either_cta_delayed(schedule):
    """The spin parks the reducer until the delayed peer has released the flag; delaying the reducer instead runs
    the peer to its end first."""
    np.testing.assert_array_equal(_run(HANDOFF, **schedule), RIGHT)


def test_the_deleted_wait_is_silent_on_min_pc_and_adversarial_seeds():
    """What happens-before alone cannot decide: the peer releases before the reducer's one acquire on every
    schedule but the delayed one, so the acquire orders the workspace and the answer is right."""
    np.testing.assert_array_equal(_run(WAIT_DELETED), RIGHT)
    for seed in (0, 1, 2):
        np.testing.assert_array_equal(_run(WAIT_DELETED, schedule="adversarial", seed=seed), RIGHT)


def test_the_deleted_wait_races_when_the_peer_is_delayed():
    store, load = _line(WAIT_DELETED, "st.global.u32 [%rd4]"), _line(WAIT_DELETED, "ld.global.u32")
    with pytest.raises(PtxHazardError) as caught:
        _run(WAIT_DELETED, schedule="delayed", seed=1)
    message = str(caught.value)
    assert message.startswith(f"<ptx>:{store}: error: st.global.u32: writes global address"), message
    assert f"the instruction at line {load} (thread (0, 0, 0) of CTA (0, 0, 0)) read" in message, message
    assert "no synchronisation orders the two (race:" in message and message.endswith("of CTA (1, 0, 0))")
    with pytest.raises(PtxHazardError) as again:  # seed 3 is CTA 3 mod 2: the same run
        _run(WAIT_DELETED, schedule="delayed", seed=3)
    assert str(again.value) == message
    np.testing.assert_array_equal(_run(WAIT_DELETED, schedule="delayed", seed=0), RIGHT)


def test_tessera_run_delays_the_cta_the_seed_names(tmp_path, capsys):
    from tessera.tools import tessera_run

    path = tmp_path / "splitk.ptx"
    path.write_text(WAIT_DELETED)
    base = [str(path), "--grid", "2", "--block", str(THREADS), "--arg", f"u32[{THREADS}]=zeros", "--arg",
            "u32[1]=zeros", "--arg", f"u32[{THREADS}]=zeros", "--schedule", "delayed"]
    assert tessera_run.main(base + ["--schedule-seed", "0"]) == 0
    capsys.readouterr()
    assert tessera_run.main(base + ["--schedule-seed", "1"]) == 1
    assert "no synchronisation orders the two (race:" in capsys.readouterr().err
