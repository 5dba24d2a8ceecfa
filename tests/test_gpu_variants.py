"""bench/gpu_variants.py, the GPU session's `variants` stage, on the CPU: the variants written once agree between
NumPy and torch and read neither b nor h, the float64 check, the FLOP count, and
the stage's rows written as they end and resumed (a fake GPU: the systems and the measure replaced). The quick dry
run (tests/test_gpu_session.py) compiles and host-checks one variant's kernel."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_plan  # noqa: E402 - bench/ is not a package
import gpu_results  # noqa: E402
import gpu_stages  # noqa: E402
import gpu_variants  # noqa: E402

from tessera import reference_attention  # noqa: E402
from tessera.numerics import BF16  # noqa: E402

torch = pytest.importorskip("torch")


def test_the_rows_cover_every_variant_at_each_length_at_16k_tokens():
    rows = gpu_variants.rows()
    assert len(rows) == 8 * 3 and [r["seq"] for r in rows[::8]] == [16384, 8192, 2048]
    assert {r["variant"] for r in rows} == set(gpu_variants.NAMES) and len(gpu_variants.NAMES) == 8
    assert all(r["batch"] * r["seq"] == 16384 and (r["heads"], r["head_dim"]) == (16, 128) for r in rows)
    ids = gpu_variants.document_ids(2048)
    assert ids.shape == (2048,) and np.all(np.diff(ids) >= 0) and ids[-1] >= 4  # packed, several documents
    assert gpu_variants.estimate_s(gpu_plan.WARMUP, gpu_plan.REPEATS, gpu_plan.SLOW_TFLOPS,
                                   gpu_plan.ROW_OVERHEAD_S) <= gpu_plan.BUDGETS_S["variants"]


def test_the_functions_are_written_once_numpy_and_torch_agree_and_the_masks_read_neither_b_nor_h():
    q_idx, kv_idx = np.arange(0, 2048, 37)[:, None], np.arange(0, 2048, 29)[None, :]
    score = np.random.default_rng(0).standard_normal(np.broadcast_shapes(q_idx.shape, kv_idx.shape)) * 30
    for mine, theirs in zip(gpu_variants.make_variants(np, 2048), gpu_variants.make_variants(torch, 2048, "cpu")):
        for b, h in ((0, 0), (1, 15)):
            args = [torch.tensor(x) for x in (b, h, q_idx, kv_idx)]
            if mine.mask_mod is not None:
                expected = np.broadcast_to(mine.mask_mod(b, h, q_idx, kv_idx), score.shape)
                assert np.array_equal(expected, theirs.mask_mod(*args).numpy()), mine.name
                assert np.array_equal(expected, np.broadcast_to(mine.mask_mod(0, 0, q_idx, kv_idx), score.shape))
            if mine.score_mod is not None:
                got = theirs.score_mod(torch.tensor(score), *args).numpy()
                expected = mine.score_mod(score, b, h, q_idx, kv_idx)  # f32 slopes: NumPy's products in f64
                np.testing.assert_allclose(expected, got, rtol=1e-5, err_msg=mine.name)
    document = dict(variant="document", seq=2048, batch=1, heads=2, head_dim=128)
    q = np.broadcast_to(np.zeros((), np.float32), (1, 2, 2048, 128))
    extra = gpu_variants.tessera_inputs(gpu_variants.variant_of(document, torch, "cpu"), document, q, q, 128)
    assert [x.shape for x in extra] == [(2048,), *[(1, 2, 16), (1, 2, 16, 16)] * 2]  # doc ids, full, partial lists
    assert np.array_equal(extra[0], gpu_variants.document_ids(2048))
    dense = dict(variant="ALiBi", seq=2048, batch=8, heads=16, head_dim=128)
    assert gpu_variants.flops(dense, gpu_variants.density(gpu_variants.variant_of(dense), dense)) == \
        4 * 8 * 16 * 2048**2 * 128


def test_the_check_accepts_the_float64_reference_in_bf16_and_refuses_a_wrong_output():
    """variant_check on CPU tensors (2 heads, 256 queries and keys, the variants built at seq 2048): the reference
    of tessera.reference_attention.attention_mods (the NumPy functions) rounded to bf16 passes, one element off by 0.05 does
    not; Tessera against FlexAttention is their largest difference on the slice."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 256, 128)).astype(BF16) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16) for x in (q, k, v))
    for mine, theirs in list(zip(gpu_variants.make_variants(np, 2048),
                                 gpu_variants.make_variants(torch, 2048, "cpu")))[2::3]:  # window, soft-cap, bias
        o, _ = reference_attention.attention_mods(q, k, v, mine.score_mod, mine.mask_mod, None)
        good = torch.from_numpy(o.astype(np.float32)).to(torch.bfloat16)
        bad = good.clone()
        bad[0, 1, -1, 5] += 0.05
        compared = {}
        errors, tolerance, magnitude = gpu_variants.variant_check(torch, tq, tk, tv, theirs, compared)(
            {"Tessera": good, "FlexAttention": bad})
        assert errors["Tessera"] <= tolerance < errors["FlexAttention"], (mine.name, errors, tolerance)
        assert compared["tessera_vs_flex"] == pytest.approx(abs(float(bad[0, 1, -1, 5]) - float(good[0, 1, -1, 5])))
        assert 0 < magnitude < 10


def test_the_stage_writes_each_row_as_it_ends_names_the_one_running_and_resumes(tmp_path, monkeypatch):
    """A fake GPU: the systems and the row's measure replaced. An earlier call measured the first row and was cut
    in the second: this one measures the rest, each written as it ends with `running` naming it meanwhile; a row
    that fails says why and the next runs."""
    import attention
    from harness import Record

    rows = gpu_variants.rows()
    earlier = tmp_path / "earlier"
    (earlier / "stages").mkdir(parents=True)
    (earlier / "stages" / "variants.json").write_text(json.dumps({
        "records": [{"system": "Tessera", "config": rows[0], "status": "ok"}], "rows": [{"config": rows[0]}],
        "running": {"item": rows[1], "since": 0}}))
    path = tmp_path / "variants.json"
    measured = []

    def measure(torch_, row, systems, seconds, args):
        assert json.loads(path.read_text())["running"]["item"] == row  # the session cuts a hang naming it
        measured.append(row)
        if row == rows[5]:
            raise RuntimeError("out of memory")
        return [Record(s.name, row, "ok", 1.0, 100.0) for s in systems], {"config": row, "density": 0.5}

    monkeypatch.setattr(gpu_stages, "gpu_reason", lambda: None)
    monkeypatch.setattr(attention, "environment", lambda torch_: {"device": "fake"})
    monkeypatch.setattr(gpu_variants, "measure", measure)
    monkeypatch.setattr(gpu_variants, "flex_system", lambda torch_: None)
    gpu_stages.variants_stage(gpu_results.StageWriter(path), dry=False, quick=False, resume=earlier)
    data = json.loads(path.read_text())
    assert measured == rows[2:] and data["running"] is None and data["systems"] == ["Tessera"]
    assert [r["config"] for r in data["records"]] == [rows[0]] + [r for r in rows[2:] if r != rows[5]]
    assert [r["config"] for r in data["rows"]] == [rows[0]] + rows[2:]
    assert data["rows"][4]["error"] == "RuntimeError: out of memory" and data["cut_before"] == [rows[1]]


def test_the_picture_has_a_panel_per_variant_and_the_csv_names_it(tmp_path):
    import xml.etree.ElementTree as ElementTree

    import gpu_plot

    records = [{"system": s, "config": r, "status": "ok", "tflops": 100.0} for r in gpu_variants.rows()
               for s in ("Tessera", "FlexAttention")]
    path = gpu_plot.write_svg(tmp_path / "v.svg", records, "variants", gpu_plot.variant_panel, 4)
    svg = path.read_text()
    assert all(f">{name}</text>" in svg for name in gpu_variants.NAMES)
    bars = [e for e in ElementTree.parse(path).getroot().iter("{http://www.w3.org/2000/svg}rect")
            if e.get("fill") != "white" and e.get("width") != "10"]
    assert len(bars) == len(records)
    gpu_plot.write_csv(tmp_path / "v.csv", records)
    assert (tmp_path / "v.csv").read_text().splitlines()[1].endswith(",causal (mask_mod)")
