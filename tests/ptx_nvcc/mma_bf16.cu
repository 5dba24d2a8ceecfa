// An Ampere-style GEMM C = A B (bf16 in, f32 out; A row-major M x K, B column-major N x K): one warp per 16 x 16
// tile of C, K in steps of 16 through a 3-stage cp.async ring in shared memory, fragments by ldmatrix, products
// by mma.sync.m16n8k16 bf16 (inline asm, as CUTLASS's SM80 atoms write them).
#include <cuda_bf16.h>
constexpr int STAGES = 3;
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* smem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
extern "C" __global__ void k_mma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int M, int N, int K) {
  __shared__ __align__(128) __nv_bfloat16 sa[STAGES][16][16];
  __shared__ __align__(128) __nv_bfloat16 sb[STAGES][16][16];
  int lane = threadIdx.x;
  int m0 = blockIdx.y * 16, n0 = blockIdx.x * 16;
  int row = lane >> 1, half = (lane & 1) * 8;  // each lane copies 16 bytes of A and of B per stage
  int kt = K / 16;
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < kt) {
      cp_async16(&sa[s][row][half], A + (size_t)(m0 + row) * K + s * 16 + half);
      cp_async16(&sb[s][row][half], B + (size_t)(n0 + row) * K + s * 16 + half);
    }
    asm volatile("cp.async.commit_group;\n");
  }
  float acc[2][4] = {};
#pragma unroll 1
  for (int k = 0; k < kt; ++k) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
    __syncwarp();
    int next = k + STAGES - 1;
    if (next < kt) {
      int s = next % STAGES;
      cp_async16(&sa[s][row][half], A + (size_t)(m0 + row) * K + next * 16 + half);
      cp_async16(&sb[s][row][half], B + (size_t)(n0 + row) * K + next * 16 + half);
    }
    asm volatile("cp.async.commit_group;\n");
    int s = k % STAGES;
    unsigned a[4], b[4];
    ldmatrix_x4(a, &sa[s][lane & 15][(lane >> 4) * 8]);
    // B tile (n x k): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
    ldmatrix_x4(b, &sb[s][(lane & 7) + ((lane >> 4) << 3)][((lane >> 3) & 1) * 8]);
    mma_bf16(acc[0], a, b);
    mma_bf16(acc[1], a, b + 2);
    __syncwarp();
  }
  int g = lane >> 2, t = lane & 3;
  for (int j = 0; j < 2; ++j) {
    int c = n0 + j * 8 + t * 2;
    C[(size_t)(m0 + g) * N + c] = acc[j][0];
    C[(size_t)(m0 + g) * N + c + 1] = acc[j][1];
    C[(size_t)(m0 + g + 8) * N + c] = acc[j][2];
    C[(size_t)(m0 + g + 8) * N + c + 1] = acc[j][3];
  }
}
