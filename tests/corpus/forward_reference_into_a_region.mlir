// ARGS:
// ERROR: 'scf.for' op uses a value not defined in this block or an enclosing one
// a loop bound defined inside the loop: xDSL's parser left the forward reference unresolved (found by the IR fuzzer)
builtin.module {
  func.func @f() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %n step %c1 {
      %n = arith.constant 4 : index
    }
    func.return
  }
}
