"""The register groups carried over from a kernel's previous allocation (`tessera.regalloc.regroup`): where
hoist-invariant-descriptors changes the kernel warp-specialize allocated, the new allocation takes the previous
groups and is the fresh allocation name for name; a change that touches a register-sharing decision is
allocated afresh."""

from __future__ import annotations

import functools

import pytest
from xdsl.context import Context

import tessera.kernels
from tessera.dialects import sm90
from tessera.kernel_abi import is_target_kernel
from tessera.passes import SPECIALIZED_PIPELINE, apply_pipeline
from tessera.passes.hoist_invariant_descriptors import HoistInvariantDescriptorsPass
from tessera.regalloc import allocate
from tessera.regalloc.regroup import KernelChanges, kernel_changes, regroup
from text_edits import checked

WITHOUT_HOIST = checked(SPECIALIZED_PIPELINE).replace(",hoist-invariant-descriptors", "")


@functools.cache
def _before_hoisting(options: tuple):
    module = tessera.kernels.flash_attention(**dict(options))
    apply_pipeline(module, WITHOUT_HOIST)
    return module


def _kernel_before_hoisting(**options):
    module = _before_hoisting(tuple(sorted(options.items()))).clone()  # each test changes its own copy
    return module, next(op for op in module.walk() if is_target_kernel(op))


@pytest.mark.parametrize("options", [dict(head_dim=64), dict(head_dim=128, block_n=128)])
def test_the_hoisted_kernel_takes_the_previous_groups_and_allocates_as_afresh(options, monkeypatch):
    # (causal kernels since mask-causal-by-mma: a constant of the bias table's descriptors that was an immediate
    # becomes a register value once hoisting moves its use, which `regroup` does not map: they are allocated
    # afresh, as the module docstring allows; compile time only)
    module, kernel = _kernel_before_hoisting(**options)
    allocate.allocate_registers(kernel)  # warp-specialize's allocation, in the memo
    carried = []
    monkeypatch.setattr(allocate, "regroup", lambda *args: carried.append(regroup(*args)) or carried[-1])

    HoistInvariantDescriptorsPass().apply(Context(), module)

    assert carried and carried[-1] is not None  # the hoisted kernel's groups came from the previous ones
    hoisted, fresh = allocate.allocate_registers(kernel), allocate._allocate_fresh(kernel)  # noqa: SLF001
    assert (hoisted.names, hoisted.counts, hoisted.peak) == (fresh.names, fresh.counts, fresh.peak)
    split = next(op for op in kernel.walk() if isinstance(op, sm90.SetMaxNRegOp)).parent_op()
    assert hoisted.region_pressure(split) == fresh.region_pressure(split)


def test_a_change_to_a_register_sharing_op_is_allocated_afresh():
    _, kernel = _kernel_before_hoisting(head_dim=64)
    allocation = allocate.allocate_registers(kernel)
    live, roots = allocation._pressure_map.live, allocation._pressure_map.roots  # noqa: SLF001
    mma = next(op for op in kernel.walk() if isinstance(op, sm90.WgmmaMmaAsyncOp))
    constants = allocate.immediates(kernel)
    # A wgmma moved (its accumulator's in-place decision is about its place), a commit moved (it ends holds),
    # or a wgmma rewired at its accumulator.
    commit = next(op for op in kernel.walk() if isinstance(op, sm90.WgmmaCommitGroupOp))
    for moved in (mma, commit):
        assert regroup(kernel, live, constants, live, roots, KernelChanges([moved], [], [], [])) is None
    rewired = KernelChanges([], [], [], [(mma, (object(), *mma.operands[1:]), tuple(mma.operands))])
    assert regroup(kernel, live, constants, live, roots, rewired) is None
    # Nothing changed: the same groups.
    same = regroup(kernel, live, constants, live, roots, KernelChanges([], [], [], []))
    assert same.roots(len(roots)) == roots


def test_kernel_changes_reads_moves_additions_removals_and_rewiring():
    a, b, c, d, e = "abcde"  # ops stand for themselves in the fingerprints' entries
    previous = ((a, (1,), (), ()), (b, (2,), (), ()), (c, (3,), (), ()), (d, (4,), (), ()))
    changes = kernel_changes(previous, ((c, (3,), (), ()), (a, (1,), (), ()), (b, (9,), (), ()), (e, (), (), ())))
    assert (changes.moved, changes.added, [entry[0] for entry in changes.removed]) == ([c], [e], [d])
    assert changes.rewired == [(b, (2,), (9,))]
    assert kernel_changes(previous, ((a, (1,), (("x", 1),), ()),)) is None  # an attribute changed
