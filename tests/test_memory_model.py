"""`tessera.sm90.memory_model` against the PTX ISA text: each rule's quote must be the ISA's own sentence, as
retrieved from the ISA pages (the excerpts below, copied as retrieved with their addresses; the mirror of PTX ISA
9.x at ptx.poole.ai and the ISA text carried by the ptx-90-parser crate's documentation), and each rule must
name a checker that exists."""

from __future__ import annotations

import importlib
import re

import pytest

from tessera.sm90 import memory_model

# section title (as the rule names it, without its number) -> the ISA text retrieved for it
ISA_TEXT = {
    "Asynchronous Multiply-and-Accumulate Instruction: wgmma.fence":
        # https://ptx.poole.ai/docs/09-instruction-set/15-wgmma/async-proxy (9.7.15.7.1)
        "wgmma.fence instruction establishes an ordering between prior accesses to any warpgroup registers and "
        "subsequent accesses to the same registers by a wgmma.mma_async instruction. Only the accumulator register "
        "and the input registers containing the fragments of matrix A require this ordering. The wgmma.fence "
        "instruction must be issued by all warps of the warpgroup at the following locations: - Before the first "
        "wgmma.mma_async operation in a warpgroup. - Between a register access by a thread in the warpgroup and any "
        "wgmma.mma_async instruction that accesses the same registers, either as accumulator or input register "
        "containing fragments of matrix A, except when these are accumulator register accesses across multiple "
        "wgmma.mma_async instructions of the same shape. In the latter case, an ordering guarantee is provided by "
        "default. Otherwise, the behavior is undefined.",
    "Async Proxy":
        # same page, 9.7.15.4
        "The wgmma.mma_async operations are performed in the asynchronous proxy (or async proxy). Accessing the "
        "same memory location across multiple proxies needs a cross-proxy fence. For the async proxy, "
        "fence.proxy.async should be used to synchronize memory between generic proxy and the async proxy. The "
        "completion of a wgmma.mma_async operation is followed by an implicit generic-async proxy fence. So the "
        "result of the asynchronous operation is made visible to the generic proxy as soon as its completion is "
        "observed. wgmma.commit_group and wgmma.wait_group operations must be used to wait for the completion of "
        "the wgmma.mma_async instructions.",
    "Parallel Synchronization and Communication Instructions: membar/fence":
        # https://docs.rs/crate/ptx-90-parser/latest/source/docs/instructions/membar.md
        "fence.sc is a slower fence that can restore sequential consistency when used in sufficient places, at "
        "the cost of performance. Instances of fence.sc with sufficient scope always synchronize by forming a total "
        "order per scope, determined at runtime. This total order can be constrained further by other "
        "synchronization in the program. Qualifiers .op_restrict and .sync_restrict restrict the class of memory "
        "operations for which the fence instruction provides the memory ordering guarantees.",
    "Axioms: Coherence":
        # https://ptx.poole.ai/docs/08-memory-consistency-model/02-axioms-special-cases (8.10.1)
        "If a write W precedes an overlapping write W' in causality order, then W must precede W' in coherence "
        "order.",
}


def _words(text: str) -> str:
    return re.sub(r"[\s\-]+", " ", text).strip()


@pytest.mark.parametrize("rule", memory_model.CTA_SIMULATOR_RULES, ids=lambda r: r.name)
def test_each_rule_quotes_the_isa(rule):
    title = rule.section.split(" ", 1)[1]
    assert title in ISA_TEXT, f"no ISA text retrieved for section '{rule.section}'"
    assert _words(rule.quote) in _words(ISA_TEXT[title])
    assert re.fullmatch(r"[a-z0-9-]+", rule.anchor)


@pytest.mark.parametrize("rule", memory_model.CTA_SIMULATOR_RULES, ids=lambda r: r.name)
def test_each_rule_names_its_checker(rule):
    module, _, path = rule.checked_by.partition(":")
    target = importlib.import_module(module)
    for name in path.split("."):
        target = getattr(target, name)
    assert callable(target)
