// tessera-opt reports bad input as a diagnostic and a non-zero exit status (`not`), never a Python traceback.
// This file is itself the input with a syntax error (below); Inputs/ holds the other bad inputs.

// RUN: not tessera-opt %s 2>&1 | filecheck %s --check-prefix=SYNTAX
// SYNTAX-NOT:  Traceback
// SYNTAX:      tessera-opt-errors.mlir:[[# @LINE + 28]]:23
// SYNTAX-NEXT: %x = arith.constant : index
// SYNTAX:      attribute expected
// SYNTAX-NOT:  Traceback

// RUN: not tessera-opt %S/Inputs/unknown-op.mlir 2>&1 | filecheck %s --check-prefix=UNKNOWN-OP
// UNKNOWN-OP-NOT: Traceback
// UNKNOWN-OP:     unknown-op.mlir:3:8
// UNKNOWN-OP:     Operation tile.bogus is not registered
// UNKNOWN-OP-NOT: Traceback

// RUN: not tessera-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN-PASS
// UNKNOWN-PASS-NOT: Traceback
// UNKNOWN-PASS:     tessera-opt: error: invalid pass pipeline 'no-such-pass': Unrecognized passes: ['no-such-pass']
// UNKNOWN-PASS-NOT: Traceback

// RUN: not tessera-opt %S/Inputs/does-not-exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING-NOT: Traceback
// MISSING:     tessera-opt: error: cannot read '{{.*}}does-not-exist.mlir': No such file or directory
// MISSING-NOT: Traceback

// Without --verify-diagnostics a verifier error is also an error exit, and shows the op in context.
// RUN: not tessera-opt %S/../dialects/tile/kernel-invalid.mlir 2>&1 | filecheck %s --check-prefix=VERIFY
// VERIFY-NOT: Traceback
// VERIFY:     kernel @not_dict: 'tile.kernel' must be a dictionary
// VERIFY-NOT: Traceback

func.func @f() {
  %x = arith.constant : index
  func.return
}
