// Double buffering with libcu++'s cuda::pipeline (per-thread scope: cp.async groups) over a row of tiles, and the
// cuda_pipeline.h primitives' zero-fill copy for the ragged last tile: out[i] = in[i] + in[i + 1] of a padded row.
#include <cuda/pipeline>
#include <cuda_pipeline.h>
extern "C" __global__ void k_pipeline(const float4* in, float* out, int tiles, int last_valid) {
  __shared__ alignas(16) float4 buf[2][128];
  auto pipe = cuda::make_pipeline();
  unsigned t = threadIdx.x;
  pipe.producer_acquire();
  cuda::memcpy_async(&buf[0][t], &in[t], sizeof(float4), pipe);
  pipe.producer_commit();
  float total = 0.0f;
  for (int k = 0; k < tiles; ++k) {
    if (k + 1 < tiles) {
      if (k + 1 == tiles - 1) {  // the last tile: copy what is valid, zero-fill the rest
        __pipeline_memcpy_async(&buf[(k + 1) % 2][t], &in[(k + 1) * 128 + t], sizeof(float4),
                                (int)t < last_valid ? 0 : sizeof(float4));
        __pipeline_commit();
      } else {
        pipe.producer_acquire();
        cuda::memcpy_async(&buf[(k + 1) % 2][t], &in[(k + 1) * 128 + t], sizeof(float4), pipe);
        pipe.producer_commit();
      }
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    pipe.consumer_wait();
    float4 v = buf[k % 2][t];
    total += v.x + v.y + v.z + v.w;
    pipe.consumer_release();
  }
  out[t] = total;
}
