// GPT-NeoX rotary embedding with the angles computed in the kernel (tile.sin / tile.cos), rows of X [S, 64] at
// arbitrary position ids (a packed batch's, not in order): angle[s, j] = f32(POS[s] * INV[j % 32]),
// OUT[s, j] = X[s, j] cos(angle) - X[s, j + 32] sin(angle) for j < 32, X[s, j] cos(angle) + X[s, j - 32] sin(angle)
// for j >= 32; the partner column is j ^ 32 (tile.xor), read with tile.gather.
builtin.module {
  func.func @rope_angles(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>},
      %POS: !tile.tile<?xi32, global> {tile.dims = #tile.dims<S>},
      %INV: !tile.tile<32xf32, global> {tile.dims = #tile.dims<32>},
      %OUT: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<S, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(S, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %rows = tile.iota rows offset %m0 : !tile.tile<64x1xi32, register>
    %cols = tile.iota cols : !tile.tile<1x64xi32, register>
    %c32 = arith.constant 32 : i32
    %t32 = tile.splat %c32 : i32 -> !tile.tile<1x1xi32, register>
    %pos = tile.gather %POS[%rows] : !tile.tile<?xi32, global>, !tile.tile<64x1xi32, register> -> !tile.tile<64x1xi32, register>
    %posf = tile.cast %pos : !tile.tile<64x1xi32, register> -> !tile.tile<64x1xf32, register>
    %pair = tile.mod %cols, %t32 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %inv = tile.gather %INV[%pair] : !tile.tile<32xf32, global>, !tile.tile<1x64xi32, register> -> !tile.tile<1x64xf32, register>
    %angle = tile.mul %posf, %inv : !tile.tile<64x1xf32, register>, !tile.tile<1x64xf32, register>
    %cos = tile.cos %angle : !tile.tile<64x64xf32, register>
    %sin = tile.sin %angle : !tile.tile<64x64xf32, register>
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %partner_col = tile.xor %cols, %t32 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %partner = tile.gather %X[%rows, %partner_col] : !tile.tile<?x64xf32, global>, !tile.tile<64x1xi32, register>, !tile.tile<1x64xi32, register> -> !tile.tile<64x64xf32, register>
    %first = tile.cmp lt %cols, %t32 : !tile.tile<1x64xi32, register>, !tile.tile<1x1xi32, register>
    %minus = tile.fill -1.0 : !tile.tile<1x64xf32, register>
    %plus = tile.fill 1.0 : !tile.tile<1x64xf32, register>
    %sign = tile.select %first, %minus, %plus : !tile.tile<1x64xi1, register>, !tile.tile<1x64xf32, register>, !tile.tile<1x64xf32, register>
    %xc = tile.mul %x, %cos : !tile.tile<64x64xf32, register>
    %ps = tile.mul %partner, %sin : !tile.tile<64x64xf32, register>
    %pss = tile.mul %ps, %sign : !tile.tile<64x64xf32, register>, !tile.tile<1x64xf32, register>
    %out = tile.add %xc, %pss : !tile.tile<64x64xf32, register>
    %ow = tile.view %OUT[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %out, %ow : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
