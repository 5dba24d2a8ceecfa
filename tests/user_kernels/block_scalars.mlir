// Per-block scalars computed from the program id with arith and scf (no tile op), spread over a tile:
//   s = max(b / 2, 0.75); t = -1 if s > 1 else 2; k = trunc(3 s) (fptosi); s2 = k if b == 1 else s;
//   X2 = 2 X if s > 1 else X (a whole tile chosen by arith.select); Y = X2 * s2 + t, X, Y [M, 64] f32, one block
//   per 64 rows. Shows scalar arith.select, arith.cmpf, arith.maximumf, arith.uitofp/fptosi and an scf.if
//   yielding an f32, each different in each block.
builtin.module {
  func.func @block_scalars(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %bi = arith.index_cast %b : index to i32
    %bf = arith.uitofp %bi : i32 to f32
    %half = arith.constant 0.5 : f32
    %floor = arith.constant 0.75 : f32
    %one = arith.constant 1.0 : f32
    %three = arith.constant 3.0 : f32
    %minus_one = arith.constant -1.0 : f32
    %two = arith.constant 2.0 : f32
    %bh = arith.mulf %bf, %half : f32
    %s = arith.maximumf %bh, %floor : f32
    %big = arith.cmpf ogt, %s, %one : f32
    %t = arith.select %big, %minus_one, %two : f32
    %s3 = arith.mulf %s, %three : f32
    %k = arith.fptosi %s3 : f32 to i32
    %kf = arith.sitofp %k : i32 to f32
    %first = arith.cmpi eq, %b, %c1 : index
    %s2 = scf.if %first -> (f32) {
      scf.yield %kf : f32
    } else {
      scf.yield %s : f32
    }
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %x2 = tile.scale %x by 2.0 : !tile.tile<64x64xf32, register>
    %xs = arith.select %big, %x2, %x : !tile.tile<64x64xf32, register>
    %st = tile.splat %s2 : f32 -> !tile.tile<64x64xf32, register>
    %tt = tile.splat %t : f32 -> !tile.tile<64x64xf32, register>
    %y = tile.fma %xs, %st, %tt : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
