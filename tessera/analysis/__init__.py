"""Analyses of Tile IR kernels."""

from tessera.analysis.live_bytes import (
    LiveBytes,
    LiveValue,
    compare_attention_variants,
    format_comparison,
    peak_live_bytes,
    output_accumulator_chain,
)

__all__ = [
    "LiveBytes",
    "LiveValue",
    "compare_attention_variants",
    "format_comparison",
    "peak_live_bytes",
    "output_accumulator_chain",
]
