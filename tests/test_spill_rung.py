"""The default pipeline's last rung (issue 29): a kernel no configuration fits without spilling is lowered
single-stage with `allocate-registers{spill=true}`, the registers past 255 left to ptxas, with a warning naming
the rung and the registers needed (`tessera.lowering.fallback`). With modifiers, `tessera.attention` and
`tessera.attention_backward` try their own rungs (smaller key blocks, the head split) before it. The heavy
variant below (a score_mod that halves scores farther than 64 apart, with soft-cap, ALiBi, a relative-position
table, a key bias and two key-weighted tanh terms of the score, under a per-batch document mask) needs 286
registers a thread single-stage at head_dim 128 even with head_split=2 (without the two tanh terms it fits
since `kv_idx - q_idx` is computed on the thread's distinct offsets, `compute-distinct-lanes`): it runs right at target and PTX level, and ptxas assembles it with spills. The
full matrix (PTX level, the forward's ordering) is `-m slow`."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.ir.diagnostics import TesseraWarning
from tessera.kernels import attention_backward, flash_attention
from tessera.lowering.fallback import PIPELINE_NOTE_ATTR, NoConfigurationFitsError, without_spilling
from tessera.numerics import BF16, round_to
from tessera.regalloc import SPILL_ATTR
from tessera.runtime.flex import attention_mods

SLOPES = np.array([0.5, 0.25])
TABLE = np.linspace(-1, 1, 126).reshape(2, 63)
BIAS = np.linspace(0, 1, 170)
BIAS2 = np.linspace(1, 0, 170)
DOCS = np.array([np.repeat([0, 1, 2], [20, 15, 135]), np.repeat([0, 1], [90, 80])])  # per batch


def near(score, b, h, q_idx, kv_idx):
    return np.where(np.abs(q_idx - kv_idx) < 64, score, score * 0.5)


def heavy(score, b, h, q_idx, kv_idx):
    s = near(score, b, h, q_idx, kv_idx)
    return (20.0 * np.tanh(s / 20.0) + SLOPES[h] * (kv_idx - q_idx) + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]
            + BIAS[kv_idx] + BIAS2[kv_idx] * np.tanh(score) + BIAS[kv_idx] * np.tanh(score / 3.0))


def document(b, h, q_idx, kv_idx):
    return (DOCS[b, q_idx] == DOCS[b, kv_idx]) & (q_idx >= kv_idx)


def inputs(seed=0, batch=1, seq_q=70, seq_k=80):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((batch, 1, seq_q, 128)), BF16)
    k, v = (round_to(rng.standard_normal((batch, 1, seq_k, 128)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16)


def spill_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "spilling past 255" in str(w.message)]


def _backward(level):
    q, k, v, do = inputs(seq_q=40, seq_k=60)
    o, lse = tessera.attention(q, k, v, score_mod=heavy, mask_mod=document, return_lse=True, level="tile")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=heavy, mask_mod=document, level=level)
    (message,) = spill_warnings(caught)
    assert "@attention_backward_d128_bf16_head_split2" in message
    needed, past = map(int, re.search(r"(\d+) registers per thread needed, (\d+) past the 255 a thread can hold "
                                      "left to ptxas", message).groups())
    assert needed > 255 and past == needed - 255
    assert f"single-stage: {needed} registers per thread, over the budget of 255" in message
    checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, heavy, document)
    assert all(c.ok for c in checks), [str(c) for c in checks]


def test_heavy_backward_spills_at_target_level():
    _backward("target")


@pytest.mark.slow
def test_heavy_backward_spills_at_ptx_level():
    _backward("ptx")


def _forward(level, block_n):
    """`near` with the document mask at head_dim 128 needs more than 255 registers single-stage at key blocks of 128
    (277 since the document mask's equality rewrite; 276 before): with block_n given (no smaller key blocks to try)
    the spilling rung is taken."""
    q, k, v, _ = inputs(1, batch=2, seq_q=70, seq_k=170)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if block_n is None:
            o = tessera.attention(q, k, v, score_mod=near, mask_mod=document, level=level)
        else:
            o = attention_mods(q, k, v, score_mod=near, mask_mod=document, causal=False, scale=None, return_lse=False,
                               level=level, head_dim=128, dtype="bf16", block_n=block_n)
    check = reference.check_attention_mods(o, q, k, v, BF16, near, document)
    assert check.ok, str(check)
    return caught


@pytest.mark.slow
@pytest.mark.parametrize("level", ["ptx", "target"])
def test_forward_with_a_key_block_given_spills(level):
    (message,) = spill_warnings(_forward(level, 128))
    needed, past = map(int, re.search(r"(\d+) registers per thread needed, (\d+) past the 255", message).groups())
    assert needed > 255 and past == needed - 255, message


@pytest.mark.slow
def test_forward_takes_smaller_key_blocks_before_spilling():
    """At the default key blocks (128) no configuration fits without spilling; flex's own rung, key blocks of 64,
    fits, and is taken: no spill."""
    caught = _forward("target", None)
    assert not spill_warnings(caught)
    assert any("rebuilt with block_n 64" in str(w.message) for w in caught)


def test_a_kernel_that_fits_takes_no_spilling_rung():
    """`near` with the document mask at key blocks of 64 fits single-stage: the ladder stops there, with or
    without the spilling rung, and the kernel carries no spill."""
    module = flash_attention(128, score_mod=near, mask_mod=document, block_sparse=True, block_n=64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = tessera.compile(module, target="target")
    (fn,) = [op for op in lowered.walk() if "sm90.registers" in op.attributes]
    assert SPILL_ATTR not in fn.attributes and not spill_warnings(caught)
    assert PIPELINE_NOTE_ATTR not in fn.attributes or "spilling" not in fn.attributes[PIPELINE_NOTE_ATTR].data


@pytest.mark.slow
def test_without_the_rung_or_with_a_named_pipeline_it_is_refused():
    from tessera import passes
    from tessera.regalloc import RegisterBudgetError

    module = flash_attention(128, score_mod=near, mask_mod=document, block_sparse=True, block_n=128)
    with pytest.raises(NoConfigurationFitsError, match=r"single-stage: 2[5-9][0-9] registers per thread"), \
            without_spilling():
        tessera.compile(module, target="target")
    with pytest.raises(RegisterBudgetError,
                       match="2[5-9][0-9] registers per thread are live at once, over the budget of 255") as refused:
        tessera.compile(module, target="target", pipeline=passes.PTX_PIPELINE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)  # asked for by name: spilled without a fallback warning
        lowered = tessera.compile(module, target="target", pipeline=passes.SPILL_PIPELINE)
    (fn,) = [op for op in lowered.walk() if SPILL_ATTR in op.attributes]
    needed = max(int(n) for n in re.findall(r"(\d+) registers per thread are live", str(refused.value)))
    assert fn.attributes[SPILL_ATTR].value.data == needed - 255 and PIPELINE_NOTE_ATTR not in fn.attributes


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
def test_ptxas_accepts_the_spilling_kernel():
    """ptxas (13.0) fits this kernel's 306 virtual registers in 255 without spilling (its own rematerialization;
    gemm_glu_wide's 333 spill 1140 bytes: tests/test_register_pressure.py); it reports the bytes either way."""
    kernels = attention_backward(128, score_mod=heavy, mask_mod=document, block_sparse=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tessera.compile(kernels.main, target="cubin")
    assert spill_warnings(caught)
    (entry,) = result.entries.values()
    assert entry.registers <= 255 and entry.spill_store_bytes >= 0 and not result.warnings, entry
