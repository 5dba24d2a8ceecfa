// A depthwise causal convolution along time, as Mamba's short conv writes it: for X [T, C] f32, taps W [4, C]
// f32 and a bias [C] f32,
//   Y[t, c] = silu(bias[c] + sum_{k=0..3} W[k, c] X[t - k, c])   (X[t - k] = 0 for t < k),
// any T and C. Block (x, y) takes times 64x.. and channels 64y..; tap k reads the window of X that starts k
// rows earlier, so the first block's windows start before the tensor (rows -1, -2, -3 read as 0). Each tap's
// weights are a [1, 64] window of W loaded as a column vector.
builtin.module {
  func.func @causal_conv1d(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<T, C>},
      %W: !tile.tile<4x?xf32, global> {tile.dims = #tile.dims<4, C>},
      %BIAS: !tile.tile<?xf32, global> {tile.dims = #tile.dims<C>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<T, C>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(T, 64), ceildiv(C, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c64 = arith.constant 64 : index
    %bt = tile.program_id x : index
    %bc = tile.program_id y : index
    %t0 = arith.muli %bt, %c64 : index
    %ch0 = arith.muli %bc, %c64 : index
    %bw = tile.view %BIAS[%ch0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %bias = tile.load_broadcast %bw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc0 = tile.add %zero, %bias : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %acc = scf.for %k = %c0 to %c4 step %c1 iter_args(%s = %acc0) -> (!tile.tile<64x64xf32, register>) {
      %tk = arith.subi %t0, %k : index
      %xw = tile.view %X[%tk, %ch0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %ww = tile.view %W[%k, %ch0] : !tile.tile<4x?xf32, global> -> !tile.tile<1x64xf32, global>
      %w = tile.load %ww : !tile.tile<1x64xf32, global> -> !tile.tile<1x64xf32, register>
      %xw_k = tile.mul %x, %w : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
      %s2 = tile.add %s, %xw_k : !tile.tile<64x64xf32, register>
      scf.yield %s2 : !tile.tile<64x64xf32, register>
    }
    %y = tile.silu %acc : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%t0, %ch0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
