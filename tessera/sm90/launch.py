"""Launch limits of compute capability 9.0: grid and block dimensions, threads per block.

Source: [CCG] = CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications per Compute
Capability", column 9.0: maximum x-dimension of a grid of thread blocks 2^31-1, maximum y- or z-dimension 65535,
maximum x- or y-dimension of a block 1024, maximum z-dimension of a block 64, maximum number of threads per
block 1024. `cuLaunchKernel` answers CUDA_ERROR_INVALID_VALUE beyond them. The shared-memory limit per block is
`warp.MAX_SHARED_MEMORY_PER_BLOCK`.
"""

from __future__ import annotations

import math

from tessera.sm90.warp import MAX_SHARED_MEMORY_PER_BLOCK

MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
"""Most thread blocks along grid x, y, z [CCG]."""

MAX_BLOCK_DIMS = (1024, 1024, 64)
"""Most threads along block x, y, z [CCG]."""

MAX_THREADS_PER_BLOCK = 1024
"""Most threads in one thread block, whatever its shape [CCG]."""

MAX_PORTABLE_CLUSTER_SIZE = 8
"""Most thread blocks in a cluster that every sm_90 launch may use [CCG, "Thread Block Clusters": "a maximum of
8 thread blocks in a cluster is supported as a portable cluster size"]."""

MAX_NONPORTABLE_CLUSTER_SIZE = 16
"""Most thread blocks in a cluster on H100 with the opt-in cudaFuncAttributeNonPortableClusterSizeAllowed
(CUDA Runtime API, cudaFuncAttributes / Hopper tuning guide, "Thread Block Clusters")."""


def check_cluster(grid: tuple[int, int, int], cluster: tuple[int, int, int], non_portable: bool = False) -> None:
    """Refuse, as cuLaunchKernelEx does (CUDA_ERROR_INVALID_CLUSTER_SIZE), a cluster shape that does not divide
    the grid in every dimension, or holds more than MAX_PORTABLE_CLUSTER_SIZE blocks
    (MAX_NONPORTABLE_CLUSTER_SIZE with the non-portable opt-in)."""
    for axis, g, c in zip("xyz", grid, cluster):
        if g % c:
            raise ValueError(f"cluster {tuple(cluster)} does not divide grid {tuple(grid)}: grid {axis} = {g} is not a "
                             f"multiple of cluster {axis} = {c}")
    size, limit = math.prod(cluster), MAX_NONPORTABLE_CLUSTER_SIZE if non_portable else MAX_PORTABLE_CLUSTER_SIZE
    if size > limit:
        hint = "" if non_portable else (f" (up to {MAX_NONPORTABLE_CLUSTER_SIZE} with the non-portable cluster size "
                                        "opt-in)")
        raise ValueError(f"cluster {tuple(cluster)} has {size} thread blocks, more than the {limit} a cluster may "
                         f"hold{hint}")


def check_launch(grid: tuple[int, ...], block: tuple[int, ...] | None = None, shared_bytes: int | None = None) -> None:
    """Refuse, naming the limit, a launch the driver refuses: `grid` and `block` (1 to 3 dimensions, x first)
    within MAX_GRID_DIMS / MAX_BLOCK_DIMS and MAX_THREADS_PER_BLOCK, and `shared_bytes` (static plus dynamic
    shared memory of one block) within MAX_SHARED_MEMORY_PER_BLOCK. None skips a check."""
    for what, dims, limits in (("grid", grid, MAX_GRID_DIMS), ("block", block, MAX_BLOCK_DIMS)):
        if dims is None:
            continue
        for axis, size, limit in zip("xyz", dims, limits):
            if size > limit:
                raise ValueError(f"{what} {tuple(dims)}: {what} {axis} = {size} exceeds the launch limit of {limit} "
                                 f"(compute capability 9.0)")
    if block is not None and math.prod(block) > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"block {tuple(block)} has {math.prod(block)} threads, more than the {MAX_THREADS_PER_BLOCK} "
                         "of a thread block")
    if shared_bytes is not None and shared_bytes > MAX_SHARED_MEMORY_PER_BLOCK:
        raise ValueError(f"shared memory of {shared_bytes} bytes per block exceeds the {MAX_SHARED_MEMORY_PER_BLOCK} "
                         "bytes (227 KiB) a block may use (compute capability 9.0)")


SM_COUNT = 132
"""Streaming multiprocessors of an H100 SXM5 or H200 (an H100 PCIe has 114): what split-KV's heuristic
(`tessera.kernels.attention_split.num_splits_heuristic`) fills with waves of thread blocks by default."""

L2_BYTES = 50 * 2**20
"""The L2 cache of an H100/H200 (50 MiB), the size FlashAttention-3's split heuristic assumes."""
