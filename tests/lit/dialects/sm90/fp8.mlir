// The 8-bit Target IR forms: sm90.prmt (the byte permute of the V transpose), sm90.cvt_pack_fp8 (P's accumulator registers packed four bytes per register),
// sm90.cvt_pack to e4m3 (byte pairs, stored two bytes a register) and
// an e4m3 wgmma and a mixed e5m2 x e4m3 one (`b_type`: B's type where it differs) from descriptors round-trip through the custom and the generic form (rules: fp8-invalid.mlir).
// RUN: tessera-opt %s --split-input-file | tessera-opt --split-input-file | filecheck %s
// RUN: tessera-opt %s --split-input-file --print-op-generic | tessera-opt --split-input-file | filecheck %s

func.func @pv(%p: vector<32xf32>, %acc: vector<32xf32>, %d: i64, %w: i32) {
  %t = sm90.prmt %w, %w selector 20800 : i32
  %a = sm90.cvt_pack_fp8 %p type "e4m3" : vector<32xf32> -> vector<8xi32>
  %b = sm90.cvt_pack_fp8 %p type "e5m2" : vector<32xf32> -> vector<8xi32>
  %q = sm90.cvt_pack %p type "e4m3" : vector<32xf32> -> vector<16xi32>
  %r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e4m3" trans 0, 0 : vector<32xf32>, i64
  %m = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e5m2" b_type "e4m3" trans 0, 0 : vector<32xf32>, i64
  func.return
}

// CHECK:      %t = sm90.prmt %w, %w selector 20800 : i32
// CHECK-NEXT: %a = sm90.cvt_pack_fp8 %p type "e4m3" : vector<32xf32> -> vector<8xi32>
// CHECK-NEXT: %b = sm90.cvt_pack_fp8 %p type "e5m2" : vector<32xf32> -> vector<8xi32>
// CHECK-NEXT: %q = sm90.cvt_pack %p type "e4m3" : vector<32xf32> -> vector<16xi32>
// CHECK-NEXT: %r = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e4m3" trans 0, 0 : vector<32xf32>, i64
// CHECK-NEXT: %m = sm90.wgmma_mma_async %acc, %d, %d n 64 type "e5m2" b_type "e4m3" trans 0, 0 : vector<32xf32>, i64
