"""Attention variants written in PyTorch as FlexAttention users write them (issue 29), the attention-gym idioms
in torch: factories (`generate_alibi_bias(H)`, `generate_sliding_window(W)`, `generate_doc_mask_mod(mask_mod,
offsets)`, `generate_tanh_softcap(cap)`, NATTEN's 2-D neighbourhood with a helper), `torch.where`,
`torch.exp2` / `log` / `sign` / `tanh`, `torch.clamp(min=)`, tensor methods (`.abs()`, `.clamp()`,
`.to(torch.float32)`, `.float()`, `.long()`, `score.new_zeros`), `torch.zeros_like` / `full_like`, captured
int64, int32, float32, bool and bfloat16 tensors (1-d, 2-d, 0-d, on device="cpu", a parameter),
`torch.tensor(2.0)` constants, `math.log` of a Python constant, comparisons combined with `&`, `|`, `~`. Each
runs through `tessera.attention` / `tessera.attention_backward` against the float64 reference (the same torch
function run on the index grids), forward and backward; `create_block_mask` with torch mask_mods gives the
kinds of the NumPy function and the lists of torch's own `create_block_mask`; what cannot be traced
(`.item()`, a reduction, ...) is refused naming the function, the line and the
construct.

The default run takes a slice (`FAST`) at one odd shape; `-m slow` runs every variant over three shapes at Tile
level, every variant at target level and a few at PTX level, ptxas on every forward and backward kernel (no
spill) and torch's own `create_block_mask` against Tessera's. Skipped without torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

from tessera.variants import ModTraceError, create_block_mask, trace_mod  # noqa: E402
from mods_checks import assert_variant_kernels_assemble, check_named_variant  # noqa: E402

H = 4                                                     # query heads of the shapes below
CPU = torch.device("cpu")
PREFIX = torch.tensor([7, 0], device=CPU)                 # int64, per batch entry: batch 1 has no prefix
OFFSETS = torch.tensor([0, 20, 55, 56, 116, 256])         # packed documents' starts (and the end); doc 2 is one token
HEAD_BIAS = torch.tensor([0.25, -0.5, 0.0, 1.0], dtype=torch.float32)
TEMPERATURE = torch.tensor(0.75)                          # a 0-d tensor
KEEP_KEY = torch.ones(2, 256, dtype=torch.bool)           # key padding as a boolean tensor
KEEP_KEY[1, 37:] = False
KEEP_KEY[0, 5] = False
RELATIVE_BIAS = torch.from_numpy(np.random.default_rng(5).standard_normal((H, 32)).astype(np.float32) * 0.5)
LEARNED = torch.nn.Parameter(torch.from_numpy(np.random.default_rng(7).standard_normal((H, 32))).to(torch.bfloat16))
"""A model's learned relative-position table: a bfloat16 parameter (NumPy has no bfloat16: read as float32)."""
CANVAS, KERNEL = 10, 5                                    # NATTEN: a 10 x 10 image, 5 x 5 neighbourhoods


# region masks as attention-gym writes them

def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def generate_sliding_window(window_size):
    def sliding_window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= window_size) & causal_mask(b, h, q_idx, kv_idx)
    return sliding_window


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX[b]) | (q_idx >= kv_idx)


def dilated_sliding_window(b, h, q_idx, kv_idx):
    diff = q_idx - kv_idx
    return (diff >= 0) & (diff < 64) & (diff % 3 == 0)


def _offsets_to_doc_ids_tensor(offsets):
    counts = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(len(counts), device=offsets.device, dtype=torch.int32), counts)


def generate_doc_mask_mod(mask_mod, offsets):
    """attention-gym's document masking: `mask_mod` on positions inside each document (int32 ids, gathers of
    gathers for the logical positions)."""
    document_id = _offsets_to_doc_ids_tensor(offsets)

    def doc_mask_mod(b, h, q_idx, kv_idx):
        same_doc = document_id[q_idx] == document_id[kv_idx]
        q_logical = q_idx - offsets[document_id[q_idx]]
        kv_logical = kv_idx - offsets[document_id[kv_idx]]
        inner_mask = mask_mod(b, h, q_logical, kv_logical)
        return same_doc & inner_mask
    return doc_mask_mod


def get_x_y(idx):
    return idx // CANVAS, idx % CANVAS


def natten_mask(b, h, q_idx, kv_idx):
    """NATTEN's 2-D neighbourhood (attention-gym): the kernel's centre clamped away from the canvas edge."""
    q_x, q_y = get_x_y(q_idx)
    kv_x, kv_y = get_x_y(kv_idx)
    kernel_x = q_x.clamp(KERNEL // 2, (CANVAS - 1) - KERNEL // 2)
    kernel_y = q_y.clamp(KERNEL // 2, (CANVAS - 1) - KERNEL // 2)
    hori_mask = (kernel_x - kv_x).abs() <= KERNEL // 2
    vert_mask = (kernel_y - kv_y).abs() <= KERNEL // 2
    return hori_mask & vert_mask


def sinks_or_window(b, h, q_idx, kv_idx):
    """Attention sinks by torch.where of booleans, `~` of a disjunction."""
    far = (q_idx - kv_idx) > 40
    return torch.where(kv_idx < 4, True, ~(far | (kv_idx > q_idx)))


def key_padding(b, h, q_idx, kv_idx):
    return KEEP_KEY[b, kv_idx] & (q_idx >= 0)


# endregion
# region score mods

def generate_alibi_bias(heads):
    def alibi_mod(score, b, h, q_idx, kv_idx):
        scale = torch.exp2(-((h + 1) * 8.0 / heads))
        bias = (kv_idx - q_idx) * scale
        return score + bias
    return alibi_mod


def generate_tanh_softcap(soft_cap):
    def tanh_softcap(score, b, h, q_idx, kv_idx):
        return soft_cap * torch.tanh(score / soft_cap)
    return tanh_softcap


def softcap_tensor_constant(score, b, h, q_idx, kv_idx):
    """A 0-d tensor captured and another made in the function like the score (its dtype and device)."""
    cap = torch.tensor(20.0, dtype=score.dtype, device=score.device)
    return cap * torch.tanh(score * TEMPERATURE / cap)


def t5_buckets(score, b, h, q_idx, kv_idx):
    """T5's bidirectional buckets in torch, `math.log` of a Python constant."""
    relative_position = kv_idx - q_idx
    num_buckets, max_distance = 16, 128
    buckets = (relative_position > 0).long() * num_buckets
    relative_position = relative_position.abs()
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (torch.log(relative_position.to(torch.float32) / max_exact)
                         / math.log(max_distance / max_exact) * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return score + RELATIVE_BIAS[h, buckets + torch.where(is_small, relative_position, large)]


def head_bias_sign_log(score, b, h, q_idx, kv_idx):
    distance = q_idx - kv_idx
    return score + HEAD_BIAS[h] - 0.1 * torch.sign(distance) * torch.log(1 + distance.abs().float())


def clamped_distance(score, b, h, q_idx, kv_idx):
    """torch.clamp(min=) and a zeros_like / new_zeros branch."""
    penalty = torch.clamp(q_idx - kv_idx, min=0) * 0.05
    return torch.where(penalty > 2.0, score.new_zeros(()) - 1.0, score - penalty) + torch.zeros_like(score)


def learned_relative_bias(score, b, h, q_idx, kv_idx):
    return score + LEARNED[h, (q_idx - kv_idx).clamp(-16, 15) + 16]


def score_masks_itself(score, b, h, q_idx, kv_idx):
    """-inf from score_mod hides a key (queries before 20 see none)."""
    return torch.where(q_idx >= kv_idx + 20, score, torch.full_like(score, -float("inf")))


# endregion

VARIANTS = {
    "sliding-window(24)": (None, generate_sliding_window(24)),
    "prefix-lm": (None, prefix_lm),
    "dilated-window": (None, dilated_sliding_window),
    "doc-mask(sliding-window)": (None, generate_doc_mask_mod(generate_sliding_window(8), OFFSETS)),
    "natten-2d": (None, natten_mask),
    "sinks-or-window": (None, sinks_or_window),
    "alibi(H)+causal": (generate_alibi_bias(H), causal_mask),
    "tanh-softcap(30)+prefix-lm": (generate_tanh_softcap(30.0), prefix_lm),
    "softcap-tensor-constant": (softcap_tensor_constant, None),
    "t5-buckets": (t5_buckets, None),
    "head-bias-sign-log+key-padding": (head_bias_sign_log, key_padding),
    "clamped-distance+natten": (clamped_distance, natten_mask),
    "score-minus-inf(empty rows)": (score_masks_itself, None),
    "learned-bf16-table+dilated": (learned_relative_bias, dilated_sliding_window),
}

SHAPES = [(2, H, 2, 77, 133), (2, H, 1, 150, 61), (2, H, 4, 100, 100)]
FAST = ["doc-mask(sliding-window)", "head-bias-sign-log+key-padding", "natten-2d"]  # t5: test_attention_mods_torch
FAST_SHAPE = (2, 2, 1, 70, 45)


@pytest.mark.parametrize("name", FAST)
def test_torch_users_variant_at_tile_level(name):
    check_named_variant(VARIANTS, name, FAST_SHAPE, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_torch_users_variant_over_shapes_at_tile_level(name, shape):
    check_named_variant(VARIANTS, name, shape, "tile")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_torch_users_variant_at_target_level(name):
    check_named_variant(VARIANTS, name, (1, H, 2, 77, 133), "target")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["doc-mask(sliding-window)", "t5-buckets", "natten-2d"])
def test_torch_users_variant_at_ptx_level(name):
    check_named_variant(VARIANTS, name, (1, H, 2, 77, 133), "ptx")


# region what the tracer makes of them

def test_captured_tensors_become_inputs_and_0d_tensors_constants():
    """int64 and int32 tensors are i32 inputs, a float32 one f32, a boolean one 0/1 (read back as a boolean), a
    bfloat16 parameter f32 (exactly its values); a 0-d tensor, captured or made with torch.tensor(20.0), is a
    constant of the kernel."""
    doc = trace_mod(VARIANTS["doc-mask(sliding-window)"][1], "mask_mod")
    assert [(a.name, a.dtype) for a in doc.arrays] == [("mask_mod_document_id", "i32"), ("mask_mod_offsets", "i32")]
    bias = trace_mod(head_bias_sign_log, "score_mod")
    assert [(a.name, a.dtype) for a in bias.arrays] == [("score_mod_HEAD_BIAS", "f32")]
    padding = trace_mod(key_padding, "mask_mod")
    assert padding.arrays[0].boolean and padding.arrays[0].array.dtype == np.int32
    assert padding.arrays[0].array.tolist() == KEEP_KEY.int().tolist()
    assert trace_mod(softcap_tensor_constant, "score_mod").arrays == []
    learned = trace_mod(learned_relative_bias, "score_mod").arrays[0]
    assert learned.array.dtype == np.float32 and np.array_equal(learned.array, LEARNED.detach().float().numpy())


def test_natten_written_with_tensor_methods_only_runs_on_tensors_in_the_reference():
    """natten_mask names no torch (its `.clamp` and `.abs()` are methods of what `get_x_y` returns): the
    reference and the block mask call it on tensors, as the NumPy grids have no .clamp."""
    kinds = create_block_mask(natten_mask, 1, 1, CANVAS * CANVAS, CANVAS * CANVAS, 16, 16).kinds[0, 0]
    q = np.arange(CANVAS * CANVAS)
    qx, qy = np.clip(q // CANVAS, 2, CANVAS - 3), np.clip(q % CANVAS, 2, CANVAS - 3)
    visible = ((np.abs(qx[:, None] - q[None] // CANVAS) <= 2) & (np.abs(qy[:, None] - q[None] % CANVAS) <= 2))
    assert visible.sum() == CANVAS * CANVAS * KERNEL * KERNEL  # every neighbourhood is whole
    padded = np.pad(visible, ((0, 12), (0, 12))).reshape(7, 16, 7, 16)
    assert np.array_equal(kinds != 0, padded.any(axis=(1, 3)))


def made_in_the_function(b, h, q_idx, kv_idx):
    return q_idx >= torch.arange(4)[kv_idx % 4]


def reduced(score, b, h, q_idx, kv_idx):
    return score - torch.logsumexp(score, -1)


def item(score, b, h, q_idx, kv_idx):
    return score * (q_idx - kv_idx).item()


def branch(b, h, q_idx, kv_idx):
    if (q_idx - kv_idx).abs() < 8:
        return True
    return q_idx >= kv_idx


@pytest.mark.parametrize("fn,kind,line,construct", [
    (made_in_the_function, "mask_mod", 0, "indexing with a traced value a tensor the function makes"),
    (reduced, "score_mod", 0, "torch.logsumexp (supported: torch.where"),
    (item, "score_mod", 0, "the attribute .item of a traced value"),
    (branch, "mask_mod", 0, "Python control flow on a traced value"),
], ids=lambda x: x.__name__ if callable(x) else "")
def test_what_cannot_be_traced_is_refused_naming_function_line_and_construct(fn, kind, line, construct):
    with pytest.raises(ModTraceError) as info:
        trace_mod(fn, kind)
    where = f"{kind} '{fn.__qualname__}' at {__file__}:{fn.__code__.co_firstlineno + 1 + line}: cannot trace "
    assert str(info.value).startswith(where + construct), str(info.value)


# endregion
# region block masks

def numpy_natten(b, h, q_idx, kv_idx):
    kernel_x = np.clip(q_idx // CANVAS, KERNEL // 2, CANVAS - 1 - KERNEL // 2)
    kernel_y = np.clip(q_idx % CANVAS, KERNEL // 2, CANVAS - 1 - KERNEL // 2)
    return (np.abs(kernel_x - kv_idx // CANVAS) <= KERNEL // 2) & (np.abs(kernel_y - kv_idx % CANVAS) <= KERNEL // 2)


DOCUMENT_NP = np.repeat(np.arange(5), np.diff(OFFSETS.numpy())).astype(np.int32)
OFFSETS_NP = OFFSETS.numpy()


def numpy_doc_window(b, h, q_idx, kv_idx):
    q_logical, kv_logical = q_idx - OFFSETS_NP[DOCUMENT_NP[q_idx]], kv_idx - OFFSETS_NP[DOCUMENT_NP[kv_idx]]
    return (DOCUMENT_NP[q_idx] == DOCUMENT_NP[kv_idx]) & (q_logical - kv_logical <= 8) & (q_logical >= kv_logical)


def test_block_masks_of_torch_mask_mods_are_those_of_the_numpy_functions():
    """The same masks written with NumPy classify every block the same, called with Tessera's arguments and
    with FlexAttention's (B and H None, device=, BLOCK_SIZE=)."""
    for torch_mod, numpy_mod in ((natten_mask, numpy_natten),
                                 (VARIANTS["doc-mask(sliding-window)"][1], numpy_doc_window)):
        ours = create_block_mask(torch_mod, None, None, 256, 200, device="cpu", BLOCK_SIZE=(32, 16))
        assert (ours.block_m, ours.block_n) == (32, 16) and ours.kinds.shape == (1, 1, 8, 13)
        assert np.array_equal(ours.kinds, create_block_mask(numpy_mod, 1, 1, 256, 200, 32, 16).kinds)
        assert 0 < ours.skipped_fraction < 1


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in sorted(VARIANTS) if VARIANTS[n][1] is not None])
def test_block_lists_are_those_of_torchs_create_block_mask(name):
    """FlexAttention's own create_block_mask (on the CPU) gives the same counts and indices for every torch
    mask_mod above (at lengths that are multiples of the block: torch pads the last block's rows with False)."""
    from torch.nn.attention.flex_attention import create_block_mask as torch_create_block_mask

    mask_mod = VARIANTS[name][1]
    theirs = torch_create_block_mask(mask_mod, 2, 2, 256, 192, device="cpu", BLOCK_SIZE=32)
    full_n, full_i, part_n, part_i = create_block_mask(mask_mod, 2, 2, 256, 192, device="cpu",
                                                       BLOCK_SIZE=32).inputs()
    for counts, indices, their_counts, their_indices in ((full_n, full_i, theirs.full_kv_num_blocks,
                                                          theirs.full_kv_indices),
                                                         (part_n, part_i, theirs.kv_num_blocks, theirs.kv_indices)):
        assert np.array_equal(counts, their_counts.numpy())
        used = np.arange(indices.shape[-1]) < counts[..., None]
        assert np.array_equal(np.where(used, indices, -1), np.where(used, their_indices.numpy(), -1))

# endregion


@pytest.mark.slow
@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_torch_users_variant_kernels_assemble_without_spills(name):
    assert_variant_kernels_assemble(*VARIANTS[name])
