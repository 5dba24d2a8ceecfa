"""`tessera.launch`: one call runs any Tile IR kernel, a builder's or a user's, in each interpreter (and on the
GPU by default); a bad call is a clear error naming the rule; without a GPU the error names `level=`."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.numerics import round_to
from tessera.runtime.driver import CudaUnavailable

LEVELS = ("tile", "target", "ptx")
pytestmark = pytest.mark.filterwarnings("ignore:.*no ring refills")
ROW_SCALE = Path(__file__).parent / "user_kernels" / "row_scale.mlir"


def has_gpu() -> bool:
    from tessera.runtime.launch import usable_device

    try:
        usable_device([])
    except CudaUnavailable:
        return False
    return True


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("level", LEVELS)
def test_launch_runs_a_builder_kernel_at_every_level(level, rng):
    a = rng.standard_normal((70, 72)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((72, 40)).astype(ml_dtypes.bfloat16)
    c = tessera.launch(tessera.kernels.gemm(), a, b, level=level)
    assert c.dtype == np.float32 and c.shape == (70, 40)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=0, atol=1e-4)


@pytest.mark.parametrize("level", LEVELS)
def test_launch_runs_a_hand_written_kernel_at_every_level(level, rng):
    module = tessera.parse_module(ROW_SCALE.read_text())
    x = rng.standard_normal((100, 20)).astype(np.float32)
    s = rng.standard_normal(100).astype(np.float32)
    y = tessera.launch(module, x, s, level=level)
    assert y.dtype == np.float16 and y.shape == (100, 20)
    np.testing.assert_array_equal(y, round_to(x * s[:, None], np.float16))


@pytest.mark.parametrize("level", LEVELS)
def test_read_only_and_strided_inputs_are_read_not_written(level, rng):
    """Regression (unseen round 22): at level="ptx" every pointer argument, inputs too, was copied back from the
    executor's memory into the caller's arrays, and a read-only input (a frozen array) failed with NumPy's
    "assignment destination is read-only". Fortran-ordered, reversed and padded views are read as they are."""
    module = tessera.parse_module(ROW_SCALE.read_text())
    x = rng.standard_normal((100, 20)).astype(np.float32)
    s = rng.standard_normal(100).astype(np.float32)
    want = round_to(x * s[:, None], np.float16)
    frozen_x, frozen_s = x.copy(), s.copy()
    frozen_x.flags.writeable = frozen_s.flags.writeable = False
    for inputs in ((frozen_x, frozen_s), (np.asfortranarray(x), s[::-1].copy()[::-1]),
                   (np.pad(x, ((0, 0), (0, 5)))[:, :20], s)):
        np.testing.assert_array_equal(tessera.launch(module, *inputs, level=level), want)


def test_builder_entry_points_go_through_launch(monkeypatch, rng):
    import tessera.runtime.entry as entry

    calls = []
    original = entry.launch

    def spy(module, *arrays, **options):
        calls.append(options.get("level"))
        return original(module, *arrays, **options)

    monkeypatch.setattr(entry, "launch", spy)
    a = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    tessera.gemm(a, b, level="tile")
    q = rng.standard_normal((1, 1, 10, 64)).astype(ml_dtypes.bfloat16)
    tessera.attention(q, q, q, level="tile")
    assert calls == ["tile", "tile"]


def test_interpret_is_launch_at_tile_level(rng):
    module = tessera.parse_module(ROW_SCALE.read_text())
    x, s = rng.standard_normal((5, 3)), rng.standard_normal(5)
    np.testing.assert_array_equal(tessera.interpret(module, x, s), tessera.launch(module, x, s, level="tile"))


@pytest.mark.parametrize("arrays, error, message", [
    (lambda x, s: (x,), ValueError, r"kernel @row_scale takes 2 inputs \(X, S\), got 1"),
    (lambda x, s: (x, s, s), ValueError, r"kernel @row_scale takes 2 inputs \(X, S\), got 3"),
    (lambda x, s: (x, s[:4]), ValueError, r"input S of @row_scale, dimension 0 \(M\): 'M' is 100 elsewhere, got 4"),
    (lambda x, s: (x[None], s), ValueError, r"input X of @row_scale must have rank 2, got shape \(1, 100, 20\)"),
    (lambda x, s: (x.astype(np.complex64), s), TypeError, r"tessera.launch: input 0 has complex element type"),
    (lambda x, s: (x > 0, s), TypeError, r"tessera.launch: input 0 has element type bool"),
    (lambda x, s: (x, "s"), TypeError, r"tessera.launch: input 1 must be a NumPy array of real numbers; got str"),
])
@pytest.mark.parametrize("level", ["tile", "ptx"])
def test_a_bad_call_is_a_clear_error(arrays, error, message, level, rng):
    module = tessera.parse_module(ROW_SCALE.read_text())
    x, s = rng.standard_normal((100, 20)), rng.standard_normal(100)
    with pytest.raises(error, match=message):
        tessera.launch(module, *arrays(x, s), level=level)


def test_floats_for_an_integer_input_are_refused():
    from tessera.kernels import flash_attention_varlen

    module = flash_attention_varlen(head_dim=64)
    q = np.zeros((5, 1, 64), np.float32)
    starts = np.array([0, 5], np.float64)
    sig = tessera.find_kernel(module)
    arrays = [q, q, q] + [starts] * (len(sig.inputs) - 3)
    with pytest.raises(TypeError, match=r"holds integers \(int32\); got element type float64"):
        tessera.launch(module, *arrays, level="tile")


def test_integers_an_integer_input_cannot_hold_are_refused():
    """An int64 label of 2^40 would wrap to 0 in an i32 input: refused, naming the input and its range."""
    from tessera.kernels import flash_attention_varlen

    module = flash_attention_varlen(head_dim=64)
    q = np.zeros((5, 1, 64), np.float32)
    starts = np.array([0, 2**40], np.int64)
    sig = tessera.find_kernel(module)
    arrays = [q, q, q] + [starts] * (len(sig.inputs) - 3)
    with pytest.raises(ValueError, match=r"holds int32 values, from -2147483648 to 2147483647; got 1099511627776"):
        tessera.launch(module, *arrays, level="tile")


def test_a_bad_level_is_named():
    module = tessera.parse_module(ROW_SCALE.read_text())
    with pytest.raises(ValueError, match=r"tessera.launch: unknown interpreter level 'gpu'"):
        tessera.launch(module, np.zeros((2, 2)), np.zeros(2), level="gpu")


@pytest.mark.skipif(has_gpu(), reason="a GPU is present: the launch runs")
def test_without_a_gpu_the_error_names_the_cpu_levels(rng):
    module = tessera.parse_module(ROW_SCALE.read_text())
    x, s = rng.standard_normal((100, 20)).astype(np.float32), rng.standard_normal(100).astype(np.float32)
    with pytest.raises(CudaUnavailable, match=r"tessera.launch: .*pass level='tile', 'target' or 'ptx'"):
        tessera.launch(module, x, s)
    a = np.zeros((8, 8), ml_dtypes.bfloat16)
    with pytest.raises(CudaUnavailable, match=r"pass level='tile', 'target' or 'ptx'"):
        tessera.gemm(a, a)
    # a wrong call is refused before the GPU is looked for
    with pytest.raises(ValueError, match=r"takes 2 inputs"):
        tessera.launch(module, x)


@pytest.mark.gpu  # skipped without a GPU by tests/conftest.py; bench/gpu_session.py runs it
def test_launch_on_the_gpu_runs_a_hand_written_kernel(rng):
    module = tessera.parse_module(ROW_SCALE.read_text())
    x = rng.standard_normal((100, 24)).astype(np.float32)
    s = rng.standard_normal(100).astype(np.float32)
    np.testing.assert_array_equal(tessera.launch(module, x, s), tessera.launch(module, x, s, level="ptx"))


def test_a_hand_written_kernel_compiles_for_the_gpu_through_the_cache(tmp_path):
    """What `launch` does before the GPU runs it: the module compiled with the default pipeline, its host
    description (grid, tensor maps, shared memory) for the launch, stored and found again by the module's text."""
    from tessera.runtime.cache import KernelCache
    from tessera.runtime.compiler import compile_module, forget_compiled

    module = tessera.parse_module(ROW_SCALE.read_text())
    cache = KernelCache(tmp_path)
    forget_compiled()
    kernel = compile_module(module, "row_scale", cache=cache)
    assert kernel.name == "row_scale" and ".entry row_scale(" in kernel.ptx and not kernel.from_cache
    assert kernel.host.grid({"M": 130, "N": 20}) == (3, 1, 1)
    forget_compiled()
    again = compile_module(tessera.parse_module(ROW_SCALE.read_text()), "row_scale", cache=cache)
    assert again.from_cache and again.key == kernel.key and again.host.as_dict() == kernel.host.as_dict()
    other = tessera.kernels.gemm()
    assert compile_module(other, tessera.find_kernel(other).name, cache=cache).key != kernel.key
