// Stands in for FlashAttention-3's hopper/cuda_check.h when its host code runs on a CPU without a driver
// (tests/ptx_library/build.py): the CUDA runtime calls it checks (cudaGetDevice, cudaFuncSetAttribute) fail
// there and are ignored; the launch itself is recorded by shim/cutlass/kernel_launch.h.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cutlass/cutlass.h>
#define CHECK_CUDA(call) ((void)(call))
#define CHECK_CUDA_KERNEL_LAUNCH() ((void)0)
#define CHECK_CUTLASS(call)                                                          \
  do {                                                                               \
    if ((call) != cutlass::Status::kSuccess) {                                       \
      std::fprintf(stderr, "CUTLASS error (%s:%d)\n", __FILE__, __LINE__);           \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)
