"""Tessera's version, the one place it is written (pyproject.toml reads it; the runtime's kernel cache keys
include it)."""

__version__ = "0.1.0"
