// A kernel taking a struct by value (a pointer, sizes, a scale and a small array inside it), 2-D blocks and a
// 2-D grid: out = scale * in + offsets[col % 4] over a pitched matrix.
struct Params {
  const float* in;
  float* out;
  int rows, cols, pitch;
  float scale;
  float offsets[4];
};
extern "C" __global__ void k_struct_param(Params p) {
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < p.rows && c < p.cols) p.out[r * p.pitch + c] = p.scale * p.in[r * p.pitch + c] + p.offsets[c % 4];
}
