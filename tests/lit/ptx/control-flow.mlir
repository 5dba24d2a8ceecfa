// RUN: python -m tessera.ptx %s | filecheck %s

// Structured control flow as labels and branches. scf.for: the carried registers receive the initial
// values, the loop is skipped unless lb < ub (signed), and at the latch the yielded values move into the
// carried registers all at once (`yield %y, %x` swaps them through a scratch register) before iv += step
// and the backward branch. scf.if with results: each branch moves its values into the result registers.
// scf.while: arguments are registers; the after-block runs while the condition holds.

func.func @control(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"},
                   %n: index {sm90.size = "n"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64}} {
  %tid = sm90.special "tid.x" : index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %x0, %y0 = scf.for %i = %c0 to %n step %c1 iter_args(%x = %tid, %y = %c1) -> (index, index) {
    scf.yield %y, %x : index, index
  }
  %odd = arith.cmpi slt, %x0, %y0 : index
  %m = scf.if %odd -> (index) {
    %d = arith.subi %y0, %x0 : index
    scf.yield %d : index
  } else {
    scf.yield %x0 : index
  }
  %w = scf.while (%v = %m) : (index) -> (index) {
    %more = arith.cmpi slt, %v, %n : index
    scf.condition(%more) %v : index
  } do {
  ^bb0(%v2: index):
    %v3 = arith.addi %v2, %c1 : index
    scf.yield %v3 : index
  }
  %wi = arith.index_cast %w : index to i32
  %mi = arith.index_cast %m : index to i32
  %a = vector.broadcast %wi : i32 to vector<1xi32>
  %b = vector.broadcast %mi : i32 to vector<1xi32>
  %vals = vector.shuffle %a, %b [0, 1] : vector<1xi32>, vector<1xi32>
  %t64 = arith.index_cast %tid : index to i64
  %c8 = arith.constant 8 : i64
  %base = arith.muli %t64, %c8 : i64
  %bv = vector.broadcast %base : i64 to vector<2xi64>
  %lane = arith.constant dense<[0, 4]> : vector<2xi64>
  %offs = arith.addi %bv, %lane : vector<2xi64>
  %all = arith.constant dense<true> : vector<2xi1>
  sm90.st_global %out[%offs], %vals, %all : vector<2xi64>, vector<2xi32>, vector<2xi1>
  func.return
}

// CHECK-LABEL: .visible .entry control(
// CHECK:           ld.param.u32 [[N:%r[0-9]+]], [param_n];
// CHECK:           mov.u32 [[TID:%r[0-9]+]], %tid.x;
// CHECK:           mov.b32 [[C0:%r[0-9]+]], 0;
// CHECK:           mov.b32 [[C1:%r[0-9]+]], 1;

// CHECK:           // %x0, %y0 = scf.for %i = %c0 to %n step %c1 iter_args(%x = %tid, %y = %c1) -> (index, index) {
// CHECK-NEXT:      mov.b32 [[I:%r[0-9]+]], [[C0]];
// CHECK-NEXT:      mov.b32 [[X:%r[0-9]+]], [[TID]];
// CHECK-NEXT:      mov.b32 [[Y:%r[0-9]+]], [[C1]];
// CHECK-NEXT:      setp.ge.s32 [[SKIP:%p[0-9]+]], [[I]], [[N]];
// CHECK-NEXT:      @[[SKIP]] bra [[END:\$L__for_end[0-9]+]];
// CHECK-NEXT:  [[TOP:\$L__for[0-9]+]]:
// CHECK-NEXT:      // latch of %i
// CHECK-NEXT:      mov.b32 [[T:%r[0-9]+]], [[Y]];
// CHECK-NEXT:      mov.b32 [[Y]], [[X]];
// CHECK-NEXT:      mov.b32 [[X]], [[T]];
// CHECK-NEXT:      add.s32 [[I]], [[I]], [[C1]];
// CHECK-NEXT:      setp.lt.s32 [[AGAIN:%p[0-9]+]], [[I]], [[N]];
// CHECK-NEXT:      @[[AGAIN]] bra [[TOP]];
// CHECK-NEXT:  [[END]]:

// CHECK:           setp.lt.s32 [[ODD:%p[0-9]+]], [[X]], [[Y]];
// CHECK-NEXT:      // %m = scf.if %odd -> (index) {
// CHECK-NEXT:      @![[ODD]] bra [[ELSE:\$L__else[0-9]+]];
// CHECK-NEXT:      // %d = arith.subi %y0, %x0 : index
// CHECK-NEXT:      sub.s32 [[D:%r[0-9]+]], [[Y]], [[X]];
// CHECK-NEXT:      mov.b32 [[M:%r[0-9]+]], [[D]];
// CHECK-NEXT:      bra [[JOIN:\$L__if_end[0-9]+]];
// CHECK-NEXT:  [[ELSE]]:
// CHECK-NEXT:      mov.b32 [[M]], [[X]];
// CHECK-NEXT:  [[JOIN]]:

// CHECK:           // %w = scf.while (%v = %m) : (index) -> index {
// CHECK-NEXT:      mov.b32 [[V:%r[0-9]+]], [[M]];
// CHECK-NEXT:  [[WHILE:\$L__while[0-9]+]]:
// CHECK-NEXT:      // %more = arith.cmpi slt, %v, %n : index
// CHECK-NEXT:      setp.lt.s32 [[MORE:%p[0-9]+]], [[V]], [[N]];
// CHECK-NEXT:      @![[MORE]] bra [[DONE:\$L__while_end[0-9]+]];
// CHECK-NEXT:      // %v3 = arith.addi %v2, %c1 : index
// CHECK-NEXT:      add.s32 [[V3:%r[0-9]+]], [[V]], [[C1]];
// CHECK-NEXT:      // latch of scf.while
// CHECK-NEXT:      mov.b32 [[V]], [[V3]];
// CHECK-NEXT:      bra [[WHILE]];
// CHECK-NEXT:  [[DONE]]:

// The stored registers: %w is the while's forwarded %v, %m the if's result.
// CHECK:           st.global.b32 [%rd{{[0-9]+}}], [[V]];
// CHECK:           st.global.b32 [%rd{{[0-9]+}}], [[M]];
