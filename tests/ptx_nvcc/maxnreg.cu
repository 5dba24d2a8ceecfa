// A register cap (__maxnreg__, nvcc writes .maxnreg) on a 3-D grid-stride fill.
extern "C" __global__ void __maxnreg__(32) k_maxnreg(float* out, int n) {
  int i = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  for (int j = i * blockDim.x + threadIdx.x; j < n; j += gridDim.x * gridDim.y * gridDim.z * blockDim.x)
    out[j] = (float)j * 0.25f;
}
