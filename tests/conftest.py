"""Shared fixtures: kernels are built once per configuration and reused across tests."""

from __future__ import annotations

import functools

import numpy as np
import pytest


@functools.lru_cache(maxsize=None)
def build_kernel(variant: str, **config):
    import tessera

    return getattr(tessera.kernels, variant)(**config)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


INSTALL = "pip install -e '.[test,ptx]' (the test command) installs it"


def require_tool(name: str) -> str:
    """The path of ptxas or nvdisasm. Without one the test fails, never skips: the test command installs both
    (the nvidia-cuda-nvcc and nvidia-cuda-nvdisasm wheels of tessera[ptx]), so a missing tool is a broken
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
