"""A kernel built from score_mod / mask_mod and compiled already (`tessera.runtime.flex.compiled_forward`) checks
its launches as a fresh launch of its module does (`tessera.runtime.variant_launch`): the modifiers' reads in
bounds for the launch's sizes, and block lists made for them. One test per GPU launch path, each refused before a
GPU is asked (no GPU needed; `prepare_torch` takes CUDA tensors only: checked where a GPU is). Needs ptxas (the
kernel is compiled once, about 3 s)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.kernels.attention_config import DEFAULT_BLOCK_M
from tessera.numerics import BF16, round_to
from tessera.runtime import launch as runtime_launch
from tessera.runtime.flex import compiled_forward, forward_inputs
from tessera.variants import IndexRangeError, create_block_mask

DOCS = np.repeat(np.arange(4), 32).astype(np.int32)  # 128 positions, four documents
BIAS = np.linspace(-1, 1, 100).astype(np.float32)


def in_document(b, h, q_idx, kv_idx):
    return DOCS[q_idx] == DOCS[kv_idx]


def key_bias(score, b, h, q_idx, kv_idx):
    return score + BIAS[kv_idx]


def _inputs(seq):
    rng = np.random.default_rng(seq)
    return [round_to(rng.standard_normal((1, 2, seq, 64)), BF16) for _ in range(3)]


@pytest.fixture(scope="module")
def compiled(ptxas):
    """(the compiled forward of key_bias under in_document for 100 tokens, its key block, its inputs at 100)."""
    q, k, v = _inputs(100)
    kernel, block_n = compiled_forward(q, k, score_mod=key_bias, mask_mod=in_document, causal=False, scale=None,
                                       return_lse=False, head_dim=64, dtype="bf16")
    assert kernel.module is not None
    return kernel, block_n


def _stale_lists(q, k, block_n):
    """The inputs after q, k, v with block lists of another mask_mod (every block empty) for these lengths."""
    extra = forward_inputs(q, k, key_bias, in_document, block_n)
    stale = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx < 0, 1, 2, 100, 100, DEFAULT_BLOCK_M, block_n)
    return extra[:2] + stale.inputs()  # BIAS, DOCS, then the lists


PATHS = {
    "tessera.launch": lambda kernel, *inputs: tessera.launch(kernel, *inputs),
    "runtime.launch.run (NumPy)": lambda kernel, *inputs: runtime_launch.run(kernel, *inputs),
    "runtime.launch.run (CPU tensors)": lambda kernel, *inputs: runtime_launch.run(kernel, *_tensors(inputs)),
    "launch_zeroed": lambda kernel, *inputs: runtime_launch.launch_zeroed(kernel, *_tensors(inputs)),
}
SLOW_PATHS = ("launch_zeroed", "runtime.launch.run (CPU tensors)")
"""The tensor paths decode the lists on the host (no `made_for` record survives a conversion): -m slow."""
PATH_PARAMS = [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PATHS else p for p in sorted(PATHS)]


def _tensors(arrays):
    pytest.importorskip("torch")
    return [runtime_launch.numpy_to_torch(np.ascontiguousarray(a)) for a in arrays]


@pytest.mark.parametrize("path", PATH_PARAMS)
def test_block_lists_of_another_mask_are_refused(compiled, path):
    kernel, block_n = compiled
    q, k, v = _inputs(100)
    with pytest.raises(ValueError, match="the block lists.* leaves out key block 0 of query block 0"):
        PATHS[path](kernel, q, k, v, *_stale_lists(q, k, block_n))


@pytest.mark.parametrize("path", PATH_PARAMS)
def test_a_read_outside_a_table_is_refused(compiled, path):
    """q and k of 120 tokens: key_bias reads BIAS[kv_idx] up to 119, past its 100 entries."""
    kernel, block_n = compiled
    q, k, v = _inputs(120)
    extra = [BIAS, DOCS] + create_block_mask(in_document, 1, 2, 120, 120, DEFAULT_BLOCK_M, block_n).inputs()
    with pytest.raises(IndexRangeError, match=r"score_mod 'key_bias' .*reads BIAS\[kv_idx\]"):
        PATHS[path](kernel, q, k, v, *extra)


@pytest.mark.parametrize("path", PATH_PARAMS)
def test_a_mask_array_of_other_values_is_refused(compiled, path):
    """DOCS passed with other documents than traced ran against the lists and the kernel made for the traced
    ones (an O of neither mask); the learned BIAS takes any values."""
    kernel, block_n = compiled
    q, k, v = _inputs(100)
    extra = forward_inputs(q, k, key_bias, in_document, block_n)  # BIAS, DOCS, then the lists
    with pytest.raises(ValueError, match="input mask_mod_DOCS holds other values than the array DOCS the mask_mod "
                                         "'in_document' was traced with"):
        PATHS[path](kernel, q, k, v, extra[0], np.roll(extra[1], 5), *extra[2:])
