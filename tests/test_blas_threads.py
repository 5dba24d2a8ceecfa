"""BLAS threading on a shared machine.

The interpreters issue many small matrix products; with one BLAS thread per core each of them waits for the
slowest core, which takes milliseconds instead of microseconds when another process holds a core (see
tessera/interpreters/blas_threads.py and the busy-neighbour rows of bench/interpret.py). So:

- each interpreter (Tile interpreter, CTA simulator, PTX executor) runs its products on one BLAS thread and
  gives the caller back the setting it had;
- nested and repeated limits restore the outermost setting;
- the test processes themselves (every pytest-xdist worker) run BLAS on one thread (tests/conftest.py sets
  the environment before NumPy loads).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController, threadpool_limits

import tessera
from tessera.interpreters.blas_threads import single_threaded_blas

CONTROLLER = ThreadpoolController()


def blas_threads() -> int:
    """The largest thread count of the BLAS libraries loaded now."""
    return max(info["num_threads"] for info in CONTROLLER.select(user_api="blas").info())


@pytest.fixture
def two_blas_threads():
    """The caller's setting: two BLAS threads (more than the interpreters may use)."""
    with threadpool_limits(limits=2, user_api="blas"):
        assert blas_threads() == 2
        yield


def recording(monkeypatch, owner, name: str, seen: list[int]) -> None:
    """Wrap `owner.name` so that every call records the BLAS thread count at that moment."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        seen.append(blas_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


def test_tile_interpreter_multiplies_on_one_blas_thread(two_blas_threads, monkeypatch, rng):
    import tessera.interpreters.tile as tile_interpreter

    seen: list[int] = []
    recording(monkeypatch, tile_interpreter, "batched_matmul", seen)
    a, b = rng.standard_normal((64, 32)), rng.standard_normal((32, 48))
    tessera.interpret(tessera.kernels.gemm(dtype="bf16"), a, b)
    assert seen and set(seen) == {1}
    assert blas_threads() == 2


def test_cta_simulator_multiplies_on_one_blas_thread(two_blas_threads, monkeypatch, rng):
    from tessera.interpreters.sm90.wgmma import WgmmaUnit

    seen: list[int] = []
    recording(monkeypatch, WgmmaUnit, "mma", seen)
    a, b = rng.standard_normal((64, 32)), rng.standard_normal((32, 64))
    tessera.interpret(tessera.kernels.gemm(dtype="bf16"), a, b, level="target")
    assert seen and set(seen) == {1}
    assert blas_threads() == 2


def test_ptx_executor_runs_on_one_blas_thread(two_blas_threads, monkeypatch):
    from tessera.interpreters.ptx.schedule import Scheduler
    from tessera.ptx import launch

    seen: list[int] = []
    recording(monkeypatch, Scheduler, "run", seen)
    source = (Path(__file__).parent / "ptx_kernels" / "vector_add.ptx").read_text()
    a, b = np.arange(200, dtype=np.float32), np.ones(200, np.float32)
    _, _, c, _ = launch(source, "add_kernel", (2, 1, 1), (128, 1, 1), [a, b, np.zeros(200, np.float32), 200])
    np.testing.assert_array_equal(c, a + b)
    assert seen and set(seen) == {1}
    assert blas_threads() == 2


def test_nested_limits_restore_the_outermost_setting(two_blas_threads):
    with single_threaded_blas():
        with single_threaded_blas():
            assert blas_threads() == 1
        assert blas_threads() == 1
    assert blas_threads() == 2


def test_the_limit_is_lifted_when_an_interpreter_fails(two_blas_threads):
    with pytest.raises(ZeroDivisionError), single_threaded_blas():
        assert blas_threads() == 1
        _ = 1 / 0
    assert blas_threads() == 2
    with single_threaded_blas():  # and a later use limits again
        assert blas_threads() == 1


def test_test_processes_run_blas_on_one_thread():
    """tests/conftest.py sets OPENBLAS_NUM_THREADS (and the MKL/OpenMP equivalents) to 1, unless the caller
    chose a value, before NumPy is imported, so every xdist worker starts its BLAS with one thread."""
    assert blas_threads() == int(os.environ["OPENBLAS_NUM_THREADS"])
