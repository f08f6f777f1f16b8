// ARGS:
// ERROR: Redefinition of symbol "k"
// two kernels named @k: the error points at the second
builtin.module {
  vyre.kernel @k items 4 workgroup_size 64 {
  }
  vyre.kernel @k items 4 workgroup_size 64 {
  }
}
