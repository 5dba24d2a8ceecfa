"""Tessera's GPU runtime (NVIDIA's `cuda-bindings`, the driver API: `pip install cuda-bindings`, or the `cuda`
extra from a checkout, `pip install '.[cuda]'`; `driver.INSTALL_HINT`).

- `tessera.attention(q, k, v, causal=False, scale=None)` (`runtime.attention`): compile or fetch the kernel
  for the shapes and run it; `runtime.gemm.gemm(a, b)` likewise for GEMM;
- `compiler`: kernel configurations, compilation, and the disk cache (`cache`) keyed by (configuration,
  Tessera version, ptxas version);
- `arguments`, `tensor_maps`: the kernel's tensors, sizes, parameter buffer and cuTensorMapEncodeTiled
  arguments, from the host description (pure host code);
- `launch`: load, encode, launch; NumPy arrays and PyTorch tensors in and out;
- `driver`: the driver calls, every error a `CudaError` naming the call and the kernel; `CudaUnavailable`
  when there is no bindings, driver, device or sm_90a device.

Importing this package imports neither the CUDA bindings nor PyTorch.
"""

from tessera.runtime.driver import CudaError, CudaUnavailable, cuda_unavailable_reason

__all__ = ["CudaError", "CudaUnavailable", "cuda_unavailable_reason"]
