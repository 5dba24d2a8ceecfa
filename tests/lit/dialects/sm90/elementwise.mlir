// Round trip of the Target IR ops the elementwise Tile IR ops lower to: tanh.approx, rsqrt.approx and the s32/f32
// conversion, then sm90.cvt's verifier.
// RUN: tessera-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @ops(%x: vector<32xf32>, %i: vector<32xi32>) {
  %t = sm90.tanh_approx %x : vector<32xf32>
  %r = sm90.rsqrt_approx %x : vector<32xf32>
  %f = sm90.cvt %i : vector<32xi32> -> vector<32xf32>
  %n = sm90.cvt %x : vector<32xf32> -> vector<32xi32>
  func.return
}

// CHECK:      %t = sm90.tanh_approx %x : vector<32xf32>
// CHECK-NEXT: %r = sm90.rsqrt_approx %x : vector<32xf32>
// CHECK-NEXT: %f = sm90.cvt %i : vector<32xi32> -> vector<32xf32>
// CHECK-NEXT: %n = sm90.cvt %x : vector<32xf32> -> vector<32xi32>

// -----

// CHECK: 'sm90.cvt' op converts between i32 and f32, got i64 -> f32
func.func @wide(%i: vector<32xi64>) {
  %f = sm90.cvt %i : vector<32xi64> -> vector<32xf32>
  func.return
}

// -----

// CHECK: 'sm90.cvt' op keeps the register count: vector<32xi32> -> vector<16xf32>
func.func @count(%i: vector<32xi32>) {
  %f = sm90.cvt %i : vector<32xi32> -> vector<16xf32>
  func.return
}

// -----

// CHECK: 'sm90.tanh_approx' op operates on f32 registers, got vector<32xi32>
func.func @int(%i: vector<32xi32>) {
  %t = "sm90.tanh_approx"(%i) : (vector<32xi32>) -> vector<32xi32>
  func.return
}
