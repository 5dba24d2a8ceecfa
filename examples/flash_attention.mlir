// Flash attention (online one-pass softmax) in Tessera Tile IR.
//
//   O = softmax(scale * Q K^T) V        head_dim 128, bf16, not causal, scale = 1/sqrt(128)
//
// One thread block computes BM = 128 query rows of one (batch, head) and walks the keys in blocks of
// BN = 128. It keeps three running values, all f32 in registers:
//   m   [BM]      the largest score each query row has seen so far,
//   l   [BM]      the sum of exp(score - m) over the keys seen so far,
//   acc [BM, 128] the sum of exp(score - m) * V over the keys seen so far.
// When a new key block raises m, the old l and acc are rescaled by alpha = exp(m_old - m_new). The output is
// normalised exactly once, after the loop: O = acc / l.
//
// Built by `tessera.kernels.flash_attention(head_dim=128, block_n=128)`; this copy is written out by hand to be
// read (the builder's default at head_dim 128 is FlashAttention-3's BN = 176 where the registers allow it).

builtin.module {
  // Tensors are [batch, heads, seq, 128] bf16 in global memory. `tile.dims` names each dimension: the
  // launcher binds batch, heads, seq_q and seq_k from the inputs and checks that Q, K and V agree.
  // O is the output (`tile.role = "out"`); rows past seq_q are never written.
  func.func @flash_attention_d128_bf16(
      %Q: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 128>},
      %K: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 128>},
      %V: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_k, 128>},
      %O: !tile.tile<?x?x?x128xbf16, global> {tile.dims = #tile.dims<batch, heads, seq_q, 128>, tile.role = "out"})
      attributes {
        tile.kernel = {kind = "attention", causal = false, scale = 0.0883883461 : f32},
        // One thread block per (query block, head, batch entry).
        tile.grid = #tile.dims<ceildiv(seq_q, 128), heads, batch>
      } {
    // --- Which block am I, and how big is the problem? -----------------------------------------------
    %q_block = tile.program_id x : index
    %head = tile.program_id y : index
    %batch = tile.program_id z : index
    %seq_q = tile.dim %Q[2] : !tile.tile<?x?x?x128xbf16, global>
    %seq_k = tile.dim %K[2] : !tile.tile<?x?x?x128xbf16, global>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c128 = arith.constant 128 : index
    %q0 = arith.muli %q_block, %c128 : index               // first query row of this block
    %n_kv = arith.ceildivui %seq_k, %c128 : index          // key blocks; the last one may be partial

    // --- Shared memory: one tile each of Q, K and V -------------------------------------------------------
    // Rows of 128 bf16 are 256 bytes, so the 128-byte XOR swizzle applies (no bank conflicts for the
    // tensor core's reads).
    %q_smem = tile.alloc_shared : !tile.tile<128x128xbf16, shared, swizzle 128>
    %k_smem = tile.alloc_shared : !tile.tile<128x128xbf16, shared, swizzle 128>
    %v_smem = tile.alloc_shared : !tile.tile<128x128xbf16, shared, swizzle 128>

    // --- Start loading this block's Q tile ----------------------------------------------------------------
    // The copy runs in the background; the first wait inside the loop covers it. Rows past seq_q land
    // as zeros.
    %q_window = tile.view %Q[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x128xbf16, global> -> !tile.tile<128x128xbf16, global>
    tile.cp_async %q_window, %q_smem : !tile.tile<128x128xbf16, global>, !tile.tile<128x128xbf16, shared, swizzle 128>
    tile.cp_commit_group

    // --- Running softmax state ----------------------------------------------------------------------------
    %m_init = tile.fill -inf : !tile.tile<128xf32, register>
    %l_init = tile.fill 0.0 : !tile.tile<128xf32, register>
    %acc_init = tile.fill 0.0 : !tile.tile<128x128xf32, register>

    // --- Loop over key blocks, carrying (m, l, acc) -------------------------------------------------------
    %m_final, %l_final, %acc_final = scf.for %j = %c0 to %n_kv step %c1
        iter_args(%m = %m_init, %l = %l_init, %acc = %acc_init)
        -> (!tile.tile<128xf32, register>, !tile.tile<128xf32, register>, !tile.tile<128x128xf32, register>) {
      // Copy key block j of K and V into shared memory, wait for every copy (this one and Q's), and make
      // the tiles visible to all threads.
      %k0 = arith.muli %j, %c128 : index
      %k_window = tile.view %K[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x128xbf16, global> -> !tile.tile<128x128xbf16, global>
      tile.cp_async %k_window, %k_smem : !tile.tile<128x128xbf16, global>, !tile.tile<128x128xbf16, shared, swizzle 128>
      %v_window = tile.view %V[%batch, %head, %k0, %c0] : !tile.tile<?x?x?x128xbf16, global> -> !tile.tile<128x128xbf16, global>
      tile.cp_async %v_window, %v_smem : !tile.tile<128x128xbf16, global>, !tile.tile<128x128xbf16, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier

      // Scores S = scale * Q K^T on the tensor core (bf16 in, f32 out).
      %s_zero = tile.fill 0.0 : !tile.tile<128x128xf32, register>
      %s = tile.mma %q_smem, %k_smem, %s_zero transpose_b : !tile.tile<128x128xbf16, shared, swizzle 128>, !tile.tile<128x128xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>
      %s_scaled = tile.scale %s by 0.0883883461 : !tile.tile<128x128xf32, register>
      // Keys past seq_k were copied as zeros: give them -inf so they get no weight.
      %s_masked = tile.mask_bounds %s_scaled, %k0, %seq_k : !tile.tile<128x128xf32, register>

      // Online softmax: the new running max, and the factor that rescales what was summed so far.
      %s_max = tile.row_max %s_masked : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
      %m_new = tile.element_max %m, %s_max : !tile.tile<128xf32, register>
      %alpha = tile.exp_diff %m, %m_new : !tile.tile<128xf32, register>          // exp(m - m_new)
      %p = tile.exp_subtract %s_masked, %m_new : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
      %p_sum = tile.row_sum %p : !tile.tile<128x128xf32, register> -> !tile.tile<128xf32, register>
      %l_new = tile.fma %alpha, %l, %p_sum : !tile.tile<128xf32, register>          // alpha * l + rowsum(P)

      // acc = alpha * acc + P V. P is rounded to bf16 for the tensor core; it is NOT divided by anything
      // here: the one normalisation happens after the loop.
      %acc_scaled = tile.mul_rows %acc, %alpha : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
      %p_bf16 = tile.cast %p : !tile.tile<128x128xf32, register> -> !tile.tile<128x128xbf16, register>
      %acc_new = tile.mma %p_bf16, %v_smem, %acc_scaled : !tile.tile<128x128xbf16, register>, !tile.tile<128x128xbf16, shared, swizzle 128>, !tile.tile<128x128xf32, register>

      // Every warp has finished reading K and V before the next iteration's copies overwrite them.
      tile.barrier
      scf.yield %m_new, %l_new, %acc_new : !tile.tile<128xf32, register>, !tile.tile<128xf32, register>, !tile.tile<128x128xf32, register>
    }

    // --- Normalise once, round to bf16, store ----------------------------------------------------------
    %o = tile.div_rows %acc_final, %l_final : !tile.tile<128x128xf32, register>, !tile.tile<128xf32, register>
    %o_bf16 = tile.cast %o : !tile.tile<128x128xf32, register> -> !tile.tile<128x128xbf16, register>
    %o_window = tile.view %O[%batch, %head, %q0, %c0] : !tile.tile<?x?x?x128xbf16, global> -> !tile.tile<128x128xbf16, global>
    tile.store_global %o_bf16, %o_window : !tile.tile<128x128xbf16, register>, !tile.tile<128x128xbf16, global>
    func.return
  }
}
