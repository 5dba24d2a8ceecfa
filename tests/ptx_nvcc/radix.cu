// One pass of a radix sort (4 bits at `shift`) within a warp: the digit by bfe, each lane's rank among equal
// digits by __match_any_sync and __popc of the lower lanes, digit counts by __ballot_sync, an exclusive prefix
// sum over the 16 digits in shared memory, then a stable scatter.
extern "C" __global__ void k_radix(const unsigned* keys, unsigned* out, int* ranks, int shift) {
  __shared__ int count[16], start[16];
  unsigned lane = threadIdx.x, k = keys[lane];
  unsigned d = (k >> shift) & 15u;
  unsigned peers = __match_any_sync(0xffffffffu, d);
  unsigned lower = peers & ((1u << lane) - 1u);
  int rank = __popc(lower);
  // digit counts: for each digit, the ballot of lanes holding it
  for (int g = 0; g < 16; ++g) {
    unsigned holders = __ballot_sync(0xffffffffu, d == (unsigned)g);
    if (lane == 0) count[g] = __popc(holders);
  }
  __syncwarp();
  if (lane == 0) {
    int s = 0;
    for (int g = 0; g < 16; ++g) { start[g] = s; s += count[g]; }
  }
  __syncwarp();
  out[start[d] + rank] = k;
  ranks[lane] = rank | (__popc(peers) << 8);
}
