// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse | filecheck %s
// RUN: tessera-opt %s -p assign-swizzle,convert-tile-to-sm90,canonicalize,cse,allocate-registers -t ptx | filecheck %s --check-prefix=PTX

// `subtract_first` (a biased kernel's exponents): tile.exp_subtract of a scaled tile is ex2((f32(x factor) - m)
// log2 e), the score rounded as its row maximum was, then the subtraction, then the scale (mul, sub, mul per
// register, in place), instead of one fma of x, factor log2 e and -m log2 e; tile.exp_diff is ex2((a - b)
// log2 e) (sub, mul) instead of ex2(a log2 e - b log2 e). b = -inf is read as 0 (setp, selp) in both. With a
// factor 2^k (0.125: head_dim 64's scale) x factor is exact, and the mul and the sub are one fma(x, factor, -m).

func.func @exp_subtract_first(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                              %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %s = tile.scale %x by 0.0883883461 : !tile.tile<64x64xf32, register>
  %m_old = tile.fill -inf : !tile.tile<64xf32, register>
  %s_max = tile.row_max %s : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
  %m = tile.element_max %m_old, %s_max : !tile.tile<64xf32, register>
  %alpha = tile.exp_diff %s_max, %m subtract_first : !tile.tile<64xf32, register>
  %p = tile.exp_subtract %s, %m subtract_first : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %y = tile.mul_rows %p, %alpha : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK:      %s_max = arith.mulf %{{.*}}, %[[FACTOR2:.*]] : vector<2xf32>
// CHECK-NEXT: %m = arith.maximumf %m_old, %s_max : vector<2xf32>
// CHECK-NEXT: %[[IS_INF:.*]] = sm90.setp "eq" %m, %m_old : vector<2xf32> -> vector<2xi1>
// CHECK:      %[[SAFE:.*]] = sm90.selp %[[IS_INF]], %{{.*}}, %m : vector<2xi1>, vector<2xf32>
// CHECK-NEXT: %[[DIFF:.*]] = arith.subf %s_max, %[[SAFE]] : vector<2xf32>
// CHECK-NEXT: %[[LOG2E2:.*]] = arith.constant dense<1.44269502> : vector<2xf32>
// CHECK-NEXT: %[[ALPHA_ARG:.*]] = arith.mulf %[[DIFF]], %[[LOG2E2]] : vector<2xf32>
// CHECK-NEXT: %alpha = sm90.ex2_approx %[[ALPHA_ARG]] : vector<2xf32>
// CHECK-NEXT: %[[FACTOR:.*]] = arith.constant dense<0.0883883461> : vector<32xf32>
// CHECK-NEXT: %[[SCORE:.*]] = arith.mulf %x, %[[FACTOR]] : vector<32xf32>
// CHECK-NEXT: %[[M_ROWS:.*]] = vector.shuffle %[[SAFE]], %[[SAFE]] [0, 0, 1, 1,
// CHECK-NEXT: %[[SUB:.*]] = arith.subf %[[SCORE]], %[[M_ROWS]] : vector<32xf32>
// CHECK-NEXT: %[[LOG2E:.*]] = arith.constant dense<1.44269502> : vector<32xf32>
// CHECK-NEXT: %[[P_ARG:.*]] = arith.mulf %[[SUB]], %[[LOG2E]] : vector<32xf32>
// CHECK-NEXT: %p = sm90.ex2_approx %[[P_ARG]] : vector<32xf32>
// CHECK-NOT:  math.fma

// Register 0 of the tile, in place in %f0 from the load to the store; .rn on each keeps ptxas from contracting
// the mul and the sub into an fma:
// PTX:      ld.global.b32 %f0,
// PTX:      sub.rn.f32 %[[ALPHA:f[0-9]+]], %[[ALPHA]], %[[SAFE:f[0-9]+]];
// PTX:      mul.rn.f32 %[[ALPHA]], %[[ALPHA]], 0f3FB8AA3B;
// PTX:      ex2.approx.ftz.f32 %[[ALPHA]], %[[ALPHA]];
// PTX:      mul.rn.f32 %f0, %f0, 0f3DB504F3;
// PTX:      sub.rn.f32 %f0, %f0, %[[SAFE]];
// PTX:      mul.rn.f32 %f0, %f0, 0f3FB8AA3B;
// PTX:      ex2.approx.ftz.f32 %f0, %f0;
// PTX:      mul.rn.f32 %f0, %f0, %[[ALPHA]];
// PTX:      st.global.b32 [%rd{{[0-9]+}}], %f0;
// PTX-NOT:  fma.rn.f32
// PTX-LABEL: .entry exp_subtract_first_power_of_two(

func.func @exp_subtract_first_power_of_two(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                                           %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %s = tile.scale %x by 0.125 : !tile.tile<64x64xf32, register>
  %m = tile.row_max %s : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
  %p = tile.exp_subtract %s, %m subtract_first : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %p, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}

// CHECK-LABEL: func.func @exp_subtract_first_power_of_two
// CHECK:      %m = arith.mulf %{{.*}}, %{{.*}} : vector<2xf32>
// CHECK:      %[[SAFE:.*]] = sm90.selp %{{.*}}, %{{.*}}, %m : vector<2xi1>, vector<2xf32>
// CHECK-NEXT: %[[NEG:.*]] = arith.negf %[[SAFE]] : vector<2xf32>
// CHECK-NEXT: %[[NEG_ROWS:.*]] = vector.shuffle %[[NEG]], %[[NEG]] [0, 0, 1, 1,
// CHECK-NEXT: %[[FACTOR:.*]] = arith.constant dense<1.250000e-01> : vector<32xf32>
// CHECK-NEXT: %[[DIFF:.*]] = math.fma %x, %[[FACTOR]], %[[NEG_ROWS]] : vector<32xf32>
// CHECK-NEXT: %[[LOG2E:.*]] = arith.constant dense<1.44269502> : vector<32xf32>
// CHECK-NEXT: %[[P_ARG:.*]] = arith.mulf %[[DIFF]], %[[LOG2E]] : vector<32xf32>
// CHECK-NEXT: %p = sm90.ex2_approx %[[P_ARG]] : vector<32xf32>

// PTX:      ld.global.b32 %f0,
// PTX:      fma.rn.f32 %f0, %f0, 0f3E000000, %{{f[0-9]+}};
// PTX:      mul.rn.f32 %f0, %f0, 0f3FB8AA3B;
// PTX:      ex2.approx.ftz.f32 %f0, %f0;
// PTX:      st.global.b32 [%rd{{[0-9]+}}], %f0;
