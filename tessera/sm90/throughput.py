"""Per-SM throughputs of an H100 SXM5 / H200 (compute capability 9.0): what the performance analysis
(bench/attention_gap.py, docs/performance.md) divides a loop's work by to count clocks. Nothing in the compiler
reads them; they are the rates a kernel's main loop is held against.

Sources: [WP] NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), Table "NVIDIA H100 SXM5 ...": 989.4
dense FP16/BF16 tensor TFLOP/s with FP32 accumulate, 132 SMs, GPU boost clock 1830 MHz for the tensor figures
(the H200's product brief quotes the same 989 TFLOP/s); [CPG] CUDA C++ Programming Guide, "Arithmetic
Instructions", throughput table (results per clock cycle per multiprocessor), compute capability 9.0 column:
32-bit floating-point add/multiply/multiply-add 128, reciprocal/rsqrt/log2/exp2/sin/cos (the special function
unit, SASS MUFU) 16; [WP] again: four SM sub-partitions, each with a warp scheduler dispatching one warp
instruction per clock.
"""

from __future__ import annotations

TENSOR_PEAK_BF16_FLOPS = 989.4e12
"""Dense bf16 tensor-core FLOP/s with f32 accumulate of an H100 SXM5 (and H200) [WP]."""

CLOCK_HZ = 1.83e9
"""The boost clock the tensor peak is quoted at [WP]: clocks below are counted at this rate."""

TENSOR_BF16_FLOP_PER_CLOCK = 4096
"""bf16 FLOP (2 per multiply-add) the four tensor cores of one SM complete per clock: 989.4e12 / (132 x 1.83e9);
an m64nNk16 wgmma is N / 2 clocks of an SM (m64n128k16: 64)."""

EX2_PER_CLOCK = 16
"""Results of ex2 (MUFU.EX2) one SM completes per clock [CPG]: a warp's MUFU instruction holds its
sub-partition's unit for 8 clocks."""

FP32_FMA_PER_CLOCK = 128
"""32-bit floating-point add, multiply or multiply-add results per clock per SM [CPG]."""

SCHEDULERS = 4
"""Warp schedulers of an SM, each issuing one warp instruction per clock [WP]."""
