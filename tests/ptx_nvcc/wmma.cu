// The WMMA API: one warp per 16 x 16 tile of C = A B (f16 in, f32 accumulate), A row-major, B column-major,
// fragments loaded from global memory with a leading dimension, K in steps of 16.
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k_wmma(const half* A, const half* B, float* C, int M, int N, int K) {
  int tm = blockIdx.y, tn = blockIdx.x;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(a, A + tm * 16 * K + k, K);
    wmma::load_matrix_sync(b, B + tn * 16 * K + k, K);
    wmma::mma_sync(c, a, b, c);
  }
  wmma::store_matrix_sync(C + tm * 16 * N + tn * 16, c, N, wmma::mem_row_major);
}
// bf16 through shared memory: the block stages A (row-major) and B (row-major, K x N) tiles, each warp
// multiplies one 16 x 16 tile, scales its accumulator elementwise and stores it column-major.
#include <cuda_bf16.h>
extern "C" __global__ void k_wmma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* Ct, int M, int N,
                                       int K, float alpha) {
  __shared__ __align__(32) __nv_bfloat16 sa[2][16 * 16];
  __shared__ __align__(32) __nv_bfloat16 sb[2][16 * 16];
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int tm = blockIdx.y * 2 + warp, tn = blockIdx.x;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  for (int k = 0; k < K; k += 16) {
    for (int e = lane; e < 256; e += 32) {
      sa[warp][e] = A[(tm * 16 + e / 16) * K + k + e % 16];
      sb[warp][e] = B[(k + e / 16) * N + tn * 16 + e % 16];
    }
    __syncwarp();
    wmma::load_matrix_sync(a, sa[warp], 16);
    wmma::load_matrix_sync(b, sb[warp], 16);
    wmma::mma_sync(c, a, b, c);
    __syncwarp();
  }
  for (int i = 0; i < c.num_elements; ++i) c.x[i] *= alpha;
  wmma::store_matrix_sync(Ct + tn * 16 * M + tm * 16, c, M, wmma::mem_col_major);
}
