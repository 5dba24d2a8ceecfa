"""The "delayed-warp" and "delayed-warpgroup" schedules of the PTX executor (`schedule`): one warp (warpgroup) of
every CTA, picked by the seed, runs only when no other lane of its CTA can, so a handoff between warps whose wait
was deleted shows as the race it is on a GPU where the producing warp is late.

Two warps of one CTA hand a buffer over through a flag in shared memory: warp 1 stores its part, meets its warp,
and lane 0 releases the flag with `st.release.cta.shared`; warp 0's lane 0 polls the flag with
`ld.acquire.cta.shared`, meets its warp, and every lane reads the buffer. With the poll's back branch deleted, the
one `ld.acquire` left still acquires whatever release it reads: min-pc (warp 1's code lies first), the adversarial
seeds and a delayed warp 0 run warp 1's stores and release first, so the run is ordered and right; only warp 1 held
back until warp 0 has read the buffer makes the read happen before the release, and then warp 1's store races it
(both sides named). The poll parks between loads when nothing changed (`memory._spin_wait`), so the correct kernel
runs with warp 1 delayed instead of spinning for ever.

The same in a real kernel: Tessera's flash kernel with ping-pong consumer warpgroups (`warp-specialize{pingpong=
true}`) with the second warpgroup's loop `bar.sync 1, 256` counting 128: on min-pc the halved barrier completes
with that warpgroup alone in every phase and the run is clean and right on 200, 300 and 700 keys; with consumer
warpgroup 0 (or any of its warps) late, its `bar.arrive 1, 256` and the halved `bar.sync` meet in one phase, which
is reported (the adversarial seeds find it too)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError, PtxHazardError, launch

HANDOFF = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry handoff(.param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 4 .b8 work[128];
    .shared .align 4 .b32 flag;
    mov.u32 %r0, %tid.x;
    and.b32 %r1, %r0, 31;
    mov.u32 %r2, work;
    shl.b32 %r3, %r1, 2;
    add.u32 %r4, %r2, %r3;
    mov.u32 %r5, flag;
    ld.param.u64 %rd0, [out];
    setp.lt.u32 %p0, %r0, 32;
    @%p0 bra CONSUMER;
    add.u32 %r6, %r1, 100;
    st.shared.u32 [%r4], %r6;
    bar.warp.sync -1;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 st.release.cta.shared.u32 [%r5], 1;
    ret;
CONSUMER:
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SYNC;
POLL:
    ld.acquire.cta.shared.u32 %r7, [%r5];
    setp.lt.u32 %p2, %r7, 1;
    @%p2 bra POLL;
SYNC:
    bar.warp.sync -1;
    ld.shared.u32 %r8, [%r4];
    add.u32 %r9, %r8, %r1;
    mul.wide.u32 %rd1, %r1, 4;
    add.u64 %rd2, %rd0, %rd1;
    st.global.u32 [%rd2], %r9;
    ret;
}
"""
POLL_DELETED = HANDOFF.replace("    @%p2 bra POLL;\n", "")
RIGHT = 2 * np.arange(32) + 100


def _run(text: str, ctas: int = 1, **schedule) -> np.ndarray:
    return launch(text, "handoff", ctas, 64, [np.zeros(32, np.uint32)], **schedule)[0]


def _line(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if line.strip().startswith(start))


@pytest.mark.parametrize("schedule", [{}, {"schedule": "delayed-warp", "seed": 0},
                                      {"schedule": "delayed-warp", "seed": 1},
                                      {"schedule": "delayed-warpgroup", "seed": 0}],
                         ids=["min-pc", "consumer warp delayed", "producer warp delayed", "warpgroup delayed"])
def test_the_handoff_runs_clean_and_right_with_either_warp_delayed(schedule):
    np.testing.assert_array_equal(_run(HANDOFF, **schedule), RIGHT)


def test_the_deleted_poll_is_silent_on_min_pc_adversarial_seeds_and_a_delayed_cta():
    """What happens-before alone cannot decide: warp 1 releases before warp 0's one acquire on every schedule but
    the delayed warp 1, so the acquire orders the buffer and the answer is right (a delayed CTA delays both warps)."""
    np.testing.assert_array_equal(_run(POLL_DELETED), RIGHT)
    for seed in (0, 1, 2):
        np.testing.assert_array_equal(_run(POLL_DELETED, schedule="adversarial", seed=seed), RIGHT)
    np.testing.assert_array_equal(_run(POLL_DELETED, schedule="delayed", seed=0), RIGHT)
    np.testing.assert_array_equal(_run(POLL_DELETED, schedule="delayed-warp", seed=0), RIGHT)


def test_the_deleted_poll_races_when_the_producer_warp_is_delayed():
    store, load = _line(POLL_DELETED, "st.shared.u32"), _line(POLL_DELETED, "ld.shared.u32")
    with pytest.raises(PtxHazardError) as caught:
        _run(POLL_DELETED, schedule="delayed-warp", seed=1)
    message = str(caught.value)
    assert message.startswith(f"<ptx>:{store}: error: st.shared.u32: writes shared address 0x0, which the "
                              f"instruction at line {load} (thread (0, 0, 0) of CTA (0, 0, 0)) read, and no "
                              "synchronisation orders the two (race:"), message
    assert message.endswith("(thread (32, 0, 0) of CTA (0, 0, 0))"), message
    with pytest.raises(PtxHazardError) as again:  # seed 3 is warp 3 mod 2: the same run
        _run(POLL_DELETED, schedule="delayed-warp", seed=3)
    assert str(again.value) == message
    with pytest.raises(PtxHazardError, match=r"of CTA \(1, 0, 0\)\)$"):  # every CTA's warp 1 is delayed
        _run(POLL_DELETED, ctas=2, schedule="delayed-warp", seed=1)


def test_tessera_run_delays_the_warp_the_seed_names(tmp_path, capsys):
    from tessera.tools import tessera_run

    path = tmp_path / "handoff.ptx"
    path.write_text(POLL_DELETED)
    base = [str(path), "--grid", "1", "--block", "64", "--arg", "u32[32]=zeros", "--schedule", "delayed-warp"]
    assert tessera_run.main(base + ["--schedule-seed", "0"]) == 0
    capsys.readouterr()
    assert tessera_run.main(base + ["--schedule-seed", "1"]) == 1
    assert "no synchronisation orders the two (race:" in capsys.readouterr().err


def _pingpong_count_halved():
    """(signature, host description, PTX) of the ping-pong flash kernel with its second `bar.sync 1, 256` (the
    second consumer warpgroup's wait in its loop) counting 128."""
    from test_ptx_race_matrix import _pingpong

    sig, host, text = _pingpong()
    lines = text.splitlines()
    i = [k for k, line in enumerate(lines) if line.strip() == "bar.sync 1, 256;"][1]
    lines[i] = lines[i].replace("256", "128")
    return sig, host, "\n".join(lines) + "\n", i + 1


def _run_pingpong(seq_k: int, **schedule):
    from tessera import reference
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.ptx.launcher import launch_described
    from tessera.reference_attention import attention_operands

    sig, host, text, _ = _pingpong_count_halved()
    arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(seq_k), 64, seq_k, 64))
    launch_described(text, host, arrays, sizes, source="seeded.ptx", **schedule)
    return reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False)


def test_a_ping_pong_barrier_counting_one_warpgroup_is_reported_when_the_other_is_late():
    """Silent on min-pc where no trip masks keys (256); a masked trip's bias barriers (mask-by-mma: a bar.sync of
    both consumer warpgroups) bring the two warpgroups' phases together, and min-pc reports it too (300)."""
    line = _pingpong_count_halved()[3]
    assert _run_pingpong(256).ok
    with pytest.raises(PtxExecutionError, match=rf"^seeded.ptx:{line}: error: bar.sync: barrier 1 used with thread "
                                                 r"counts 256 and 128 \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\)$"):
        _run_pingpong(256, schedule="delayed-warpgroup", seed=0)
    with pytest.raises(PtxExecutionError, match=rf"^seeded.ptx:{line}: error: bar.sync: barrier 1 used with thread"):
        _run_pingpong(300)


@pytest.mark.slow
@pytest.mark.parametrize("seq_k", [256, 384, 768])
def test_the_halved_ping_pong_barrier_on_every_length_and_each_late_warp(seq_k):
    """Silent on min-pc (lengths whose trips mask no key: a masked trip's bias barriers make min-pc report it too);
    reported with each warp of consumer warpgroup 0 late, and with warpgroup 0 late; clean with the other warps and
    warpgroups late (their lateness keeps the phases apart)."""
    assert _run_pingpong(seq_k).ok
    for warp in range(12):
        if warp < 4:
            with pytest.raises(PtxHazardError, match=r"barrier 1 used with thread counts (256 and 128|128 and 256)"):
                _run_pingpong(seq_k, schedule="delayed-warp", seed=warp)
        else:
            assert _run_pingpong(seq_k, schedule="delayed-warp", seed=warp).ok
    with pytest.raises(PtxHazardError, match=r"barrier 1 used with thread counts 256 and 128"):
        _run_pingpong(seq_k, schedule="delayed-warpgroup", seed=0)
