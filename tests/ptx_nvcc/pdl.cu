// Programmatic dependent launch (sm_90): a kernel that waits for its predecessor's memory
// (cudaGridDependencySynchronize: griddepcontrol.wait) before reading, and lets its dependent start early
// (cudaTriggerProgrammaticLaunchCompletion: griddepcontrol.launch_dependents); named barriers in inline asm
// split the block's two warps into producer and consumer.
extern "C" __global__ void k_pdl(const float* x, float* out) {
  __shared__ float stage[32];
  cudaGridDependencySynchronize();
  int t = threadIdx.x;
  if (t < 32) {
    stage[t] = x[blockIdx.x * 32 + t] * 3.0f;
    asm volatile("bar.arrive 1, 64;" ::: "memory");
  } else {
    asm volatile("bar.sync 1, 64;" ::: "memory");
    out[blockIdx.x * 32 + t - 32] = stage[63 - t] + 1.0f;
  }
  cudaTriggerProgrammaticLaunchCompletion();
}
