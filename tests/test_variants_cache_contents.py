"""The trace cache keys an array's contents only where the trace used them (`tessera.variants.trace.trace_mod`,
`Trace.free`, docs/variants-arrays.md): a learned table read at traced indices and changed in place between
training steps is neither traced, built nor proved again, and the next call reads its new values; an array whose
contents the trace used (a read at a constant index, a search's boundaries, an index array the bounds proof
reads, a float table made an integer, a 0-d array, a float64 table, any array of a mask_mod) changed in place is
traced anew, and the result is bitwise the one a call with nothing kept gives. At Tile level, 64 tokens
(tests/test_attention_mods_kept.py's inputs and fixture); through the fake driver under `-m slow`
(tests/test_captured_gradients_gpu_path.py's harness)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.numerics import BF16
from tessera.runtime import flex
from tessera.variants import ModTraceError
from tessera.variants.index_ranges import IndexRangeError
from tessera.variants.trace import modifier_key, trace_mod

from test_attention_mods_kept import K, Q, V, attend, fresh, traces  # noqa: F401 - traces: a fixture

SEQ = Q.shape[2]


def test_a_learned_table_changed_in_place_is_not_traced_again(traces, monkeypatch):
    """A relative-position table and ALiBi slopes, both read at traced indices, changed in place (an optimizer's
    step) three times: one trace, one kernel, and each call reads the table's new values (bitwise a call with
    nothing kept, and within the reference's tolerance)."""
    rel = np.linspace(-1, 1, 2 * SEQ - 1).astype(np.float32)
    slopes = np.array([0.25, -0.5], np.float32)

    def learned(score, b, h, q_idx, kv_idx):
        return score + rel[q_idx - kv_idx + SEQ - 1] + slopes[h] * (kv_idx - q_idx)

    first = trace_mod(learned, "score_mod")
    assert first.free == {id(rel), id(slopes)}
    results = [attend(learned)]
    key = modifier_key(learned, "score_mod")
    import tessera.kernels

    monkeypatch.setattr(tessera.kernels, "flash_attention", None)  # a build would fail
    for step in range(2):
        rel += 0.75 * np.sin(np.arange(rel.size) + step).astype(np.float32)
        slopes *= -2
        results.append(attend(learned))
        assert trace_mod(learned, "score_mod") is first and modifier_key(learned, "score_mod") == key
    assert traces == ["score_mod"]
    assert not np.array_equal(results[-1], results[-2])
    check = reference.check_attention_mods(results[-1], Q, K, V, BF16, learned, None)
    assert check.ok, check
    monkeypatch.undo()
    assert np.array_equal(results[-1], fresh(learned))


def _constant_index():
    w = np.array([0.5, 2.0], np.float32)
    return (lambda s, b, h, q, kv: s * w[0]), None, w, lambda: w.__setitem__(0, -1.5)


def _search_boundaries():
    bounds = np.array([-8, -2, 0, 3], np.int32)
    return (lambda s, b, h, q, kv: s + np.searchsorted(bounds, q - kv)), None, bounds, \
        lambda: bounds.__setitem__(slice(None), [-20, -10, 10, 20])


def _index_array():
    table = np.array([0.0, 1.5, -2.0, 4.0], np.float32)
    docs = np.repeat(np.array([0, 1], np.int32), SEQ // 2)
    return (lambda s, b, h, q, kv: s + table[docs[kv]]), None, docs, lambda: docs.__setitem__(slice(4, 9), 3)


def _float_as_index():
    table = np.linspace(-2, 2, 2 * SEQ - 1).astype(np.float32)
    shift = np.array([0.0, 3.0], np.float32)

    def fn(s, b, h, q, kv):
        return s + table[np.clip(q - kv + SEQ - 1 + shift[h].astype(np.int32), 0, 2 * SEQ - 2)]
    return fn, None, shift, lambda: shift.__setitem__(0, -5.0)


def _zero_d():
    c = np.array(2.0, np.float32)
    return (lambda s, b, h, q, kv: s * c), None, c, lambda: c.fill(-0.25)


def _mask_table():
    keep = np.array([1.0, 0.0], np.float32)
    return None, (lambda b, h, q, kv: (q >= kv) | (keep[h] > 0.5)), keep, lambda: keep.__setitem__(1, 1.0)


def _read_unwrapped():
    w = np.array([0.5, 2.0], np.float32)
    settings = {"tables": [w]}  # a container of containers: the tracer's proxies do not reach in

    def fn(s, b, h, q, kv):
        return s * w[h] + settings["tables"][0][1] * (q - kv)  # w[1] read raw: a constant of the kernel
    return fn, None, w, lambda: w.__setitem__(1, -3.0)


CONTENT_USES = {"a read at a constant index": _constant_index, "a read the proxies do not see": _read_unwrapped,
                "a search's boundaries": _search_boundaries,
                "an index array": _index_array, "a float table made an index": _float_as_index,
                "a 0-d array": _zero_d, "a mask_mod's table": _mask_table}


@pytest.mark.parametrize("use", CONTENT_USES)
def test_an_array_whose_contents_the_trace_used_is_traced_anew(use, traces):
    score_mod, mask_mod, array, change = CONTENT_USES[use]()
    fn, kind = (score_mod, "score_mod") if score_mod is not None else (mask_mod, "mask_mod")
    before = attend(score_mod, mask_mod)
    first = trace_mod(fn, kind)
    assert id(array) not in first.free
    change()
    after = attend(score_mod, mask_mod)
    assert trace_mod(fn, kind) is not first and traces == [kind, kind]
    assert not np.array_equal(before, after)
    assert np.array_equal(after, fresh(score_mod, mask_mod))


def test_an_index_array_changed_to_read_outside_is_refused(traces):
    """The bounds proof reads the index array's values: changed in place to read outside the table, the next call
    proves again and refuses it by name (a proof kept from the first call would pass it)."""
    table = np.array([0.0, 1.5], np.float32)
    docs = np.zeros(SEQ, np.int32)

    def by_document(s, b, h, q, kv):
        return s + table[docs[q]]

    attend(by_document)
    docs[3] = 2
    with pytest.raises(IndexRangeError, match="table"):
        attend(by_document)


def test_a_float64_table_changed_past_f32_is_refused(traces):
    """A float64 table is checked to fit f32 when traced: its contents are keyed, so a value past f32's range
    written in place is refused at the next call, not passed to the kernel as inf."""
    bias = np.array([0.5, -0.5])

    def biased(s, b, h, q, kv):
        return s + bias[h]

    trace_mod(biased, "score_mod")
    bias[1] = 1e300
    with pytest.raises(ModTraceError, match="overflows f32"):
        trace_mod(biased, "score_mod")


def test_a_float_remainder_keys_its_divisors_table():
    """np.fmod's steps are sized by the largest value of the divisor's table (`float_division.magnitude_bound`):
    that table's contents are keyed; a table added to the result is not."""
    div = np.array([0.5, 3.0], np.float32)
    add = np.array([1.0, 2.0], np.float32)

    def remainder(s, b, h, q, kv):
        return np.fmod(s, div[h]) + add[h]

    assert trace_mod(remainder, "score_mod").free == {id(add)}


def test_contents_that_alternate_keep_a_trace_each(traces):
    """A weight read at a constant index that alternates between two values (two configurations evaluated in
    turn) is traced once per value: the traces of a structure's last few contents are kept."""
    w = np.array([0.5, 2.0], np.float32)

    def weighted(s, b, h, q, kv):
        return s * w[0]

    made = []
    for value in (0.5, -1.0, 0.5, -1.0):
        w[0] = value
        made.append(trace_mod(weighted, "score_mod"))
    assert traces == ["score_mod"] * 2 and made[0] is made[2] and made[1] is made[3] and made[0] is not made[1]


@pytest.mark.slow
def test_a_learned_table_on_the_device_through_the_fake_driver(traces, monkeypatch):
    """Training steps on the GPU path (the fake driver runs the PTX the runtime loads): a relative-position table,
    a pretend CUDA tensor read at traced indices, changed in place between steps; one trace, the kernels kept, and
    each step's output and the table's gradient are those of its new values (float64 tolerances)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import warnings

    from captured_grads_checks import assert_captured_grads
    from test_captured_gradients_gpu_path import LoadedPtxCuda, _on_device
    from tessera.runtime import launch as launch_module
    from tessera.runtime.driver import Driver
    from tessera.runtime.launch_plan import forget_plans
    from tessera import toolchain

    sys_path_bench()
    from fake_cuda import FakeCudaTorch

    api = LoadedPtxCuda()
    fake = FakeCudaTorch(torch, api=api)
    driver = Driver(api)
    monkeypatch.setattr(launch_module, "get_driver", lambda: driver)
    monkeypatch.setattr(launch_module, "_torch", lambda: fake)
    monkeypatch.setattr("tessera.host_arrays._torch", lambda: fake)  # is_torch_tensor's
    monkeypatch.setattr(toolchain, "find_ptxas", lambda *args, **kwargs: None)
    monkeypatch.setattr(flex, "WARP_SPECIALIZED_FIRST", {})  # the builder's 64 x 64 kernel (no refused candidate)
    forget_plans()
    flex.forget_device_inputs()
    seq = 17
    values = np.linspace(-1, 1, 2 * seq - 1).astype(np.float32)
    rel = _on_device(fake, torch.from_numpy(values))  # in pretend device memory: the kernels read it there

    def make(tables):
        table = tables["rel"]
        return (lambda s, b, h, q, kv: s + table[q - kv + seq - 1]), None

    score_mod, _ = make({"rel": rel})
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal((1, 2, seq, 64)).astype(ml_dtypes.bfloat16) for _ in range(4))
    qt, kt, vt, dot = (_on_device(fake, x) for x in (q, k, v, do))
    try:
        for step in range(2):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                o, made = tessera.attention(qt, kt, vt, score_mod=score_mod, return_lse=True)
                lse = fake.cuda_like(made)  # a reshape, in which a pretend tensor loses its device (`made` kept:
                # its memory is the LSE's)
                *_, grads = tessera.attention_backward(qt, kt, vt, o, lse, dot, score_mod=score_mod,
                                                       captured_grads=["table"])
            now = {"rel": rel.detach().numpy().copy()}
            out = o.detach().float().numpy()
            check = reference.check_attention_mods(out, q, k, v, BF16, make(now)[0], None)
            assert check.ok, (step, check)
            assert_captured_grads({"rel": grads["table"].detach().numpy()}, q, k, v, do, out, make, now)
            rel.add_(torch.from_numpy(np.cos(np.arange(values.size) * (step + 1)).astype(np.float32)))
    finally:
        forget_plans()
        flex.forget_device_inputs()
    assert traces == ["score_mod"]


def sys_path_bench():
    """bench/ on sys.path (its fake_cuda.py is not a package's)."""
    import sys
    from pathlib import Path

    bench = str(Path(__file__).resolve().parent.parent / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
