"""The race detector on nvcc's PTX with an ordering bug seeded into it (tests/nvcc_kernels.py's kernels, a line
deleted from their PTX): a missing __syncthreads, __syncwarp or cluster.sync, a deleted cp.async.wait_group,
the acquire fence the CUDA samples' threadFenceReduction omits, the fences of a spin lock. Each must be reported
naming both sides; the unseeded kernels run clean (tests/test_ptx_nvcc_kernels.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nvcc_kernels import delete_line, dyn_smem_case, fence_reduce_case, mma_bf16_case, ptx
from tessera.interpreters.ptx import PtxHazardError, launch


def test_deleted_syncthreads_in_the_tree_reduction_is_a_race_naming_both_sides():
    # the second bar.sync (inside the loop over halves): a thread adds s[t + h] that another thread still writes
    text, _ = delete_line(ptx("dyn_smem"), r"^\s*bar\.sync\s+0;", 1)
    with pytest.raises(PtxHazardError) as error:
        dyn_smem_case(np.random.default_rng(7), text)
    message = str(error.value)
    assert "race" in message
    lines = [int(re.match(r"dyn_smem.ptx:(\d+)", message)[1])] + [int(n) for n in re.findall(r"line (\d+)", message)]
    ops = {re.sub(r"\s+", " ", text.split("\n")[line - 1].strip()).split(" ")[0] for line in lines}
    assert {"ld.shared.f32", "st.shared.f32"} <= ops, message


def test_deleted_cp_async_wait_in_the_mma_pipeline_is_reported_naming_both_sides():
    text, _ = delete_line(ptx("mma_bf16"), r"cp\.async\.wait_group", 0)
    with pytest.raises(PtxHazardError) as error:
        mma_bf16_case(np.random.default_rng(7), text)
    message = str(error.value)
    reader = re.match(r"mma_bf16.ptx:(\d+): error: ldmatrix.* the cp.async at line (\d+) into it has not landed",
                      message)
    assert reader, message
    assert "ldmatrix" in text.split("\n")[int(reader[1]) - 1] and "cp.async.cg" in text.split("\n")[int(reader[2]) - 1]


def test_threadfence_reduction_without_the_readers_fence_is_a_race_naming_both_sides():
    """The CUDA sample as NVIDIA wrote it: the last block reads the partials after its atomicInc with no fence,
    so nothing orders the other blocks' plain stores before its reads [memory_model.RELEASE_ACQUIRE]."""
    text, _ = delete_line(ptx("fence_reduce"), r"^\s*membar\.gl;", 1)
    with pytest.raises(PtxHazardError) as error:
        fence_reduce_case(np.random.default_rng(7), text)
    message = str(error.value)
    reader = re.match(r"fence_reduce.ptx:(\d+): error: ld.volatile.global.f32: reads .* which the instruction at "
                      r"line (\d+) \(thread \(0, 0, 0\) of CTA \((\d), 0, 0\)\) wrote", message)
    assert reader, message
    assert "st.global.f32" in text.split("\n")[int(reader[2]) - 1] and "race" in message


def _reported(name: str, pattern: str, occurrence: int, case=None) -> tuple[str, str]:
    """Run kernel `name` with the `occurrence`-th line matching `pattern` deleted: (the race reported, the
    edited text). `case` runs it (default: the kernel's own case through `run`)."""
    text, _ = delete_line(ptx(name), pattern, occurrence)
    with pytest.raises(PtxHazardError) as error:
        if case is not None:
            case(text)
        else:
            launch(text, f"k_{name}", *_SEED_LAUNCHES[name], source=f"{name}.ptx")
    return str(error.value), text


_SEED_LAUNCHES = {
    "atomics_more": (2, 128, [np.arange(200, dtype=np.int32), np.int32(200), np.zeros(16, np.uint32),
                              np.array([2**31 - 1, -2**31], np.int32), np.zeros(2, np.uint32),
                              np.array([0xFFFFFFFF, 0, 0], np.uint32), np.zeros(1), np.zeros(1, np.int32)]),
    "cub_block": (2, 128, [np.arange(1024, dtype=np.int32), np.zeros(1024, np.int32), np.zeros(4, np.int32)]),
    "syncwarp": (2, 64, [np.arange(128, dtype=np.int32), np.zeros(128, np.int32)]),
}


def _sides(message: str, text: str, name: str) -> tuple[str, str]:
    """The opcodes of the two accesses a race report names: the reporting instruction's and the earlier one's."""
    lines = text.split("\n")
    here = int(re.match(rf"{name}.ptx:(\d+)", message)[1])
    there = int(re.search(r"the instruction at line (\d+)", message)[1])
    return lines[here - 1].split()[0], lines[there - 1].split()[0]


@pytest.mark.parametrize("name,pattern,occurrence,sides", [
    # the __syncthreads between zeroing the shared histogram and the atomics, and between the atomics and the
    # flush: plain accesses against shared-memory atomics (both reported since atomics are tracked there)
    ("atomics_more", r"^\s*bar\.sync\s+0;", 0, ("atom.shared.add.u32", "st.shared.u32")),
    ("atomics_more", r"^\s*bar\.sync\s+0;", 1, ("ld.shared.u32", "atom.shared.add.u32")),
    # CUB's temp storage reused by BlockReduce then BlockScan without the __syncthreads between
    ("cub_block", r"^\s*bar\.sync\s+0;", 2, ("ld.shared.v2.u32", "st.shared.u32")),
    # the warp's __syncwarp() between the exchange's store and its read
    ("syncwarp", r"^\s*bar\.warp\.sync\s+-1;", 1, ("ld.shared.u32", "st.shared.u32")),
])
def test_seeded_missing_barrier_is_a_race_naming_both_sides(name, pattern, occurrence, sides):
    message, text = _reported(name, pattern, occurrence)
    assert "no synchronisation orders the two" in message
    assert _sides(message, text, name) == sides, message


def test_seeded_missing_cluster_sync_before_reading_remote_atomics_is_a_race():
    """Without the second cluster.sync, the first block reads its bins while the other block still adds into
    them through distributed shared memory (atom.shared::cluster)."""
    x = np.arange(512, dtype=np.int32)
    text, _ = delete_line(ptx("cluster_dsmem"), r"^\s*barrier\.cluster\.wait;", 1)
    text, _ = delete_line(text, r"^\s*barrier\.cluster\.arrive;", 1)
    with pytest.raises(PtxHazardError) as error:
        launch(text, "k_cluster_dsmem", 4, 128, [x, np.zeros(64, np.int32)], cluster=(2, 1, 1),
               source="cluster_dsmem.ptx")
    message = str(error.value)
    assert _sides(message, text, "cluster_dsmem") == ("ld.shared.u32", "atom.shared::cluster.add.u32"), message
    assert "of CTA (1, 0, 0)) wrote" in message and "(thread (0, 0, 0) of CTA (0, 0, 0))" in message


def test_seeded_missing_fences_around_a_spin_lock_are_a_race():
    """The mutex's atomics are relaxed: without __threadfence() after taking it, the next holder's plain reads
    of the record are not ordered after the last holder's plain writes."""
    for occurrence in (0, 1):
        message, text = _reported("spin_lock", r"^\s*membar\.gl;", occurrence, lambda text: launch(
            text, "k_spin_lock", 8, 32, [np.zeros(1, np.int32), np.array([0, -100], np.int32),
                                         np.arange(8, dtype=np.int32)], source="spin_lock.ptx"))
        assert _sides(message, text, "spin_lock") == ("ld.global.u32", "st.global.u32"), message
