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


def pytest_addoption(parser):
    parser.addoption("--all-ptxas", action="store_true", default=False,
                     help="test_compile.py: check the whole kernel matrix with every ptxas found, not only the newest")
