"""The CTA simulator runs the CTAs of a grid in batches, a leader with every check and followers computed
alongside it (`tessera.interpreters.sm90.followers`): results bitwise those of one CTA at a time, followers that
differ from their leader (a causal trip count) or fail drop out and run alone, and a hazard names its CTA."""

from __future__ import annotations

import gc
import re
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.passes import DEFAULT_PIPELINE
import tessera.interpreters.sm90.launch as launch
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.interpreters.sm90.batches import cta_batches
from tessera.kernel_abi import kernels, signature
from tessera.regalloc import allocate_registers

from test_sm90_simulator import SS_GEMM, _kernel
from text_edits import planted

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def batches(monkeypatch):
    """Each leader's CTA id, its followers' count and why they all stopped following (None: some followed to
    the end)."""
    seen = []
    run_cta = launch.run_cta

    def recording(*args, **kwargs):
        cta = run_cta(*args, **kwargs)
        if cta.followers is not None:
            seen.append((cta.cta_id, cta.followers.count, cta.followers.dropped))
        return cta

    monkeypatch.setattr(launch, "run_cta", recording)
    return seen


def _both_ways(module, inputs, pipeline: str | None = None):
    """The outputs of the kernel's target run one CTA at a time and in batches (allocation checked)."""
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name, pipeline)
    allocation = allocate_registers(target)
    outputs = []
    for size in (1, launch.BATCH_CTAS):
        arguments, sizes = prepare_arguments(sig, inputs)
        run_target_kernel(target, arguments, sizes, allocation, batch_ctas=size)
        outputs.append(arguments)
    return outputs


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_batched_flash_is_bitwise_one_at_a_time(causal, batches, rng):
    """Two heads of 200 queries (a masked tail block): the full kernel's four CTAs run as one batch; the causal
    one's trip counts differ between query blocks, so the second query block's CTAs leave the first batch
    (its other head follows to the end) and run as the next."""
    q, k, v = (rng.standard_normal((1, 2, 200, 64)) for _ in range(3))
    alone, batched = _both_ways(tessera.kernels.flash_attention(head_dim=64, causal=causal), [q, k, v])
    for a, b in zip(alone, batched):
        assert a.tobytes() == b.tobytes()
    if causal:
        assert batches == [((0, 0, 0), 3, None), ((1, 0, 0), 1, None)]
    else:
        assert batches == [((0, 0, 0), 3, None)]


@pytest.fixture
def leaders(monkeypatch):
    """Each run's leader, the followers that followed it to the end and those that left it."""
    seen = []
    run_cta = launch.run_cta

    def recording(*args, **kwargs):
        cta = run_cta(*args, **kwargs)
        followers = cta.followers
        seen.append((cta.cta_id, followers.following() if followers else [],
                     sorted(followers.cta_ids[f] for f in followers.left) if followers else []))
        return cta

    monkeypatch.setattr(launch, "run_cta", recording)
    return seen


def test_a_causal_one_head_grid_batches_the_query_blocks_that_agree(leaders, rng):
    """One head, 300 queries over 600 keys (d64, three 128-query blocks): the first query block has fewer key
    blocks than the others and leaves the batch at the producer's loop; the last two have as many, their
    diagonal block masked at different keys (a pure scf.if, where each follower takes its own branch, its ops
    checked for writes to registers in flight as the leader's are), and run as one batch: two leaders, not
    three. With `mask-causal-by-mma` (the default) their diagonals' bias wgmmas read windows of the table at
    different rows (D = q0 + seq_k - seq_q - k0 differs by the 128 queries between them), so the last two part
    there: three leaders, the same bits."""
    q = rng.standard_normal((1, 1, 300, 64))
    k, v = (rng.standard_normal((1, 1, 600, 64)) for _ in range(2))
    selected = DEFAULT_PIPELINE.replace("mask-causal-by-mma,", "")
    alone, batched = _both_ways(tessera.kernels.flash_attention(head_dim=64, causal=True), [q, k, v], selected)
    for a, b in zip(alone, batched):
        assert a.tobytes() == b.tobytes()
    assert leaders[3:] == [((0, 0, 0), [], [(1, 0, 0), (2, 0, 0)]), ((1, 0, 0), [(2, 0, 0)], [])]
    del leaders[:]
    alone, batched = _both_ways(tessera.kernels.flash_attention(head_dim=64, causal=True), [q, k, v])
    for a, b in zip(alone, batched):
        assert a.tobytes() == b.tobytes()
    assert [leader for leader, _, _ in leaders[3:]] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]


def test_a_varlen_grid_batches_the_sequences_that_agree(leaders, monkeypatch, rng):
    """Packed sequences of 0, 1, 70 and 5 queries over 3, 1, 150 and 7 keys, two heads (8 CTAs): each loads its
    sequence's bounds (ld_global, a follower rule) and the CTAs of equal trip counts run together, as long as
    their last key blocks clear as many V rows past their keys (tile.clear_rows' st.shared has a follower rule,
    its rows' branches compare the sequences' lengths): the 7-key sequence leaves the 1-key one's batch there, so
    each sequence leads a batch of its two heads."""
    lengths_q, lengths_k = [0, 1, 70, 5], [3, 1, 150, 7]
    cu = [np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lengths_q, lengths_k)]
    q = rng.standard_normal((sum(lengths_q), 2, 64)).astype(BF16)
    k, v = (rng.standard_normal((sum(lengths_k), 1, 64)).astype(BF16) for _ in range(2))

    def run():
        return tessera.attention(q, k, v, causal=True, cu_seqlens_q=cu[0], cu_seqlens_k=cu[1], max_seqlen_q=70,
                                 max_seqlen_k=150, level="target")

    batched = run()
    assert len(leaders) == 4 and len({cta for _, following, _ in leaders for cta in following}) == 4
    monkeypatch.setattr(launch, "batchable", lambda *args: False)
    assert run().tobytes() == batched.tobytes()
    assert len(leaders) == 4 + 8


def test_workers_run_their_ctas_in_batches(monkeypatch, tmp_path, rng):
    """Each worker runs its share of the grid in batches: two heads of two query blocks, causal, in two groups
    of two CTAs (forked workers note their leaders in a file), bitwise the serial run."""
    notes, run_cta = tmp_path / "leaders", launch.run_cta

    def recording(*args, **kwargs):
        cta = run_cta(*args, **kwargs)
        with notes.open("a") as out:
            out.write(f"{cta.cta_id} {cta.followers.following() if cta.followers else None}\n")
        return cta

    monkeypatch.setattr(launch, "run_cta", recording)
    q, k, v = (rng.standard_normal((1, 2, 200, 64)) for _ in range(3))
    module = tessera.kernels.flash_attention(head_dim=64, causal=True)
    sig = signature(kernels(module)[0])
    outputs = []
    for workers in (None, 2):  # each lowered afresh: no launch before it has taught it how its CTAs part
        target = tessera.lower_to_target(module, sig.name)
        allocation = allocate_registers(target)
        arguments, sizes = prepare_arguments(sig, [q, k, v])
        run_target_kernel(target, arguments, sizes, allocation, workers=workers)
        outputs.append(arguments)
    assert [a.tobytes() for a in outputs[0]] == [a.tobytes() for a in outputs[1]]
    assert sorted(notes.read_text().splitlines()[2:]) == ["(0, 0, 0) []", "(0, 1, 0) []", "(1, 0, 0) None",
                                                          "(1, 1, 0) None"]


def test_a_later_launch_batches_the_ctas_by_how_they_parted(monkeypatch, rng):
    """Causal, one head and batch: the query blocks' trip counts differ, so the first launch's batch parts at
    the loop and each block runs again alone; the next launch of the same kernel, grid and sizes batches them by
    how they parted (`batches._classes`): no follower leaves, and the output is the same bytes. Two heads:
    each query block of both heads is one batch from the start. Another size is a launch of its own."""
    leaders, run_cta = [], launch.run_cta

    def recording(*args, **kwargs):
        cta = run_cta(*args, **kwargs)
        followers = cta.followers
        leaders.append((cta.cta_id, None if followers is None else (followers.following(), dict(followers.left))))
        return cta

    monkeypatch.setattr(launch, "run_cta", recording)
    module = tessera.kernels.flash_attention(head_dim=64, causal=True)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    allocation = allocate_registers(target)

    def run(heads: int, seq: int) -> bytes:
        q, k, v = (np.random.default_rng(3).standard_normal((1, heads, seq, 64)) for _ in range(3))
        arguments, sizes = prepare_arguments(sig, [q, k, v])
        leaders.clear()
        run_target_kernel(target, arguments, sizes, allocation)
        return arguments[-1].tobytes()

    first = run(1, 300)
    assert any(entry and entry[1] for _, entry in leaders)  # the first launch's batch parted
    assert run(1, 300) == first
    assert all(entry is None or not entry[1] for _, entry in leaders) and len(leaders) == 3
    first = run(2, 300)
    assert run(2, 300) == first
    assert sorted((cta, entry[0] if entry else []) for cta, entry in leaders) == [
        ((0, 0, 0), [(0, 1, 0)]), ((1, 0, 0), [(1, 1, 0)]), ((2, 0, 0), [(2, 1, 0)])]
    run(1, 200)
    assert any(entry and entry[1] for _, entry in leaders)  # another size: learnt afresh


def test_batched_gemm_is_bitwise_one_at_a_time(batches, rng):
    a, b = rng.standard_normal((200, 96)), rng.standard_normal((96, 136))
    alone, batched = _both_ways(tessera.kernels.gemm(), [a, b])
    assert alone[2].tobytes() == batched[2].tobytes()
    assert batches and all(dropped is None for _, _, dropped in batches)


def test_a_launch_frees_its_ctas_values_without_the_cyclic_collector(rng):
    """A CTA's units and strands refer to each other; its frame, its implementations (which hold the launch's
    global memory) and its followers' shared memory are dropped when it ends, so what a launch allocated is freed
    by reference counting (13 MB of a batched GEMM were held until a full collection)."""
    a, b = rng.standard_normal((200, 96)), rng.standard_normal((96, 136))
    module = tessera.kernels.gemm()
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)

    def launch_once():
        arguments, sizes = prepare_arguments(sig, [a, b])
        run_target_kernel(target, arguments, sizes)

    launch_once()  # the caches a launch fills, and its record pool
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        launch_once()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert held < 2 << 20


def _tile_grid(text: str, ctas: int) -> str:
    return planted(text, "tile.grid = #tile.dims<1>", f"tile.grid = #tile.dims<{ctas}>")


def _run(text: str, rng, batch_ctas: int):
    a, b = (rng.standard_normal((64, 64)).astype(BF16) for _ in range(2))
    c = np.zeros((64, 64), np.float32)
    run_target_kernel(_kernel(text), [a, b, c], {}, batch_ctas=batch_ctas)


def _error(text: str, batch_ctas: int) -> str:
    with pytest.raises(KernelHazardError) as caught:
        _run(text, np.random.default_rng(0), batch_ctas)
    return str(caught.value)


def test_a_race_between_a_leader_and_its_follower_names_both_ctas(batches):
    """Two CTAs store the same tile: the follower's stores, made after its leader's, race with them, reported as
    one CTA at a time reports it."""
    kernel = _tile_grid(SS_GEMM, 2)
    message = _error(kernel, launch.BATCH_CTAS)
    assert batches == [((0, 0, 0), 1, None)]
    assert "CTA (1, 0, 0)" in message and "CTA (0, 0, 0)" in message
    assert message == _error(kernel, 1)


def test_a_follower_that_fails_runs_alone_and_is_named(batches):
    """CTA 1 divides by zero where CTA 0 does not: its followers drop out, and its own run reports it."""
    kernel = planted(_tile_grid(SS_GEMM, 3), "    %c0 = arith.constant 0 : index\n",
                     "    %c0 = arith.constant 0 : index\n    %cta = sm90.special \"ctaid.x\" : index\n"
                     "    %one = arith.constant 1 : index\n    %gone = arith.subi %one, %cta : index\n"
                     "    %bad = arith.divui %one, %gone : index\n")
    message = _error(kernel, launch.BATCH_CTAS)
    assert batches[0][0] == (0, 0, 0) and "divides by zero" in batches[0][2]
    assert re.search(r"divides by zero in thread 0 .* of CTA \(1, 0, 0\)", message), message
    assert message == _error(kernel, 1)


def test_a_hazard_in_a_branch_only_a_follower_takes_is_reported_by_its_own_run(batches):
    """CTA 1 alone takes a pure scf.if's branch that reads the wgmma result before its wait: the followers
    compute that branch by themselves, its ops checked there with the leader's operands; the check fails, the
    batch drops, and CTA 1's own run reports it as one CTA at a time does."""
    branch = ("    sm90.wgmma_commit_group\n    %cta = sm90.special \"ctaid.x\" : index\n"
              "    %second = arith.cmpi eq, %cta, %c1 : index\n"
              "    %early = scf.if %second -> (vector<32xf32>) {\n"
              "      %twice = arith.addf %acc, %acc : vector<32xf32>\n      scf.yield %twice : vector<32xf32>\n"
              "    } else {\n      scf.yield %acc0 : vector<32xf32>\n    }\n")
    kernel = planted(_tile_grid(SS_GEMM, 2), "    sm90.wgmma_commit_group\n", branch)
    message = _error(kernel, launch.BATCH_CTAS)
    assert batches[0][0] == (0, 0, 0) and "before a wgmma_wait_group" in batches[0][2]
    assert "CTA (1, 0, 0)" in message and message == _error(kernel, 1)


def test_cta_batches_lead_with_the_first_cta():
    ids = [(x, y, 0) for y in range(2) for x in range(3)]
    assert cta_batches(ids, 4, False) == [ids[:4], ids[4:]]
    assert cta_batches(ids, 4, True) == [[(0, 0, 0), (0, 1, 0)], [(1, 0, 0), (1, 1, 0)],
                                                [(2, 0, 0), (2, 1, 0)]]
    assert cta_batches(ids, 1, True) == [[cta_id] for cta_id in ids]
