"""Round 24, as a user writes them next: split-KV, clusters and grouped heads in their less common
configurations, through `tessera.attention` (Tile level for the grid, a slice at target and PTX level), the
builders under `tessera.launch`, tessera-run --check and tessera-opt --validate, each O and LSE held to a float64
reference written here (not `tessera.reference`).

- split-KV with more parts than key blocks (seq_k 1 in 256 parts), one part, parts left empty (3 parts over 4
  key blocks), causal rows that see no key in any part (seq_q > seq_k: the combine's LSE -inf, O 0), under GQA
  8:1, MQA and PackGQA, head_dim 64/96/128/192 (256 is refused by name), bf16 and f16, seq 1/7/177/1000;
- clusters of 2 on an odd number of query blocks (launched as clusters of one), on one query block shorter
  than block_m, a second CTA with one row (seq_q 129), clusters of 4 and 8; causal, GQA and split-KV with
  clusters refused by name, and a `cluster` that is no int (True, 2.0) refused, not read as 1;
- a GQA kernel launched with heads not a multiple of heads_k: refused by every launch (its tile.multiples),
  now located at the kernel in tessera-run and tessera-opt --validate;
- tessera-run --check on a GQA kernel of heads_k > 1: the NumPy reference did not repeat K's heads (a NumPy
  broadcasting error), as `tessera.reference.check_attention` did not.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera import reference
from tessera.kernels import flash_attention

BF16, F16 = ml_dtypes.bfloat16, np.float16


def attention64(q, k, v, causal):
    """(O, LSE) in float64: query head h reads key head h // (heads // heads_k); causal bottom-right (query i
    sees keys 0 .. i + seq_k - seq_q); a row that sees no key has O = 0 and LSE = -inf."""
    group = q.shape[1] // k.shape[1]
    q, k, v = q.astype(np.float64), np.repeat(k, group, 1).astype(np.float64), np.repeat(v, group, 1).astype(np.float64)
    seq_q, seq_k = q.shape[2], k.shape[2]
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(seq_k)[None] <= np.arange(seq_q)[:, None] + seq_k - seq_q, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = (np.log(total) + m)[..., 0]
        o = np.where(total > 0, e / total, 0.0) @ v
    return o, lse


def assert_attention(o, lse, q, k, v, causal):
    want_o, want_lse = attention64(q, k, v, causal)
    assert np.isfinite(np.asarray(o, np.float64)).all()
    assert np.abs(np.asarray(o, np.float64) - want_o).max(initial=0) < 2e-2
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    assert np.abs(lse[finite] - want_lse[finite]).max(initial=0) < 1e-4


def operands(heads, heads_k, seq_q, seq_k, head_dim, dtype=BF16, batch=1, seed=24):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads, seq_q, head_dim)).astype(dtype)
    k, v = (rng.standard_normal((batch, heads_k, seq_k, head_dim)).astype(dtype) for _ in range(2))
    return q, k, v


# region the grid at Tile level, and a slice below it

CASES = {  # name: (heads, heads_k, seq_q, seq_k, head_dim, causal, num_splits, cluster, dtype, batch)
    "5 parts over 2 key blocks": (2, 2, 7, 177, 64, False, 5, 1, BF16, 1),
    "256 parts over seq_k 1": (2, 2, 7, 1, 64, False, 256, 1, BF16, 1),
    "one part, causal 177 x 177 at d128": (1, 1, 177, 177, 128, True, 1, 1, BF16, 1),
    "3 parts over 4 key blocks: the last empty": (2, 2, 1, 400, 64, False, 3, 1, BF16, 1),
    "causal 1000 x 177 in 4 parts: 823 rows see no key": (1, 1, 1000, 177, 64, True, 4, 1, BF16, 1),
    "causal 1000 x 1 in 2 parts": (1, 1, 1000, 1, 64, True, 2, 1, BF16, 1),
    "GQA 8:1 decoding in 3 parts": (8, 1, 1, 1000, 64, False, 3, 1, BF16, 1),
    "GQA 8:1 causal f16 d128 in 3 parts": (8, 1, 7, 177, 128, True, 3, 1, F16, 1),
    "MQA 4:1 causal 177 x 1000 d128 in 2 parts": (4, 1, 177, 1000, 128, True, 2, 1, BF16, 1),
    "GQA 8:1 d256 (one part)": (8, 1, 7, 177, 256, False, 1, 1, BF16, 1),
    "GQA 8:1 d256 auto": (8, 1, 1, 1000, 256, False, "auto", 1, BF16, 1),
    "PackGQA 16:1 d192 in 3 parts": (16, 1, 7, 1000, 192, False, 3, 1, BF16, 1),
    "GQA 8:1 d96 f16 causal in 7 parts": (8, 1, 7, 1000, 96, True, 7, 1, F16, 1),
    "batch 3 GQA 6:2 causal f16 in 4 parts": (6, 2, 177, 177, 64, True, 4, 1, F16, 3),
    "MQA 3:1 129 packed-size rows in 2 parts": (3, 1, 43, 300, 64, False, 2, 1, BF16, 1),
    "cluster 2, seq_q 7 < block_m": (1, 1, 7, 177, 64, False, 1, 2, BF16, 1),
    "cluster 2, seq 1": (1, 1, 1, 1, 64, False, 1, 2, BF16, 1),
    "cluster 2, f16 d128 177 x 1000": (2, 2, 177, 1000, 128, False, 1, 2, F16, 1),
    "cluster 2, 3 query blocks": (1, 1, 300, 77, 64, False, 1, 2, BF16, 1),
    "cluster 4, 3 query blocks": (1, 1, 300, 300, 64, False, 1, 4, BF16, 1),
    "cluster 4, 6 query blocks": (1, 1, 700, 200, 64, False, 1, 4, BF16, 1),
    "cluster 2, d256 129 x 1000": (1, 1, 129, 1000, 256, False, 1, 2, BF16, 1),
    "cluster 2, d96 200 x 7": (1, 1, 200, 7, 96, False, 1, 2, BF16, 1),
    "cluster 2, d192 batch 2 heads 3": (3, 3, 256, 300, 192, False, 1, 2, BF16, 2),
    "cluster 8, 8 query blocks": (1, 1, 1000, 100, 64, False, 1, 8, BF16, 1),
    "cluster 2, seq_q 129 x seq_k 1 f16": (2, 2, 129, 1, 64, False, 1, 2, F16, 2),
}


def run_case(name, level):
    heads, heads_k, seq_q, seq_k, d, causal, splits, cluster, dtype, batch = CASES[name]
    q, k, v = operands(heads, heads_k, seq_q, seq_k, d, dtype, batch)
    o, lse = tessera.attention(q, k, v, causal=causal, num_splits=splits, cluster=cluster, return_lse=True,
                               level=level)
    assert o.dtype == dtype and o.shape == q.shape and lse.shape == q.shape[:3]
    assert_attention(o, lse, q, k, v, causal)


@pytest.mark.parametrize("name", CASES)
def test_at_tile_level(name):
    run_case(name, "tile")


BELOW = ["5 parts over 2 key blocks", "cluster 2, seq_q 7 < block_m", "cluster 2, 3 query blocks"]


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", BELOW)
def test_a_slice_below_tile_level(name, level):
    run_case(name, level)


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_split_kv_under_gqa_and_rows_without_keys_below_tile_level(level):
    """GQA 4:2 in 2 parts on batch 2 (f16), and causal 130 x 1 in 2 parts: 129 rows whose every part is empty,
    LSE -inf and O 0 out of the combine."""
    q, k, v = operands(4, 2, 7, 177, 64, F16, batch=2)
    o, lse = tessera.attention(q, k, v, causal=True, num_splits=2, return_lse=True, level=level)
    assert_attention(o, lse, q, k, v, True)
    q, k, v = operands(1, 1, 130, 1, 64)
    o, lse = tessera.attention(q, k, v, causal=True, num_splits=2, return_lse=True, level=level)
    assert_attention(o, lse, q, k, v, True)
    assert np.isneginf(lse[0, 0, :129]).all() and not np.any(o[0, 0, :129].astype(np.float32))


# endregion
# region refusals by name


@pytest.mark.parametrize("options,error,message", [
    (dict(causal=True, cluster=2), ValueError, "depends on the program id along x .*causal attention's key ranges"),
    (dict(num_splits=2, cluster=2), ValueError, "cluster is supported for num_splits=1"),
    (dict(num_splits="auto", cluster=2), ValueError, "cluster is supported for num_splits=1"),
    (dict(cluster=True), TypeError, "attention: cluster must be an int .*got True"),
    (dict(cluster=2.0), TypeError, "attention: cluster must be an int .*got 2.0"),
    (dict(cluster=0), ValueError, "attention: cluster sizes must be >= 1, got 0"),
])
def test_cluster_options_no_kernel_takes_are_refused_by_name(options, error, message):
    """Regression: `cluster=True` ran unclustered (True == 1) where the builders refuse it."""
    q, k, v = operands(1, 1, 177, 1000, 64)
    with pytest.raises(error, match=message):
        tessera.attention(q, k, v, level="tile", **options)


def test_a_numpy_integer_cluster_is_a_cluster():
    q, k, v = operands(1, 1, 256, 100, 64)
    np.testing.assert_array_equal(tessera.attention(q, k, v, cluster=np.int64(2), level="tile"),
                                  tessera.attention(q, k, v, cluster=2, level="tile"))


def test_clusters_with_grouped_heads_and_split_kv_at_256_are_refused_by_name():
    q, k, v = operands(4, 2, 177, 100, 64)
    with pytest.raises(ValueError, match="as many key heads as query heads only"):
        tessera.attention(q, k, v, cluster=2, level="tile")
    q, k, v = operands(1, 1, 2, 400, 256)
    with pytest.raises(ValueError, match="num_splits > 1 .split-KV. supports head_dim 64, 96, 128, 192"):
        tessera.attention(q, k, v, num_splits=3, level="tile")


@pytest.mark.parametrize("heads,heads_k", [(6, 4), (2, 4)])
@pytest.mark.parametrize("level", ["tile", "target"])
def test_a_grouped_kernel_refuses_heads_not_a_multiple_of_heads_k(heads, heads_k, level):
    """The grouped forward kernel's tile.multiples (heads 6 over heads_k 4 would read key heads past K's, TMA's
    zero fill; heads 2 over 4 divide by a group of 0)."""
    q, k, v = operands(heads, heads_k, 7, 50, 64)
    with pytest.raises(ValueError, match=f"needs heads to be a multiple of heads_k .*heads = {heads} and heads_k = "
                                         f"{heads_k}"):
        tessera.launch(flash_attention(64, grouped=True, return_lse=True), q, k, v, level=level)


def test_the_reference_repeats_key_heads():
    """Regression: `reference.check_attention` (and tessera-run --check through it) broadcast K against Q's
    heads, which only heads_k 1 survived; it repeats them now, and refuses a heads_k that does not divide."""
    q, k, v = operands(8, 2, 7, 177, 64)
    o, _ = tessera.attention(q, k, v, return_lse=True, level="tile")
    assert reference.check_attention(o, q, k, v, BF16).ok
    with pytest.raises(ValueError, match="heads must be a multiple of heads_k; got heads = 8, heads_k = 3"):
        reference.check_attention(o, q, k[:, :1].repeat(3, 1), v[:, :1].repeat(3, 1), BF16)


# endregion
# region the command line


def run_tool(tool_name, *args):
    proc = inprocess.run([sys.executable, "-m", f"tessera.tools.{tool_name}", *args])
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc


GQA_SIZES = ["-d", "batch=1", "-d", "seq_q=7", "-d", "seq_k=177"]


@pytest.mark.parametrize("level", ["tile", "ptx"])
def test_tessera_run_checks_a_gqa_kernel_of_two_key_heads(tmp_path, level):
    path = tmp_path / "gqa.mlir"
    path.write_text(str(flash_attention(128, grouped=True, causal=True, return_lse=True, dtype="f16")))
    proc = run_tool("tessera_run", str(path), *GQA_SIZES, "-d", "heads=8", "-d", "heads_k=2", "--check",
                    "--level", level)
    assert proc.returncode == 0, proc.stderr
    assert ": ok (reference: NumPy reference of kind 'attention')" in proc.stdout


def test_the_tools_refuse_heads_not_a_multiple_of_heads_k_located(tmp_path):
    """Regression: tessera-run and tessera-opt --validate refused the sizes unlocated (validate after a table
    row of the input level); they now name the kernel at its line, before anything is lowered or run."""
    path = tmp_path / "gqa.mlir"
    path.write_text(str(flash_attention(64, grouped=True, return_lse=True)))
    sizes = [*GQA_SIZES, "-d", "heads=6", "-d", "heads_k=4"]
    proc = run_tool("tessera_run", str(path), *sizes, "--check")
    assert proc.returncode == 1 and not proc.stdout
    assert f"{path}:2:3: kernel @flash_attention_gqa_d64_bf16_lse: needs heads to be a multiple of heads_k" in proc.stderr
    proc = run_tool("tessera_opt", str(path), "-p", "default-pipeline", "--validate", *sizes)
    assert proc.returncode == 1 and "(input)" not in proc.stdout + proc.stderr
    assert f"{path}:2:3: kernel @flash_attention_gqa_d64_bf16_lse: needs heads to be a multiple of heads_k" in proc.stderr


def test_tessera_run_checks_a_split_kernel_whose_parts_are_empty_at_ptx_level(tmp_path):
    """The split kernel's three parts over seq_k 1 (two of them empty) against its own Tile IR in float64."""
    split = tmp_path / "split.mlir"
    split.write_text(str(flash_attention(64, num_splits=3, return_lse=True)))
    proc = run_tool("tessera_run", str(split), "-d", "batch=1", "-d", "heads=2", "-d", "seq_q=7", "-d", "seq_k=1",
                    "--check", "--level", "ptx")
    assert proc.returncode == 0 and ": ok (reference: its own Tile IR in float64)" in proc.stdout, proc.stderr


def test_tessera_run_checks_a_cluster_whose_second_block_has_one_row_at_ptx_level(tmp_path):
    cluster = tmp_path / "cluster.mlir"
    cluster.write_text(str(flash_attention(64, cluster=2, return_lse=True)))
    proc = run_tool("tessera_run", str(cluster), "-d", "batch=1", "-d", "heads=1", "-d", "seq_q=129", "-d",
                    "seq_k=7", "--check", "--level", "ptx")
    assert proc.returncode == 0 and ": ok (reference: NumPy reference of kind 'attention')" in proc.stdout, proc.stderr


# endregion


# region the builders' split-KV and grouped kernels with clusters (tessera.attention refuses them)


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_a_split_grouped_kernel_with_clusters_of_two(level):
    """docs/attention.md: `flash_attention(num_splits=3, grouped=True, cluster=2)` builds, and its three parts
    of GQA 4:2 over 3 query blocks (the last cluster of one) merge into the right O and LSE at every level."""
    from tessera.kernels import attention_combine
    from tessera.runtime.attention_plan import combine_lowering

    q, k, v = operands(4, 2, 300, 177, 64)
    o_part, lse_part = tessera.launch(flash_attention(64, num_splits=3, grouped=True, cluster=2), q, k, v,
                                      level=level)
    parts = [x.reshape((3, 1) + x.shape[1:]) for x in (o_part, lse_part)]
    with combine_lowering():
        o, lse = tessera.launch(attention_combine(64, 3, return_lse=True), *parts, level="tile")
    assert_attention(o, lse[..., 0], q, k, v, False)


# endregion
