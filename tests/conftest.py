"""Shared fixtures: kernels are built once per configuration and reused across tests.

BLAS runs on one thread in every test process. pytest-xdist runs one worker per core, and a BLAS that starts
one thread per core in each of them has every small product wait for a core another worker holds (the
Tile-interpreter tests took 324-354 s that way on two loaded cores, 46-52 s single-threaded). The variables
are set here, before NumPy is imported, so this process and the workers it starts (which inherit its
environment) load their BLAS with one thread; a value the caller set is kept.
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import functools  # noqa: E402 - after the BLAS environment, before NumPy

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@functools.lru_cache(maxsize=None)
def build_kernel(variant: str, **config):
    import tessera

    return getattr(tessera.kernels, variant)(**config)


_LOWERED = None
"""This test process's memo of lowered modules (`tessera.lowering.memo`), made by the first test that uses it."""


@pytest.fixture(autouse=True)
def memoized_lowering(request):
    """Every test lowers through one memo per test process: a kernel several tests compile (to Target IR, to PTX,
    run at both levels) is lowered once per worker. A test that takes `monkeypatch` lowers afresh every time,
    the builders' kept lowerings (`tessera.lowering.kept`) not taken either (what it patches may change the
    lowering, which neither key can see); TESSERA_TEST_MEMO=0 turns the memo off for the run."""
    global _LOWERED
    from tessera.lowering.kept import unkept_lowering
    from tessera.lowering.memo import LoweringMemo, memoized_lowering as memoized

    if "monkeypatch" in request.fixturenames:
        with unkept_lowering():
            yield
        return
    if os.environ.get("TESSERA_TEST_MEMO") == "0":
        yield
        return
    if _LOWERED is None:
        _LOWERED = LoweringMemo()
    with memoized(_LOWERED):
        yield


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


INSTALL = "pip install -e '.[test,ptx]' (the test command) installs it"


def require_tool(name: str) -> str:
    """The path of ptxas or nvdisasm. Without one the test fails, never skips: the test command installs both
    (the nvidia-cuda-nvcc and nvidia-cuda-nvdisasm wheels of tessera-compiler[ptx]), so a missing tool is a broken
    install or a broken `tessera.toolchain.find_*`, a regression to report."""
    from tessera import toolchain

    path = {"ptxas": toolchain.find_ptxas, "nvdisasm": toolchain.find_nvdisasm}[name]()
    if path is None:
        pytest.fail(f"no {name} in PATH, $CUDA_HOME/bin or the nvidia wheels: {INSTALL}")
    return path


@pytest.fixture(scope="session")
def ptxas() -> str:
    """ptxas (see `require_tool`)."""
    return require_tool("ptxas")


@pytest.fixture(scope="session")
def nvdisasm() -> str:
    """nvdisasm (see `require_tool`)."""
    return require_tool("nvdisasm")


def pytest_addoption(parser):
    parser.addoption("--all-ptxas", action="store_true", default=False,
                     help="test_compile.py: check the whole kernel matrix with every ptxas found, not only the newest")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long matrix left out of the default suite; run it with -m slow")
    config.addinivalue_line("markers", "gpu: needs an H100/H200 (tessera.runtime finds one) and is skipped, saying why, "
                                       "without one; bench/gpu_session.py runs every test so marked")


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` are skipped without a usable GPU (the runtime's reason is the skip's); tests marked
    `slow` are skipped unless the -m expression names them (`pytest -m slow ...`)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items:
        from tessera.runtime import cuda_unavailable_reason

        reason = cuda_unavailable_reason()
        if reason is not None:
            for item in gpu_items:
                item.add_marker(pytest.mark.skip(reason=f"no usable GPU: {reason}"))
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
