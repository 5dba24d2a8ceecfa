// Dynamic per-row symmetric int8 quantization (a LLM.int8 / SmoothQuant activation quantizer) of rows of any length:
// X [M, N] f32, any M, N; SCALE[i] = max_j |X[i, j]| / 127 (f32 [M]) and Q[i, j] = clamp(rint(X[i, j] * 127 /
// max_j |X[i, j]|), -127, 127) as i32 [M, N] (Tile IR has no 8-bit integer tile). Two passes over 64-column blocks:
// the row's absolute maximum (columns past N read as 0, which |x| never exceeds), then the codes. A row of zeros
// has SCALE 0 and codes 0 (0 * inf is NaN, which the cast to i32 gives as 0).
builtin.module {
  func.func @int8_row_quant(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Q: !tile.tile<?x?xi32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"},
      %SCALE: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %n_blocks = arith.ceildivui %n, %c64 : index
    %zero = tile.fill 0.0 : !tile.tile<64xf32, register>
    %amax = scf.for %j = %c0 to %n_blocks step %c1 iter_args(%m = %zero) -> (!tile.tile<64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %ax = tile.abs %x : !tile.tile<64x64xf32, register>
      %bmax = tile.row_max %ax : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
      %m2 = tile.element_max %m, %bmax : !tile.tile<64xf32, register>
      scf.yield %m2 : !tile.tile<64xf32, register>
    }
    %c127 = tile.fill 127.0 : !tile.tile<64xf32, register>
    %scale = tile.div %amax, %c127 : !tile.tile<64xf32, register>
    %sw = tile.view %SCALE[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %scale, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    %inv = tile.div %c127, %amax : !tile.tile<64xf32, register>
    %hi = tile.fill 127.0 : !tile.tile<64x64xf32, register>
    %lo = tile.fill -127.0 : !tile.tile<64x64xf32, register>
    scf.for %j = %c0 to %n_blocks step %c1 {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
      %y = tile.mul %x, %inv : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
      %r = tile.rint %y : !tile.tile<64x64xf32, register>
      %r1 = tile.element_min %r, %hi : !tile.tile<64x64xf32, register>
      %r2 = tile.element_max %r1, %lo : !tile.tile<64x64xf32, register>
      %q = tile.cast %r2 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xi32, register>
      %qw = tile.view %Q[%m0, %n0] : !tile.tile<?x?xi32, global> -> !tile.tile<64x64xi32, global>
      tile.store_global %q, %qw : !tile.tile<64x64xi32, register>, !tile.tile<64x64xi32, global>
    }
    func.return
  }
}
